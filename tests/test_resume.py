"""A job killed with SIGKILL in the middle of a search resumes on rerun: measurements finished before
the kill are served from the shared store, only the missing ones are measured, nothing is lost or
duplicated, and the result equals an uninterrupted run's."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from specsparse.jobs.store import ResultsStore

ROOT = Path(__file__).resolve().parents[1]
ARGS = [
    "model=tiny", "logger=none", "domain=translation", "domain.limit=28", "generation.max_new_tokens=32",
    "search=bfs", "tss.max_depth=2", "tss.max_pool=null", "tss.guard=task", "evaluate_test=false", "progress=false",
]
# tss.max_pool=null: the pool is every layer whose single skip passes (a rule on accept length and
# metric only), so the configurations measured do not depend on timings. tss.guard=task: the random
# tiny model's replies share little with each other, so the fidelity guard would leave no pool to resume.


def command(store: Path, run_dir: Path) -> list[str]:
    return [sys.executable, str(ROOT / "run.py"), *ARGS, f"paths.store={store}", f"hydra.run.dir={run_dir}"]


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


def run_to_end(store: Path, run_dir: Path) -> dict:
    subprocess.run(command(store, run_dir), env=environment(), cwd=ROOT, check=True, capture_output=True, timeout=300)
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
    run_to_end(reference_store, tmp_path / "reference")
    reference = measured(reference_store)
    expected = len(reference)  # dense, 4 single-layer skips, the pairs of the pool
    assert expected > 5

    store = tmp_path / "store.sqlite"
    process = subprocess.Popen(command(store, tmp_path / "killed"), env=environment(), cwd=ROOT,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 240
    try:
        while count_rows(store) < 3 and process.poll() is None and time.time() < deadline:
            time.sleep(0.02)
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL, "the job finished before it could be killed"
    before = measured(store)
    assert 3 <= len(before) < expected, f"{len(before)} of {expected} measurements at the kill"
    assert not (tmp_path / "killed" / "summary.json").exists()

    summary = run_to_end(store, tmp_path / "rerun")
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
