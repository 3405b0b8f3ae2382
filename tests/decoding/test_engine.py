"""The speculative engine is lossless (greedy) and unbiased (sampling), for every drafter."""

import math
from dataclasses import replace

import pytest
import torch
from conftest import DRAFTERS, NUM_LAYERS, TREE_DRAFTERS, assert_same_up_to_near_tie, make_drafter, reference_greedy, skip_sets
from hypothesis import given, settings
from hypothesis import strategies as st

from specsparse.decoding.drafter import tree_from_branches
from specsparse.decoding.engine import AdaptiveDraftLength, greedy_accept, speculative_generate
from specsparse.decoding.models import tiny_model
from specsparse.decoding.session import ModelSession
from specsparse.drafters import DraftModelDrafter, SelfSkipDrafter, TokenRecyclingDrafter
from specsparse.drafters.pld import PromptLookupDrafter
from specsparse.types import GenerationConfig

# Prompts with repeats so that lookup drafters actually propose.
prompts = st.lists(st.integers(0, 20), min_size=1, max_size=12).map(lambda p: p * 2)


@settings(max_examples=60, deadline=None)
@given(
    drafter=st.sampled_from(DRAFTERS + TREE_DRAFTERS),
    skip=skip_sets(NUM_LAYERS),
    draft_skip=skip_sets(NUM_LAYERS),
    k=st.integers(1, 6),
    prompt=prompts,
    max_new=st.integers(1, 24),
    draft_length=st.sampled_from(["fixed", "adaptive"]),
)
def test_greedy_speculative_output_equals_target_greedy(
    models, drafter, skip, draft_skip, k, prompt, max_new, draft_length
):
    target = models[0]
    config = GenerationConfig(max_new_tokens=max_new, num_draft_tokens=k, stop_on_eos=False, draft_length=draft_length)
    result = speculative_generate(
        target, prompt, make_drafter(drafter, models, NUM_LAYERS, draft_skip), config, skip_layers=skip
    )
    reference, gaps = reference_greedy(target, prompt, skip, max_new)
    assert_same_up_to_near_tie(list(result.new_token_ids), reference, gaps)
    assert sum(result.accept_lengths) == result.new_tokens == max_new
    assert all(1 <= a <= k + 1 for a in result.accept_lengths)


def test_plain_decoding_has_accept_length_one(models):
    result = speculative_generate(models[0], [1, 2, 3], None, GenerationConfig(max_new_tokens=10, stop_on_eos=False))
    assert result.accept_lengths == (1,) * 10
    assert result.mean_accept_length == 1.0 and result.target_forwards == 10


@pytest.mark.parametrize("skip", [(), (0,), (1, 3), (NUM_LAYERS - 1,)])
def test_self_skip_with_the_targets_skip_set_accepts_everything(models, skip):
    """The drafter is then the verifying model itself: every draft must be accepted. This fails if the
    drafter's cache misses accepted tokens in layers it runs (acceptance drops; output stays right)."""
    k = 4
    config = GenerationConfig(max_new_tokens=40, num_draft_tokens=k, stop_on_eos=False)
    result = speculative_generate(models[0], [3, 1, 4, 1, 5], SelfSkipDrafter(models[0], skip_layers=skip), config, skip_layers=skip)
    full_steps = sum(a == k + 1 for a in result.accept_lengths[:-1])
    assert full_steps >= 0.9 * (len(result.accept_lengths) - 1)
    assert result.mean_accept_length > 0.9 * (k + 1) * (len(result.accept_lengths) - 1) / len(result.accept_lengths)


