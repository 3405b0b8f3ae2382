"""Domain config map: YAML/JSON round trip, validation errors, building from a search result."""

from __future__ import annotations

import csv
import json
from dataclasses import replace

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specsparse.config_map import (
    ConfigMap,
    ConfigMapError,
    DomainConfig,
    OperatingPoint,
    config_map_to_dict,
    load_config_map,
    write_config_map,
)
from specsparse.jobs.outputs import domain_config_from_result, write_measurements_csv
from specsparse.search import BFSSearch
from specsparse.search.rule import TSSRule
from specsparse.study.driver import evaluate_callable, run_search
from specsparse.types import Candidate, Component

NUM_LAYERS = 12
PLD = Component("specsparse.drafters.pld.PromptLookupDrafter", {"max_ngram_size": 2, "min_ngram_size": 2})


def sample_map() -> ConfigMap:
    dense = OperatingPoint((), 2.4, 0.53, 0.0131)
    return ConfigMap(
        model="SmolLM2-135M-Instruct",
        num_layers=NUM_LAYERS,
        drafter=PLD,
        domains={
            "qa": DomainConfig((3, 7), 2.31, 0.52, 2 / NUM_LAYERS, 0.0123, 0.93, None, dense,
                               (OperatingPoint((3,), 2.38, 0.53, 0.0127),)),
            "chat": DomainConfig((), 2.0, None, 0.0, 0.02, 1.0, 8192, OperatingPoint((), 2.0, None, 0.02),
                                 notes=("metric undefined: acceptance-only rules",)),
        },
    )


def test_yaml_and_json_round_trip(tmp_path):
    cm = sample_map()
    y, j = write_config_map(tmp_path / "maps" / "smollm", cm)
    assert (y.name, j.name) == ("smollm.yaml", "smollm.json")
    assert load_config_map(y) == cm
    assert load_config_map(j) == cm
    assert load_config_map(tmp_path / "maps" / "smollm") == cm  # base path: YAML preferred
    assert yaml.safe_load(y.read_text()) == json.loads(j.read_text())
    assert sorted(p.name for p in y.parent.iterdir()) == ["smollm.json", "smollm.yaml"]


def test_write_accepts_either_file_name(tmp_path):
    y, j = write_config_map(tmp_path / "m.json", sample_map())
    assert y == tmp_path / "m.yaml" and j == tmp_path / "m.json"
    assert list(config_map_to_dict(sample_map())) == [
        "specsparse_version", "created", "model", "num_layers", "drafter", "model_identity", "domains",
    ]


point_st = st.builds(
    OperatingPoint,
    st.lists(st.integers(0, NUM_LAYERS - 1), unique=True, max_size=4).map(lambda v: tuple(sorted(v))),
    st.floats(1, 5),
    st.none() | st.floats(0, 1),
    st.floats(0, 1),
)
domain_st = st.builds(
    DomainConfig,
    st.lists(st.integers(0, NUM_LAYERS - 1), unique=True, max_size=4).map(lambda v: tuple(sorted(v))),
    st.floats(1, 5),
    st.none() | st.floats(0, 1),
    st.floats(0, 1),
    st.floats(0, 1),
    st.floats(0, 1),
    st.none() | st.integers(1, 300_000),
    point_st,
    st.lists(point_st, max_size=3).map(tuple),
    st.lists(st.text(max_size=20), max_size=2).map(tuple),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(st.text("abcxyz_", min_size=1, max_size=8), domain_st, max_size=3))
def test_round_trip_property(tmp_path, domains):
    cm = ConfigMap("m", NUM_LAYERS, domains, drafter=None)
    y, j = write_config_map(tmp_path / "prop", cm)
    assert load_config_map(y) == cm == load_config_map(j)


def test_the_drafter_is_recorded_whole_and_maps_naming_it_only_still_load(tmp_path):
    y, _ = write_config_map(tmp_path / "m", sample_map())
    assert yaml.safe_load(y.read_text())["drafter"] == {"class_path": PLD.class_path, "options": PLD.options}
    corpus = Component("specsparse.drafters.samd.SuffixAutomatonDrafter", {"corpus": ("builtin",)})  # as a job holds it
    write_config_map(tmp_path / "m", replace(sample_map(), drafter=corpus))
    assert load_config_map(y).drafter == Component(corpus.class_path, {"corpus": ["builtin"]})
    earlier = config_map_to_dict(sample_map()) | {"drafter": "pld"}  # before maps recorded the drafter's options
    (tmp_path / "earlier.yaml").write_text(yaml.safe_dump(earlier))
    assert load_config_map(tmp_path / "earlier.yaml").drafter == "pld"


