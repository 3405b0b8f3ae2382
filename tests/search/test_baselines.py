"""The baselines TSS is compared with, on synthetic objectives with known answers (no model): GM-Skip
(greedy), random skip sets at the depth of the TSS selection, and accept-only and metric-only search."""

from __future__ import annotations

import math
from collections import Counter

import pytest
from conftest import TRAP, Counted, additive, papers, search_on
from hypothesis import assume, example, given
from hypothesis import strategies as st
from search_helpers import FAST, TWO_WAYS

from specsparse.search import AcceptOnlySearch, BFSSearch, GreedySearch, MetricOnlySearch, RandomSearch
from specsparse.types import Candidate

# One constraint binds for each ablation: layer 1 hurts A only, layer 2 hurts M only, layer 4 is mild.
TWO = additive(
    8,
    {1: 0.3, 2: 0.0, 4: 0.05},
    {1: 0.0, 2: 0.2, 4: 0.01},
    {1: 0.3, 2: 0.25, 4: 0.1},
    default=(0.5, 0.5, 0.1),
)


# -- GM-Skip (greedy) ------------------------------------------------------------------------------
def test_gm_skip_deletes_the_least_harmful_block_each_step_where_one_reverse_pass_would_not():
    """6 layers, M0 1, sparsity_weight 0.6: a deletion may cost at most 0.1 of metric. One reverse pass
    (the earlier reading) would keep 5 and then 4 (0.08 each); GM-Skip measures every remaining block
    each step and deletes the least harmful: 1 (free), then 5 (ties with 4 go to the later block)."""
    fn = Counted(additive(6, {}, {5: 0.08, 4: 0.08, 1: 0.0}, {}, m0=1.0, default=(0.0, 0.3, 0.1)))
    strategy = GreedySearch(6, papers(), sparsity_weight=0.6, max_deletions=2)
    result = search_on(strategy, fn)
    assert [c.skip_layers for c in fn.calls[1:7]] == [(5,), (4,), (3,), (2,), (1,), (0,)]  # later blocks first
    assert strategy.path == [(1,), (1, 5)] and result.selected == Candidate((1, 5))
    assert len(fn.calls) == 1 + 6 + 5  # one batch per step: O(L^2) measurements
    # uncapped, it goes on while the balance holds: 4 (0.08) too, then 0, 2, 3 (0.3) would lower it
    assert search_on(GreedySearch(6, papers(), sparsity_weight=0.6), fn.fn).selected == Candidate((1, 4, 5))
    # GM-Skip is not bound to the BFS depth: the shared rule's max_depth does not cap it
    assert search_on(GreedySearch(6, papers(max_depth=1), sparsity_weight=0.6), fn.fn).selected == Candidate((1, 4, 5))
    free = GreedySearch(4, papers())  # every deletion free: it stops with one layer left, the most a skip set may remove
    assert search_on(free, additive(4, {}, {}, {}, m0=1.0, default=(0.0, 0.0, 0.1))).selected == Candidate((1, 2, 3))


@FAST
# Drops on a binary grid (multiples of 1/64): sums of them are exact, so equal harms tie exactly, as in the rule
# (hundredths do not: 1 - (0.03 + 0.09 + 0.09 - 0.02 + 0.12) depends on the order of the sum).
@given(drops=st.lists(st.integers(-3, 19).map(lambda d: d / 64), min_size=6, max_size=6), weight=st.floats(0, 2),
       cap=st.one_of(st.none(), st.integers(1, 6)))
@example(drops=[0.25] * 5 + [0.0], weight=0.0, cap=1)  # a deletion that costs nothing is kept at weight 0
@example(drops=[d / 64 for d in (2, 6, 6, 8, -1, 8)], weight=1.0, cap=None)  # layers 3 and 5 tie: the later goes
def test_gm_skip_follows_least_harmful_deletions_until_the_balance_falls(drops, weight, cap):
    # A balance change near the 1e-12 tolerance is decided by float rounding of sums: left out.
    assume(all(not -1e-10 < weight / 6 - d < -1e-14 for d in drops))
    strategy = GreedySearch(6, papers(), sparsity_weight=weight, max_deletions=cap)
    result = search_on(strategy, additive(6, {}, dict(enumerate(drops)), {}, m0=1.0))
    kept: list[int] = []  # the rule restated: additive drops make each step's harm the layer's own drop
    while len(kept) < min(cap or 6, 5):  # one layer always stays
        best = max((layer for layer in range(6) if layer not in kept), key=lambda layer: (-drops[layer], layer))
        if weight / 6 - drops[best] < -1e-12:
            break
        kept.append(best)
    assert [set(p) for p in strategy.path] == [set(kept[:i + 1]) for i in range(len(kept))]
    assert result.selected.skip_layers == tuple(sorted(kept))


