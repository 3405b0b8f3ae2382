"""The feasibility rule and the Pareto front on hand-written points: the 5% thresholds on accept length
and metric, early-stopped and duplicate points, tie order, and the front's defining properties."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from search_helpers import FAST

from specsparse.search import is_feasible, pareto_front
from specsparse.search.pareto import feasibility_thresholds, selection_key
from specsparse.types import Candidate, Measurement


def M(a, m, cost, stopped=False):
    return Measurement(a, m, cost, cost, 0.0, 0, 0, 0.0, early_stopped=stopped)


DENSE = M(2.0, 0.5, 1.0)


@pytest.mark.parametrize(
    ("m", "kw", "expected"),
    [
        (M(1.9, 0.475, 0.5), {}, True),  # both exactly on the boundary
        (M(1.89, 0.5, 0.5), {}, False),
        (M(2.0, 0.47, 0.5), {}, False),
        (M(2.0, 0.47, 0.5), {"use_metric": False}, True),
        (M(1.5, 0.5, 0.5), {"use_accept": False}, True),
        (M(1.5, 0.5, 0.5), {"eps_accept": 0.25}, True),
        (M(2.0, None, 0.5), {}, False),  # metric missing while dense has one
        (M(2.5, 0.9, 0.5, stopped=True), {}, False),
    ],
)
def test_is_feasible(m, kw, expected):
    assert is_feasible(m, DENSE, **kw) is expected


def test_is_feasible_without_metric_uses_acceptance():
    dense = M(2.0, None, 1.0)
    assert is_feasible(M(1.95, None, 0.5), dense, use_accept=False)
    assert not is_feasible(M(1.8, None, 0.5), dense, use_accept=False)
    assert feasibility_thresholds(dense, use_accept=False) == pytest.approx((1.9, None))


def test_pareto_front_hand_written():
    pts = [
        (Candidate(), M(2.0, 0.50, 1.0)),
        (Candidate((1,)), M(1.9, 0.48, 0.9)),
        (Candidate((2,)), M(1.8, 0.47, 0.9)),  # worse in A and M at the same cost as (1,): dropped
        (Candidate((3,)), M(1.95, 0.46, 0.9)),  # better A, worse M than (1,): kept
        (Candidate((1, 2)), M(1.85, 0.45, 0.8)),  # worse A and M but cheaper: kept
        (Candidate((1, 3)), M(2.5, 0.9, 0.1, stopped=True)),  # early-stopped: dropped
        (Candidate((1,)), M(0.0, 0.0, 5.0)),  # duplicate candidate: first measurement wins
    ]
    front = pareto_front(pts)
    assert [c.skip_layers for c, _ in front] == [(1, 2), (3,), (1,), ()]  # equal cost: higher A first
    am_only = pareto_front(pts, objectives=("accept", "metric"))
    assert {c.skip_layers for c, _ in am_only} == {()}
    with pytest.raises(ValueError):
        pareto_front(pts, objectives=("speed",))


def test_pareto_ties_prefer_more_layers_then_lexicographic():
    pts = [(Candidate((4,)), M(2, 0.5, 0.5)), (Candidate((1, 2)), M(2, 0.5, 0.5)), (Candidate((0, 5)), M(2, 0.5, 0.5))]
    assert [c.skip_layers for c, _ in pareto_front(pts)] == [(0, 5), (1, 2), (4,)]


points_st = st.lists(
    st.tuples(
        st.lists(st.integers(0, 5), max_size=3).map(Candidate),
        st.builds(M, st.floats(1, 3), st.one_of(st.none(), st.floats(0, 1)), st.floats(0.1, 1), st.booleans()),
    ),
    max_size=12,
)


@FAST
@given(points_st)
def test_pareto_front_properties(points):
    front = pareto_front(points)
    unique = {}
    for c, m in points:
        if not m.early_stopped:
            unique.setdefault(c, m)
    assert len({c for c, _ in front}) == len(front)
    assert all(unique[c] == m for c, m in front)
    use_m = any(m.metric is not None for m in unique.values())

    def vec(m):
        return (m.accept_length, (m.metric if m.metric is not None else -math.inf) if use_m else 0, -m.modeled_cost)

    def dom(p, q):
        return all(x >= y for x, y in zip(p, q)) and p != q

    front_c = {c for c, _ in front}
    for c, m in unique.items():
        beaten = any(dom(vec(o), vec(m)) for o in unique.values())
        assert (c not in front_c) == beaten
    assert front == sorted(front, key=selection_key)