def _write_with(tmp_path, mutate, suffix=".yaml"):
    data = config_map_to_dict(sample_map())
    mutate(data)
    path = tmp_path / f"bad{suffix}"
    path.write_text(yaml.safe_dump(data) if suffix == ".yaml" else json.dumps(data))
    return path


def _set(path, value):
    def mutate(data):
        *parents, last = path
        node = data
        for p in parents:
            node = node[p]
        if value is KeyError:
            del node[last]
        else:
            node[last] = value

    return mutate


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (_set(["domains", "qa", "skip_layers"], "3,7"), "domains.qa.skip_layers: expected a list"),
        (_set(["domains", "qa", "skip_layers"], [3, 99]), "layer 99 out of range"),
        (_set(["domains", "qa", "skip_layers"], [3, 3]), "repeated layer"),
        (_set(["domains", "qa", "accept_length"], "fast"), "domains.qa.accept_length: expected a number"),
        (_set(["domains", "qa", "accept_length"], True), "domains.qa.accept_length: expected a number"),
        (_set(["domains", "qa", "metric"], []), "domains.qa.metric: expected a number or null"),
        (_set(["domains", "qa", "modeled_cost"], KeyError), "domains.qa: missing key 'modeled_cost'"),
        (_set(["domains", "qa", "skipped"], [1]), "domains.qa: unknown key 'skipped'"),
        (_set(["domains", "qa", "sparsity"], 1.5), "domains.qa.sparsity: expected a value in [0, 1]"),
        (_set(["domains", "chat", "draft_vocab_size"], 0), "draft_vocab_size: expected a positive integer"),
        (_set(["domains", "qa", "dense"], [1]), "domains.qa.dense: expected a mapping"),
        (_set(["domains", "qa", "alternatives"], [{"skip_layers": [1]}]), "alternatives[0]: missing key"),
        (_set(["domains", "qa", "notes"], "hi"), "domains.qa.notes: expected a list of strings"),
        (_set(["num_layers"], 0), "num_layers: expected a positive integer"),
        (_set(["model"], KeyError), "top level: missing key 'model'"),
        (_set(["domains"], [1, 2]), "domains: expected a mapping"),
        (_set(["drafter", "class_path"], KeyError), "drafter: missing key 'class_path'"),
        (_set(["drafter", "options"], [1]), "drafter: expected a class_path string and an options mapping"),
    ],
)
@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_malformed_files_give_one_line_errors(tmp_path, mutate, expected, suffix):
    path = _write_with(tmp_path, mutate, suffix)
    with pytest.raises(ConfigMapError) as err:
        load_config_map(path)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(str(path)) and expected in message


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("broken.yaml", "domains: [unclosed\n", "not valid YAML"),
        ("broken.json", '{"model": ', "not valid JSON"),
        ("list.yaml", "- 1\n- 2\n", "top level: expected a mapping"),
        ("empty.yaml", "", "top level: expected a mapping"),
    ],
)
def test_unparsable_files(tmp_path, name, text, expected):
    (tmp_path / name).write_text(text)
    with pytest.raises(ConfigMapError, match="^[^\n]*$") as err:
        load_config_map(tmp_path / name)
    assert expected in str(err.value)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigMapError, match="no such"):
        load_config_map(tmp_path / "absent.yaml")
    with pytest.raises(ConfigMapError, match="no such config map"):
        load_config_map(tmp_path / "absent")


def _trap(c: Candidate):
    drop = {0: 0.10, 3: 0.07, 7: 0.07}
    save = {0: 0.12, 3: 0.10, 7: 0.10}
    return (3.0 - sum(drop.get(i, 0.2) for i in c.skip_layers), 0.8,
            1.0 - sum(save.get(i, 0.1) for i in c.skip_layers))


