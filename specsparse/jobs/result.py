"""A finished job's result and the headline numbers its outputs, tables and logs are built from
(`JobResult.summary`), with the held-out verdict (`JobResult.held_out`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specsparse.measuring.fidelity import NAME as FIDELITY
from specsparse.measuring.fidelity import fidelity_interval
from specsparse.measuring.intervals import comparison, paired_ratios
from specsparse.measuring.timing import SideBySide
from specsparse.metrics import SCALE, metric_description
from specsparse.search.base import TASK_GUARD, SearchResult
from specsparse.search.random import draw_statistics
from specsparse.search.rule import TSSRule
from specsparse.study.store import measurement_to_dict
from specsparse.types import Candidate, Component, Measurement


@dataclass(frozen=True)
class JobResult:
    domain: str
    search_result: SearchResult
    test_dense: Measurement | None
    test_selected: Measurement | None
    output_dir: Path
    wall_time_s: float
    num_layers: int = 0
    description: dict[str, Any] = field(default_factory=dict, compare=False)  # Study.description() of the search (study.keys)
    timing: SideBySide | None = None  # plain decoding, dense and selected on the test split, side by side
    calibration_timing: SideBySide | None = None  # plain decoding, dense and the pick (or the front) on calibration prompts
    eps_metric: float = TSSRule.eps_metric  # the search's metric tolerance, which the held-out verdict applies too
    metric: str | None = None  # the domain's metric (a `specsparse.metrics.METRICS` name)
    guard: dict[str, Any] = field(default_factory=lambda: dict(TASK_GUARD))  # the search's
    draws_test: list[Measurement] | None = None  # random search: every draw on the test split
    vocab_comparison: dict[str, Any] | None = None  # `specsparse.study.vocab_comparison.compare_vocabularies`
    cost_profiles: list[dict[str, Any]] = field(default_factory=list)  # the profiles that priced the search
    recorded_drafter: Component | None = None  # the drafter as measured, class and options (serving rebuilds it)
    draft_vocab_ids: tuple[int, ...] | None = None  # the selected trimmed head's token ids (None: the full head)
    vocab_corpus: dict[str, Any] | None = None  # a vocabulary search's corpus (`DraftVocabulary.provenance`)

    def summary(self) -> dict[str, Any]:
        """The job's headline numbers (what tables and W&B summaries are built from). Metrics are on
        the 0-100 scale `metric` names; fields named modeled_* come from the cost profile, measured_*
        from the engine, timed side by side in this process."""
        s = self.search_result
        timing, calibration = self.timing, self.calibration_timing
        selected, dense = s.selected.label, s.baseline.label
        intervals = {split: _intervals(d, m) or {} for split, d, m in (
            ("calibration", s.dense, s.selected_measurement), ("test", self.test_dense, self.test_selected))}
        fidelity = {"calibration": _fidelity(s.dense, s.selected_measurement),
                    "test": _fidelity(self.test_dense, self.test_selected)}
        return with_flat_intervals({
            "domain": self.domain,
            "strategy": s.strategy,
            "metric": metric_description(self.metric),
            "guard": {**self.guard, "eps_metric": self.eps_metric},
            "selected_skip_layers": list(s.selected.skip_layers),
            "selected_vocab_size": s.selected.vocab_size,
            # Speed leads: measured over plain decoding, then over dense speculative decoding, then modeled.
            "measured_speedup_test_vs_plain": _speedup(timing, "selected", "plain", slice(0, 3)),
            "measured_speedup_dense_vs_plain": _speedup(timing, "dense", "plain", slice(0, 3)),
            "measured_speedup_test": _speedup(timing, "selected", "dense", 0),
            "measured_speedup_test_interval": _speedup(timing, "selected", "dense", slice(1, 3)),
            "modeled_speedup_test": _ratio(self.test_selected, self.test_dense, "modeled_tokens_per_s"),
            # the cost profile priced on the very steps the timing ran (measured_timing_test's terms): the model's own error
            "modeled_speedup_test_timed_steps": _modeled_speedup(timing, "selected", "dense"),
            "measured_plain_tokens_per_s_test": None if timing is None else timing.tokens_per_s[0],
            # The same figures on the calibration split, where the search chose: what a sweeper's objective reads.
            "measured_speedup_calibration_vs_plain": _speedup(calibration, selected, "plain", slice(0, 3)),
            "measured_speedup_calibration_vs_dense": _speedup(calibration, selected, dense, slice(0, 3)),
            "modeled_speedup_calibration": _ratio(s.selected_measurement, s.dense, "modeled_tokens_per_s"),
            **{f"{name}_{split}": intervals[split].get(name) for split in ("calibration", "test")
               for name in ("accept_ratio", "metric_ratio")},
            "fidelity_calibration": fidelity["calibration"],
            "fidelity_test": fidelity["test"],
            "calibration": {"dense": _numbers(s.dense), "selected": _numbers(s.selected_measurement)},
            "test": {"dense": _numbers(self.test_dense), "selected": _numbers(self.test_selected)},
            "intervals": {split: values or None for split, values in intervals.items()},
            "fidelity": {"name": FIDELITY, "scale": "0-100", **fidelity},
            "measured_timing_test": None if timing is None else timing.as_dict(),
            "measured_timing_calibration": None if calibration is None else calibration.as_dict(),
            "held_out": self.held_out(),
            "search_cost": {
                "configurations_measured": s.n_measured,
                "cache_hits": s.n_cache_hits,
                "target_forwards": s.target_forwards,
                "wall_time_s": s.wall_time_s,
            },
            "random_draws": self.random_draws(),
            "alternatives": [list(c.skip_layers) for c, _ in s.alternatives],
            "notes": list(s.notes),
            "info": {k: v for k, v in s.info.items() if isinstance(v, (int, float, str, list, type(None)))},
            "vocab_corpus": self.vocab_corpus,
            "vocab_comparison": self.vocab_comparison,
            "job_wall_time_s": self.wall_time_s,
        })

    def random_draws(self) -> dict[str, Any] | None:
        """Random search: mean, min and max over its draws (metric on 0-100) on both splits; the pick is
        the best draw, which the rest of the summary describes."""
        draws = self.search_result.info.get("draws")
        if not draws:
            return None
        measured = dict(self.search_result.history)
        calibration = [measured[Candidate(tuple(d))] for d in draws]
        return {"draws": len(draws), "best_draw": self.search_result.info["best_draw"],
                "calibration": _draw_statistics(calibration),
                "test": None if self.draws_test is None else _draw_statistics(self.draws_test)}

    def held_out(self) -> dict[str, Any]:
        """Whether the selection held on the test split, judged by intervals, never point estimates:
        the measured speedup over dense, the task metric's ratio to dense (against 1 - eps_metric)
        and the replies' fidelity to dense (against min_fidelity), each where the search's guard used
        it. A check *held* when its whole 95% interval clears its threshold, *did not hold* when the
        whole interval misses it, and is *inconclusive* otherwise; the verdict is the worst check.
        "dense kept": nothing to verify; "not evaluated": no test evaluation."""
        s = self.search_result
        if s.selected == s.baseline:
            return {"verdict": DENSE_KEPT, "reasons": ["the search kept the dense target"], "checks": {}}
        if self.timing is None or self.test_dense is None or self.test_selected is None:
            return {"verdict": "not evaluated", "reasons": ["no test evaluation (evaluate_test=false)"], "checks": {}}
        checks = {"speedup": _check("measured speedup over dense", self.timing.speedup("selected", "dense"),
                                    1.0, strictly=True)}
        ratios = paired_ratios(self.test_dense, self.test_selected)
        if self.guard.get("task_metric") and ratios is not None and ratios.metric is not None:
            checks["metric"] = _check("metric / dense metric", ratios.metric.as_list(), 1 - self.eps_metric)
        fidelity = _fidelity(self.test_dense, self.test_selected)
        if self.guard.get("fidelity") and fidelity is not None:
            checks["fidelity"] = _check(f"fidelity ({FIDELITY})", fidelity, self.guard["min_fidelity"])
        states = {c["state"] for c in checks.values()}
        verdict = next(v for v in (DID_NOT_HOLD, INCONCLUSIVE, HELD) if v in states)
        return {"verdict": verdict, "reasons": [c["text"] for c in checks.values() if c["state"] != HELD],
                "checks": checks}


HELD, INCONCLUSIVE, DID_NOT_HOLD, DENSE_KEPT = "held", "inconclusive", "did not hold", "dense kept"


def _check(label: str, values: list[float] | None, threshold: float, strictly: bool = False) -> dict[str, Any]:
    """One held-out check: [point, low, high] against `threshold` (`strictly` above it, or at least)."""
    if values is None:
        return {"state": INCONCLUSIVE, "text": f"{label}: not measured", "interval": None, "threshold": threshold}
    point, low, high = values
    clears = (lambda x: x > threshold) if strictly else (lambda x: x >= threshold)
    state = HELD if clears(low) else DID_NOT_HOLD if not clears(high) else INCONCLUSIVE
    needs = ">" if strictly else ">="
    text = f"{label} {point:.2f} [{low:.2f}-{high:.2f}] {state} (needs {needs} {threshold:.2f} over the whole interval)"
    return {"state": state, "text": text, "interval": [point, low, high], "threshold": threshold}


def _draw_statistics(measurements: list[Measurement]) -> dict[str, Any]:
    stats = draw_statistics(measurements)
    if stats["metric_of_draws"] is not None:
        stats["metric_of_draws"] = {k: SCALE * v for k, v in stats["metric_of_draws"].items()}
    return stats


def _numbers(m: Measurement | None) -> dict[str, Any] | None:
    """A measurement's totals as written: metric on the 0-100 scale, no per-prompt detail, and no
    wall time (a batched pass measures many configurations at once: none has a wall time of its own)."""
    if m is None:
        return None
    numbers = {k: v for k, v in measurement_to_dict(m).items() if k not in ("per_prompt", "wall_time_s", "draft_time_s")}
    numbers["metric"] = None if m.metric is None else SCALE * m.metric
    return numbers


def _intervals(dense: Measurement | None, selected: Measurement | None) -> dict[str, Any] | None:
    """`comparison` with the metric intervals on the 0-100 scale (ratios need no scale)."""
    intervals = comparison(dense, selected)
    if intervals is not None:
        for key in ("metric_dense", "metric_selected"):
            if intervals[key] is not None:
                intervals[key] = [SCALE * v for v in intervals[key]]
    return intervals


def _fidelity(dense: Measurement | None, selected: Measurement | None) -> list[float] | None:
    interval = None if dense is None or selected is None else fidelity_interval(dense, selected)
    return None if interval is None else interval.as_list()


def with_flat_intervals(summary: dict[str, Any]) -> dict[str, Any]:
    """`summary` with `<key>_low` and `<key>_high` after each top-level [point, low, high] interval (and
    after `<key>` for a `<key>_interval` pair), numbers a plotting tool or W&B can sort and chart."""
    flat: dict[str, Any] = {}
    for key, value in summary.items():
        flat[key] = value
        if key.endswith("_interval") and isinstance(value, list) and len(value) == 2:
            flat[f"{key.removesuffix('_interval')}_low"], flat[f"{key.removesuffix('_interval')}_high"] = value
        elif key in INTERVAL_KEYS:
            flat[f"{key}_low"], flat[f"{key}_high"] = (None, None) if value is None else value[1:]
    return flat


# The top-level [point, low, high] intervals of summary.json (each also flat: `with_flat_intervals`).
INTERVAL_KEYS = ("measured_speedup_test_vs_plain", "measured_speedup_dense_vs_plain",
                 "measured_speedup_calibration_vs_plain", "measured_speedup_calibration_vs_dense",
                 *(f"{name}_{split}" for split in ("calibration", "test")
                   for name in ("accept_ratio", "metric_ratio", "fidelity")))


def with_scalar_points(summary: dict[str, Any]) -> dict[str, Any]:
    """`summary` with each INTERVAL_KEYS interval replaced by its point (its bounds are `_low` / `_high`):
    the form of a W&B run's summary, where only scalars sort and chart. `with_interval_lists` inverts it."""
    return {k: v[0] if k in INTERVAL_KEYS and isinstance(v, list) else v for k, v in summary.items()}


