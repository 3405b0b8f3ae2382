"""W&B logging, offline: one run per job written under the job's folder, with every measurement, the
tables, the Pareto plot, the config map artifact and the job's numbers in the summary. Logging never
blocks a job: no key means offline, and a failing W&B means no W&B."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import wandb_records
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from specsparse.jobs.config import build_plan
from specsparse.jobs.job import run_plan
from specsparse.jobs.result import with_interval_lists, with_scalar_points
from specsparse.reporting.records import JobRecord
from specsparse.reporting.wandb_logger import WandbLogger, artifact_name, has_api_key, run_identity
from specsparse.reporting.wandb_report import job_group, report_definition, runset_filters, to_wandb_report

ROOT = Path(__file__).resolve().parents[2]



def test_offline_run_is_written_under_the_job_folder(tmp_path):
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=[
            "model=tiny", "logger=wandb", "logger.mode=offline", "domain.limit=8", "generation.max_new_tokens=12",
            "tss.max_depth=1", "progress=false", f"paths.outputs={tmp_path}",
        ])
    plan = build_plan(OmegaConf.to_container(cfg, resolve=True), output_dir=tmp_path / "job", cwd=tmp_path,
                      choices={"search": "bfs", "drafter": "samd"})
    job = run_plan(plan)

    runs = list((tmp_path / "job" / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    (run_file,) = runs[0].glob("run-*.wandb")
    records = wandb_records(run_file)
    kinds = [r.WhichOneof("record_type") for r in records]
    assert "exit" in kinds and kinds.count("history") >= 1 + 4 + 1  # measurements, then tables and plot

    run = next(r.run for r in records if r.WhichOneof("record_type") == "run")
    assert (run.run_group, run.display_name) == ("job", "job")  # a single run: its folder, not the preset
    assert {"model:tiny", "drafter:samd", "domain:qa", "search:bfs", "experiment:quickstart"} <= set(run.tags)

    summary_keys = {u.key or "/".join(u.nested_key) for r in records if r.WhichOneof("record_type") == "summary"
                    for u in r.summary.update}
    assert {"domain", "strategy", "selected_skip_layers", "calibration", "test", "measured_speedup_test", "search_cost",
            "model", "num_layers", "wandb_group"} <= summary_keys
    assert {"measurements", "pareto_front", "pareto_plot"} <= {k.split("/")[0] for k in summary_keys}
    history_keys = {i.key or "/".join(i.nested_key) for r in records if r.WhichOneof("record_type") == "history"
                    for i in r.history.item}
    assert {"measurement/accept_length", "measurement/modeled_cost", "measurement/metric"} <= history_keys
    artifacts = {r.artifact.name: r.artifact.type for r in records if r.WhichOneof("record_type") == "artifact"}
    assert artifacts.get("config_map-tiny-qa-bfs") == "config_map"
    config_keys = {u.key for r in records if r.WhichOneof("record_type") == "config" for u in r.config.update}
    assert "cost_profile" in config_keys  # the profile that priced the search, as in reproduce.json

    assert list(runs[0].glob("files/media/images/pareto_plot_*.png"))
    assert list(runs[0].glob("files/media/images/speedup_plot_*.png"))
    assert (tmp_path / "job" / "pareto.png").is_file() and (tmp_path / "job" / "speedup.png").is_file()
    summary = job.summary()
    values = {u.key: json.loads(u.value_json) for r in records if r.WhichOneof("record_type") == "summary"
              for u in r.summary.update if u.key}
    point, low, high = summary["measured_speedup_dense_vs_plain"]  # a number W&B can chart, its bounds beside it
    assert [values[f"measured_speedup_dense_vs_plain{end}"] for end in ("", "_low", "_high")] == pytest.approx([point, low, high])
    assert with_interval_lists(with_scalar_points(summary)) == summary  # what `report --wandb` reads back


def test_online_without_a_key_falls_back_to_offline(tmp_path, monkeypatch, caplog):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_IDENTITY_TOKEN_FILE", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    assert not has_api_key()
    logger = WandbLogger(mode="online", project="test")
    with caplog.at_level(logging.WARNING):
        logger.start(name="job", output_dir=tmp_path, config={"a": 1})
    try:
        assert "no API key" in caplog.text
        assert logger.run is not None and logger.run.settings.mode == "offline"
    finally:
        logger.close()
    assert list((tmp_path / "wandb").glob("offline-run-*"))


def test_unreachable_server_falls_back_to_offline_quickly(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("WANDB_API_KEY", "a" * 40)
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # nothing listens there
    logger = WandbLogger(mode="online", init_timeout=5)
    start = time.perf_counter()
    with caplog.at_level(logging.WARNING):
        logger.start(name="job", output_dir=tmp_path)
    try:
        assert time.perf_counter() - start < 30
        assert "logging offline instead" in caplog.text
        assert logger.run is not None and logger.run.settings.mode == "offline"
    finally:
        logger.close()


def test_a_broken_wandb_never_stops_the_job(tmp_path, monkeypatch, caplog):
    import wandb

    def broken(**_):
        raise RuntimeError("server on fire")

    monkeypatch.setattr(wandb, "init", broken)
    logger = WandbLogger(mode="offline")
    with caplog.at_level(logging.WARNING):
        logger.start(name="job", output_dir=tmp_path)
    assert logger.run is None and "server on fire" in caplog.text
    logger.on_told(None, None, False)  # no-ops without a run
    logger.close()


def test_disabled_mode_writes_nothing(tmp_path):
    logger = WandbLogger(mode="disabled")
    logger.start(name="job", output_dir=tmp_path)
    logger.close()
    assert list(tmp_path.rglob("*")) == [] and logger.run is None


def test_unknown_mode_is_rejected():
    with pytest.raises(ValueError, match="logger.mode"):
        WandbLogger(mode="sometimes")
    assert WandbLogger(mode="dryrun").mode == "offline"


def test_a_killed_process_leaves_no_wandb_temp_folders_behind(tmp_path):
    """wandb makes temporary folders when imported; a process killed with -9 cannot remove them.
    They live in specsparse-wandb-<pid>, which the next import removes once that pid is gone."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    code = ("import os, sys, tempfile; from specsparse.reporting.wandb_logger import import_wandb; import_wandb(); "
            "print(os.getpid(), flush=True); sys.stdin.read()")
    child = subprocess.Popen([sys.executable, "-c", code], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    pid = child.stdout.readline().strip()
    own = tmp_path / f"specsparse-wandb-{pid}"
    assert {p.name.endswith(("wandb-media", "wandb-artifacts")) for p in own.iterdir()} == {True}
    assert not [p for p in tmp_path.iterdir() if p != own]  # nothing of wandb's outside its folder
    child.kill()
    child.wait()
    assert own.is_dir()  # what kill -9 leaves
    subprocess.run([sys.executable, "-c", "from specsparse.reporting.wandb_logger import import_wandb; import_wandb()"],
                   env=env, check=True, timeout=120)
    assert not own.exists() and list(tmp_path.iterdir()) == []  # removed; the second process cleaned up after itself


# -- comparable runs: group = the sweep, unique names, artifacts per model / domain / strategy --------
def test_a_sweeps_jobs_share_its_group_and_have_unique_names(tmp_path):
    sweep = tmp_path / "multirun" / "2026-12-02_05-40-00-123456"
    (sweep / "0_qa_bfs").mkdir(parents=True)
    (sweep / "multirun.yaml").write_text("{}\n")  # what Hydra writes into every sweep folder
    assert run_identity(sweep / "0_qa_bfs") == ("multirun-2026-12-02_05-40-00-123456",
                                                "2026-12-02_05-40-00-123456/0_qa_bfs")
    assert run_identity(sweep / "qa" / "bfs")[1] == "2026-12-02_05-40-00-123456/qa/bfs"  # a nested hydra.sweep.subdir
    single = tmp_path / "runs" / "2026-12-02_05-41-00-654321_qa_bfs"
    assert run_identity(single) == (single.name, single.name)
    assert run_identity(sweep / "0_qa_bfs", group="mine") == ("mine", "2026-12-02_05-40-00-123456/0_qa_bfs")


def test_the_configured_group_wins(tmp_path):
    out = tmp_path / "2026-12-02_05-41-00-654321_qa_bfs"
    out.mkdir()
    logger = WandbLogger(mode="offline", group="ablations")
    logger.start(output_dir=out)
    try:
        assert logger.run.group == "ablations" and logger.run.name == "2026-12-02_05-41-00-654321_qa_bfs"
    finally:
        logger.close()


def test_artifact_names_carry_model_domain_and_strategy():
    assert artifact_name("smollm2_135m", "qa", "bfs") == "config_map-smollm2_135m-qa-bfs"
    # only letters, digits, "_", "-" and "." are safe in W&B artifact names
    assert artifact_name("meta-llama/Llama 3.1:8B", "qa", "tpe_vocab") == "config_map-meta-llama_Llama_3.1_8B-qa-tpe_vocab"
    assert len(artifact_name("m" * 200, "qa", "bfs")) == 128


def test_report_panels_are_scoped_to_the_reported_sweeps(tmp_path):
    from wandb_workspaces import expr

    sweep = tmp_path / "2026-12-02_05-40-00-123456"
    (sweep / "0_qa_bfs").mkdir(parents=True)
    (sweep / "multirun.yaml").write_text("{}\n")
    records = [
        JobRecord({"domain": "qa", "strategy": "bfs"}, sweep / "0_qa_bfs"),
        JobRecord({"domain": "qa", "strategy": "bfs"}, tmp_path / "run", {"config": {"logger": {"group": "mine"}}}),
        JobRecord({"domain": "qa", "strategy": "bfs", "wandb_group": "from-wandb"}, None, source="wandb:e/p/id"),
        JobRecord({"domain": "qa", "strategy": "bfs"}, None, source="wandb:e/p/old"),  # logged before wandb_group
    ]
    groups = sorted({g for g in map(job_group, records) if g})
    assert groups == ["from-wandb", "mine", "multirun-2026-12-02_05-40-00-123456"]

    definition = report_definition("me", "specsparse", "t", {}, ["qa"], groups=groups)
    (grid,) = [b for b in definition["blocks"] if b["type"] == "PanelGrid"]
    tree = expr.expr_to_filters(grid["runset"]["filters"])  # how wandb-workspaces reads it
    assert tree.op == "AND"
    terms = {(f.key.section, f.key.name): (f.op, f.value) for f in tree.filters}
    assert terms == {("run", "group"): ("IN", groups), ("config", "domain.name"): ("=", "qa")}
    (runset,) = next(b for b in to_wandb_report(definition).blocks if type(b).__name__ == "PanelGrid").runsets
    assert runset.filters == grid["runset"]["filters"]
    assert runset_filters("qa", []) == "Config('domain.name') = 'qa'"  # no group known: the domain only


def test_report_from_wandb_without_credentials_is_one_error_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_") and k != "NETRC"}
    env.update(HOME=str(tmp_path), WANDB_MODE="offline", WANDB_CONFIG_DIR=str(tmp_path / "wandb-config"))
    done = subprocess.run([sys.executable, "-m", "specsparse.cli", "report", "--wandb", "me/specsparse",
                           "--out", str(tmp_path / "report")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "error:" in lines[0] and "API key" in lines[0], done.stderr
    assert not (tmp_path / "report").exists()


def test_the_draft_heads_comparison_is_a_wandb_table(tmp_path):
    """A vocabulary job with vocab_comparison logs the heads timed side by side as a W&B table."""
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=[
            "model=tiny", "logger=wandb", "logger.mode=offline", "domain.limit=8", "generation.max_new_tokens=8",
            "search=tpe_vocab", "drafter=self_skip", "search.n_trials=6", "timing_prompts=2", "progress=false",
            "vocab_comparison={train_at_k: false, subsamples: 2, fixed_fractions: [0.25]}", f"paths.outputs={tmp_path}",
        ])
    plan = build_plan(OmegaConf.to_container(cfg, resolve=True), output_dir=tmp_path / "job", cwd=tmp_path,
                      choices={"search": "tpe_vocab", "drafter": "self_skip"})
    job = run_plan(plan)
    assert [row["method"] for row in job.vocab_comparison["rows"]] == ["plain", "full", "fixed_top_k", "pruned_at_k"]
    (run_file,) = next((tmp_path / "job" / "wandb").glob("offline-run-*")).glob("run-*.wandb")
    logged = [i for r in wandb_records(run_file) if r.WhichOneof("record_type") == "history" for i in r.history.item
              if (i.key or "/".join(i.nested_key)).startswith("vocab_comparison")]
    assert logged and "table-file" in " ".join(i.value_json for i in logged)  # a Table, not a summary value
