"""A job killed with SIGKILL in the middle of a search resumes on rerun: measurements finished before
the kill are served from the shared store, only the missing ones are measured, nothing is lost or
duplicated, and the result equals an uninterrupted run's. A search level is measured a batched pass at
a time, each pass's measurements stored as it ends, so a kill inside a level keeps the level's
finished passes; how the level is split into passes changes no measurement."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from specsparse.data import get_domain
from specsparse.measuring.evaluation import EvaluationSpec, Evaluator, MeasureSpec
from specsparse.study.runners.local import configurations_per_pass, measure_in_passes
from specsparse.study.store import ResultsStore
from specsparse.types import Candidate, Component, GenerationConfig

ROOT = Path(__file__).resolve().parents[2]
ARGS = [
    "model=tiny", "logger=none", "domain=translation", "domain.limit=28", "generation.max_new_tokens=32",
    "search=bfs", "tss.max_depth=2", "tss.max_pool=null", "tss.guard=task", "evaluate_test=false", "progress=false",
]
# tss.max_pool=null: the pool is every layer whose single skip passes (a rule on accept length and
# metric only), so the configurations measured do not depend on timings. tss.guard=task: the random
# tiny model's replies share little with each other, so the fidelity guard would leave no pool to resume.
ONE_PER_PASS = ["measure.batch_size=6"]  # the 6 calibration prompts fill a batch: one configuration a pass


def command(store: Path, run_dir: Path, *extra: str) -> list[str]:
    return [sys.executable, str(ROOT / "run.py"), *ARGS, *extra, f"paths.store={store}", f"hydra.run.dir={run_dir}"]


def environment() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "HYDRA_FULL_ERROR": "1"}


def count_rows(store: Path) -> int:
    if not store.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=1) as conn:
            return conn.execute("SELECT COUNT(*) FROM measurements").fetchone()[0]
    except sqlite3.OperationalError:  # the table is not created yet
        return 0


def run_to_end(store: Path, run_dir: Path, *extra: str) -> dict:
    subprocess.run(command(store, run_dir, *extra), env=environment(), cwd=ROOT, check=True, capture_output=True,
                   timeout=300)
    return json.loads((run_dir / "summary.json").read_text())


def measured(store: Path) -> dict[tuple, tuple]:
    with ResultsStore(store) as s:
        rows = s.rows()
    keys = [r["key"] for r in rows]
    assert len(keys) == len(set(keys))
    by_candidate = {}
    for r in rows:
        candidate = (r["split"], r["candidate.skip_layers"], r["candidate.vocab_size"])
        assert candidate not in by_candidate, f"{candidate} measured twice"
        by_candidate[candidate] = (r["key"], r["accept_length"], r["metric"])
    return by_candidate


def test_rerun_after_sigkill_measures_only_the_missing_configurations(tmp_path):
    reference_store = tmp_path / "reference.sqlite"
    run_to_end(reference_store, tmp_path / "reference")  # each level in one pass (batches of 64 rows)
    reference = measured(reference_store)
    expected = len(reference)  # dense, 4 single-layer skips, the pairs of the pool
    assert expected > 5

    # Killed inside the first level (the 4 single skips), once dense and one pass of it are stored.
    store = tmp_path / "store.sqlite"
    process = subprocess.Popen(command(store, tmp_path / "killed", *ONE_PER_PASS), env=environment(), cwd=ROOT,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 240
    try:
        while count_rows(store) < 2 and process.poll() is None and time.time() < deadline:
            time.sleep(0.02)
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL, "the job finished before it could be killed"
    before = measured(store)
    singles_kept = sum(len(skip) == 1 for _, skip, _ in before)
    assert len(before) == 1 + singles_kept and 1 <= singles_kept < 4, f"killed with {sorted(before)} stored"
    assert not (tmp_path / "killed" / "summary.json").exists()
    print(f"kill -9 inside the first level: {singles_kept} of its 4 measurements kept")

    summary = run_to_end(store, tmp_path / "rerun", *ONE_PER_PASS)
    after = measured(store)
    assert after == reference  # same configurations, keys, accept lengths and metrics, none twice
    assert all(after[c] == v for c, v in before.items())  # nothing lost, nothing rewritten
    cost = summary["search_cost"]
    assert cost["cache_hits"] == len(before)
    assert cost["configurations_measured"] == expected - len(before)

    # A second rerun measures nothing and concludes the same.
    again = run_to_end(store, tmp_path / "again")
    assert again["search_cost"]["configurations_measured"] == 0
    assert again["search_cost"]["cache_hits"] == expected
    assert again["selected_skip_layers"] == summary["selected_skip_layers"]


def test_chunked_and_unchunked_measurement_give_identical_measurements():
    """Measured one configuration a pass, each handed over as its pass ends, or all in one pass: the
    same Measurements (timings aside)."""
    spec = EvaluationSpec(model="tiny", drafter=Component("specsparse.drafters.pld.PromptLookupDrafter"),
                          domain=get_domain("translation", limit=28), generation=GenerationConfig(max_new_tokens=24))
    chunked_spec = replace(spec, measure=MeasureSpec(batch_size=6))
    candidates = [Candidate(), *(Candidate((i,)) for i in range(4)), Candidate((0, 2)), Candidate((1, 3))]
    evaluator = Evaluator(chunked_spec)
    assert configurations_per_pass(evaluator.batch_size, len(evaluator.examples)) == 1
    evaluator.continuations.clear()
    generated_before = []  # greedy generations done when each measurement was handed over

    def on_measured(candidate, measurement):
        generated_before.append(len(evaluator.continuations))

    chunked = measure_in_passes(evaluator, candidates, on_measured=on_measured, progress=False)
    assert generated_before == [6 * i for i in range(1, len(candidates) + 1)]  # one pass each, handed over at once
    whole = Evaluator(spec)
    assert configurations_per_pass(whole.batch_size, len(whole.examples)) >= len(candidates)
    whole.continuations.clear()
    unchunked = whole.evaluate_many(candidates, progress=False)
    assert [untimed(m) for m in chunked] == [untimed(m) for m in unchunked]
    assert [[untimed(p) for p in m.per_prompt] for m in chunked] == [[untimed(p) for p in m.per_prompt] for m in unchunked]


def untimed(result):
    """A Measurement or PromptResult without its wall-clock fields."""
    timings = {"wall_time_s", "draft_time_s", "verify_time_s"} & set(result.__dataclass_fields__)
    return replace(result, **dict.fromkeys(timings, 0.0))
