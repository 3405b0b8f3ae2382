"""BFS under the TSS rule, on synthetic objectives with known answers (no model): the rule's need for
per-prompt results, the joint optimum greedy misses, exactness against brute force, the pool (tau and
its cap), the paper's selection, and the early-rejection thresholds a runner reads."""

from __future__ import annotations

import itertools

import pytest
from conftest import TRAP, TRAP_OPTIMUM, additive, papers, search_on
from hypothesis import given
from hypothesis import strategies as st
from search_helpers import FAST

from specsparse.search import BFSSearch, GreedySearch, TSSRule, is_feasible
from specsparse.search.pareto import selection_key
from specsparse.study.driver import FunctionMeasurer, evaluate_callable, run_search
from specsparse.types import Candidate, Measurement


@pytest.mark.parametrize("rule", [TSSRule(), TSSRule(feasibility="point", guard="fidelity")])
def test_a_rule_that_needs_prompts_refuses_measurements_without_them(rule):
    """Without per-prompt results every interval and reply comparison is missing: the rule would reject
    every skip set and pick dense silently, so it says so instead."""
    with pytest.raises(ValueError, match="needs per-prompt results"):
        search_on(BFSSearch(4, rule), additive(4, [0.0] * 4, [0.0] * 4, [0.1] * 4))


# -- known answers ---------------------------------------------------------------------------------
def test_bfs_finds_joint_optimum_that_greedy_misses():
    """TRAP's metric never moves, so every deletion ties and GM-Skip, guided by the metric alone, deletes
    the last layers first up to its cap, and acceptance falls; BFS finds the joint optimum."""
    bfs = search_on(BFSSearch(10, papers(max_depth=4)), TRAP)
    greedy_strategy = GreedySearch(10, papers(), max_deletions=4)
    greedy = search_on(greedy_strategy, TRAP)
    assert bfs.selected == TRAP_OPTIMUM
    assert bfs.selected_measurement.modeled_cost == pytest.approx(0.80)
    assert greedy_strategy.path == [(9,), (8, 9), (7, 8, 9), (6, 7, 8, 9)]
    assert greedy.selected == Candidate((6, 7, 8, 9))
    assert greedy.selected_measurement.accept_length < 0.95 * greedy.dense.accept_length
    # the single skips that are feasible but pricier stay as Pareto alternatives
    assert {c.skip_layers for c, _ in bfs.alternatives} == {(0,), (3,), (7,)}


@FAST
@given(
    drops=st.lists(st.tuples(st.floats(0, 0.3), st.floats(0, 0.06), st.floats(0.01, 0.2)), min_size=6, max_size=6),
    max_pool=st.none(),
)
def test_bfs_is_exact_on_monotone_separable_objectives(drops, max_pool):
    """With drops >= 0 and savings > 0, BFS's early stop and permissive pool lose nothing: it matches
    brute force over every skip set."""
    n = len(drops)
    fn = additive(n, {i: d[0] for i, d in enumerate(drops)}, {i: d[1] for i, d in enumerate(drops)},
                  {i: d[2] for i, d in enumerate(drops)})
    result = search_on(BFSSearch(n, papers(max_depth=n, max_pool=max_pool)), fn)
    evaluate = evaluate_callable(fn)
    subsets = [Candidate(s) for k in range(n + 1) for s in itertools.combinations(range(n), k)]
    measured = list(zip(subsets, evaluate.evaluate_batch(subsets, None)))
    dense = measured[0][1]
    best = min((p for p in measured if is_feasible(p[1], dense)), key=selection_key)
    assert result.selected_measurement.modeled_cost == pytest.approx(best[1].modeled_cost)
    assert is_feasible(result.selected_measurement, dense)


