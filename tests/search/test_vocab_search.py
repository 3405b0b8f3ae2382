"""The draft-vocabulary searches on synthetic coverage and latency curves (no model): TPE against the
analytic optimum, its coverage constraint, distinct k and the fallback, its baseline; and the joint skip
and vocabulary search reaching a fixed point."""

from __future__ import annotations

import math
from collections import Counter

import pytest
from conftest import TRAP, papers, search_on

from specsparse.measuring.vocab import head_latency_reduction
from specsparse.search import TPEVocabSearch
from specsparse.study.driver import evaluate_callable, run_search
from specsparse.types import Candidate, Measurement

# -- TPE vocabulary search -------------------------------------------------------------------------
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


# -- joint skip and vocabulary search --------------------------------------------------------------
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
