"""Files earlier versions wrote are read in this version's form (`specsparse.old_formats`), each through
the reader of its file; this version's records come back as they are (the same object)."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import asdict, replace

import pandas as pd
import pytest
import yaml

from specsparse.config_map import (
    ConfigMap,
    ConfigMapError,
    DomainConfig,
    OperatingPoint,
    config_map_to_dict,
    load_config_map,
    write_config_map,
)
from specsparse.data import Domain, get_domain
from specsparse.jobs.sweep import sweep_rows
from specsparse.old_formats import (
    config_map_from_v1,
    config_map_from_v2,
    current_config_map,
    current_reproduce,
    current_store_measurement,
    current_store_meta,
    current_summary,
    reproduce_from_v1,
    reproduce_from_v2,
    store_measurement_from_v1,
    store_meta_from_v1,
    summary_from_v1,
    summary_from_v2,
)
from specsparse.reporting.figures import dense_accept_lengths
from specsparse.reporting.records import JobRecord
from specsparse.reporting.report import find_jobs
from specsparse.reporting.tables import table_vocab_comparison
from specsparse.study.store import ResultsStore, measurement_to_dict
from specsparse.types import Component, Measurement

PLD = "specsparse.drafters.pld.PromptLookupDrafter"
DOMAIN_V2 = {"name": "qa", "source": "builtin", "path": None, "options": {}, "limit": 12,  # a DomainSpec record
             "calibration_fraction": 0.2, "split_seed": 0, "exclude_ids": []}


# -- results store rows ----------------------------------------------------------------------------------------
MEASUREMENT_V1 = {"accept_length": 2.0, "metric": 0.5, "cost": 0.02, "flops_fraction": 0.9, "tokens_per_s": 50.0,
                  "new_tokens": 10, "target_forwards": 5, "wall_time_s": 1.0, "draft_time_s": 0.0,
                  "early_stopped": False, "per_prompt": [], "verify_cost": 0.01}
META_V1 = {"candidate": {"skip_layers": [], "vocab_size": None}, "domain": DOMAIN_V2, "model": "m",
           "drafter": {"target": PLD, "options": {"max_ngram_size": 3}}, "split": "calibration"}


def test_a_store_row_of_v1_reads_with_modeled_figures_named_so_and_its_drafters_class_path(tmp_path):
    path = tmp_path / "store.sqlite"
    ResultsStore(path).close()
    with sqlite3.connect(path) as conn:  # a row as a store written before be0bca0 / 93eff85 holds it
        conn.execute("INSERT INTO measurements (key, meta, measurement, created) VALUES (?, ?, ?, ?)",
                     ("old", json.dumps(META_V1), json.dumps(MEASUREMENT_V1), 1.0))
    conn.close()
    with ResultsStore(path) as store:
        m = store.get("old")
        assert (m.modeled_cost, m.modeled_tokens_per_s, m.modeled_verify_cost) == (0.02, 50.0, 0.01)
        assert store.get_meta("old")["drafter"] == {"class_path": PLD, "options": {"max_ngram_size": 3}}
        [row] = store.rows()
        assert row["drafter.class_path"] == PLD and "drafter.target" not in row
    assert dense_accept_lengths([path]).to_dict("records") == [  # the report's Fig. 2 names the drafter
        {"model": "m", "drafter": "PromptLookupDrafter", "domain": "qa", "accept_length": 2.0, "prompts": 0}]


def test_store_rows_of_this_version_come_back_as_they_are():
    m = measurement_to_dict(Measurement(2.0, 0.5, 0.02, 0.9, 50.0, 10, 5, 1.0, modeled_verify_cost=0.01))
    meta = {**META_V1, "drafter": {"class_path": PLD, "options": {}}}
    assert current_store_measurement(m) is m and store_measurement_from_v1(m) is m
    assert current_store_meta(meta) is meta and store_meta_from_v1(meta) is meta
    assert store_meta_from_v1({"model": "m"}) == {"model": "m"}  # no drafter recorded: nothing to rename


# -- summary.json ----------------------------------------------------------------------------------------------
SUMMARY_V1 = {
    "domain": "qa", "strategy": "bfs", "selected_skip_layers": [3],
    "calibration": {"dense": None, "selected": None},
    "test": {"dense": {"accept_length": 2.0, "metric": 0.6, "tokens_per_s": 10.0, "cost": 0.02},
             "selected": {"accept_length": 1.9, "metric": 0.55, "tokens_per_s": 12.0, "cost": 0.015}},
    "intervals": {"test": {"metric_dense": [0.6, 0.5, 0.7], "accept_dense": [2.0, 1.9, 2.1]}, "calibration": None},
    "speedup_test": 1.2, "speedup_test_interval": [0.95, 1.4], "speedup_test_vs_plain": [1.5, 1.3, 1.7],
    "held_out": {"verdict": "held", "reasons": []},
    "search_cost": {"configurations_measured": 5, "cache_hits": 2, "wall_time_s": 3.0},
}


def test_a_summary_of_v1_reads_in_this_versions_names_scale_and_verdicts():
    original = json.loads(json.dumps(SUMMARY_V1))
    s = summary_from_v1(SUMMARY_V1)
    assert SUMMARY_V1 == original  # the record read is left as it was
    assert s["metric"]["name"] == "F1" and "speedup_test" not in s
    assert (s["measured_speedup_test"], s["measured_speedup_test_interval"]) == (1.2, [0.95, 1.4])
    assert s["measured_speedup_test_vs_plain"] == [1.5, 1.3, 1.7]
    selected = s["test"]["selected"]
    assert selected == {"accept_length": 1.9, "metric": pytest.approx(55.0), "modeled_tokens_per_s": 12.0,
                        "modeled_cost": 0.015}
    assert s["intervals"]["test"]["metric_dense"] == pytest.approx([60.0, 50.0, 70.0])
    assert s["intervals"]["test"]["accept_dense"] == [2.0, 1.9, 2.1]  # ratios and accept lengths need no scale
    assert s["held_out"]["verdict"] == "inconclusive"  # "held" with an interval reaching 1
    assert summary_from_v1({**SUMMARY_V1, "held_out": {"verdict": "dense selected"}})["held_out"]["verdict"] == "dense kept"


def test_a_summary_of_v2_gets_the_pruned_speedup_its_vocabulary_comparison_lacked(tmp_path):
    row = {"label": "full", "method": "full", "k": 49152, "coverage_corpus": 1.0, "coverage_generations": 1.0,
           "modeled_latency_reduction": 0.0, "accept_length": 2.0, "draft_ms_per_step": 3.0,
           "measured_tokens_per_s": 20.0, "measured_latency_s": [1.0, 0.9, 1.1], "measured_speedup_vs_full": None,
           "measured_speedup_vs_plain": [1.2, 1.1, 1.3], "same_as_plain": True}
    summary = {"domain": "qa", "strategy": "tpe_vocab", "metric": {"name": "F1"},
               "vocab_comparison": {"rows": [row], "prompts": 4, "chosen_k": 1024}}
    upgraded = summary_from_v2(summary)
    assert upgraded["vocab_comparison"]["rows"] == [{**row, "measured_speedup_vs_pruned": None}]
    assert "measured_speedup_vs_pruned" not in row  # the record read is left as it was
    assert summary_from_v2(upgraded) is upgraded
    table = table_vocab_comparison([_record(current_summary(summary))], "unknown")
    assert pd.isna(table.loc[0, "measured_speedup_vs_pruned"]) and table.loc[0, "label"] == "full"


def _record(summary):
    return JobRecord(summary, None, {"model": "m", "finished": "1"})


def test_summaries_of_this_version_and_other_json_come_back_as_they_are():
    current = {**SUMMARY_V1, "metric": {"name": "F1"}, "vocab_comparison": None}
    assert current_summary(current) is current
    for other in ({}, {"domain": "qa", "metric": None}, {"strategy": "bfs"}):
        assert current_summary(other) is other


def test_sweep_and_report_read_a_v1_job_folder(tmp_path):
    job = tmp_path / "multirun" / "0_qa_bfs"
    job.mkdir(parents=True)
    (job / "summary.json").write_text(json.dumps(SUMMARY_V1))
    (job / "reproduce.json").write_text(json.dumps({"status": "finished", "finished": "2026-12-01T00:00:00",
                                                    "evaluation_spec": {"domain": DOMAIN_V2}}))
    [row] = sweep_rows(tmp_path / "multirun")
    assert (row["metric"], row["measured_speedup"], row["metric_selected"]) == ("F1", 1.2, pytest.approx(55.0))
    [record] = find_jobs([tmp_path / "multirun"])
    assert record.summary["held_out"]["verdict"] == "inconclusive"
    assert record.reproduce["evaluation_spec"]["domain"]["metric"] == "squad"


# -- reproduce.json --------------------------------------------------------------------------------------------
def test_a_reproduce_record_of_v1_names_its_components_class_path():
    record = {"evaluation_spec": {"drafter": {"target": PLD, "options": {}}, "domain": {**DOMAIN_V2}},
              "search_spec": {"target": "specsparse.search.bfs.BFSSearch", "options": {"beam": 2}}}
    upgraded = reproduce_from_v1(record)
    assert upgraded["evaluation_spec"]["drafter"] == {"class_path": PLD, "options": {}}
    assert upgraded["search_spec"] == {"class_path": "specsparse.search.bfs.BFSSearch", "options": {"beam": 2}}
    assert record["evaluation_spec"]["drafter"] == {"target": PLD, "options": {}}  # left as it was
    assert reproduce_from_v1(upgraded) is upgraded


def test_a_reproduce_record_of_v2_reads_its_domain_as_the_packaged_definition_gives_it():
    record = {"evaluation_spec": {"drafter": {"class_path": PLD, "options": {}}, "domain": DOMAIN_V2}}
    upgraded = reproduce_from_v2(record)
    assert Domain.from_record(upgraded["evaluation_spec"]["domain"]) == get_domain("qa", limit=12)
    assert Domain.from_record(json.loads(json.dumps(upgraded["evaluation_spec"]["domain"]))) == get_domain("qa", limit=12)
    assert "metric" not in DOMAIN_V2  # left as it was
    custom = {"evaluation_spec": {"domain": {**DOMAIN_V2, "name": "mine"}}}  # not packaged: the dataclass defaults
    assert reproduce_from_v2(custom) is custom and Domain.from_record(DOMAIN_V2 | {"name": "mine"}).metric is None


def test_reproduce_records_of_this_version_come_back_as_they_are():
    record = {"status": "finished", "evaluation_spec": {"drafter": {"class_path": PLD, "options": {}},
                                                        "domain": json.loads(json.dumps(asdict(get_domain("qa"))))},
              "search_spec": {"class_path": "specsparse.search.bfs.BFSSearch", "options": {}}}
    assert current_reproduce(record) is record
    for other in ({}, {"status": "failed", "error": "x"}, {"evaluation_spec": None}):
        assert current_reproduce(other) is other


# -- config maps -----------------------------------------------------------------------------------------------
def sample_map() -> ConfigMap:
    dense = OperatingPoint((), 2.4, 0.53, 0.0131)
    return ConfigMap(model="m", num_layers=12, drafter=Component(PLD, {}), domains={
        "qa": DomainConfig((3, 7), 2.31, 0.52, 2 / 12, 0.0123, 0.93, None, dense, (OperatingPoint((3,), 2.38, 0.53, 0.0127),)),
        "chat": DomainConfig((), 2.0, None, 0.0, 0.02, 1.0, None, OperatingPoint((), 2.0, None, 0.02)),
    })


def _map_v2() -> dict:
    """A map as written between be0bca0 and 33fff04: modeled_cost, metrics on 0-1, no metric_name."""
    data = config_map_to_dict(sample_map())
    for entry in data["domains"].values():
        for key in ("metric_name", "verdict", "verdict_checks"):
            entry.pop(key)
    return data


def test_a_config_map_of_v1_reads_cost_as_modeled_cost_and_its_metrics_onto_0_100(tmp_path):
    data = _map_v2()
    qa = data["domains"]["qa"]
    for point in (qa, qa["dense"], *qa["alternatives"]):  # before be0bca0: `cost`
        point["cost"] = point.pop("modeled_cost")
    (tmp_path / "v1.yaml").write_text(yaml.safe_dump(data))
    cm = load_config_map(tmp_path / "v1.yaml")
    read = cm.domains["qa"]
    assert (read.modeled_cost, read.dense.modeled_cost, read.alternatives[0].modeled_cost) == (0.0123, 0.0131, 0.0127)
    assert (read.metric, read.dense, read.alternatives[0]) == (
        pytest.approx(52.0), OperatingPoint((), 2.4, pytest.approx(53.0), 0.0131),
        OperatingPoint((3,), 2.38, pytest.approx(53.0), 0.0127))
    assert read.metric_name is None and cm.domains["chat"].metric is None
    assert config_map_from_v1(config_map_from_v1(data)) == config_map_from_v1(data)
    assert qa["cost"] == 0.0123  # the data read is left as it was


def test_a_config_map_of_v2_with_a_bad_metric_is_refused_as_before(tmp_path):
    data = _map_v2()
    data["domains"]["qa"]["dense"]["metric"] = "high"
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigMapError, match=r"bad\.yaml: domains\.qa\.dense\.metric: expected a number or null, got 'high'$"):
        load_config_map(tmp_path / "bad.yaml")


def test_config_maps_of_this_version_and_malformed_data_come_back_as_they_are(tmp_path):
    cm = replace(sample_map(), domains={name: replace(d, metric_name="F1") for name, d in sample_map().domains.items()})
    y, _ = write_config_map(tmp_path / "map", cm)
    data = yaml.safe_load(y.read_text())
    assert current_config_map(data) is data and load_config_map(y) == cm
    for malformed in (None, [], {"domains": []}, {"domains": {"qa": 3}}, {"domains": {"qa": {"metric_name": None}}}):
        assert config_map_from_v1(malformed) is malformed and config_map_from_v2(malformed) is malformed