def test_self_skip_acceptance_matches_an_independent_replay(models):
    """Target skips layer 2, which the drafter runs. At every step the accept length must equal what the
    drafter's own no-cache greedy chain from that context matches of the output. A drafter whose cache
    missed the accepted tokens in some layer would accept less while the output stayed right."""
    k, prompt, max_new = 3, [7, 8, 9, 7, 8], 30
    config = GenerationConfig(max_new_tokens=max_new, num_draft_tokens=k, stop_on_eos=False)
    result = speculative_generate(models[0], prompt, SelfSkipDrafter(models[0], skip_layers=(1,)), config, skip_layers=(1, 2))
    output = list(result.new_token_ids)
    reference, gaps = reference_greedy(models[0], prompt, (1, 2), max_new)
    assert output == reference and min(gaps) > 1e-4
    position, expected = 0, []
    while position < max_new:
        budget = min(k, max_new - position - 1)
        chain, _ = reference_greedy(models[0], prompt + output[:position], (1,), budget)
        matched = 0
        while matched < budget and chain[matched] == output[position + matched]:
            matched += 1
        expected.append(matched + 1)
        position += matched + 1
    assert list(result.accept_lengths) == expected
    assert result.mean_accept_length > 1.0  # the replay is not trivially all ones


def test_trimmed_vocabulary_drafts_only_kept_ids(models):
    vocab_ids = list(range(0, 259, 5))
    drafter = DraftModelDrafter(models[1], vocab_ids=vocab_ids)
    drafter.begin([1, 2, 3])
    proposal = drafter.propose(5)
    assert len(proposal.tokens) == 5 and set(proposal.tokens) <= set(vocab_ids)
    assert drafter.vocab_size == len(vocab_ids)


def test_eos_stops_generation(models):
    plain = speculative_generate(models[0], [1, 2], None, GenerationConfig(max_new_tokens=12, stop_on_eos=False))
    eos = plain.new_token_ids[5]
    first = plain.new_token_ids.index(eos)
    result = speculative_generate(models[0], [1, 2], PromptLookupDrafter(), GenerationConfig(max_new_tokens=12), eos_token_ids=[eos])
    assert result.new_token_ids == plain.new_token_ids[: first + 1]


def test_on_step_returning_true_ends_generation_after_that_step(models):
    prompt, config = [3, 4, 5, 3, 4, 5], GenerationConfig(max_new_tokens=16)
    full = speculative_generate(models[0], prompt, PromptLookupDrafter(), config)
    steps: list[list[int]] = []
    result = speculative_generate(models[0], prompt, PromptLookupDrafter(), config,
                                  on_step=lambda committed: steps.append(committed) or len(steps) == 3)
    assert len(steps) == result.target_forwards == 3
    assert result.new_token_ids == tuple(sum(steps, [])) == full.new_token_ids[: result.new_tokens]


def test_bad_inputs_fail_clearly(models):
    with pytest.raises(ValueError, match="empty prompt"):
        speculative_generate(models[0], [], None)
    with pytest.raises(ValueError, match="out of range"):
        speculative_generate(models[0], [1], None, skip_layers=(NUM_LAYERS,))
    with pytest.raises(ValueError, match="max_new_tokens"):
        GenerationConfig(max_new_tokens=0)
    with pytest.raises(ValueError, match="draft_length"):
        GenerationConfig(draft_length="auto")
    with pytest.raises(ValueError, match="verify_cost_per_token"):
        GenerationConfig(verify_cost_per_token=0)


def test_adaptive_draft_length_follows_acceptance_and_cost():
    """Fresh (p = 1/2): a few tokens at a moderate cost. Every draft accepted: the whole budget;
    every draft rejected: plain decoding, then (counts decaying) drafting again after a while."""
    policy = AdaptiveDraftLength(0.09)
    assert 0 < policy.length(8) < 8
    assert AdaptiveDraftLength(2.0).length(8) == 0  # verifying costs too much to draft at all
    for _ in range(20):
        policy.update(drafted=8, accepted=8)
    assert policy.length(8) == 8
    rejected = 0
    while policy.length(8) > 0:
        policy.update(drafted=policy.length(8), accepted=0)
        rejected += 1
    assert 0 < rejected < 100
    waited = 0
    while policy.length(8) == 0:
        policy.update(drafted=0, accepted=0)
        waited += 1
    assert 0 < waited < 100


