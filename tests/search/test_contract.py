"""The contract every search strategy keeps, on synthetic objectives (no model; the loop that runs them:
tests/study/test_driver.py): strategy names match modules and configs; no duplicate measurements, the
budget, seeds and the results store respected; each selects by its own rule; and the rules the layer
strategies share (nothing feasible selects dense, protected layers are never skipped)."""

from __future__ import annotations

import importlib
import inspect
import math
import pkgutil
from collections import Counter
from pathlib import Path

import pytest
from conftest import TRAP, Counted, additive, papers, search_on
from hypothesis import given
from hypothesis import strategies as st
from search_helpers import FAST, TWO_WAYS

import specsparse.search as search_pkg
from specsparse.search import (
    STRATEGY_NAMES,
    AcceptOnlySearch,
    BFSSearch,
    GreedySearch,
    MetricOnlySearch,
    RandomSearch,
    SearchStrategy,
    TPEVocabSearch,
    is_feasible,
)
from specsparse.search.base import NOTE_DENSE_SELECTED, NOTE_METRIC_UNDEFINED
from specsparse.study.driver import candidate_meta
from specsparse.study.store import ResultsStore
from specsparse.types import Candidate, Measurement
from specsparse.util import content_hash


def tpe_factory(seed=0):
    return TPEVocabSearch(
        1000,
        coverage=lambda k: 1 - math.exp(-k / 100),
        latency_reduction=lambda k: 1 - k / 1000,
        n_trials=12,
        seed=seed,
    )


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


# -- naming ----------------------------------------------------------------------------------------
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


# -- contract suite over every strategy ------------------------------------------------------------
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
        r1 = search_on(ALL_STRATEGIES[name](10), first, store=store, key=key_fn)
        second = Counted(TRAP)
        r2 = search_on(ALL_STRATEGIES[name](10), second, store=store, key=key_fn)
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


# -- rules the layer strategies share --------------------------------------------------------------
def test_nothing_feasible_selects_dense():
    fn = additive(6, {}, {}, {}, default=(1.0, 0.5, 0.1))
    for strategy in (BFSSearch(6, papers()), GreedySearch(6, papers()), RandomSearch(6, papers())):
        result = search_on(strategy, fn)
        assert result.selected == Candidate()
        assert NOTE_DENSE_SELECTED in result.notes
        assert result.alternatives == ()


def test_protected_layers_never_skipped():
    protected = papers(protect_layers=(0, 9))
    for strategy in (BFSSearch(10, protected), GreedySearch(10, protected),
                     RandomSearch(10, protected, depth=3, draws=30)):
        result = search_on(strategy, TRAP)
        assert all(not {0, 9} & set(c.skip_layers) for c, _ in result.history)
