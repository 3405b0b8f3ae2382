"""A sweep ends with one table of every job (sweep_summary.md / .csv in the sweep folder, failed jobs
included), and every job says which experiment preset shaped it."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from specsparse.cli import hydra_callbacks
from specsparse.cli.hydra_callbacks import SweepSummary
from specsparse.jobs.sweep import sweep_rows, to_csv, to_markdown

ROOT = Path(__file__).resolve().parents[2]


def write_job(folder: Path, summary: dict | None = None, reproduce: dict | None = None) -> None:
    folder.mkdir(parents=True)
    if summary is not None:
        (folder / "summary.json").write_text(json.dumps(summary))
    if reproduce is not None:
        (folder / "reproduce.json").write_text(json.dumps(reproduce))


def summary(domain: str, strategy: str, **extra) -> dict:
    return {
        "domain": domain, "strategy": strategy, "selected_skip_layers": [3, 7],
        "test": {"dense": {"accept_length": 2.5, "metric": 0.61}, "selected": {"accept_length": 2.25, "metric": 0.6}},
        **extra,
    }


@pytest.fixture
def sweep_dir(tmp_path) -> Path:
    sweep = tmp_path / "multirun" / "2026-12-02_05-40-00-123456"
    write_job(sweep / "0_qa_bfs", summary(
        "qa", "bfs", metric={"name": "F1"}, measured_speedup_test=1.31, measured_speedup_test_interval=[1.12, 1.5],
        measured_speedup_test_vs_plain=[1.4, 1.2, 1.6], held_out={"verdict": "held", "reasons": []}), {"status": "finished"})
    write_job(sweep / "1_qa_greedy", summary("qa", "greedy", speedup_test=0.97))  # an older summary.json
    write_job(sweep / "2_mmlu_bfs", None, {"status": "failed", "domain": "mmlu", "search": "bfs",
                                           "error": "model foo: no such file"})
    write_job(sweep / "3_math_bfs", None, {"status": "failed", "error": "domain.limit must be >= 2"})  # a bad config
    write_job(sweep / "10_math_bfs", summary("math", "bfs", held_out={"verdict": "dense kept"}))
    write_job(sweep / "4_rag_bfs", None, {"status": "running", "domain": "rag", "search": "bfs"})  # stopped
    stray = sweep / "0_qa_bfs" / "wandb" / "offline-run-x" / "files"
    stray.mkdir(parents=True)
    (stray / "summary.json").write_text("{}")  # W&B's files are not jobs
    return sweep


def test_one_row_per_job_failed_ones_included(sweep_dir):
    rows = {r["job"]: r for r in sweep_rows(sweep_dir)}
    assert list(rows) == ["0_qa_bfs", "1_qa_greedy", "2_mmlu_bfs", "3_math_bfs", "4_rag_bfs", "10_math_bfs"]
    assert rows["0_qa_bfs"] == {
        "job": "0_qa_bfs", "domain": "qa", "search": "bfs", "skip_layers": [3, 7], "measured_speedup_vs_plain": 1.4,
        "measured_speedup_vs_plain_low": 1.2, "measured_speedup_vs_plain_high": 1.6, "measured_speedup": 1.31,
        "measured_speedup_low": 1.12, "measured_speedup_high": 1.5, "accept_dense": 2.5, "accept_selected": 2.25,
        "metric": "F1", "metric_dense": 0.61, "metric_selected": 0.6, "verdict": "held", "error": "",
    }
    old = rows["1_qa_greedy"]  # an earlier version's names and 0-1 metric, no verdict or interval: never an error
    assert (old["metric"], old["verdict"], old["measured_speedup"], old["measured_speedup_low"]) == ("F1", "n/a", 0.97, None)
    assert old["metric_dense"] == pytest.approx(61.0)
    failed = rows["2_mmlu_bfs"]  # domain and search from its reproduce.json
    assert (failed["domain"], failed["search"], failed["verdict"], failed["error"], failed["accept_dense"]) == (
        "mmlu", "bfs", "failed", "model foo: no such file", None)
    assert (rows["3_math_bfs"]["verdict"], rows["3_math_bfs"]["domain"]) == ("failed", None)  # nothing but its error
    assert rows["4_rag_bfs"]["verdict"] == "no summary.json (status running)"
    assert rows["10_math_bfs"]["verdict"] == "dense kept"


def test_markdown_and_csv(sweep_dir):
    rows = sweep_rows(sweep_dir)
    lines = to_markdown(rows).splitlines()
    assert len(lines) == 2 + len(rows)
    assert lines[2] == ("| 0_qa_bfs | qa | bfs | [3, 7] | 1.40x [1.20-1.60] | 1.31x [1.12-1.50] | 2.50 | 2.25 | F1 | 0.6 "
                        "| 0.6 | held |")  # speed leads: over plain decoding, then over dense
    assert lines[3].endswith("| n/a | 0.97x | 2.50 | 2.25 | F1 | 61.0 | 60.0 | n/a |")
    assert "| failed: model foo: no such file |" in lines[4]
    table = list(csv.DictReader(io.StringIO(to_csv(rows))))
    assert [r["job"] for r in table] == [r["job"] for r in rows]
    assert (table[0]["skip_layers"], table[0]["measured_speedup_low"], table[2]["verdict"]) == ("[3, 7]", "1.12", "failed")


def test_the_callback_writes_the_table_and_exits_2_when_a_job_failed(sweep_dir, caplog):
    """Failures come from the job folders (a job may have run in another process or on another node)."""
    config = OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep_dir)}}})
    failed = {name: (sweep_dir / name / "reproduce.json").read_text() for name in ("2_mmlu_bfs", "3_math_bfs")}
    for name in failed:
        (sweep_dir / name / "reproduce.json").write_text(json.dumps({"status": "finished"}))
    with caplog.at_level("INFO", logger=hydra_callbacks.log.name):
        SweepSummary().on_multirun_end(config)  # no failure: no exit
    assert "| 0_qa_bfs |" in caplog.text
    assert (sweep_dir / "sweep_summary.md").read_text() == to_markdown(sweep_rows(sweep_dir))
    for name, text in failed.items():
        (sweep_dir / name / "reproduce.json").write_text(text)
    with pytest.raises(SystemExit) as exit_info:
        SweepSummary().on_multirun_end(config)
    assert exit_info.value.code == 2
    assert "2 job(s) of the sweep failed" in caplog.text
    assert "3_math_bfs" in (sweep_dir / "sweep_summary.csv").read_text()
    assert not list(sweep_dir.glob(".*.tmp"))  # written atomically


def test_preset_line():
    from specsparse.cli import run as run_app

    assert run_app._preset_line("quickstart", ["domain=qa"]) == (
        "preset: experiment=quickstart (applied by default; `~experiment` runs the full-size settings)")
    assert run_app._preset_line("tss_main", ["experiment=tss_main"]) == "preset: experiment=tss_main"
    assert run_app._preset_line(None, ["~experiment"]) == "preset: none"


def test_a_hydra_sweep_ends_with_the_table(tmp_path):
    """Two jobs, one with a bad value: the table has both, the sweep exits 2; each job logged its preset
    (console and run.log) and its W&B run went to the sweep's group under a unique name."""
    from conftest import wandb_records

    sweep = tmp_path / "multirun" / "2026-12-02_05-40-00-123456"
    done = subprocess.run(
        [sys.executable, str(ROOT / "run.py"), "-m", "model=tiny", "logger=wandb", "domain=translation",
         "domain.limit=8,1", "generation.max_new_tokens=12", "tss.max_depth=1", "progress=false",
         f"paths.outputs={tmp_path}", f"hydra.sweep.dir={sweep}"],
        cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline"}, capture_output=True,
        text=True, timeout=400,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    output = done.stdout + done.stderr
    assert output.count("preset: experiment=quickstart (applied by default") == 2
    run_log = (sweep / "0_translation_bfs" / "run.log").read_text()
    assert "preset: experiment=quickstart" in run_log
    assert "held-out verdict:" in run_log and "outputs: " in run_log  # the final table, on the console and in run.log
    assert "held-out verdict:" in output
    rows = (sweep / "sweep_summary.md").read_text().splitlines()[2:]
    assert [r.split(" | ")[0] for r in rows] == ["| 0_translation_bfs", "| 1_translation_bfs"]
    assert "| failed: domain.limit must be an integer >= 2" in rows[1] and "| 0_translation_bfs |" in done.stdout
    (run_file,) = (sweep / "0_translation_bfs" / "wandb").glob("offline-run-*/run-*.wandb")
    run = next(r.run for r in wandb_records(run_file) if r.WhichOneof("record_type") == "run")
    assert (run.run_group, run.display_name) == (f"multirun-{sweep.name}", f"{sweep.name}/0_translation_bfs")


def test_an_unexpected_error_in_a_job_is_one_line_and_the_sweep_goes_on(tmp_path):
    """A bug inside a job (here a strategy that raises) is one `error:` line naming the job, its
    traceback goes to the job's run.log, reproduce.json says failed, the other job runs, exit 2."""
    (tmp_path / "boom.py").write_text(
        "from specsparse.search.bfs import BFSSearch\n\n\n"
        "class Boom(BFSSearch):\n    def ask(self):\n        raise RuntimeError('strategy bug')\n")
    sweep = tmp_path / "multirun" / "boom"
    done = subprocess.run(
        [sys.executable, str(ROOT / "run.py"), "-m", "model=tiny", "logger=none", "domain=translation",
         "domain.limit=8", "generation.max_new_tokens=8", "tss.max_depth=1", "progress=false", "evaluate_test=false",
         "search._target_=boom.Boom,specsparse.search.bfs.BFSSearch", f"paths.outputs={tmp_path}",
         f"hydra.sweep.dir={sweep}"],
        cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(tmp_path)}, capture_output=True,
        text=True, timeout=400,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "job 0_translation_bfs failed unexpectedly (RuntimeError: strategy bug)" in errors[0]
    assert "Traceback" not in done.stderr
    assert "RuntimeError: strategy bug" in (sweep / "0_translation_bfs" / "run.log").read_text()
    assert json.loads((sweep / "0_translation_bfs" / "reproduce.json").read_text())["status"] == "failed"
    assert (sweep / "1_translation_bfs" / "summary.json").is_file()  # the sweep went on
    failed_row = next(line for line in (sweep / "sweep_summary.md").read_text().splitlines() if "0_translation_bfs" in line)
    assert "| failed: job 0_translation_bfs failed unexpectedly" in failed_row


def test_the_ray_launcher_runs_a_sweeps_jobs_at_once_and_counts_failures_from_their_folders(tmp_path):
    """hydra/launcher=ray: each job a Ray task (runner=ray: its workers a placement group); the two good
    jobs overlap in time, the bad one fails in its own process and still counts (exit 2, its error row)."""
    sweep = tmp_path / "multirun"
    done = subprocess.run(
        [sys.executable, str(ROOT / "run.py"), "-m", "hydra/launcher=ray", "model=tiny", "logger=none",
         "domain=qa,translation", "domain.limit=8,1", "generation.max_new_tokens=12", "tss.max_depth=1",
         "evaluate_test=false", "progress=false", "runner=ray", "runner.num_workers=1", f"paths.outputs={tmp_path}",
         f"hydra.sweep.dir={sweep}"],
        cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "1", "RAY_AUTH_MODE": "disabled"}, capture_output=True,
        text=True, timeout=400,
    )
    assert done.returncode == 2, done.stderr[-3000:]
    rows = {r["job"]: r for r in sweep_rows(sweep)}
    assert sorted(rows) == ["0_qa_bfs", "1_qa_bfs", "2_translation_bfs", "3_translation_bfs"]
    assert [rows[j]["verdict"] for j in ("1_qa_bfs", "3_translation_bfs")] == ["failed", "failed"]
    assert "domain.limit must be an integer >= 2" in rows["1_qa_bfs"]["error"]
    records = [json.loads((sweep / job / "reproduce.json").read_text()) for job in ("0_qa_bfs", "2_translation_bfs")]
    assert [r["status"] for r in records] == ["finished", "finished"]
    assert all(r["models_loaded_by_job_process"] == [] for r in records)  # every model on the workers
    pids = {r["ray_workers"][0]["pid"] for r in records}
    assert len(pids) == 2
    first, second = sorted(records, key=lambda r: r["started"])
    assert second["started"] < first["finished"], "the two jobs did not run at the same time"
    assert "2 job(s) of the sweep failed" in done.stdout + done.stderr
