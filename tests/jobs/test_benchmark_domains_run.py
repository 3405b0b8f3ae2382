"""The benchmark domains end to end on the embedded SmolLM2-135M (slow): `run.py domain=<name>` searches,
times and scores each on a few prompts (HumanEval from its package, the others from files in their
sources' formats, as the Hub and bfcl-eval ship them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import HUB_ROWS, write_bfcl_folder, write_jsonl

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["logger=none", "progress=false", "domain.limit=10", "generation.max_new_tokens=24", "timing_prompts=2",
         "tss.max_depth=1", "tss.max_pool=2"]


def data_overrides(name: str, folder: Path) -> list[str]:
    if name == "humaneval":
        return ["domain.execute_code=true"]
    if name == "function_calling":
        return [f"domain.path={write_bfcl_folder(folder / 'bfcl', 5)}"]
    file = write_jsonl(folder / f"{name}.jsonl", HUB_ROWS[name](10))
    return ["domain.path=json", f"+domain.options.data_files={file}", f"+domain.options.cache_dir={folder / 'datasets'}"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["humaneval", "function_calling", "math500", "aime", "ner"])
def test_a_benchmark_domain_runs_end_to_end(tmp_path, name):
    run_dir = tmp_path / "run"
    env = {**os.environ, "HYDRA_FULL_ERROR": "1"}
    done = subprocess.run([sys.executable, str(ROOT / "run.py"), f"domain={name}", *SMALL, *data_overrides(name, tmp_path),
                           f"paths.outputs={tmp_path / 'out'}", f"hydra.run.dir={run_dir}"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["domain"] == name and summary["held_out"]["verdict"]
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 8 and all(s["references"] for s in samples)
    # every held-out reply was scored by the domain's metric (a number, not n/a)
    assert all(isinstance(s["metric_dense"], float) for s in samples), samples[0]
