"""Feasibility rule and Pareto front over measured configurations.

A configuration is *feasible* when it keeps both accept length A and task metric M within tolerance of
the dense model: A >= (1 - eps_A) * A0 and M >= (1 - eps_M) * M0. Domains without references have no
metric (M0 is None); the rule then uses acceptance only.

Cost here is `selection_cost`: the modeled time per generated token, (draft + verify time) / A, priced
from the measurement's step counts by the cost profile (`specsparse.measuring.profile`). It accounts for accept
length: a deeper skip set that verifies faster but accepts less can cost more per token. It is never a
wall-clock timing taken while measuring: on a shared machine that noise (10-20%) is larger than the
difference between skip sets of equal depth, and it would make selections differ between runs.

The Pareto front is taken over (A up, M up, cost down). A configuration is dropped only when another one
is at least as good in A *and* M *and* cost (and better in one): being worse in both A and M is not
enough if it is also cheaper, because the whole point of skipping layers is to buy cost with a bounded
loss of A and M. Selection then takes the cheapest point of the feasible front.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from specsparse.types import Candidate, Measurement

Point = tuple[Candidate, Measurement]
OBJECTIVES = ("accept", "metric", "cost")

# Relative slack on thresholds so that e.g. A == 0.95 * A0 computed two ways is not rejected by rounding.
_REL_TOL = 1e-9


def active_objectives(dense: Measurement, use_accept: bool = True, use_metric: bool = True) -> tuple[bool, bool]:
    """Which constraints actually apply given the dense baseline: the metric only when the domain
    has one (dense.metric is not None); acceptance always when nothing else is left."""
    use_metric = use_metric and dense.metric is not None
    if not use_metric:
        use_accept = True
    return use_accept, use_metric


def feasibility_thresholds(
    dense: Measurement,
    eps_accept: float = 0.05,
    eps_metric: float = 0.05,
    use_accept: bool = True,
    use_metric: bool = True,
) -> tuple[float | None, float | None]:
    """(min_accept, min_metric) a feasible configuration must reach; None for an unused constraint."""
    use_accept, use_metric = active_objectives(dense, use_accept, use_metric)
    min_a = (1.0 - eps_accept) * dense.accept_length if use_accept else None
    min_m = (1.0 - eps_metric) * dense.metric if use_metric else None  # type: ignore[operator]
    return min_a, min_m


def _at_least(x: float, threshold: float) -> bool:
    return x >= threshold - _REL_TOL * max(1.0, abs(threshold))


def is_feasible(
    m: Measurement,
    dense: Measurement,
    eps_accept: float = 0.05,
    eps_metric: float = 0.05,
    use_accept: bool = True,
    use_metric: bool = True,
) -> bool:
    """A >= (1-eps_accept)*A0 and M >= (1-eps_metric)*M0 for the constraints in use.

    Early-stopped measurements are never feasible. A missing metric on `m` when the dense baseline has
    one cannot be checked and counts as infeasible.
    """
    if m.early_stopped:
        return False
    min_a, min_m = feasibility_thresholds(dense, eps_accept, eps_metric, use_accept, use_metric)
    if min_a is not None and not _at_least(m.accept_length, min_a):
        return False
    if min_m is not None and (m.metric is None or not _at_least(m.metric, min_m)):
        return False
    return True


SELECTION_RULES = ("time_per_token", "verify_cost", "measured")


def selection_cost(m: Measurement, rule: str = "time_per_token") -> float:
    """The cost a selection minimises: modeled time per generated token ("time_per_token", see the
    module doc), or modeled time of one verification step ("verify_cost", the paper's rule; "measured"
    orders the front by it before the job times its head, `specsparse.jobs.job.pick_by_timing`)."""
    return m.modeled_cost if rule == "time_per_token" else m.modeled_verify_cost


def selection_key(point: Point, rule: str = "time_per_token") -> tuple:
    """Order used to pick one configuration: lowest cost, then more layers skipped, then higher
    accept length and metric, then the lexicographically smallest skip set, then the smaller
    vocabulary (None = full vocabulary last)."""
    c, m = point
    vocab = c.vocab_size if c.vocab_size is not None else float("inf")
    metric = m.metric if m.metric is not None else float("-inf")
    return (selection_cost(m, rule), -len(c.skip_layers), -m.accept_length, -metric, c.skip_layers, vocab)


def _vector(m: Measurement, use_metric: bool, use_accept: bool, use_cost: bool, rule: str) -> tuple[float, ...]:
    """Objective vector, every component to be maximised."""
    vec: list[float] = []
    if use_accept:
        vec.append(m.accept_length)
    if use_metric:
        vec.append(m.metric if m.metric is not None else float("-inf"))
    if use_cost:
        vec.append(-selection_cost(m, rule))
    return tuple(vec)


def dominates(a: Sequence[float], b: Sequence[float]) -> bool:
    """a is at least as good as b everywhere and strictly better somewhere (all maximised)."""
    return all(x >= y for x, y in zip(a, b)) and any(x > y for x, y in zip(a, b))


def pareto_front(points: Iterable[Point], objectives: Sequence[str] = OBJECTIVES, rule: str = "time_per_token") -> list[Point]:
    """Non-dominated points over `objectives` (any of "accept" up, "metric" up, "cost" down), cost
    being `selection_cost(m, rule)`.

    Early-stopped measurements are dropped; a candidate listed twice is kept once (its first
    measurement). The metric is ignored when no point has one. Points with identical objective values
    are all kept. The front is returned in `selection_key(rule)` order, so `front[0]` is the pick.
    """
    unknown = set(objectives) - set(OBJECTIVES)
    if unknown or not objectives:
        raise ValueError(f"objectives must be a non-empty subset of {OBJECTIVES}, got {tuple(objectives)}")
    unique: dict[Candidate, Measurement] = {}
    for c, m in points:
        if not m.early_stopped and c not in unique:
            unique[c] = m
    use_metric = "metric" in objectives and any(m.metric is not None for m in unique.values())
    vectors = {c: _vector(m, use_metric, "accept" in objectives, "cost" in objectives, rule) for c, m in unique.items()}
    front = [
        (c, m) for c, m in unique.items()
        if not any(dominates(vectors[o], vectors[c]) for o in unique if o != c)
    ]
    return sorted(front, key=lambda point: selection_key(point, rule))
