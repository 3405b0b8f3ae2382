"""Reports from a tiny-model multirun: Table 1 / Table 2 as Markdown, LaTeX and CSV, the Pareto and
ablation plots, a merged multi-domain config map, and what each job records to be reproduced."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from specsparse.cli import main
from specsparse.config_map import load_config_map
from specsparse.data import Example
from specsparse.old_formats import current_summary
from specsparse.reporting.ablation import single_layer_ablation
from specsparse.reporting.formatting import format_cell, slim_table1, to_latex, to_markdown
from specsparse.reporting.mixed_stream import round_robin
from specsparse.reporting.records import JobRecord
from specsparse.reporting.report import build_report, find_jobs
from specsparse.reporting.tables import merged_config_map, routing_table, table1, table2
from specsparse.reporting.wandb_report import to_wandb_report
from specsparse.serving.router import map_routing_prompts
from specsparse.types import Component

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    """`python run.py -m domain=translation,mt_bench search=bfs,greedy` on the tiny model (4 jobs)."""
    out = tmp_path_factory.mktemp("sweep")
    subprocess.run(
        [sys.executable, str(ROOT / "run.py"), "-m", "model=tiny", "logger=none", "domain=translation,mt_bench",
         "search=bfs,greedy", "domain.limit=8", "generation.max_new_tokens=12", "tss.max_depth=2", "progress=false",
         f"paths.outputs={out}", f"hydra.sweep.dir={out / 'multirun'}"],
        cwd=out, env={**os.environ, "OMP_NUM_THREADS": "1"}, check=True, capture_output=True, timeout=400,
    )
    return out


def test_random_search_is_reported_as_its_best_draw_and_the_mean_over_its_draws(tmp_path):
    subprocess.run(
        [sys.executable, str(ROOT / "run.py"), "model=tiny", "logger=none", "domain=translation", "search=random",
         "search.depth=1", "search.draws=3", "domain.limit=8", "generation.max_new_tokens=12", "progress=false",
         f"paths.outputs={tmp_path}"],
        cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "1"}, check=True, capture_output=True, timeout=400,
    )
    (record,) = find_jobs([tmp_path / "runs"])
    draws = record.summary["random_draws"]
    assert draws["draws"] == 3 and record.summary["selected_skip_layers"] == draws["best_draw"]
    for split in ("calibration", "test"):
        accept = draws[split]["accept_of_draws"]
        assert accept["min"] <= accept["mean"] <= accept["max"]
        assert 0 <= draws[split]["metric_of_draws"]["mean"] <= 100  # BLEU on 0-100
    rows = table2([record]).set_index("strategy")
    assert list(rows.index) == ["random: best of 3 draws", "random: mean [min-max] of 3 draws"]
    mean = rows.loc["random: mean [min-max] of 3 draws"]
    assert (mean["accept"], mean["accept_low"], mean["accept_high"]) == (
        draws["test"]["accept_of_draws"]["mean"], draws["test"]["accept_of_draws"]["min"],
        draws["test"]["accept_of_draws"]["max"])
    assert pd.isna(mean["measured_speedup"]) and mean["split"] == "test"  # only the best draw is timed
    assert rows.loc["random: best of 3 draws", "measured_speedup"] > 0


def test_multirun_jobs_share_one_store(sweep):
    jobs = sorted(p.name for p in (sweep / "multirun").iterdir() if p.is_dir() and p.name[0].isdigit())
    assert jobs == ["0_translation_bfs", "1_translation_greedy", "2_mt_bench_bfs", "3_mt_bench_greedy"]
    greedy = json.loads((sweep / "multirun" / "1_translation_greedy" / "summary.json").read_text())
    # dense and GM-Skip's first deletion, the last layer, were measured by bfs before
    assert greedy["search_cost"]["cache_hits"] >= 2
    assert (sweep / "store.sqlite").is_file()


def test_every_job_records_what_reproduces_it(sweep):
    job = sweep / "multirun" / "0_translation_bfs"
    record = json.loads((job / "reproduce.json").read_text())
    assert record["status"] == "finished"
    assert {"model=tiny", "domain=translation", "search=bfs"} <= set(record["overrides"])
    assert record["command"].startswith("python run.py ")
    assert record["seeds"] == {"seed": 0, "generation": 0, "split": 0, "search": None}
    assert {"torch", "transformers", "specsparse", "hydra-core", "ray", "wandb"} <= set(record["versions"])
    assert record["versions"]["torch"] and record["versions"]["specsparse"]
    assert "git" in record  # the commit, or None outside a checkout
    assert len(record["data"]["calibration_ids_sha256"]) == 64 and record["data"]["n_test"] >= 1
    assert record["model_identity"]["name"] == "tiny" and record["num_layers"] == 4
    assert record["config"]["model"]["source"] == "tiny"
    assert record["store"] == str(sweep / "store.sqlite")
    assert (job / ".hydra" / "config.yaml").is_file()


def test_tables(sweep):
    records = find_jobs([sweep / "multirun"])
    assert len(records) == 4
    t1 = table1(records)
    assert list(t1["domain"]) == ["mt_bench", "translation"] and set(t1["strategy"]) == {"bfs"}
    assert (t1["split"] == "test").all()
    mt = t1.set_index("domain").loc["mt_bench"]
    assert pd.isna(mt["metric_native"]) and pd.isna(mt["metric_tss"])  # no references: no metric, not 0
    assert mt["accept_native"] > 0 and 0 <= mt["skipped_ratio"] <= 1
    assert set(t1["method"]) == {"pld"}  # the drafter every job of the sweep ran (the quickstart preset's)
    timing = next(r.summary["measured_timing_test"] for r in records if r.domain == "mt_bench" and r.strategy == "bfs")
    assert mt["measured_tokens_per_s_native"] == dict(zip(timing["labels"], timing["tokens_per_s"]))["dense"] > 0
    assert mt["accept_native_low"] <= mt["accept_native"] <= mt["accept_native_high"]  # numeric interval columns
    translation = t1.set_index("domain").loc["translation"]
    assert translation["metric_name"] == "BLEU" and 0 <= translation["metric_native"] <= 100
    t2 = table2(records)
    assert (t2["measured_tokens_per_s"] > 0).all()  # each pick's engine tokens/s, timed side by side on test
    assert sorted(zip(t2["domain"], t2["strategy"])) == [
        ("mt_bench", "bfs"), ("mt_bench", "greedy"), ("translation", "bfs"), ("translation", "greedy")]
    assert (t2["configurations"] >= t2["new_measurements"]).all()
    slim = slim_table1(t1)  # the paper's layout, speed first: over plain decoding, then over native
    assert list(slim.columns) == ["model", "method", "domain", "TSS vs plain [95% CI]", "native vs plain [95% CI]",
                                  "TSS vs native [95% CI]", "A", "metric (0-100)", "measured tok/s", "skipped",
                                  "verdict"]
    markdown, latex = to_markdown(slim), to_latex(slim)
    header = [cell.strip() for cell in markdown.splitlines()[0].strip("|").split("|")]
    mt_row = next(line for line in markdown.splitlines() if "| mt_bench |" in line)
    cells = dict(zip(header, (cell.strip() for cell in mt_row.strip("|").split("|"))))
    assert cells["metric (0-100)"] == "n/a" and " -> " in cells["A"] and cells["measured tok/s"] != "n/a"
    assert cells["TSS vs plain [95% CI]"].endswith("]") and cells["native vs plain [95% CI]"].endswith("]")
    assert cells["verdict"] in ("held", "inconclusive", "did not hold", "dense kept")
    assert "mt\\_bench" in latex and "\\toprule" in latex


def test_report_command_writes_tables_plots_and_merged_map(sweep, capsys):
    out = sweep / "report"
    merged = out / "maps" / "all"
    assert main(["report", str(sweep / "multirun"), "--out", str(out), "--merge-config-map", str(merged)]) == 0
    printed = capsys.readouterr().out
    assert "Table 1" in printed and "Table 2" in printed
    assert printed.count("serve will route domain ") == 2  # what serving runs per domain, and why (its verdict)
    for table in ("table1", "table2"):
        for suffix in (".md", ".tex", ".csv"):
            assert (out / f"{table}{suffix}").stat().st_size > 0
    csv = pd.read_csv(out / "table1.csv")  # numeric columns, empty where a value does not exist
    assert pd.isna(csv.set_index("domain").loc["mt_bench", "metric_tss"])
    assert pd.api.types.is_float_dtype(csv["measured_speedup_low"]) and pd.api.types.is_float_dtype(csv["accept_tss_high"])
    for png in ("pareto_translation.png", "pareto_mt_bench.png", "ablation_single_layer.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"
    ablation = pd.read_csv(out / "ablation_single_layer.csv", keep_default_na=False)
    assert sorted(set(ablation["domain"])) == ["mt_bench", "translation"]
    assert sorted(ablation[ablation["domain"] == "translation"]["layer"]) == [0, 1, 2, 3]
    assert set(ablation[ablation["domain"] == "mt_bench"]["delta_metric"]) == {""}  # no metric: empty, never 0
    config_map = load_config_map(merged)
    assert set(config_map.domains) == {"translation", "mt_bench"} and config_map.num_layers == 4
    dense = pd.read_csv(out / "dense_accept_length.csv")  # Fig. 2: the dense accept length per domain and drafter
    assert sorted(zip(dense["drafter"], dense["domain"])) == [
        ("PromptLookupDrafter", "mt_bench"), ("PromptLookupDrafter", "translation")]
    assert (dense["accept_length"] >= 1).all() and (dense["prompts"] > 0).all()
    assert (out / "dense_accept_length.png").read_bytes()[:4] == b"\x89PNG"
    for job, has_metric in (("0_translation_bfs", True), ("2_mt_bench_bfs", False)):  # Fig. 5's data
        samples = pd.read_json(sweep / "multirun" / job / "samples.jsonl", lines=True, dtype={"metric_dense": float, "metric_tss": float})
        record = json.loads((sweep / "multirun" / job / "reproduce.json").read_text())
        assert len(samples) == len(set(samples["example_id"])) == record["data"]["n_test"]
        assert (samples[["accept_dense", "accept_tss"]] >= 1).all().all()
        assert samples["metric_dense"].notna().all() == has_metric and samples["metric_tss"].notna().all() == has_metric
    for png in ("samples_translation.png", "samples_mt_bench.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"
    assert (out / "report.md").read_text().count("![") == 6


def test_single_layer_ablation_reads_the_store(sweep):
    frame = single_layer_ablation([sweep / "store.sqlite"])
    translation = frame[frame["domain"] == "translation"]
    assert list(translation["layer"]) == [0, 1, 2, 3]
    assert (translation["delta_accept"] == translation["accept_length"] - translation["dense_accept_length"]).all()


def test_missing_numbers_print_as_na():
    assert format_cell("metric_tss", None) == "n/a"
    assert format_cell("metric_tss", float("nan")) == "n/a"
    assert format_cell("metric_tss", 0.0) == "0.0"
    assert format_cell("measured_speedup", 1.234) == "1.23x"


def test_report_without_jobs_fails_with_one_line(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("specsparse: error:") and "\n" not in err


def test_tables_from_summaries_alone(tmp_path):
    """What the W&B path feeds in: summaries without job folders."""
    summary = {
        "domain": "qa", "strategy": "bfs", "selected_skip_layers": [3], "selected_vocab_size": None,
        "calibration": {"dense": None, "selected": None},
        "test": {"dense": {"accept_length": 2.0, "metric": None, "tokens_per_s": 10.0, "cost": 0.02},
                 "selected": {"accept_length": 1.9, "metric": None, "tokens_per_s": 12.0, "cost": 0.015}},
        "speedup_test": 1.2, "search_cost": {"configurations_measured": 5, "cache_hits": 2, "wall_time_s": 3.0},
        "model": "m", "num_layers": 30,
    }
    # An earlier version's summary (as W&B may hold it): read in this version's names and scale.
    record = JobRecord(current_summary(summary), None, {"model": "m", "num_layers": 30, "finished": "1"})
    t1 = table1([record])
    assert t1.loc[0, "skipped_ratio"] == pytest.approx(1 / 30) and t1.loc[0, "measured_speedup"] == 1.2
    assert t1.loc[0, "modeled_speedup"] == pytest.approx(12.0 / 10.0)  # from the cost profile, labelled so
    assert table2([record]).loc[0, "configurations"] == 7
    written = build_report([record], tmp_path, plots=False)
    # the metric, and what this older summary lacks (method, both speedups over plain, the side-by-side
    # rates, verdict): n/a, never 0
    assert written["table1"][0].read_text().count("n/a") == 6


def test_routing_learns_from_the_maps_calibration_prompts_and_is_scored_on_test(sweep, tmp_path):
    """Each job's map records its calibration prompts; the report fits the runtime's default router
    on them and scores it on every mapped job's held-out prompts."""
    records = find_jobs([sweep / "multirun"])
    job = sweep / "multirun" / "0_translation_bfs"
    recorded = load_config_map(job / "config_map.yaml").domains["translation"].routing_prompts
    calibration = json.loads((job / "reproduce.json").read_text())["data"]["n_calibration"]
    assert len(recorded) == calibration and all(p.startswith("Translate") for p in recorded)
    merged = merged_config_map(records)
    prompts = map_routing_prompts(merged)
    assert prompts["translation"] == list(recorded) and "qa" in prompts  # unmapped built-in domains: served dense
    routing = routing_table(records, merged).set_index("domain")
    assert list(routing.index) == ["mt_bench", "translation", "all"]
    assert routing.loc["all", "test_prompts"] == routing.loc[["mt_bench", "translation"], "test_prompts"].sum()
    assert 0 <= routing.loc["all", "accuracy"] <= 1 and routing.loc["translation", "accuracy"] > 0.5