def test_from_result_and_measurements_csv(tmp_path):
    rule = TSSRule(max_depth=3, feasibility="point", guard="task")  # the papers' rule: no per-prompt results here
    result = run_search(BFSSearch(NUM_LAYERS, rule), evaluate_callable(_trap), progress=False)
    cfg = domain_config_from_result("qa", result, NUM_LAYERS)
    assert cfg.skip_layers == (3, 7)
    assert cfg.sparsity == pytest.approx(2 / NUM_LAYERS)
    assert cfg.accept_length == pytest.approx(2.86) and cfg.modeled_cost == pytest.approx(0.8)
    assert cfg.dense == OperatingPoint((), 3.0, 80.0, 1.0)  # metrics on 0-100
    assert {a.skip_layers for a in cfg.alternatives} == {(0,), (3,), (7,)}
    assert cfg.draft_vocab_size is None

    cm = ConfigMap("toy", NUM_LAYERS, {"qa": cfg})
    write_config_map(tmp_path / "toy", cm)
    assert load_config_map(tmp_path / "toy.json").domains["qa"] == cfg

    out = write_measurements_csv(tmp_path / "qa_measurements.csv", result)
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(result.history) == result.n_measured
    assert [json.loads(r["skip_layers"]) for r in rows[:2]] == [[], [0]]
    assert [r["label"] for r in rows if r["selected"] == "True"] == ["skip[3,7]"]
    assert {r["label"] for r in rows if r["pareto"] == "True"} == {"skip[3,7]", "skip[0]", "skip[3]", "skip[7]"}
    assert sum(r["feasible"] == "True" for r in rows) == len(result.feasible)


def test_export_writes_the_token_map_sglang_loads(tmp_path, capsys):
    """`specsparse export`: a domain's kept ids as SGLang's --speculative-token-map reads them
    (torch.load with weights_only=True, then a tensor of ids)."""
    import dataclasses

    import torch

    from specsparse.cli import main

    base = sample_map()
    ids = (1, 5, 9, 200)
    trimmed = dataclasses.replace(base.domains["chat"], draft_vocab_size=len(ids), draft_vocab_ids=ids)
    write_config_map(tmp_path / "map.yaml", dataclasses.replace(base, domains={**base.domains, "chat": trimmed}))
    assert main(["export", "--config-map", str(tmp_path / "map.yaml"), "--domain", "chat",
                 "--token-map", str(tmp_path / "chat.pt")]) == 0
    assert torch.tensor(torch.load(tmp_path / "chat.pt", weights_only=True), dtype=torch.int64).tolist() == list(ids)
    assert main(["export", "--config-map", str(tmp_path / "map.yaml"), "--domain", "qa",
                 "--token-map", str(tmp_path / "qa.pt")]) == 2  # qa kept the full vocabulary
    assert "give one of the domains with a trimmed vocabulary in this map (chat)" in capsys.readouterr().err
    (tmp_path / "ids.json").write_text("[7, 3, 3]")
    assert main(["export", "--vocab-file", str(tmp_path / "ids.json"), "--token-map", str(tmp_path / "ids.pt")]) == 0
    assert torch.load(tmp_path / "ids.pt", weights_only=True) == [3, 7]
    assert not list(tmp_path.glob(".*.tmp"))


def test_verdicts_and_named_metrics_round_trip_and_earlier_maps_read_onto_0_100(tmp_path):
    checks = {"speedup": {"interval": [1.2, 1.1, 1.3], "threshold": 1.0, "state": "held"}}
    qa = replace(sample_map().domains["qa"], metric=52.0, metric_name="F1", verdict="held", verdict_checks=checks,
                 dense=OperatingPoint((), 2.4, 53.0, 0.0131))
    cm = replace(sample_map(), domains={"qa": qa})
    y, _ = write_config_map(tmp_path / "map", cm)
    assert load_config_map(y) == cm
    data = yaml.safe_load(y.read_text())
    assert list(data["domains"]["qa"])[:3] == ["skip_layers", "verdict", "verdict_checks"]
    for key in ("metric_name", "verdict", "verdict_checks"):  # a map written before maps named the metric: 0-1
        del data["domains"]["qa"][key]
    data["domains"]["qa"]["metric"], data["domains"]["qa"]["dense"]["metric"] = 0.52, 0.53
    (tmp_path / "earlier.yaml").write_text(yaml.safe_dump(data))
    earlier = load_config_map(tmp_path / "earlier.yaml").domains["qa"]
    assert (earlier.metric, earlier.dense.metric, earlier.verdict) == (pytest.approx(52.0), pytest.approx(53.0), None)
    data["domains"]["qa"]["verdict"] = "probably"
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigMapError, match=r"domains\.qa\.verdict: expected one of held, inconclusive"):
        load_config_map(tmp_path / "bad.yaml")
