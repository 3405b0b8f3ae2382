"""Paired-bootstrap intervals and the feasibility rules built on them (point, lower_bound, metric floor)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specsparse.measuring.intervals import accept_interval, metric_interval, paired_ratios
from specsparse.search.bfs import BFSSearch
from specsparse.search.rule import TSSRule
from specsparse.types import Candidate, Measurement, PromptResult


def measurement(steps, tokens, metrics=None) -> Measurement:
    """A measurement whose prompt i took steps[i] verification steps for tokens[i] tokens."""
    metrics = metrics if metrics is not None else [None] * len(steps)
    prompts = tuple(
        PromptResult(f"ex{i}", f"reply number {i}", tuple([t // s] * s), t, 0.0, 0.0, m)
        for i, (s, t, m) in enumerate(zip(steps, tokens, metrics))
    )
    metric = None if metrics[0] is None else float(np.mean(metrics))
    return Measurement(sum(tokens) / sum(steps), metric, 1.0, 1.0, 0.0, sum(tokens), sum(steps), 0.0, per_prompt=prompts)


prompt_counts = st.lists(st.tuples(st.integers(1, 30), st.integers(1, 4)), min_size=2, max_size=25)


@settings(max_examples=50, deadline=None)
@given(prompts=prompt_counts, scores=st.lists(st.floats(0, 1), min_size=25, max_size=25))
def test_intervals_contain_their_point_and_a_configuration_paired_with_itself_is_exactly_one(prompts, scores):
    steps = [s for s, _ in prompts]
    tokens = [s * a for s, a in prompts]
    m = measurement(steps, tokens, scores[: len(steps)])
    a, metric = accept_interval(m), metric_interval(m)
    assert a.low - 1e-9 <= a.point <= a.high + 1e-9
    assert metric.low - 1e-9 <= metric.point <= metric.high + 1e-9
    ratios = paired_ratios(m, m)
    assert ratios.accept.as_list() == pytest.approx([1, 1, 1]) and ratios.metric.as_list() == pytest.approx([1, 1, 1])


def test_a_uniform_loss_has_a_tight_paired_interval_and_pairing_beats_independence():
    rng = np.random.default_rng(0)
    steps = rng.integers(5, 30, size=20).tolist()
    dense = measurement(steps, [4 * s for s in steps], rng.uniform(0.1, 0.9, size=20).tolist())
    # The candidate accepts 3 instead of 4 tokens per step on every prompt and keeps 90% of each score.
    candidate = measurement(steps, [3 * s for s in steps], [0.9 * p.metric for p in dense.per_prompt])
    ratios = paired_ratios(dense, candidate)
    assert ratios.accept.as_list() == pytest.approx([0.75, 0.75, 0.75])
    assert ratios.metric.low == pytest.approx(0.9) and ratios.metric.high == pytest.approx(0.9)
    independent = metric_interval(candidate)
    assert independent.high - independent.low > 0.1  # the prompts' spread, which pairing cancels


def test_different_prompts_cannot_be_paired():
    a = measurement([4, 4], [8, 8])
    b = measurement([4], [8])
    assert paired_ratios(a, b) is None


def bfs(num_layers: int, **settings) -> BFSSearch:
    """BFS under the papers' rule (point estimates, the task metric) with `settings` changed."""
    return BFSSearch(num_layers, TSSRule(**{"feasibility": "point", "guard": "task", **settings}))


def search_with(dense: Measurement, single: Measurement, **options) -> BFSSearch:
    search = bfs(3, max_depth=1, **options)
    search.tell(Candidate(), dense)
    search.tell(Candidate((1,)), single)
    return search


def noisy_pair(seed=1):
    """A candidate 3% below dense on average but 15% below on some prompts."""
    rng = np.random.default_rng(seed)
    steps = [20] * 16
    dense = measurement(steps, [80] * 16, [0.6] * 16)
    factors = rng.choice([1.0, 0.85], size=16, p=[0.8, 0.2])
    factors = factors * (0.97 * 16 / factors.sum())  # mean factor exactly 0.97
    candidate = measurement(steps, [int(round(80 * f)) for f in factors], [0.6] * 16)
    return dense, candidate


