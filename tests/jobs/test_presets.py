"""The papers' CPU twins end to end on the embedded SmolLM2-135M (slow): each preset's sweep at a
few prompts, then the report built from it. The full-size twins are the presets themselves. And the
defaults every preset starts from: conf/config.yaml restates the code's, which must agree."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pandas as pd
import pytest
import yaml

from specsparse.reporting.report import build_report, find_jobs
from specsparse.search.rule import TSSRule
from specsparse.types import GenerationConfig

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["logger=none", "progress=false", "domain.limit=10", "generation.max_new_tokens=8", "timing_prompts=2"]


def test_the_config_restates_the_code_defaults():
    """conf/config.yaml restates TSSRule's and GenerationConfig's defaults only so that they can be
    overridden on the command line: each must be the code's own."""
    config = yaml.safe_load((ROOT / "conf" / "config.yaml").read_text())
    assert {**config["tss"], "protect_layers": tuple(config["tss"]["protect_layers"])} == asdict(TSSRule())
    assert config["generation"]["seed"] == "${seed}" and config["seed"] == GenerationConfig.seed
    assert {**config["generation"], "seed": config["seed"]} == asdict(GenerationConfig())


def sweep(tmp_path: Path, *overrides: str) -> Path:
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, str(ROOT / "run.py"), "-m", *overrides, *SMALL, f"paths.outputs={out}",
         f"hydra.sweep.dir={out / 'multirun'}"],
        cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "2"}, capture_output=True, text=True, timeout=1900,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return out / "multirun"


@pytest.mark.slow
def test_paper_tss_cpu_twin_runs_and_reports(tmp_path):
    multirun = sweep(tmp_path, "experiment=paper_tss_cpu", "domain=qa,mmlu",
                     "tss.max_depth=1")
    records = find_jobs([multirun])
    assert sorted(r.domain for r in records) == ["mmlu", "qa"]
    for record in records:
        assert record.summary["strategy"] == "bfs" and record.summary["held_out"]["verdict"]
        assert record.reproduce["config"]["tss"]["select"] == "measured"
    written = build_report(records, tmp_path / "report", plots=False, merge_config_map=tmp_path / "map",
                           mixed_stream=1, progress=False)
    table1 = pd.read_csv(written["table1"][2], keep_default_na=False)
    assert list(table1["domain"]) == ["mmlu", "qa", "mixed stream"]
    routing = pd.read_csv(written["routing"][2]).set_index("domain")
    assert routing.loc["all", "test_prompts"] == 16  # 8 held-out prompts of each domain (limit 10, 20% calibration)


@pytest.mark.slow
@pytest.mark.timeout(2000)  # trains two heads per domain (qa's hold out its own prompts) and times 8 heads per domain
def test_paper_vocab_cpu_twin_reports_in_and_out_of_domain(tmp_path):
    multirun = sweep(tmp_path, "experiment=paper_vocab_cpu", "domain=qa,math", "search.n_trials=10",
                     "drafter.train.max_new_tokens=16", "drafter.train.sampled_replies=0", "drafter.train.epochs=1",
                     "vocab_comparison.subsamples=2")
    records = find_jobs([multirun])
    written = build_report(records, tmp_path / "report")
    vocab = pd.read_csv(written["table_vocab"][2], keep_default_na=False).set_index("domain")
    assert vocab.loc["qa", "in_domain"] == "in domain" and vocab.loc["math", "in_domain"] == "out of domain"
    assert (vocab["k"].astype(int) >= 1).all() and (vocab["coverage"].astype(float) >= 0.9).all()
    assert {p.name for p in written["vocab_coverage"]} == {"vocab_coverage_qa.png", "vocab_coverage_math.png"}
    for where, domain in (("in_domain", "qa"), ("out_of_domain", "math")):  # the heads, side by side
        heads = pd.read_csv(written[f"table_vocab_{where}"][2])
        assert set(heads["domain"]) == {domain} and list(heads["method"]) == [
            "plain", "full", *["fixed_top_k"] * 4, "pruned_at_k", "trained_at_k"]
        assert (heads["same_as_plain"] == heads["prompts"]).all()  # every head lossless (float32)