# -- random skip sets ------------------------------------------------------------------------------
def test_random_draws_at_the_depth_of_the_tss_selection():
    """TRAP: TSS selects (3, 7), so random draws sets of 2 layers; the BFS it runs first is TSS's own
    (same measurements); the pick is the best draw, and the mean and range over every draw are kept."""
    bfs_calls, random_calls = Counted(TRAP), Counted(TRAP)
    search_on(BFSSearch(10, papers(max_depth=3)), bfs_calls)
    strategy = RandomSearch(10, papers(max_depth=3), draws=4, seed=1)
    result = search_on(strategy, random_calls)
    assert random_calls.calls[: len(bfs_calls.calls)] == bfs_calls.calls
    draws = [c.skip_layers for c in strategy.drawn]
    assert len(draws) == len(set(draws)) == 4 and all(len(d) == 2 for d in draws)
    measured = dict(result.history)
    accepts = [measured[c].accept_length for c in strategy.drawn]
    assert result.info["accept_of_draws"] == pytest.approx(
        {"mean": sum(accepts) / 4, "min": min(accepts), "max": max(accepts)})
    feasible = [c for c in strategy.drawn if c in result.feasible]
    if feasible:  # the best draw: what the TSS rule picks among the draws
        assert result.selected == min(feasible, key=lambda c: measured[c].modeled_cost)
    else:  # none feasible: the draw retaining the most quality
        assert result.selected == max(strategy.drawn, key=lambda c: strategy.quality(measured[c]))
    assert result.info["best_draw_feasible"] == bool(feasible)
    assert {c for c, _ in result.alternatives} == set(strategy.drawn) - {result.selected}


@FAST
@given(seed=st.integers(0, 2**16))
def test_random_picks_the_cheapest_feasible_draw(seed):
    """Draws of TWO at depth 1: layer 4 is the only single skip within both tolerances; whenever it is
    drawn it is the pick, otherwise the pick is the draw retaining the most quality."""
    strategy = RandomSearch(8, papers(), depth=1, draws=3, seed=seed)
    result = search_on(strategy, TWO)
    if Candidate((4,)) in strategy.drawn:
        assert result.selected == Candidate((4,)) and result.info["best_draw_feasible"]
    else:
        measured = dict(result.history)
        assert result.selected == max(strategy.drawn, key=lambda c: strategy.quality(measured[c]))


@FAST
@given(seed=st.integers(0, 2**31), draws=st.integers(1, 60), depth=st.integers(1, 3))
def test_random_draws_are_distinct_of_one_depth_and_capped(seed, draws, depth):
    strategy = RandomSearch(7, papers(max_depth=3), depth=depth, draws=draws, seed=seed)
    fn = Counted(TRAP)
    search_on(strategy, fn)
    sets = [c.skip_layers for c in fn.calls[1:]]
    assert len(sets) == len(set(sets)) == min(draws, math.comb(7, depth))
    assert all(len(s) == depth for s in sets)


def test_random_draws_are_uniform_over_sets_of_the_depth():
    """All 10 sets of 2 of 5 layers, one draw per seed over 2000 seeds: a chi-square test of uniformity."""
    counts = Counter(RandomSearch(5, papers(), depth=2, draws=1, seed=seed)._draw(2)[0].skip_layers
                     for seed in range(2000))
    assert len(counts) == 10
    statistic = sum((n - 200) ** 2 / 200 for n in counts.values())
    assert statistic < 27.88  # the chi-square quantile for p = 0.001 at 9 degrees of freedom


def test_random_seed_changes_sequence():
    a, b = Counted(TRAP), Counted(TRAP)
    search_on(RandomSearch(10, papers(), depth=2, draws=3, seed=0), a)
    search_on(RandomSearch(10, papers(), depth=2, draws=3, seed=1), b)
    assert a.calls != b.calls


# -- accept-only and metric-only -------------------------------------------------------------------
def test_ablations_differ_when_one_constraint_binds():
    """TSS keeps both within 5%; each single-objective search takes its objective's maximum (ties to
    the cheaper set): A 3.0 at dense and (2,), M 0.8 at dense and (1,)."""
    assert search_on(BFSSearch(8, papers()), TWO).selected == Candidate((4,))
    assert search_on(AcceptOnlySearch(8, papers()), TWO).selected == Candidate((2,))
    assert search_on(MetricOnlySearch(8, papers()), TWO).selected == Candidate((1,))


def test_single_objective_baselines_find_their_objectives_maximum():
    """TWO_WAYS: the highest accept length is (3, 5) (A 3.5, metric ruined), the highest metric
    (2, 6) (M 0.95); TSS finds nothing within 5% on both and keeps dense."""
    accept = search_on(AcceptOnlySearch(10, papers(max_depth=3)), TWO_WAYS)
    metric = search_on(MetricOnlySearch(10, papers(max_depth=3)), TWO_WAYS)
    assert (accept.selected, accept.selected_measurement.accept_length) == (Candidate((3, 5)), pytest.approx(3.5))
    assert accept.selected_measurement.metric < 0.5 * accept.dense.metric
    assert (metric.selected, metric.selected_measurement.metric) == (Candidate((2, 6)), pytest.approx(0.95))
    assert search_on(BFSSearch(10, papers(max_depth=3)), TWO_WAYS).selected == Candidate()