def test_point_rule_accepts_what_the_lower_bound_rule_rejects():
    dense, candidate = noisy_pair()
    assert candidate.accept_length / dense.accept_length == pytest.approx(0.97, abs=0.01)
    assert search_with(dense, candidate, feasibility="point").feasible(candidate)
    assert not search_with(dense, candidate, feasibility="lower_bound").feasible(candidate)
    # The same loss on every prompt is certain: the lower bound accepts it.
    steady = measurement([20] * 16, [78] * 16, [0.6] * 16)
    assert search_with(dense, steady, feasibility="lower_bound").feasible(steady)


def test_an_uninformative_metric_is_noted_and_stops_constraining_only_when_asked():
    steps = [10] * 12
    dense = measurement(steps, [30] * 12, [0.0] * 11 + [0.2])  # near zero: BLEU of a tiny model
    broken = measurement(steps, [30] * 12, [0.0] * 12)  # metric falls to 0, accept length unchanged
    papers = search_with(dense, broken)  # the papers' rule: the metric still constrains, on noise
    assert not papers.feasible(broken) and "rests on noise" in papers.metric_uninformative()
    assert any(note.startswith("metric uninformative") for note in papers.select().notes)
    floored = search_with(dense, broken, metric_floor=0.05)
    assert floored.feasible(broken) and "accept length only" in floored.metric_uninformative()
    informative = measurement(steps, [30] * 12, [0.5] * 12)
    assert search_with(informative, broken, metric_floor=0.05).metric_uninformative() is None


def pool_of(measurements: dict[tuple[int, ...], Measurement], **options) -> tuple[int, ...]:
    """The BFS pool built from these single-skip measurements (dense under ())."""
    from specsparse.study.driver import evaluate_callable, run_search

    worst = measurements[(3,)]  # pairs: as bad as the worst single skip
    result = run_search(bfs(4, max_depth=2, **options),
                        evaluate_callable(lambda c: measurements.get(c.skip_layers, worst)), progress=False)
    return tuple(result.info["pool"])


def test_the_pool_takes_a_layer_that_keeps_either_constraint_within_tau():
    """Layer 1 keeps A and loses 30% of M, layer 2 keeps M and loses 30% of A, layer 3 loses both:
    the paper's OR rule pools 0, 1 and 2 (an AND pool would hold layer 0 alone)."""
    steps = [10] * 8
    singles = {(): measurement(steps, [30] * 8, [0.5] * 8), (0,): measurement(steps, [30] * 8, [0.5] * 8),
               (1,): measurement(steps, [30] * 8, [0.35] * 8), (2,): measurement(steps, [21] * 8, [0.5] * 8),
               (3,): measurement(steps, [21] * 8, [0.35] * 8)}
    assert pool_of(singles) == (0, 1, 2)


def test_under_lower_bound_the_pool_asks_the_interval_not_the_point():
    """`feasibility=lower_bound` makes the pool its own rule: a constraint enters it when the lower end
    of its paired 95% interval reaches 1 - tau. Layer 1 keeps A on average but swings +-30% per prompt
    (and loses 30% of M): the point rule pools it, the lower-bound rule does not."""
    steps = [10] * 8
    singles = {(): measurement(steps, [30] * 8, [0.5] * 8), (0,): measurement(steps, [30] * 8, [0.5] * 8),
               (1,): measurement(steps, [39, 21] * 4, [0.35] * 8), (2,): measurement(steps, [21] * 8, [0.35] * 8),
               (3,): measurement(steps, [21] * 8, [0.35] * 8)}
    ratios = paired_ratios(singles[()], singles[(1,)])
    assert ratios.accept.point == pytest.approx(1.0) and ratios.accept.low < 0.95
    assert pool_of(singles, feasibility="point") == (0, 1)
    assert pool_of(singles, feasibility="lower_bound") == (0,)


def test_bad_rule_names_fail_clearly():
    with pytest.raises(ValueError, match="feasibility"):
        TSSRule(feasibility="median")