def with_interval_lists(summary: dict[str, Any]) -> dict[str, Any]:
    """A summary in W&B's form (`with_scalar_points`) as summary.json holds it: [point, low, high] lists."""
    return {k: [v, summary.get(f"{k}_low"), summary.get(f"{k}_high")] if k in INTERVAL_KEYS and isinstance(v, (int, float))
            else v for k, v in summary.items()}


def _speedup(timing: SideBySide | None, label: str, over: str, part: int | slice) -> Any:
    """A timing's speedup of `label` over `over` (the same configuration: 1), or None untimed."""
    values = None if timing is None else [1.0, 1.0, 1.0] if label == over else timing.speedup(label, over)
    return None if values is None else values[part]


def _modeled_speedup(timing: SideBySide | None, label: str, over: str) -> float | None:
    """Modeled ms/token of `over` over `label`'s, both priced on their timed steps (`Pricer.with_modeled_terms`)."""
    terms = {} if timing is None else dict(zip(timing.labels, timing.terms))
    if label not in terms or over not in terms or "modeled_ms_per_token" not in terms[label]:
        return None
    return terms[over]["modeled_ms_per_token"] / terms[label]["modeled_ms_per_token"]


def _ratio(a: Measurement | None, b: Measurement | None, field_name: str) -> float | None:
    if a is None or b is None or not getattr(b, field_name):
        return None
    return getattr(a, field_name) / getattr(b, field_name)