# -- the pool and the selection --------------------------------------------------------------------
def test_bfs_pool_cap_ranks_by_retained_quality():
    # single drops grow with the index; the cap keeps the three mildest layers
    fn = additive(8, {i: 0.01 * i for i in range(8)}, {i: 0.0 for i in range(8)}, {})
    strategy = BFSSearch(8, papers(max_depth=2, max_pool=3))
    result = search_on(strategy, fn)
    assert strategy.pool == (0, 1, 2)
    assert {c.skip_layers for c, _ in result.history if len(c.skip_layers) == 2} == {(0, 1), (0, 2), (1, 2)}


def test_bfs_pool_takes_every_layer_within_tau_and_names_a_cap():
    """Layer i's single skip loses 2% * i of both A and M: tau decides who enters the pool."""
    def fn(c):
        loss = sum(0.02 * i for i in c.skip_layers)
        return 3.0 * (1 - loss), 0.8 * (1 - loss), 1.0 - 0.05 * len(c.skip_layers)

    loose = run_search(BFSSearch(6, papers(max_depth=2, tau=0.07)), evaluate_callable(fn), progress=False)
    assert loose.info["pool"] == [0, 1, 2, 3]  # losses 0, 2, 4, 6% <= 7%
    strict = run_search(BFSSearch(6, papers(max_depth=2, tau=0.03)), evaluate_callable(fn), progress=False)
    assert strict.info["pool"] == [0, 1]
    capped = run_search(BFSSearch(6, papers(max_depth=2, tau=0.07, max_pool=2)), evaluate_callable(fn),
                        progress=False)
    assert capped.info["pool"] == [0, 1] and any("deviation" in note for note in capped.notes)
    assert not any("deviation" in note for note in loose.notes)


def test_the_papers_selection_drops_what_accept_and_metric_dominate_then_takes_the_cheapest_step():
    def m(a, metric, per_token, per_step):
        return Measurement(a, metric, per_token, 1.0, 0.0, 10, 5, 0.0, modeled_verify_cost=per_step)

    table = {(): m(2.0, 0.50, 0.50, 1.00), (1,): m(1.96, 0.49, 0.45, 0.90), (2,): m(2.10, 0.50, 0.46, 0.95)}
    fn = lambda c: table.get(c.skip_layers, m(1.0, 0.1, 0.9, 0.9))  # noqa: E731
    per_token = run_search(BFSSearch(3, papers(max_depth=1)), evaluate_callable(fn), progress=False)
    assert per_token.selected == Candidate((1,))  # cheapest per generated token, within 5%
    paper = run_search(BFSSearch(3, papers(max_depth=1, select="verify_cost")), evaluate_callable(fn),
                       progress=False)
    assert paper.selected == Candidate((2,))  # skip[1] is dominated in (A, M) by dense; skip[2] dominates dense
    with pytest.raises(ValueError, match="select"):
        BFSSearch(3, papers(select="fastest"))


# -- early rejection hook --------------------------------------------------------------------------
def test_bfs_thresholds_only_from_level_two():
    strategy = BFSSearch(10, papers(early_reject=True))
    seen = []

    def evaluate_batch(batch, on_measured):
        seen.append(strategy.feasibility_thresholds())
        out = []
        for c in batch:
            a, m, cost = TRAP(c)
            th = seen[-1]
            stop = th is not None and a < th[0]  # a runner aborts once A cannot reach the threshold
            out.append(Measurement(a, m, cost, cost, 0.0, 0, 0, 0.0, early_stopped=stop))
        return out

    result = run_search(strategy, FunctionMeasurer(evaluate_batch), progress=False)
    assert seen[0] is None and seen[1] is None
    assert seen[2] == pytest.approx((0.95 * 3.0, 0.95 * 0.8))
    assert result.selected == TRAP_OPTIMUM
    assert BFSSearch(10, papers()).feasibility_thresholds() is None


def test_thresholds_without_metric():
    strategy = BFSSearch(4, papers(early_reject=True))
    strategy.level = 2  # thresholds apply from the pairs on
    strategy.tell(Candidate(), Measurement(2.0, None, 1.0, 1.0, 0.0, 0, 0, 0.0))
    min_a, min_m = strategy.feasibility_thresholds()
    assert min_a == pytest.approx(1.9) and min_m is None
