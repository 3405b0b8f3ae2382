"""Batched measurement equals the engine, prompt by prompt: replay over the greedy continuation and
lockstep batched verification give the engine's outputs and per-step accept and verified lengths."""

import pytest
import torch
from conftest import DRAFTERS, NUM_LAYERS, TREE_DRAFTERS, make_drafter, skip_sets
from hypothesis import given, settings
from hypothesis import strategies as st

from specsparse.data import get_domain, load_examples
from specsparse.decoding.batched import generate_batch
from specsparse.decoding.engine import speculative_generate
from specsparse.drafters import PromptLookupDrafter, SuffixAutomatonDrafter
from specsparse.measuring.measure import measure
from specsparse.measuring.replay import replay
from specsparse.types import GenerationConfig

prompt_lists = st.lists(st.lists(st.integers(0, 20), min_size=1, max_size=10).map(lambda p: p * 2), min_size=1, max_size=5)


def engine_runs(target, prompts, new_drafter, config, skip, eos=()):
    return [speculative_generate(target, p, new_drafter(), config, skip, eos) for p in prompts]


def steps(result):
    return result.new_token_ids, result.accept_lengths, result.verified_lengths


@settings(max_examples=50, deadline=None)
@given(
    drafter=st.sampled_from(DRAFTERS + TREE_DRAFTERS),
    skip=skip_sets(NUM_LAYERS),
    draft_skip=skip_sets(NUM_LAYERS),
    k=st.integers(1, 6),
    prompts=prompt_lists,
    max_new=st.integers(1, 20),
    batch_size=st.integers(1, 4),
    eos=st.sampled_from([(), (5,), (5, 9)]),
    draft_length=st.sampled_from(["fixed", "adaptive"]),
)
def test_batched_measurement_equals_the_engine_step_for_step(
    models, drafter, skip, draft_skip, k, prompts, max_new, batch_size, eos, draft_length
):
    """Every drafter: replay when it is replayable, lockstep verification otherwise; both against the
    engine run prompt by prompt with a fresh drafter each. Tree drafts replay, but lockstep refuses
    them (the engine measures those). The tiny models' logits have no near-ties."""
    target = models[0]
    config = GenerationConfig(max_new_tokens=max_new, num_draft_tokens=k, draft_length=draft_length)
    new_drafter = lambda: make_drafter(drafter, models, NUM_LAYERS, draft_skip)  # noqa: E731
    expected = [steps(r) for r in engine_runs(target, prompts, new_drafter, config, skip, eos)]
    try:
        lockstep = generate_batch(target, prompts, [new_drafter() for _ in prompts], config, skip, eos, batch_size)
        assert [steps(r) for r in lockstep] == expected
    except ValueError as err:
        assert drafter in TREE_DRAFTERS and "measure.mode=engine" in str(err)
    prototype = new_drafter()
    if prototype.replayable:
        greedy = [r.new_token_ids for r in generate_batch(target, prompts, None, config, skip, eos, batch_size)]
        replayed = replay(prototype.replay_drafters(prompts, greedy, batch_size), prompts, greedy, config, eos)
        assert [steps(r) for r in replayed] == expected
    else:  # they learn from the target's logits at rejected drafts
        assert drafter in ("samd", "recycling", "samd_tree", "recycling_tree")


def test_replay_rejects_a_continuation_from_other_stopping_rules(models):
    config = GenerationConfig(max_new_tokens=8, num_draft_tokens=3, stop_on_eos=False)
    prompt = [1, 2, 3, 1, 2]
    greedy = speculative_generate(models[0], prompt, None, config).new_token_ids
    with pytest.raises(RuntimeError, match="diverged"):
        replay([PromptLookupDrafter()], [prompt], [greedy[:-2]], config)


def test_skipping_layer_zero_in_a_batch_keeps_positions(models):
    """Rows of different lengths, layer 0 skipped: equal to each prompt alone (positions from row lengths)."""
    prompts = [[4, 5, 6], [7] * 9, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]]
    config = GenerationConfig(max_new_tokens=15, num_draft_tokens=0, stop_on_eos=False)
    alone = [speculative_generate(models[0], p, None, config, (0,)).new_token_ids for p in prompts]
    together = generate_batch(models[0], prompts, None, config, (0,), batch_size=3)
    assert [r.new_token_ids for r in together] == alone


@pytest.fixture(scope="module")
def translation_prompts():
    return get_domain("translation"), load_examples("translation", limit=3)