def test_mixed_stream_row_times_the_controller_against_dense(sweep, tmp_path):
    records = find_jobs([sweep / "multirun"])
    written = build_report(records, tmp_path / "report", plots=False, mixed_stream=2, progress=False)
    t1 = pd.read_csv(written["table1"][2], keep_default_na=False).set_index("domain")
    row = t1.loc["mixed stream"]
    assert row["strategy"] == "controller" and row["verdict"].startswith("4 requests, routed right")
    assert float(row["measured_tokens_per_s_native"]) > 0 and float(row["measured_tokens_per_s_tss"]) > 0
    assert float(row["measured_speedup_low"]) <= float(row["measured_speedup"]) <= float(row["measured_speedup_high"])
    assert (tmp_path / "report" / "routing.md").is_file() is False  # only with --merge-config-map


def test_the_mixed_streams_drafter_learns_nothing_from_the_prompts_it_times(sweep, monkeypatch):
    """A drafter with a corpus of its own (SAMD over the built-in sets): the mixed stream builds it with every
    prompt the jobs measured left out, the streamed test prompts among them, as each job's drafter was."""
    from specsparse.drafters.samd import SuffixAutomatonDrafter
    from specsparse.reporting.tables import mapped_test_splits, mixed_stream_row

    records = find_jobs([sweep / "multirun"])
    for record in records:  # the jobs' records, as if they had measured SAMD
        record.reproduce["evaluation_spec"]["drafter"] = {
            "class_path": "specsparse.drafters.samd.SuffixAutomatonDrafter", "options": {"corpus": ["builtin"]}}
    excluded = []
    build = SuffixAutomatonDrafter.from_target.__func__

    def recording(cls, *args, **options):
        excluded.append(set(options.get("exclude_ids", ())))
        return build(cls, *args, **options)

    monkeypatch.setattr(SuffixAutomatonDrafter, "from_target", classmethod(recording))
    merged = dataclasses.replace(merged_config_map(records), drafter=Component(
        "specsparse.drafters.samd.SuffixAutomatonDrafter", {"corpus": ["builtin"]}))  # and their maps
    mixed_stream_row(records, merged, per_domain=1, progress=False)
    streamed = {ex.id for examples in mapped_test_splits(records, merged).values() for ex in examples}
    assert excluded and all(streamed <= ids for ids in excluded)


