"""Search strategies, the feasibility rule and Pareto front, TPE and the fidelity guard on synthetic
objectives with known answers (no model; the loop that runs them: tests/study/test_driver.py)."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import itertools
import math
import pkgutil
from collections import Counter
from pathlib import Path

import pytest
from conftest import TRAP, TRAP_OPTIMUM, Counted, additive, papers, search_on
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

import specsparse.search as search_pkg
from specsparse.measuring.vocab import head_latency_reduction
from specsparse.search import (
    STRATEGY_NAMES,
    AcceptOnlySearch,
    BFSSearch,
    GreedySearch,
    MetricOnlySearch,
    RandomSearch,
    SearchStrategy,
    TPEVocabSearch,
    TSSRule,
    is_feasible,
    pareto_front,
)
from specsparse.search.base import NOTE_DENSE_SELECTED, NOTE_METRIC_UNDEFINED
from specsparse.search.pareto import feasibility_thresholds, selection_key
from specsparse.study.driver import candidate_meta, evaluate_callable, run_search
from specsparse.study.store import ResultsStore
from specsparse.types import Candidate, Measurement
from specsparse.util import content_hash

FAST = settings(max_examples=25, deadline=None)


# Each objective alone prefers another set: layers 3 and 5 raise accept length (5 ruins the metric),
# layers 2 and 6 raise the metric; everything else costs A 0.2 and M 0.05.
TWO_WAYS = additive(10, {3: -0.1, 5: -0.4}, {2: -0.1, 5: 0.5, 6: -0.05}, {}, default=(0.2, 0.05, 0.1))

# One constraint binds for each ablation: layer 1 hurts A only, layer 2 hurts M only, layer 4 is mild.
TWO = additive(
    8,
    {1: 0.3, 2: 0.0, 4: 0.05},
    {1: 0.0, 2: 0.2, 4: 0.01},
    {1: 0.3, 2: 0.25, 4: 0.1},
    default=(0.5, 0.5, 0.1),
)


def tpe_factory(seed=0):
    return TPEVocabSearch(
        1000,
        coverage=lambda k: 1 - math.exp(-k / 100),
        latency_reduction=lambda k: 1 - k / 1000,
        n_trials=12,
        seed=seed,
    )


@pytest.mark.parametrize("rule", [TSSRule(), TSSRule(feasibility="point", guard="fidelity")])
def test_a_rule_that_needs_prompts_refuses_measurements_without_them(rule):
    """Without per-prompt results every interval and reply comparison is missing: the rule would reject
    every skip set and pick dense silently, so it says so instead."""
    with pytest.raises(ValueError, match="needs per-prompt results"):
        search_on(BFSSearch(4, rule), additive(4, [0.0] * 4, [0.0] * 4, [0.1] * 4))


LAYER_STRATEGIES = {
    "bfs": lambda L, seed=0: BFSSearch(L, papers(max_depth=3)),
    "greedy": lambda L, seed=0: GreedySearch(L, papers(), max_deletions=3),
    "random": lambda L, seed=0: RandomSearch(L, papers(max_depth=3), seed=seed),
    "accept_only": lambda L, seed=0: AcceptOnlySearch(L, papers(max_depth=3)),
    "metric_only": lambda L, seed=0: MetricOnlySearch(L, papers(max_depth=3)),
}
def joint_factory(num_layers: int, seed: int = 0):
    from specsparse.search.joint_vocab import JointVocabSearch

    return JointVocabSearch(num_layers, vocab_size=64, coverage=lambda k: min(1.0, k / 32),
                            latency_reduction=lambda k: 1 - k / 64, draft_share=lambda skip: 0.5, n_trials=12,
                            seed=seed, max_rounds=2, rule=papers(max_depth=2))


ALL_STRATEGIES = {**LAYER_STRATEGIES, "tpe_vocab": lambda L, seed=0: tpe_factory(seed), "joint_vocab": joint_factory}


def rule_of(strategy):
    return ("accept" in strategy.objectives, "metric" in strategy.objectives)


# -- naming ------------------------------------------------------------------------------------------
def test_strategy_names_match_modules():
    found = {}
    for info in pkgutil.iter_modules(search_pkg.__path__):
        module = importlib.import_module(f"specsparse.search.{info.name}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, SearchStrategy) and cls.__module__ == module.__name__ and not inspect.isabstract(cls):
                found[info.name] = cls
                assert cls.name == info.name
                assert cls.__name__.lower() == info.name.replace("_", "") + "search"
    assert set(found) == set(ALL_STRATEGIES)
    conf = Path(search_pkg.__file__).parents[1] / "conf" / "search"
    assert set(STRATEGY_NAMES) == set(found) == {f.stem for f in conf.glob("*.yaml")}


# -- contract suite over every strategy --------------------------------------------------------------
@pytest.mark.parametrize("name", ALL_STRATEGIES)
def test_contract_no_duplicate_measurements(name):
    fn = Counted(TRAP)
    result = search_on(ALL_STRATEGIES[name](10), fn)
    assert max(Counter(fn.calls).values()) == 1
    assert len(fn.calls) == result.n_measured == len(result.history)
    assert [c for c, _ in result.history] == fn.calls
    assert result.dense == result.history[0][1]


@pytest.mark.parametrize("name", ALL_STRATEGIES)
@FAST
@given(budget=st.integers(1, 30))
def test_contract_budget_respected(name, budget):
    fn = Counted(TRAP)
    result = search_on(ALL_STRATEGIES[name](10), fn, budget=budget)
    assert len(fn.calls) == result.n_measured <= budget
    assert result.selected in {c for c, _ in result.history}
    if any("budget" in n for n in result.notes):
        assert result.n_measured == budget


@pytest.mark.parametrize("name", ALL_STRATEGIES)
def test_contract_budget_zero_cannot_measure_baseline(name):
    with pytest.raises(RuntimeError, match="never measured"):
        search_on(ALL_STRATEGIES[name](10), TRAP, budget=0)


@pytest.mark.parametrize("name", ALL_STRATEGIES)
def test_contract_same_seed_same_sequence(name):
    first, second = Counted(TRAP), Counted(TRAP)
    r1 = search_on(ALL_STRATEGIES[name](10, seed=3), first)
    r2 = search_on(ALL_STRATEGIES[name](10, seed=3), second)
    assert first.calls == second.calls
    assert (r1.selected, r1.alternatives, r1.history) == (r2.selected, r2.alternatives, r2.history)


@pytest.mark.parametrize("name", ALL_STRATEGIES)
def test_contract_store_serves_second_run(name, tmp_path):
    def key_fn(c):
        return content_hash({"objective": "trap", "strategy": name, "candidate": candidate_meta(c)})

    with ResultsStore(tmp_path / "r.sqlite") as store:
        first = Counted(TRAP)
        r1 = search_on(ALL_STRATEGIES[name](10), first, store=store, key_fn=key_fn)
        second = Counted(TRAP)
        r2 = search_on(ALL_STRATEGIES[name](10), second, store=store, key_fn=key_fn)
        assert len(store) == r1.n_measured
    assert second.calls == []
    assert (r2.n_measured, r2.n_cache_hits) == (0, r1.n_measured)
    assert (r1.selected, r1.selected_measurement, r1.alternatives, r1.history) == (
        r2.selected, r2.selected_measurement, r2.alternatives, r2.history,
    )


def test_contract_each_strategy_selects_by_its_own_rule():
    """TSS (bfs) and random: the cheapest feasible configuration; accept_only / metric_only: the
    highest accept length / metric measured; greedy (GM-Skip): the end of its deletion path."""
    for name in LAYER_STRATEGIES:
        strategy = LAYER_STRATEGIES[name](10)
        result = search_on(strategy, TWO_WAYS)
        told = [(c, m) for c, m in result.history if not m.early_stopped]
        if name == "accept_only":
            assert result.selected_measurement.accept_length == max(m.accept_length for _, m in told)
        elif name == "metric_only":
            assert result.selected_measurement.metric == max(m.metric for _, m in told)
        elif name == "greedy":
            assert result.selected.skip_layers == (strategy.path[-1] if strategy.path else ())
        elif name == "random":  # the best of random draws at the TSS depth
            assert result.selected in (strategy.drawn or [Candidate()])
        else:
            feasible = [m for c, m in told if c in result.feasible]
            assert result.selected_measurement.modeled_cost == min(m.modeled_cost for m in feasible)


@pytest.mark.parametrize("name", ["bfs"])
def test_contract_selected_is_cheapest_feasible(name):
    strategy = LAYER_STRATEGIES[name](10)
    result = search_on(strategy, TRAP)
    use_a, use_m = rule_of(strategy)
    feasible = [(c, m) for c, m in result.history if is_feasible(m, result.dense, use_accept=use_a, use_metric=use_m)]
    assert set(result.feasible) == {c for c, _ in feasible}
    assert result.selected in result.feasible
    assert result.selected_measurement.modeled_cost == min(m.modeled_cost for _, m in feasible)
    for c, _ in result.alternatives:
        assert c in result.feasible and c != result.selected and c.skip_layers


@pytest.mark.parametrize("name", LAYER_STRATEGIES)
def test_contract_early_stopped_never_selected(name):
    def fn(c):
        a, m, cost = TRAP(c)
        if {3, 8} & set(c.skip_layers):  # looks perfect but the runner aborted it
            return Measurement(3.0, 0.8, 0.01, 0.01, 0.0, 0, 0, 0.0, early_stopped=True)
        return a, m, cost

    result = search_on(LAYER_STRATEGIES[name](10), fn)
    stopped = {c for c, m in result.history if m.early_stopped}
    assert stopped, "the objective should have produced early-stopped measurements"
    assert result.selected not in stopped
    assert not stopped & set(result.feasible)
    assert not stopped & {c for c, _ in result.alternatives}


@pytest.mark.parametrize("name", LAYER_STRATEGIES)
def test_contract_metric_none_uses_acceptance_only(name):
    fn = additive(10, {0: 0.10, 3: 0.07, 7: 0.07}, {}, {0: 0.12, 3: 0.10, 7: 0.10}, m0=None)
    result = search_on(LAYER_STRATEGIES[name](10), fn)
    assert NOTE_METRIC_UNDEFINED in result.notes or name == "accept_only"
    assert NOTE_METRIC_UNDEFINED not in result.notes or name != "accept_only"
    if name in ("accept_only", "metric_only"):  # the highest accept length: here, dense
        assert result.selected_measurement.accept_length == max(m.accept_length for _, m in result.history)
    elif name == "greedy":  # GM-Skip: guided by accept length instead, still without a constraint
        assert any("accept length used instead" in n for n in result.notes)
        assert result.selected.skip_layers
    elif name == "random":  # unconstrained, at the depth of the TSS pick
        bfs = search_on(BFSSearch(10, papers(max_depth=3)), fn)
        assert len(result.selected.skip_layers) == len(bfs.selected.skip_layers) > 0
    else:
        assert result.selected.skip_layers  # acceptance alone still allows skipping
        assert result.selected_measurement.accept_length >= 0.95 * 3.0 - 1e-9


# -- known answers -----------------------------------------------------------------------------------
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


def test_nothing_feasible_selects_dense():
    fn = additive(6, {}, {}, {}, default=(1.0, 0.5, 0.1))
    for strategy in (BFSSearch(6, papers()), GreedySearch(6, papers()), RandomSearch(6, papers())):
        result = search_on(strategy, fn)
        assert result.selected == Candidate()
        assert NOTE_DENSE_SELECTED in result.notes
        assert result.alternatives == ()


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
    measured = list(zip(subsets, evaluate(subsets)))
    dense = measured[0][1]
    best = min((p for p in measured if is_feasible(p[1], dense)), key=selection_key)
    assert result.selected_measurement.modeled_cost == pytest.approx(best[1].modeled_cost)
    assert is_feasible(result.selected_measurement, dense)


def test_bfs_pool_cap_ranks_by_retained_quality():
    # single drops grow with the index; the cap keeps the three mildest layers
    fn = additive(8, {i: 0.01 * i for i in range(8)}, {i: 0.0 for i in range(8)}, {})
    strategy = BFSSearch(8, papers(max_depth=2, max_pool=3))
    result = search_on(strategy, fn)
    assert strategy.pool == (0, 1, 2)
    assert {c.skip_layers for c, _ in result.history if len(c.skip_layers) == 2} == {(0, 1), (0, 2), (1, 2)}


def test_protected_layers_never_skipped():
    protected = papers(protect_layers=(0, 9))
    for strategy in (BFSSearch(10, protected), GreedySearch(10, protected),
                     RandomSearch(10, protected, depth=3, draws=30)):
        result = search_on(strategy, TRAP)
        assert all(not {0, 9} & set(c.skip_layers) for c, _ in result.history)


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


# -- early rejection hook ----------------------------------------------------------------------------
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

    result = run_search(strategy, evaluate_batch, progress=False)
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


# -- feasibility and Pareto front on hand-written points ---------------------------------------------
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


# -- TPE vocabulary search ---------------------------------------------------------------------------
V, S, HIDDEN, NON_HEAD = 50_000, 2_000.0, 576, 2 * 576 * 20_000.0


def synthetic_coverage(k):
    return 1.0 - math.exp(-k / S)


def synthetic_reduction(k):
    return head_latency_reduction(k, V, HIDDEN, NON_HEAD)


def analytic_optimum(alpha, c_min):
    """argmax alpha*C + (1-alpha)*R: alpha/S e^{-k/S} = (1-alpha)*slope, clipped to C(k) >= c_min."""
    slope = 2 * HIDDEN / (NON_HEAD + 2 * HIDDEN * V)
    k_free = S * math.log(alpha / (S * (1 - alpha) * slope))
    k_min = -S * math.log(1 - c_min)
    return max(k_free, k_min)


def objective(k, alpha=0.5):
    return alpha * synthetic_coverage(k) + (1 - alpha) * synthetic_reduction(k)


@pytest.mark.parametrize(("alpha", "c_min"), [(0.5, 0.9), (0.3, 0.95)])
def test_tpe_finds_analytic_optimum(alpha, c_min):
    strategy = TPEVocabSearch(V, synthetic_coverage, synthetic_reduction, alpha=alpha, min_coverage=c_min,
                              n_trials=60, seed=0)
    result = search_on(strategy, lambda c: (2.0 if c.vocab_size is None else 1.9, 0.5, 1.0))
    k_star = analytic_optimum(alpha, c_min)
    k = result.info["k"]
    assert result.selected == Candidate((), k)
    assert result.info["coverage"] >= c_min
    assert abs(k - k_star) / k_star < 0.15
    assert objective(k, alpha) >= objective(k_star, alpha) - 0.005
    assert result.selected_measurement.accept_length == 1.9 and result.dense.accept_length == 2.0


def test_tpe_constraint_binds():
    c_min = 0.99  # pushes k to about 9210, beyond the unconstrained optimum of about 4400
    strategy = TPEVocabSearch(V, synthetic_coverage, synthetic_reduction, alpha=0.5, min_coverage=c_min,
                              n_trials=60, seed=1)
    choice = strategy.optimise()
    k_c = -S * math.log(1 - c_min)
    assert analytic_optimum(0.5, 0.0) < k_c
    assert choice.chosen.coverage >= c_min and choice.chosen.k >= k_c
    assert choice.chosen.k < 1.2 * k_c


def test_tpe_deduplicates_k_and_falls_back_when_unreachable():
    calls = Counter()

    def cov(k):
        calls[k] += 1
        return k / 100

    strategy = TPEVocabSearch(100, cov, lambda k: 1 - k / 100, n_trials=50, k_min=1, k_max=20, min_coverage=0.5)
    result = search_on(strategy, TRAP)
    ks = [t[0] for t in result.info["trials"]]
    assert len(ks) == len(set(ks)) == result.info["n_distinct_k"] < 50
    assert max(calls.values()) == 1  # each k once: the trials, the fallback to k_max, the coverage curve
    assert result.info["k"] == 20 and not result.info["constraint_met"]
    assert any("coverage" in n for n in result.notes)


def test_tpe_keeps_skip_set_and_selects_baseline_when_chosen_stopped():
    strategy = TPEVocabSearch(1000, lambda k: 1.0, lambda k: 0.0, n_trials=3, skip_layers=(2, 5))

    def fn(c):
        return Measurement(2.0, None, 1.0, 1.0, 0.0, 0, 0, 0.0, early_stopped=c.vocab_size is not None)

    result = search_on(strategy, fn)
    assert result.baseline == Candidate((2, 5))
    assert [c.vocab_size is not None for c, _ in result.history] == [False, True]
    assert result.selected == result.baseline
    assert any("not measured to the end" in n for n in result.notes)


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


# -- the fidelity guard (chrF of the replies against the dense replies) --------------------------------------------
REPLIES = ("The capital of France is Paris, a city on the Seine.", "Water boils at one hundred degrees Celsius.",
           "Photosynthesis turns light, water and carbon dioxide into sugar.", "The Moon orbits the Earth monthly.")


def with_replies(accept, cost, replies, metric=None):
    """A measurement whose prompts each have one of `replies` and accept length `accept` (a multiple of
    0.5: two verification steps per prompt), no task metric."""
    from specsparse.types import PromptResult

    tokens = round(2 * accept)
    per_prompt = tuple(PromptResult(f"p{i}", text, (tokens - tokens // 2, tokens // 2), tokens, 0.0, 0.0)
                       for i, text in enumerate(replies))
    return Measurement(accept_length=accept, metric=metric, modeled_cost=cost, flops_fraction=cost, modeled_tokens_per_s=0.0,
                       new_tokens=tokens * len(replies), target_forwards=2 * len(replies), wall_time_s=0.0,
                       per_prompt=per_prompt)


# Layer 1 turns every reply into repetitions (A rises: the drafter predicts them); layer 2 rewords a
# little (A and the replies stay close); the rest cost A 0.5 and fidelity nothing.
def degrading(c: Candidate):
    replies = [(").).).)" * 8) if 1 in c.skip_layers else
               text.replace("The", "This") if 2 in c.skip_layers else text for text in REPLIES]
    accept = 2.0 + (1.0 if 1 in c.skip_layers else 0.0) - 0.5 * len(set(c.skip_layers) - {1, 2})
    return with_replies(accept, 1.0 - 0.1 * len(c.skip_layers), replies)


degrading.num_layers = 6


@pytest.mark.parametrize("guard, expected", [("task", Candidate((1, 2))), ("auto", Candidate((2,))),
                                             ("fidelity", Candidate((2,))), ("both", Candidate((2,)))])
def test_fidelity_guard_rejects_degenerate_replies_that_raise_accept_length(guard, expected):
    for feasibility in ("point", "lower_bound"):
        rule = papers(max_depth=2, guard=guard, min_fidelity=50, feasibility=feasibility)
        result = search_on(BFSSearch(6, rule), degrading)
        assert result.selected == expected, (guard, feasibility)
        assert any(n.startswith("guard: output fidelity") for n in result.notes) == (guard != "task")


def test_fidelity_guard_auto_adds_fidelity_only_without_an_informative_metric():
    def informative(c):
        m = degrading(c)
        return dataclasses.replace(m, metric=0.8, per_prompt=tuple(dataclasses.replace(p, metric=0.8) for p in m.per_prompt))

    informative.num_layers = 6
    strategy = BFSSearch(6, papers(max_depth=2, guard="auto", min_fidelity=50))
    search_on(strategy, informative)
    assert strategy.quality_guard() == {"task_metric": True, "fidelity": False, "min_fidelity": None}
    strategy = BFSSearch(6, papers(max_depth=2, guard="auto", min_fidelity=50))
    search_on(strategy, degrading)
    assert strategy.quality_guard() == {"task_metric": False, "fidelity": True, "min_fidelity": 50.0}


@FAST
@given(st.lists(st.text(min_size=1, max_size=40), min_size=1, max_size=6))
def test_fidelity_of_identical_replies_is_100_and_of_others_below(replies):
    from specsparse.measuring.fidelity import fidelity_interval

    dense = with_replies(2.0, 1.0, replies)
    same = fidelity_interval(dense, with_replies(1.0, 0.5, replies))
    assert same.point == same.low == same.high == pytest.approx(100.0)
    other = fidelity_interval(dense, with_replies(1.0, 0.5, ["\u2603" * 50] * len(replies)))
    assert other.low <= other.point <= other.high < 100.0


def test_joint_skip_vocab_search_alternates_to_a_fixed_point_and_beats_sequential_where_drafting_is_cheap():
    """Synthetic: skipping layer 3 is free, others cost acceptance; accept length grows with the
    vocabulary's coverage; verification dominates a step (the head's share is 10%). The paper's TPE
    (R(k) of the drafter alone) picks the smallest k meeting c_min; weighed by the head's share of a
    step, TPE keeps more tokens, accepts more, and the joint pick wins on modeled tokens/s."""
    from specsparse.search.joint_vocab import JointVocabSearch
    from specsparse.types import Measurement

    vocab = 100
    coverage = lambda k: 1 - (1 - k / vocab) ** 3  # noqa: E731
    latency = lambda k: 1 - k / vocab  # noqa: E731

    def measure(c: Candidate) -> Measurement:
        k = vocab if c.vocab_size is None else c.vocab_size
        accept = (3.0 - 0.5 * len(set(c.skip_layers) - {3})) * (0.5 + 0.5 * coverage(k))
        seconds = (1.0 - 0.2 * len(c.skip_layers)) + 0.1 * (0.3 + 0.7 * k / vocab)  # verify + draft per step
        return Measurement(accept_length=accept, metric=1.0, modeled_cost=seconds / accept, flops_fraction=1.0,
                           modeled_tokens_per_s=accept / seconds, new_tokens=100, target_forwards=10,
                           wall_time_s=0.0)

    search = JointVocabSearch(4, vocab_size=vocab, coverage=coverage, latency_reduction=latency,
                              draft_share=lambda skip: 0.1, alpha=0.5, min_coverage=0.9, n_trials=80,
                              rule=papers(max_depth=2, tau=0.05))
    result = run_search(search, evaluate_callable(measure), progress=False)
    sequential, joint = search.sequential, search.joint
    assert sequential.skip_layers == joint.skip_layers == (3,)
    assert 54 <= sequential.vocab_size <= 58 and joint.vocab_size > sequential.vocab_size + 10
    assert search.rounds[-1]["next_k"] == search.rounds[-1]["k"]  # a fixed point
    assert result.selected == joint
    rates = dict(result.info["modeled_tokens_per_s"])
    assert rates["joint"] > rates["sequential"] > rates["dense"]