def test_adaptive_drafting_shortens_rejected_drafts(models):
    """The same output as fixed-length drafting with fewer verified tokens when drafts fail."""
    prompt = [3, 1, 4, 1, 5, 9, 2, 6] * 2
    fixed = GenerationConfig(max_new_tokens=24, num_draft_tokens=6, stop_on_eos=False)
    adaptive = GenerationConfig(max_new_tokens=24, num_draft_tokens=6, stop_on_eos=False, draft_length="adaptive",
                                verify_cost_per_token=0.3)
    a = speculative_generate(models[0], prompt, PromptLookupDrafter(), fixed)
    b = speculative_generate(models[0], prompt, PromptLookupDrafter(), adaptive)
    assert a.new_token_ids == b.new_token_ids
    assert sum(b.verified_lengths) < sum(a.verified_lengths)


def exact_two_token_distribution(model, prompt, temperature):
    """p(t1, t2 | prompt) for every pair, from full forwards: [V, V]."""
    with torch.inference_mode():
        first = torch.softmax(model(input_ids=torch.tensor([prompt])).logits[0, -1] / temperature, -1)
        vocab = first.shape[0]
        batch = torch.tensor([prompt + [t] for t in range(vocab)])
        second = torch.softmax(model(input_ids=batch).logits[:, -1] / temperature, -1)
    return first[:, None] * second


@pytest.mark.parametrize("drafter_kind", ["draft_model", "pld"])
def test_sampling_follows_the_target_distribution(drafter_kind):
    """Chi-square goodness of fit of 2-token samples against the exact target distribution."""
    vocab, temperature, trials = 6, 1.0, 2500
    target = tiny_model(num_layers=2, hidden_size=32, vocab_size=vocab, seed=11, initializer_range=0.5).model
    draft = tiny_model(num_layers=1, hidden_size=32, vocab_size=vocab, seed=12, initializer_range=0.5).model
    prompt = [1, 2, 1, 2]
    expected = exact_two_token_distribution(target, prompt, temperature).flatten()
    counts = torch.zeros(vocab * vocab)
    for seed in range(trials):
        drafter = (
            DraftModelDrafter(draft, temperature=temperature, seed=seed + 10_000)
            if drafter_kind == "draft_model"
            else PromptLookupDrafter(max_ngram_size=2)
        )
        config = GenerationConfig(max_new_tokens=2, num_draft_tokens=2, temperature=temperature, seed=seed, stop_on_eos=False)
        out = speculative_generate(target, prompt, drafter, config).new_token_ids
        counts[out[0] * vocab + out[1]] += 1
    mask = expected * trials >= 5  # pool rare cells (chi-square validity)
    observed = torch.cat([counts[mask], counts[~mask].sum().reshape(1)])
    exp = torch.cat([expected[mask] * trials, (expected[~mask].sum() * trials).reshape(1)])
    chi2 = float(((observed - exp) ** 2 / exp.clamp_min(1e-9)).sum())
    dof = len(observed) - 1
    # Wilson-Hilferty: chi2 quantile at p = 0.9995
    z = 3.29
    critical = dof * (1 - 2 / (9 * dof) + z * math.sqrt(2 / (9 * dof))) ** 3
    assert chi2 < critical, f"chi2={chi2:.1f} over dof={dof} (critical {critical:.1f}): samples do not follow the target"


# -- tree drafts -------------------------------------------------------------------------------------
trees = st.integers(1, 9).flatmap(lambda n: st.tuples(
    st.lists(st.integers(0, 50), min_size=n, max_size=n),
    st.tuples(*[st.integers(-1, i - 1) for i in range(n)]),
))