def test_vocabulary_job_reports_coverage_and_in_or_out_of_domain(tmp_path):
    """A tiny vocabulary search whose corpus is the built-in QA references, run on math: an
    out-of-domain row in the vocabulary table, and the coverage-vs-k figure."""
    subprocess.run(
        [sys.executable, str(ROOT / "run.py"), "model=tiny", "logger=none", "domain=math", "search=tpe_vocab",
         "drafter=self_skip", "search.n_trials=8", "vocab_corpus=[builtin:qa]", "domain.limit=8",
         "generation.max_new_tokens=8", "timing_prompts=2", "progress=false", f"paths.outputs={tmp_path}",
         f"hydra.run.dir={tmp_path / 'job'}"],
        cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "1"}, check=True, capture_output=True, timeout=300,
    )
    summary = json.loads((tmp_path / "job" / "summary.json").read_text())
    assert summary["vocab_corpus"] == {"entries": ["builtin:qa"], "domains": ["qa"], "in_domain": False}
    written = build_report(find_jobs([tmp_path / "job"]), tmp_path / "report")
    vocab = pd.read_csv(written["table_vocab"][2], keep_default_na=False)
    assert list(vocab["in_domain"]) == ["out of domain"] and int(vocab.loc[0, "k"]) == summary["selected_vocab_size"]
    assert float(vocab.loc[0, "accept_full"]) >= 1 and float(vocab.loc[0, "accept_trimmed"]) >= 1
    [figure] = written["vocab_coverage"]
    assert figure.name == "vocab_coverage_math.png" and figure.read_bytes()[:4] == b"\x89PNG"
    curve = summary["info"]["curve"]
    assert [k for k, _, _ in curve] == sorted(k for k, _, _ in curve) and summary["info"]["k"] in [k for k, _, _ in curve]
    coverages = [c for _, c, _ in curve]
    assert coverages == sorted(coverages)  # C(k) never falls as k grows