def _job(timing_speedup: list[float], test_metrics: tuple, guard: dict | None = None):
    """A finished job whose pick (skip[2]) was timed at `timing_speedup` ([point, low, high]) over
    dense; `test_metrics`: (dense, selected), each one metric for every prompt or a per-prompt list."""
    from specsparse.jobs.result import JobResult
    from specsparse.measuring.timing import SideBySide
    from specsparse.study.driver import evaluate_callable, run_search

    # Skipping layer 2 is free and cheaper: the search selects it.
    result = run_search(bfs(4, max_depth=1), evaluate_callable(
        lambda c: (3.0, 0.6, 1.0 - 0.1 * len(c.skip_layers) if c.skip_layers == (2,) or not c.skip_layers else 2.0)),
        progress=False)
    assert result.selected == Candidate((2,))
    dense, selected = (measurement([10] * 4, [30] * 4, m if isinstance(m, list) else [m] * 4) for m in test_metrics)
    timing = SideBySide(("plain", "dense", "selected"), (10.0, 20.0, 20.0 * timing_speedup[0]),
                        {"selected/dense": timing_speedup, "dense/plain": [2.0, 1.9, 2.1]}, 4)
    extra = {} if guard is None else {"guard": guard}
    return JobResult("qa", result, dense, selected, None, 1.0, 4, {}, timing, eps_metric=0.05, **extra)


def test_held_out_verdict_is_held_only_when_every_interval_clears_its_threshold():
    assert _job([1.2, 1.1, 1.3], (0.6, 0.59)).held_out()["verdict"] == "held"
    slower = _job([0.9, 0.8, 0.95], (0.6, 0.6)).held_out()
    assert slower["verdict"] == "did not hold" and "speedup" in slower["reasons"][0]
    worse = _job([1.2, 1.1, 1.3], (0.6, 0.5)).held_out()
    assert worse["verdict"] == "did not hold" and "metric" in worse["reasons"][0]
    unsure = _job([1.36, 0.69, 2.28], (0.6, 0.6)).held_out()  # the overstated "HELD" of an earlier version
    assert unsure["verdict"] == "inconclusive" and "[0.69-2.28] inconclusive" in unsure["reasons"][0]
    straddles = _job([1.2, 1.1, 1.3], (0.6, [0.7, 0.4, 0.6, 0.6])).held_out()  # M/M0 0.96, interval across 0.95
    assert straddles["verdict"] == "inconclusive" and straddles["checks"]["metric"]["state"] == "inconclusive"
    low, high = straddles["checks"]["metric"]["interval"][1:]
    assert low < 0.95 <= high
    # A worse check wins: a failing speedup with an inconclusive metric did not hold.
    assert _job([0.8, 0.7, 0.9], (0.6, [0.7, 0.4, 0.6, 0.6])).held_out()["verdict"] == "did not hold"


def test_held_out_verdict_judges_fidelity_where_the_guard_used_it():
    guard = {"task_metric": False, "fidelity": True, "min_fidelity": 30.0}
    verdict = _job([1.2, 1.1, 1.3], (0.6, 0.6), guard).held_out()
    assert set(verdict["checks"]) == {"speedup", "fidelity"} and verdict["verdict"] == "held"  # identical replies


@given(st.floats(0.5, 2.0), st.floats(0.0, 0.5), st.floats(0.0, 0.5))
def test_held_out_verdict_matches_its_speedup_interval(point, below, above):
    low, high = point - below, point + above
    verdict = _job([point, low, high], (0.6, 0.6)).held_out()["verdict"]
    assert verdict == ("held" if low > 1 else "did not hold" if high <= 1 else "inconclusive")


def test_a_corpus_score_that_is_not_the_mean_of_its_prompts_still_lies_in_its_interval():
    m = measurement([10] * 12, [30] * 12, [0.0, 0.05, 0.02, 0.01] * 3)
    corpus = Measurement(m.accept_length, 0.004, 1.0, 1.0, 0.0, m.new_tokens, m.target_forwards, 0.0,
                         per_prompt=m.per_prompt)  # like corpus BLEU, below the sentence mean 0.02
    interval = metric_interval(corpus)
    assert interval.low <= 0.004 <= interval.high
    other = Measurement(m.accept_length, 0.002, 1.0, 1.0, 0.0, m.new_tokens, m.target_forwards, 0.0,
                        per_prompt=m.per_prompt)
    ratio = paired_ratios(corpus, other).metric
    assert ratio.point == pytest.approx(0.5) and ratio.low <= ratio.point <= ratio.high