@settings(max_examples=30, deadline=None)
@given(tree=trees, skip=skip_sets(NUM_LAYERS), prompt=prompts)
def test_a_tree_forward_equals_each_branch_run_as_a_chain(models, tree, skip, prompt):
    """Tree attention: every node's logits equal those of its root-to-node path run as a chain; and
    after keeping one path, the cache continues exactly as if only that path had been run."""
    target = models[0]
    tokens, parents = tree
    with torch.inference_mode():
        session = ModelSession(target, skip)
        session.prefill(prompt[:-1])
        start = session.length
        inputs = [prompt[-1], *tokens]
        input_parents = (-1, *(p + 1 for p in parents))
        logits = session.forward(inputs, input_parents)
        paths = []
        for node in range(len(inputs)):
            path = [node]
            while input_parents[path[-1]] >= 0:
                path.append(input_parents[path[-1]])
            paths.append(path[::-1])
            chain = ModelSession(target, skip)
            chain.prefill(prompt[:-1])
            expected = chain.forward([inputs[i] for i in paths[-1]])[-1]
            torch.testing.assert_close(logits[node], expected, rtol=1e-4, atol=1e-4)
        deepest = max(paths, key=len)
        session.keep(start, deepest)
        chain = ModelSession(target, skip)
        chain.prefill(prompt[:-1] + [inputs[i] for i in deepest])
        torch.testing.assert_close(session.forward([7]), chain.forward([7]), rtol=1e-4, atol=1e-4)


def test_greedy_acceptance_follows_the_predicted_branch():
    # tree: 0:a(root) 1:b(root) 2:c(after a) 3:d(after b) 4:e(after d)
    draft, parents = [10, 11, 12, 13, 14], (-1, -1, 0, 1, 3)
    # inputs: [last, a, b, c, d, e]; the target predicts b after last, d after b, e after d, 99 after e
    predicted = [11, 0, 13, 0, 14, 99]
    assert greedy_accept(draft, predicted, parents) == ([11, 13, 14, 99], [0, 2, 4, 5])
    assert greedy_accept(draft, [12] + [0] * 5, parents) == ([12], [0])
    assert greedy_accept([10, 11], [10, 11, 5]) == ([10, 11, 5], [0, 1, 2])  # a chain


def test_tree_proposals_trim_by_depth_and_merge_shared_prefixes():
    tree = tree_from_branches([[1, 2, 3], [1, 2, 4], [5]])
    assert (tree.tokens, tree.parents) == ([1, 2, 3, 4, 5], (-1, 0, 1, 1, -1))
    assert tree.depths() == [1, 2, 3, 3, 1]
    assert (tree.within(2).tokens, tree.within(2).parents) == ([1, 2, 5], (-1, 0, -1))
    assert tree_from_branches([[1, 2], [1, 2]]).parents is None  # one path is a chain


class FixedTreeDrafter(PromptLookupDrafter):
    """Always the same two-branch tree."""

    def propose(self, k):
        return tree_from_branches([[1, 2, 3][:k], [4, 5][:k]])


def test_tree_drafts_need_greedy_decoding(models):
    config = GenerationConfig(max_new_tokens=12, num_draft_tokens=3, stop_on_eos=False)
    prompt = [3, 1, 4, 1, 5]
    greedy = speculative_generate(models[0], prompt, FixedTreeDrafter(), config)
    assert greedy.new_token_ids == speculative_generate(models[0], prompt, None, config).new_token_ids
    assert greedy.verified_lengths[0] == 6  # 5 tree tokens and the last committed one (fewer near the budget)
    with pytest.raises(ValueError, match="temperature 0"):
        speculative_generate(models[0], prompt, FixedTreeDrafter(), replace(config, temperature=0.8))


def test_a_tree_verifies_more_inputs_and_keeps_the_output(models):
    """Token Recycling with a static tree accepts at least as much per step as its top-1 chain on a
    repetitive prompt, and both give the target's greedy output."""
    target, vocab = models[0], models[0].config.vocab_size
    prompt = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5] * 3
    config = GenerationConfig(max_new_tokens=30, num_draft_tokens=4, stop_on_eos=False)
    chain = speculative_generate(target, prompt, TokenRecyclingDrafter(vocab), config)
    tree = speculative_generate(target, prompt, TokenRecyclingDrafter(vocab, tree=(4, 2)), config)
    assert tree.new_token_ids == chain.new_token_ids
    assert max(tree.verified_lengths) > max(chain.verified_lengths)
    assert tree.mean_accept_length >= chain.mean_accept_length
