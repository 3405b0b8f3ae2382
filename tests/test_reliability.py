"""Bad files and interrupted runs: one clear line and exit code 2, nothing half-written."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specsparse.study.store import ResultsStore, StoreError
from specsparse.util import atomic_write_text, read_jsonl

ROOT = Path(__file__).resolve().parents[1]
TINY_JOB = ["model=tiny", "logger=none", "domain.limit=10", "generation.max_new_tokens=6", "tss.max_depth=1",
            "progress=false", "timing_prompts=2"]


def run(args, tmp_path, **kw):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}
    return subprocess.run([sys.executable, str(ROOT / "run.py"), *args, f"paths.outputs={tmp_path}"],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600, **kw)


@pytest.mark.parametrize("content", [b"this is not a database" * 100, b"SQLite format 3\x00" + b"\x00" * 200])
def test_a_damaged_store_is_one_line_naming_the_file(tmp_path, content):
    store = tmp_path / "store.sqlite"
    store.write_bytes(content)
    with pytest.raises(StoreError, match="store.sqlite is damaged"):
        ResultsStore(store)
    done = run(TINY_JOB, tmp_path)
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "move it aside" in errors[0] and "Traceback" not in done.stderr
    (record,) = tmp_path.glob("runs/*/reproduce.json")
    assert json.loads(record.read_text())["status"] == "failed"


def test_a_sweep_runs_its_valid_jobs_and_lists_the_failed_ones(tmp_path):
    done = run(["-m", *TINY_JOB, "generation.max_new_tokens=0,6"], tmp_path)
    assert done.returncode == 2
    output = done.stdout + done.stderr
    assert "1 job(s) of the sweep failed: 0_qa_bfs: generation: max_new_tokens must be in 1..1048576" in output
    jobs = sorted(p.name for p in tmp_path.glob("multirun/*/*_qa_bfs"))
    assert jobs == ["0_qa_bfs", "1_qa_bfs"]  # the valid one ran; the invalid one's folder holds only its error
    (failed,) = tmp_path.glob("multirun/*/0_qa_bfs/reproduce.json")
    assert json.loads(failed.read_text())["error"].startswith("generation: max_new_tokens must be in")
    assert not list(failed.parent.glob("*.csv")) and not (failed.parent / "summary.json").exists()
    assert len(list(tmp_path.glob("multirun/*/1_qa_bfs/summary.json"))) == 1


def test_outputs_respect_the_umask(tmp_path):
    previous = os.umask(0o022)
    try:
        path = atomic_write_text(tmp_path / "out.json", "{}")
    finally:
        os.umask(previous)
    assert path.stat().st_mode & 0o777 == 0o644


def test_jsonl_errors_name_the_file_and_the_right_line(tmp_path):
    bad = tmp_path / "prompts.jsonl"
    bad.write_text('{"prompt": "a"}\n\n{"prompt": \n')
    with pytest.raises(ValueError, match=r"prompts.jsonl:3: not valid JSON"):
        list(read_jsonl(bad))
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes('{"prompt": "a"}\n{"prompt": "caf\u00e9"}\n'.encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin.jsonl:2: not UTF-8"):
        list(read_jsonl(latin))


def test_command_line_usage_errors_are_one_line(capsys):
    from specsparse.cli import main

    for argv, needle in ((["generate", "hi"], "--config-map"), (["serve", "--config-map", "m.yaml", "--port", "x"], "--port"),
                         (["nonsense"], "invalid choice")):
        with pytest.raises(SystemExit) as stop:
            main(argv)
        err = capsys.readouterr().err.strip()
        assert stop.value.code == 2 and "\n" not in err and needle in err and err.endswith("--help)")