@pytest.mark.parametrize("skip", [(0,), (0, 7, 15, 29), pytest.param((), marks=pytest.mark.slow),
                                  pytest.param((5, 9), marks=pytest.mark.slow)])
def test_replay_equals_the_engine_on_the_embedded_model(smollm, translation_prompts, skip):
    """SmolLM2 fp32, real prompts: per-prompt outputs and accept lengths of replay (pld, samd without
    fallback) and lockstep (samd with its recycling fallback) equal the engine's."""
    domain, examples = translation_prompts
    config = GenerationConfig(max_new_tokens=16, num_draft_tokens=4)
    cases = [PromptLookupDrafter, lambda: SuffixAutomatonDrafter(2, None), lambda: SuffixAutomatonDrafter.from_target(smollm)]
    for make in cases:
        engine = measure(smollm, domain, examples, make, skip, config, mode="engine", progress=False)
        batched = measure(smollm, domain, examples, make, skip, config, batch_size=3, progress=False)
        assert [(p.output_text, p.accept_lengths) for p in batched.per_prompt] == [
            (p.output_text, p.accept_lengths) for p in engine.per_prompt
        ]
        assert (batched.accept_length, batched.metric, batched.verified_tokens) == (
            engine.accept_length, engine.metric, engine.verified_tokens)


def test_one_generation_serves_every_drafter_and_k(tiny):
    domain, examples = get_domain("summarization"), load_examples("summarization", limit=3)
    continuations = {}
    calls = []
    config = GenerationConfig(max_new_tokens=10, num_draft_tokens=2)
    first = measure(tiny, domain, examples, PromptLookupDrafter, (1,), config, continuations=continuations, progress=False)
    assert len(continuations) == 3
    import specsparse.measuring.measure as measure_module

    original = measure_module.generate_batch
    measure_module.generate_batch = lambda *a, **kw: calls.append(a) or original(*a, **kw)
    try:
        for k in (1, 4):
            again = measure(tiny, domain, examples, lambda: SuffixAutomatonDrafter(2, None), (1,),
                            GenerationConfig(max_new_tokens=10, num_draft_tokens=k), continuations=continuations,
                            progress=False)
            assert [p.output_text for p in again.per_prompt] == [p.output_text for p in first.per_prompt]
    finally:
        measure_module.generate_batch = original
    assert all(len(a[1]) == 0 for a in calls)  # nothing left to generate: every prompt came from the cache


def test_batched_forward_equals_single_sequence_logits(tiny):
    """The padded, per-row-position forward gives each row the logits it has alone."""
    from specsparse.decoding.batched.session import BatchedSession
    from specsparse.decoding.session import ModelSession

    rows = {0: [3, 4, 5], 1: [6, 7, 8, 9, 10, 11], 2: [12]}
    with torch.inference_mode():
        batched = BatchedSession(tiny.model, (0, 2), 3, 16).forward(rows)
        for row, tokens in rows.items():
            alone = ModelSession(tiny.model, (0, 2)).forward(tokens)
            torch.testing.assert_close(batched[row], alone, rtol=1e-4, atol=1e-4)


class CountingTreeLookup(PromptLookupDrafter):
    """Prompt lookup drafting trees, counting the steps that drafted one."""

    trees = 0

    def propose(self, k):
        proposal = super().propose(k)
        CountingTreeLookup.trees += proposal.parents is not None
        return proposal


@settings(max_examples=25, deadline=None)
@given(tail=st.lists(st.integers(0, 20), min_size=0, max_size=12), skip=skip_sets(NUM_LAYERS), k=st.integers(2, 6))
def test_replay_of_tree_drafts_equals_the_engine(models, tail, skip, k):
    """Prompts whose last n-grams first occur at different places, so lookup drafts a tree at once."""
    prompt = [2, 3, 5, 1, 2, 3, 9, *tail, 1, 2, 3]
    config = GenerationConfig(max_new_tokens=16, num_draft_tokens=k, stop_on_eos=False)
    CountingTreeLookup.trees = 0
    [engine] = engine_runs(models[0], [prompt], lambda: CountingTreeLookup(branches=3), config, skip)
    assert CountingTreeLookup.trees > 0
    greedy = [r.new_token_ids for r in generate_batch(models[0], [prompt], None, config, skip)]
    [replayed] = replay([CountingTreeLookup(branches=3)], [prompt], greedy, config)
    assert steps(replayed) == steps(engine)