def test_wandb_report_definition_offline(sweep, tmp_path, capsys, monkeypatch):
    """Offline, --publish writes the report definition; it holds the tables and one panel grid per
    domain, and wandb-workspaces builds a Report from it."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    out = tmp_path / "report"
    assert main(["report", str(sweep / "multirun"), "--out", str(out), "--no-plots", "--publish", "me/specsparse"]) == 0
    assert "definition written" in capsys.readouterr().out
    definition = json.loads((out / "wandb_report.json").read_text())
    assert (definition["entity"], definition["project"]) == ("me", "specsparse")
    blocks = definition["blocks"]
    tables = {b["text"]: blocks[i + 1]["text"] for i, b in enumerate(blocks) if b["type"] == "H1" and i + 1 < len(blocks)
              and blocks[i + 1]["type"] == "MarkdownBlock"}
    assert tables["Table 1: native vs TSS per domain"] == (out / "table1.md").read_text()
    assert tables["Table 2: search strategies per domain"] == (out / "table2.md").read_text()
    grids = [b for b in blocks if b["type"] == "PanelGrid"]
    assert [g["runset"]["filters"] for g in grids] == [  # scoped to the sweep's group (Hydra's sweep dir)
        f"Metric('Group') in ['multirun-multirun'] and Config('domain.name') = '{d}'" for d in ("mt_bench", "translation")]
    assert {p["type"] for p in grids[0]["panels"]} == {"WeavePanelSummaryTable", "MediaBrowser", "ScatterPlot"}
    import wandb_workspaces.reports.v2 as wr

    report = to_wandb_report(definition)
    assert isinstance(report, wr.Report) and report.project == "specsparse"
    assert [type(b).__name__ for b in report.blocks][:2] == ["H1", "MarkdownBlock"]
    assert sum(isinstance(b, wr.PanelGrid) for b in report.blocks) == 2
    assert main(["report", str(sweep / "multirun"), "--out", str(out), "--publish", "nobody"]) == 2


def test_every_json_file_a_job_writes_is_strict_json(sweep):
    """RFC 8259 JSON: no NaN / Infinity constants, which Python writes by default and most parsers refuse."""
    def refuse(constant):
        raise AssertionError(f"non-standard JSON constant {constant}")

    files = [f for f in (sweep / "multirun").rglob("*") if f.suffix in (".json", ".jsonl") and "wandb" not in f.parts]
    assert {"summary.json", "reproduce.json", "config_map.json", "samples.jsonl"} <= {f.name for f in files}
    for file in files:
        texts = file.read_text().splitlines() if file.suffix == ".jsonl" else [file.read_text()]
        for text in texts:
            json.loads(text, parse_constant=refuse)
    samples = [json.loads(line) for line in (sweep / "multirun" / "0_translation_bfs" / "samples.jsonl").open()]
    assert all(s["prompt"] and s["references"] and 0 <= s["fidelity_tss"] <= 100 for s in samples)
    summary = json.loads((sweep / "multirun" / "0_translation_bfs" / "summary.json").read_text())
    assert summary["metric"] == {"name": "BLEU", "module": "sacrebleu", "key": "bleu", "scale": "0-100"}
    assert summary["held_out"]["verdict"] in ("held", "inconclusive", "did not hold", "dense kept")


def test_strict_json_writes_null_for_what_json_cannot_hold():
    from specsparse.util import strict_json

    text = strict_json({"a": float("inf"), "b": [float("nan"), 1.5, (2, -float("inf"))], "c": Path("/x")})
    assert json.loads(text) == {"a": None, "b": [None, 1.5, [2, None]], "c": "/x"}


@given(lengths=st.lists(st.integers(0, 5), max_size=4), per_domain=st.integers(1, 10**12))
def test_the_mixed_stream_takes_at_most_n_prompts_per_domain_and_all_of_a_shorter_one(lengths, per_domain):
    """A huge --mixed-stream N is legal: every test prompt of every domain, at once (never a loop to N)."""
    domains = {f"d{i}": [Example(f"d{i}-{j}", f"d{i}", ("q",), ("a",)) for j in range(n)] for i, n in enumerate(lengths)}
    stream = round_robin(domains, per_domain)
    assert len(stream) == sum(min(n, per_domain) for n in lengths)
    assert [ex.id for ex in stream if ex.domain == "d0"] == [ex.id for ex in domains.get("d0", [])][:per_domain]


@pytest.mark.parametrize("direction, best", [("maximize", 1), ("minimize", 2), (None, 3)])
def test_an_optuna_sweep_reports_its_best_trial_not_its_last(tmp_path, direction, best):
    """Trials 0-3 of one sweep (trial 3 failed: NaN); an Optuna sweep's report takes the best by the
    objective in the sweep's direction, any other sweep its latest job."""
    from specsparse.reporting.records import JobRecord, tss_jobs

    sweeper = {"_target_": "hydra_plugins.specsparse_optuna_sweeper.optuna_sweeper.OptunaSweeper", "direction": direction}
    if direction is None:
        sweeper = {"_target_": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"}
    records = []
    for trial, value in enumerate([1.2, 1.5, 1.1, None]):
        folder = tmp_path / "sweep" / f"{trial}_qa_bfs"
        (folder / ".hydra").mkdir(parents=True)
        (folder / ".hydra" / "hydra.yaml").write_text(yaml.safe_dump({"hydra": {"sweeper": sweeper}}))
        summary = {"domain": "qa", "strategy": "bfs", "speedup": value}
        records.append(JobRecord(summary, folder, {"config": {"objective": "speedup"}, "model": "m",
                                                   "finished": f"2026-01-01T00:00:0{trial}"}))
    [chosen] = tss_jobs(records).values()
    assert chosen.directory.name == f"{best}_qa_bfs"
