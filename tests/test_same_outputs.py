"""A change that is not meant to change results writes the same outputs: a tiny sweep (and, slow, the
quickstart), each priced by a cost profile pinned under tests/golden/, gives every job's
measurements.csv and samples.jsonl byte for byte as recorded there, and the same picks, accept lengths,
metrics and intervals in summary.json (its timed fields aside).

A change meant to alter results records them anew, and its diff under tests/golden/ shows what moved:
    SPECSPARSE_UPDATE_GOLDEN=1 python -m pytest tests/test_same_outputs.py -m "slow or not slow"
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from specsparse.jobs.outputs import UNTIMED_FILES, untimed_summary

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden"

TINY_SWEEP = ["-m", "model=tiny", "domain=qa,translation", "search=bfs,greedy", "domain.limit=8",
              "generation.max_new_tokens=12", "tss.max_depth=2"]
QUICKSTART = ["timing_prompts=2"]  # the default experiment; timing prompts only time, so 2 suffice


def run_jobs(name: str, overrides: list[str], tmp_path: Path) -> dict[str, Path]:
    """Run run.py with the profile pinned in tests/golden/<name>/; every job's folder by its name."""
    out = tmp_path / name
    done = subprocess.run(
        [sys.executable, str(ROOT / "run.py"), *overrides, "logger=none", "progress=false",
         f"cost.profile={GOLDEN / name / 'profile.json'}", f"paths.outputs={out}",
         f"hydra.sweep.dir={out / 'jobs'}", f"hydra.run.dir={out / 'jobs' / 'job'}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return {job.parent.name: job.parent for job in sorted((out / "jobs").glob("**/summary.json"))}


def assert_same_as_golden(name: str, jobs: dict[str, Path]) -> None:
    golden = GOLDEN / name
    if os.environ.get("SPECSPARSE_UPDATE_GOLDEN") == "1":
        for job, folder in jobs.items():
            shutil.rmtree(golden / job, ignore_errors=True)
            (golden / job).mkdir(parents=True)
            for file in UNTIMED_FILES:
                shutil.copyfile(folder / file, golden / job / file)
            (golden / job / "summary.json").write_text(untimed_summary(folder))
    assert sorted(jobs) == sorted(p.name for p in golden.iterdir() if p.is_dir())
    for job, folder in jobs.items():
        for file in UNTIMED_FILES:
            assert (folder / file).read_bytes() == (golden / job / file).read_bytes(), (
                f"{job}/{file} differs from tests/golden/{name}/{job}/{file}")
        assert untimed_summary(folder) == (golden / job / "summary.json").read_text(), f"{job}/summary.json differs"


def test_a_tiny_sweep_writes_the_recorded_outputs(tmp_path):
    assert_same_as_golden("tiny_sweep", run_jobs("tiny_sweep", TINY_SWEEP, tmp_path))


@pytest.mark.slow
def test_the_quickstart_writes_the_recorded_outputs(tmp_path, smollm):
    assert_same_as_golden("quickstart", run_jobs("quickstart", QUICKSTART, tmp_path))
