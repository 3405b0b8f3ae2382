"""What a job returns to a Hydra sweeper that reads it (`objective`): the summary.json keys it may name,
each measured on the calibration split, and the value a finished job's summary gives for them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from specsparse.jobs.checks import ConfigError
from specsparse.jobs.result import DENSE_KEPT

DEFAULT = "measured_speedup_calibration_vs_plain"

# summary.json keys a job can return to a Hydra sweeper (a number, or an interval's point estimate), each
# measured on the calibration split, where the search chose: the test split stays held out. measured_*
# keys time plain decoding, dense and the pick side by side on calibration prompts (`objective_timing`).
OBJECTIVES = ("measured_speedup_calibration_vs_plain", "measured_speedup_calibration_vs_dense",
              "modeled_speedup_calibration", "metric_ratio_calibration", "accept_ratio_calibration",
              "fidelity_calibration", "job_wall_time_s")


def timed(objective: str | Sequence[str] | None) -> bool:
    """Whether an objective needs the calibration split timed side by side."""
    keys = [] if objective is None else [objective] if isinstance(objective, str) else objective
    return any(k.startswith("measured_") for k in keys)


def checked_objective(value: Any) -> str | tuple[str, ...] | None:
    """`objective`: one of OBJECTIVES, a list of them (a multi-objective sweeper), or null."""
    keys = [value] if isinstance(value, str) else value
    held_out = [k for k in keys if isinstance(k, str) and "_test" in k] if isinstance(keys, list) else []
    if held_out:
        twin = {"measured_speedup_test": "measured_speedup_calibration_vs_dense"}.get(
            held_out[0], held_out[0].replace("_test", "_calibration"))
        raise ConfigError(f"objective={value!r} reads the test split, which a sweep choosing by it would no longer "
                          f"hold out: use {twin if twin in OBJECTIVES else DEFAULT} (measured on the "
                          "calibration split; `report` shows the chosen trial's held-out numbers)")
    if value is not None and (not isinstance(keys, list) or not keys or any(k not in OBJECTIVES for k in keys)):
        raise ConfigError(f"objective={value!r}: give a summary.json key ({', '.join(OBJECTIVES)}), a list of "
                          "them for a multi-objective sweeper, or null")
    return value if value is None or isinstance(value, str) else tuple(keys)


def checked_objective_timing(cfg: Mapping[str, Any]) -> tuple[int | None, int]:
    """`objective_timing`: calibration prompts (null: all) and repeats per prompt."""
    unknown = sorted(set(cfg) - {"prompts", "repeats"})
    if unknown:
        raise ConfigError(f"objective_timing: unknown option(s) {unknown}: use prompts, repeats")
    prompts, repeats = cfg.get("prompts"), cfg.get("repeats", 1)
    if prompts is not None and (not isinstance(prompts, int) or isinstance(prompts, bool) or prompts < 1):
        raise ConfigError(f"objective_timing.prompts={prompts!r}: give a positive number of calibration prompts, "
                          "or null for all")
    if not isinstance(repeats, int) or isinstance(repeats, bool) or repeats < 1:
        raise ConfigError(f"objective_timing.repeats={repeats!r}: give a positive number of timings per prompt")
    return prompts, repeats


def objective_value(objective: str | Sequence[str] | None, summary: Mapping[str, Any]) -> Any:
    """What a job returns to a sweeper: each objective's value in `summary` (an interval's point estimate),
    a tuple for a list of keys, NaN where the summary has none (a failed trial to a sweeper). Where the
    search kept dense, the selected configuration's speedups are dense's."""
    def value(key: str) -> float:
        number = summary.get(key)
        if number is None and (summary.get("held_out") or {}).get("verdict") == DENSE_KEPT:
            number = {"measured_speedup_test_vs_plain": summary.get("measured_speedup_dense_vs_plain"),
                      "measured_speedup_test": 1.0}.get(key)
        number = number[0] if isinstance(number, (list, tuple)) else number
        return float("nan") if number is None else float(number)

    if objective is None:
        return None
    return value(objective) if isinstance(objective, str) else tuple(value(k) for k in objective)
