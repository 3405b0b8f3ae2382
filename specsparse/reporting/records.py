"""The finished jobs a report is built from: one `JobRecord` per job (its summary.json, reproduce.json and
folder), the latest job per key (the best trial where an Optuna sweep ran several), and a job's
measurements.csv. Finding the jobs (in folders or W&B runs) is `specsparse.reporting.report`'s; the W&B
logger reads measurements.csv here too."""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from specsparse.config_map import load_config_map

log = logging.getLogger(__name__)


class ReportError(ValueError):
    """Nothing to report from, or inputs that do not fit together (one-line message)."""


# What every job's summary.json holds (read through `specsparse.old_formats.current_summary`), beside domain and
# strategy, that tables read without a default: (key, key within it).
SUMMARY_KEYS = (("search_cost", "configurations_measured"),)


def checked_summary(summary: dict[str, Any], where: str) -> dict[str, Any]:
    """`summary` when it holds what a report reads (`SUMMARY_KEYS`); ReportError naming what is missing."""
    wrong = [".".join(path) for path in SUMMARY_KEYS
             if not isinstance(summary.get(path[0]), dict) or path[1] not in summary[path[0]]]
    if wrong:
        raise ReportError(f"{where}: a job summary without {', '.join(wrong)} (a job that did not finish, or not "
                          "written by specsparse): rerun its job, or leave it out")
    return summary


@dataclass
class JobRecord:
    """One finished job: its summary.json, and reproduce.json / config map when there is a folder."""

    summary: dict[str, Any]
    directory: Path | None = None
    reproduce: dict[str, Any] = field(default_factory=dict)
    source: str = "outputs"

    @property
    def domain(self) -> str:
        return self.summary["domain"]

    @property
    def strategy(self) -> str:
        return self.summary["strategy"]

    @property
    def model(self) -> str:
        model = self.reproduce.get("model")
        if isinstance(model, dict):
            return str(model.get("name") or model.get("source"))
        return str(model or self.summary.get("model") or "model")

    @property
    def drafter(self) -> str | None:
        return self.reproduce.get("drafter")

    @property
    def num_layers(self) -> int | None:
        n = self.reproduce.get("num_layers") or self.summary.get("num_layers")
        if n is None and isinstance(self.reproduce.get("model"), dict):
            n = self.reproduce["model"].get("num_layers")
        if n is None and self.directory is not None and (self.directory / "config_map.yaml").is_file():
            n = load_config_map(self.directory / "config_map.yaml").num_layers
        return n

    @functools.cached_property
    def trial_direction(self) -> str | None:
        """"maximize" or "minimize" when the job was a trial of a single-objective Optuna sweep (its
        folder's .hydra/hydra.yaml), else None."""
        file = None if self.directory is None else self.directory / ".hydra" / "hydra.yaml"
        if file is None or not file.is_file():
            return None
        sweeper = (yaml.safe_load(file.read_text()) or {}).get("hydra", {}).get("sweeper") or {}
        direction = sweeper.get("direction")
        return direction if "optuna" in str(sweeper.get("_target_", "")).lower() and isinstance(direction, str) else None

    @property
    def objective(self) -> tuple[str, float] | None:
        """(objective key, the value the job returned to its sweeper), or None without one."""
        from specsparse.jobs.objectives import objective_value  # noqa: PLC0415

        key = (self.reproduce.get("config") or {}).get("objective")
        return (key, objective_value(key, self.summary)) if isinstance(key, str) else None

    @property
    def order(self) -> str:
        """Sorts jobs by time (latest last)."""
        finished = self.reproduce.get("finished") or ""
        if not finished and self.directory is not None:
            finished = str((self.directory / "summary.json").stat().st_mtime)
        return str(finished)


def latest(records: Iterable[JobRecord], *keys: str) -> dict[tuple, JobRecord]:
    """The latest record per key tuple (attribute names of JobRecord); where the latest is a trial of an
    Optuna sweep, that sweep's best trial of the key by its objective (logged, naming the folder)."""
    records = list(records)
    chosen: dict[tuple, JobRecord] = {}
    for record in sorted(records, key=lambda r: r.order):
        chosen[tuple(getattr(record, k) for k in keys)] = record
    for key, record in chosen.items():
        if record.trial_direction is not None:
            chosen[key] = best_trial(record, [r for r in records if tuple(getattr(r, k) for k in keys) == key])
    return chosen


def best_trial(last: JobRecord, records: Sequence[JobRecord]) -> JobRecord:
    """The best of the trials of `last`'s sweep among `records` by their objective (failed trials, NaN,
    never win; ties go to the earlier trial)."""
    trials = [r for r in records if r.directory is not None and r.directory.parent == last.directory.parent
              and r.objective is not None and not math.isnan(r.objective[1])]
    if len(trials) < 2:
        return last
    sign = 1 if last.trial_direction == "maximize" else -1
    best = max(sorted(trials, key=lambda r: r.order), key=lambda r: sign * r.objective[1])
    key, value = best.objective
    log.info("%s: the best of %d Optuna trials by %s (%s): %s = %.4g", best.directory.parent.name, len(trials),
             key, last.trial_direction, best.directory.name, value)
    return best


def tss_jobs(
    records: Sequence[JobRecord], strategy: str = "bfs", keys: tuple[str, ...] = ("model", "domain")
) -> dict[tuple, JobRecord]:
    """Latest job per `keys` (JobRecord attributes) of `strategy`; keys with none fall back to their
    latest job (Table 1's strategy column says which)."""
    picked = latest([r for r in records if r.strategy == strategy], *keys)
    for key, record in latest(records, *keys).items():
        picked.setdefault(key, record)
    return dict(sorted(picked.items(), key=lambda item: tuple(str(k) for k in item[0])))


def bounded(name: str) -> list[str]:
    """The columns of a value with its 95% interval: the point, then its low and high ends."""
    return [name, f"{name}_low", f"{name}_high"]
