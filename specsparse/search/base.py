"""Search strategy interface, the result of a search, and the shared layer-skip machinery.

A strategy only proposes (`ask`) and learns (`tell`); `specsparse.study.driver.run_search` owns the
loop, the budget, de-duplication, caching, storing and logging — as Optuna's Study owns the loop and
samplers only sample.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from specsparse.measuring.fidelity import NAME as FIDELITY
from specsparse.measuring.fidelity import fidelity_interval
from specsparse.measuring.intervals import metric_interval, paired_ratios
from specsparse.metrics import SCALE
from specsparse.search.pareto import (
    Point,
    active_objectives,
    feasibility_thresholds,
    is_feasible,
    pareto_front,
    selection_cost,
)
from specsparse.search.rule import TSSRule
from specsparse.types import Candidate, Measurement

UNINFORMATIVE_BELOW = 0.05  # a dense metric whose 95% interval reaches below this cannot discriminate
NOTE_METRIC_UNDEFINED = "metric undefined: acceptance-only rules"
NOTE_DENSE_SELECTED = "no feasible configuration cheaper than dense: dense selected"

Thresholds = tuple[float | None, float | None]
TASK_GUARD = {"task_metric": True, "fidelity": False, "min_fidelity": None}  # the papers' quality check


@dataclass(frozen=True)
class Selection:
    """What a strategy concludes from what it was told (candidates only; the driver attaches the
    measurements). `baseline` is the dense reference every tolerance is relative to."""

    baseline: Candidate
    selected: Candidate
    alternatives: tuple[Candidate, ...] = ()
    feasible: tuple[Candidate, ...] = ()
    notes: tuple[str, ...] = ()
    info: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class SearchResult:
    """Outcome of one search.

    history: every distinct (candidate, measurement) the search used, in measurement order
        (cache hits included, in the order they were served).
    alternatives: the other Pareto-optimal feasible configurations (the dense baseline excluded).
    n_measured: new measurements made by this run (what the budget counts).
    n_cache_hits: measurements served from the results store.
    target_forwards: target verification forwards of the new measurements only.
    wall_time_s: wall time of the whole search.
    info: strategy-specific facts (e.g. the chosen vocabulary size with its coverage).
    """

    strategy: str
    baseline: Candidate
    dense: Measurement
    selected: Candidate
    selected_measurement: Measurement
    alternatives: tuple[Point, ...]
    history: tuple[Point, ...]
    feasible: tuple[Candidate, ...] = ()
    notes: tuple[str, ...] = ()
    n_measured: int = 0
    n_cache_hits: int = 0
    target_forwards: int = 0
    wall_time_s: float = 0.0
    info: dict[str, Any] = field(default_factory=dict, compare=False)


class SearchStrategy(abc.ABC):
    """Proposes candidates in batches and learns from their measurements.

    Contract: `ask()` returns the next batch ([] when finished); the driver tells every candidate of
    the batch it could measure (a batch may be cut short by the budget) before asking again.
    Same constructor arguments (seed included) -> same sequence of proposals for the same measurements.
    """

    name: ClassVar[str] = "search"
    # Constructor arguments that come from the model and data (`specsparse.search.context.SearchContext`), not the config.
    context_arguments: ClassVar[tuple[str, ...]] = ()
    # Picks a trimmed draft vocabulary (k rows of the drafter's LM head): the drafter needs one
    # (`Drafter.trims_vocabulary`).
    trims_vocabulary: ClassVar[bool] = False
    # Its selection can be compared with other draft vocabularies (the job's `vocab_comparison`).
    supports_vocab_comparison: ClassVar[bool] = False

    @abc.abstractmethod
    def ask(self) -> list[Candidate]:
        """Next batch of candidates to measure; [] when the search is over."""

    @abc.abstractmethod
    def tell(self, candidate: Candidate, measurement: Measurement) -> None:
        """Record the measurement of a candidate this strategy proposed."""

    @abc.abstractmethod
    def select(self) -> Selection:
        """Conclude from everything told so far."""

    def quality_guard(self) -> dict[str, Any]:
        """The quality constraints the selection was held to, for the held-out verdict:
        {"task_metric": bool, "fidelity": bool, "min_fidelity": float | None}."""
        return dict(TASK_GUARD)

    def feasibility_thresholds(self) -> Thresholds | None:
        """(min_accept, min_metric) below which a configuration of the *current* batch is certainly
        rejected, or None when early rejection does not apply (yet). A runner may stop measuring a
        configuration once it cannot reach them and return it with `early_stopped=True`."""
        return None


class LayerSkipSearch(SearchStrategy):
    """Shared state and rules of the target-layer skip searches (bfs, greedy, random, ...).

    Every search starts with the dense baseline, applies the same feasibility rule and the same
    selection: among feasible measured configurations, keep the Pareto front over (A, M, FLOPs cost) and pick
    the cheapest (ties: more layers skipped, then lexicographic); the rest of the front are the
    alternatives. With nothing feasible the dense configuration is selected.

    rule: the settings every layer-skip search shares (depth, tolerances, feasibility, guard, selection).
    objectives: which constraints the rule uses, a non-empty subset of ("accept", "metric").
    """

    context_arguments: ClassVar[tuple[str, ...]] = ("num_layers",)

    def __init__(self, num_layers: int, rule: TSSRule = TSSRule(),
                 objectives: Sequence[str] = ("accept", "metric")) -> None:
        if num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {num_layers}")
        objectives = tuple(objectives)
        if not objectives or set(objectives) - {"accept", "metric"}:
            raise ValueError(f"objectives must be a non-empty subset of ('accept', 'metric'), got {objectives}")
        bad = [i for i in rule.protect_layers if not 0 <= i < num_layers]
        if bad:
            raise ValueError(f"protect_layers out of range [0, {num_layers}): {bad}")
        self.num_layers = num_layers
        self.rule = rule
        self.objectives = objectives
        self.free_layers = tuple(i for i in range(num_layers) if i not in rule.protect_layers)
        self.measured: dict[Candidate, Measurement] = {}
        self.dense_candidate = Candidate()

    # -- state -----------------------------------------------------------------------------------
    def tell(self, candidate: Candidate, measurement: Measurement) -> None:
        self.measured[candidate] = measurement
        if candidate == self.dense_candidate and not measurement.per_prompt:
            self._check_needs_no_prompts()

    def _check_needs_no_prompts(self) -> None:
        """A measurement without per-prompt results (a synthetic objective) has no intervals and no
        replies: a rule that needs them would reject every skip set and pick dense, silently."""
        use_fidelity = self._constraints()[2]
        if self.rule.feasibility == "lower_bound" or use_fidelity:
            needs = "feasibility=lower_bound" if self.rule.feasibility == "lower_bound" else f"guard={self.rule.guard}"
            raise ValueError(f"{needs} needs per-prompt results, and the dense measurement has none: "
                             "measure through an Evaluator, or use TSSRule(feasibility='point', guard='task')")

    @property
    def dense(self) -> Measurement | None:
        """The dense baseline measurement, once told."""
        return self.measured.get(self.dense_candidate)

    def _dense_metric_low(self) -> float | None:
        """Lower end of the dense metric's 95% interval (its point without per-prompt scores)."""
        dense = self.dense
        if dense is None or dense.metric is None or "metric" not in self.objectives:
            return None
        interval = metric_interval(dense)
        return dense.metric if interval is None else interval.low

    def metric_dropped(self) -> bool:
        """The dense metric reaches below metric_floor, so it does not constrain."""
        low = self._dense_metric_low()
        return low is not None and low < self.rule.metric_floor

    def metric_uninformative(self) -> str | None:
        """A note when the dense metric cannot discriminate (its interval reaches below
        UNINFORMATIVE_BELOW), saying whether it still constrains; None otherwise."""
        low = self._dense_metric_low()
        if low is None or low >= UNINFORMATIVE_BELOW:
            return None
        interval = metric_interval(self.dense)
        point, low, high = (SCALE * v for v in ([self.dense.metric] * 3 if interval is None else interval.as_list()))
        shown = f"{point:.1f}" if interval is None else f"{point:.1f} [{low:.1f}-{high:.1f}]"
        effect = ("it does not constrain (metric_floor): accept length only" if self.metric_dropped()
                  else "the metric constraint rests on noise")
        return (f"metric uninformative: dense metric {shown} (0-100) reaches below {SCALE * UNINFORMATIVE_BELOW:g}; "
                f"{effect}")

    def _constraints(self) -> tuple[bool, bool, bool]:
        """(accept length, task metric, fidelity): the constraints in use (see `TSSRule.guard`)."""
        assert self.dense is not None
        quality = "metric" in self.objectives
        guard = self.rule.guard
        use_metric = quality and guard != "fidelity" and not self.metric_dropped()
        use_accept, use_metric = active_objectives(self.dense, "accept" in self.objectives, use_metric)
        no_task_check = self.dense.metric is None or self.metric_uninformative() is not None
        use_fidelity = quality and (guard in ("fidelity", "both") or (guard == "auto" and no_task_check))
        return use_accept, use_metric, use_fidelity

    def quality_guard(self) -> dict[str, Any]:
        if self.dense is None:
            return super().quality_guard()
        _, use_metric, use_fidelity = self._constraints()
        return {"task_metric": use_metric, "fidelity": use_fidelity,
                "min_fidelity": self.rule.min_fidelity if use_fidelity else None}

    def guard_note(self) -> str | None:
        """What the fidelity constraint is and why it applies; None when it does not."""
        if self.dense is None or not self._constraints()[2]:
            return None
        why = (f"tss.guard={self.rule.guard}" if self.rule.guard != "auto" else
               "the domain has no task metric" if self.dense.metric is None else "the task metric is uninformative")
        bound = "the lower end of its 95% interval" if self.rule.feasibility == "lower_bound" else "its mean"
        return (f"guard: output fidelity ({FIDELITY}, {bound}) >= {self.rule.min_fidelity:g}, an extension of the "
                f"papers, because {why}")

    def _holds(self, m: Measurement, use_accept: bool, use_metric: bool, use_fidelity: bool = False,
               tolerance: float | None = None) -> bool:
        """The constraints in use hold for `m` under this search's feasibility rule, with tolerances
        eps_accept / eps_metric, or `tolerance` for both (the BFS pool's tau); fidelity against its
        floor `min_fidelity`, whatever the tolerance."""
        assert self.dense is not None
        if use_fidelity and not self._fidelity_holds(m):
            return False
        if not (use_accept or use_metric):
            return True
        eps_a = self.rule.eps_accept if tolerance is None else tolerance
        eps_m = self.rule.eps_metric if tolerance is None else tolerance
        if self.rule.feasibility == "point" or m.early_stopped:
            return is_feasible(m, self.dense, eps_a, eps_m, use_accept, use_metric)
        ratios = paired_ratios(self.dense, m)
        if ratios is None:  # not the same prompts as the dense baseline: nothing to pair
            return False
        if use_accept and ratios.accept.low < 1 - eps_a:
            return False
        return not (use_metric and (ratios.metric is None or ratios.metric.low < 1 - eps_m))

    def _fidelity_holds(self, m: Measurement) -> bool:
        assert self.dense is not None
        if m.early_stopped:
            return False
        interval = fidelity_interval(self.dense, m)
        if interval is None:  # not the dense baseline's prompts: nothing to compare
            return False
        return (interval.point if self.rule.feasibility == "point" else interval.low) >= self.rule.min_fidelity

    def feasible(self, m: Measurement) -> bool:
        """The feasibility rule of this search (needs the dense baseline)."""
        return self._holds(m, *self._constraints())

    def passes_any(self, m: Measurement, tolerance: float | None = None) -> bool:
        """Permissive rule: at least one of the constraints in use holds (the BFS candidate pool)."""
        use_a, use_m, use_f = self._constraints()
        terms = ((use_a, False, False), (False, use_m, False), (False, False, use_f))
        return any(self._holds(m, *term, tolerance=tolerance) for term in terms if any(term))

    def quality(self, m: Measurement, weight_accept: float = 0.5) -> float:
        """Retained quality: weight_accept * A/A0 + (1 - weight_accept) * M/M0 over the constraints in
        use (just the one ratio when only one applies). Where fidelity guards instead of the metric,
        its mean / 100 stands for M/M0 (the dense replies match themselves: 100)."""
        assert self.dense is not None
        use_a, use_m, use_f = self._constraints()
        ra = _ratio(m.accept_length, self.dense.accept_length)
        if use_m:
            rm = _ratio(m.metric if m.metric is not None else 0.0, self.dense.metric)  # type: ignore[arg-type]
        elif use_f:
            interval = fidelity_interval(self.dense, m)
            rm = 0.0 if interval is None else interval.point / 100
        else:
            return ra
        if not use_a:
            return rm
        return weight_accept * ra + (1.0 - weight_accept) * rm

    def feasibility_thresholds(self) -> Thresholds | None:
        if not self.rule.early_reject or self.dense is None:
            return None
        use_a, use_m, _ = self._constraints()
        return feasibility_thresholds(self.dense, self.rule.eps_accept, self.rule.eps_metric, use_a, use_m)

    # -- conclusion ------------------------------------------------------------------------------
    def select(self) -> Selection:
        dense = self.dense
        if dense is None:
            return Selection(baseline=self.dense_candidate, selected=self.dense_candidate)
        notes = []
        if "metric" in self.objectives and dense.metric is None:
            notes.append(NOTE_METRIC_UNDEFINED)
        if self.metric_uninformative() is not None:
            notes.append(self.metric_uninformative())
        if self.guard_note() is not None:
            notes.append(self.guard_note())
        feasible = [(c, m) for c, m in self.measured.items() if self.feasible(m)]
        front = self.front(feasible)
        if not front:  # only possible when the dense measurement itself was early-stopped
            front = [(self.dense_candidate, dense)]
        selected = front[0][0]
        if selected == self.dense_candidate:
            notes.append(NOTE_DENSE_SELECTED)
        alternatives = tuple(c for c, _ in front[1:] if c != self.dense_candidate)
        return Selection(
            baseline=self.dense_candidate,
            selected=selected,
            alternatives=alternatives,
            feasible=tuple(c for c, _ in feasible),
            notes=tuple(notes),
        )

    def front(self, points: list[tuple[Candidate, Measurement]]) -> list[tuple[Candidate, Measurement]]:
        """The Pareto front of `points` under this search's rule, the pick first."""
        use_a, use_m, _ = self._constraints()
        objectives = [o for o, on in (("accept", use_a), ("metric", use_m)) if on]
        if self.rule.select == "time_per_token":  # verify_cost and measured, the paper's, drop only what (A, M) dominate
            objectives.append("cost")
        return pareto_front(points, objectives, self.rule.select)

    def maximising(self, selection: Selection, objective: str) -> Selection:
        """`selection` with the measured configuration of the highest accept length ("accept") or
        metric ("metric") selected instead: the single-objective baselines of Table 2. Ties go to the
        cheaper configuration (modeled cost), then the smaller skip set. Early-stopped measurements
        are never picked; the alternatives are dropped (one objective has no front)."""
        def value(m: Measurement) -> float:
            return m.accept_length if objective == "accept" else (m.metric or 0.0)

        told = [(c, m) for c, m in self.measured.items() if not m.early_stopped]
        if not told:
            return selection
        best, _ = min(told, key=lambda cm: (-value(cm[1]), selection_cost(cm[1], self.rule.select), cm[0].skip_layers))
        notes = [n for n in selection.notes if n != NOTE_DENSE_SELECTED]
        if best == self.dense_candidate:
            notes.append(f"dense has the highest {objective} of everything measured: dense selected")
        return replace(selection, selected=best, alternatives=(), notes=tuple(notes))


def _ratio(x: float, x0: float) -> float:
    """x / x0, with a zero baseline mapped so that any x >= 0 retains everything."""
    return x / x0 if x0 > 0 else 1.0 + x
