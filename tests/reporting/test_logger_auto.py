"""logger=auto, the default: W&B (with logger=wandb's options) when the wandb extra is installed, no logger
otherwise, and the job's log says which."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from specsparse.jobs.config import ConfigError, build_plan

ROOT = Path(__file__).resolve().parents[2]


def plan_for(overrides: list[str], tmp_path: Path):
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        config = OmegaConf.to_container(compose("config", overrides=overrides), resolve=True)
    return build_plan(config, output_dir=tmp_path / "job", cwd=tmp_path)


def test_auto_is_the_default_and_is_wandb_when_installed(tmp_path):
    plan = plan_for(["model=tiny"], tmp_path)
    wandb = plan_for(["model=tiny", "logger=wandb"], tmp_path)
    assert plan.logger == wandb.logger and plan.config["logger"]["auto"] is True  # the tests install wandb
    assert plan_for(["model=tiny", "logger.project=mine"], tmp_path).logger.options["project"] == "mine"
    with pytest.raises(ConfigError, match="logger.mode"):
        plan_for(["model=tiny", "logger.mode=sometimes"], tmp_path)


def test_auto_is_none_without_wandb(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # not importable, as when the extra is missing
    assert plan_for(["model=tiny"], tmp_path).logger is None
    with pytest.raises(ConfigError, match=r"pip install 'specsparse\[wandb\]', or run with logger=none"):
        plan_for(["model=tiny", "logger=wandb"], tmp_path)


def test_the_job_log_names_the_logger_auto_chose(tmp_path):
    code = ("import runpy, sys; sys.modules['wandb'] = None; sys.argv = sys.argv[1:]; "
            "runpy.run_path(sys.argv[0], run_name='__main__')")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "SPECSPARSE_CACHE": str(tmp_path / "cache")}
    done = subprocess.run(
        [sys.executable, "-c", code, str(ROOT / "run.py"), "model=tiny", "domain.limit=10", "generation.max_new_tokens=8",
         "timing_prompts=2", "tss.max_depth=1", "progress=false", f"paths.outputs={tmp_path / 'out'}",
         f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "logger: none (pip install 'specsparse[wandb]' for W&B runs)" in (tmp_path / "run" / "run.log").read_text()
    assert not (tmp_path / "run" / "wandb").exists()
