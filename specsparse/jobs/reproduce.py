"""What reproduces a job: the record written to reproduce.json (command, composed config, seeds,
package versions, git commit, data and model identity, the cost profiles that priced it)."""

from __future__ import annotations

import logging
import platform
import socket
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specsparse import __version__
from specsparse.util import content_hash, utc_now

if TYPE_CHECKING:
    from specsparse.jobs.config import JobPlan
    from specsparse.study.runners import Runner

log = logging.getLogger(__name__)

PACKAGES = (
    "specsparse", "torch", "transformers", "tokenizers", "numpy", "hydra-core", "omegaconf", "ray", "wandb",
    "optuna", "datasets", "evaluate", "sacrebleu", "gguf", "pandas",
)


def reproduce_record(plan: JobPlan) -> dict[str, Any]:
    """What reproduces the job: command, composed config, seeds, versions, git commit, data and model."""
    overrides = list(plan.overrides)
    return {
        "command": " ".join(["python", "run.py", *overrides]),
        "argv": list(sys.argv),
        "overrides": overrides,
        "experiment": plan.experiment,
        "choices": plan.choices,
        "model": asdict(plan.model),
        "drafter": plan.drafter_name,
        "domain": plan.evaluation.domain.name,
        "search": plan.search_name,
        "seeds": {
            "seed": plan.seed,
            "generation": plan.evaluation.generation.seed,
            "split": plan.evaluation.domain.split_seed,
            "search": plan.search.options.get("seed"),
        },
        "data": plan.data,
        "evaluation_spec": asdict(plan.evaluation),
        "search_spec": asdict(plan.search),
        "store": str(plan.store_path),
        "output_dir": str(plan.output_dir),
        "versions": package_versions(),
        "git": git_state(Path(__file__).resolve().parents[2]),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "host": socket.gethostname(),
        "started": utc_now(),
        "config": plan.config,
    }


def package_versions(packages: Sequence[str] = PACKAGES) -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in packages:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    versions["specsparse"] = versions.get("specsparse") or __version__
    return versions


def git_state(directory: Path) -> dict[str, Any] | None:
    """{"commit", "dirty"} of the checkout holding `directory`, or None outside a git checkout."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(directory), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return None
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": bool(status) if status is not None else None}


def cost_profiles(runner: Runner) -> list[dict[str, Any]]:
    """Records (`specsparse.measuring.profile.profile_record`) of every cost profile that priced the job's
    measurements, where the runner measured them (the job's process, or Ray workers).
    One, unless workers on other hardware priced without a pinned profile (then a warning)."""
    unique = list({content_hash(r): r for r in runner.profile_records()}.values())
    if len(unique) > 1:
        log.warning("%d different cost profiles priced this search (workers on other hardware): pin one with "
                    "cost.profile=PATH so every configuration is priced alike", len(unique))
    return unique
