"""The TSS rule's fidelity guard (chrF of the replies against the dense replies), on synthetic replies (no
model): it rejects degenerate replies that raise accept length, `auto` adds it only without an informative
task metric, and identical replies score 100."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import papers, search_on
from hypothesis import given
from hypothesis import strategies as st
from search_helpers import FAST

from specsparse.search import BFSSearch
from specsparse.types import Candidate, Measurement

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
