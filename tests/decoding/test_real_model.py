"""The embedded SmolLM2-135M (float32): where skipping, chat templates and acceptance really break."""

import pytest
import torch
from conftest import physically_removed

from specsparse.data import build_messages, get_domain, load_examples
from specsparse.decoding.engine import speculative_generate
from specsparse.decoding.generation import encode_messages
from specsparse.decoding.session import ModelSession
from specsparse.drafters import PromptLookupDrafter, SelfSkipDrafter, SuffixAutomatonDrafter
from specsparse.types import GenerationConfig


@pytest.fixture(scope="module")
def summarization_prompts(smollm):
    domain = get_domain("summarization")
    return [encode_messages(smollm.tokenizer, build_messages(domain, ex, 0)) for ex in load_examples("summarization", limit=2)]


def test_chat_template_is_applied(smollm, summarization_prompts):
    text = smollm.tokenizer.decode(summarization_prompts[0])
    assert text.startswith("<|im_start|>") and text.rstrip().endswith("<|im_start|>assistant")


@pytest.mark.parametrize("skip", [(0,), (29,), (0, 7, 15, 29)])
def test_skip_equals_physical_removal_on_the_real_model(smollm, summarization_prompts, skip):
    ids = summarization_prompts[0][:48]
    pruned = physically_removed(smollm.model, skip)
    with torch.inference_mode():
        expected = pruned(input_ids=torch.tensor([ids]), use_cache=False).logits[0]
        session = ModelSession(smollm.model, skip)
        ours = torch.cat([session.forward(ids[:40]), session.forward(ids[40:])])
    # logits ~ 1e1, 30 layers: float32 noise (the lean step's kernels sum in another order than HF's modules)
    torch.testing.assert_close(ours, expected, rtol=1e-4, atol=2e-3)


def test_drafters_are_lossless_and_accept_on_the_real_model(smollm, summarization_prompts):
    config = GenerationConfig(max_new_tokens=40, num_draft_tokens=5)
    vocab = smollm.model.config.vocab_size
    drafters = {
        "pld": lambda: PromptLookupDrafter(),
        "samd": lambda: SuffixAutomatonDrafter.from_target(smollm),
        "self_skip": lambda: SelfSkipDrafter(smollm.model, skip_layers=range(10, 20)),
    }
    accepts = {}
    for ids in summarization_prompts:
        dense = speculative_generate(smollm.model, ids, None, config, eos_token_ids=smollm.eos_token_ids)
        assert dense.mean_accept_length == 1.0
        for name, make in drafters.items():
            result = speculative_generate(smollm.model, ids, make(), config, eos_token_ids=smollm.eos_token_ids)
            assert result.new_token_ids == dense.new_token_ids, name
            accepts.setdefault(name, []).extend(result.accept_lengths)
    mean = {name: sum(a) / len(a) for name, a in accepts.items()}
    # Summaries copy phrases from the article: lookup drafters must get accepted often.
    assert mean["pld"] > 1.3 and mean["samd"] > 1.3, mean
    assert mean["self_skip"] > 1.05, mean
    assert vocab == 49152


def test_sparse_target_stays_lossless_with_a_drafter(smollm, summarization_prompts):
    skip = (8, 12, 16, 20)
    config = GenerationConfig(max_new_tokens=32, num_draft_tokens=4)
    ids = summarization_prompts[1]
    sparse = speculative_generate(smollm.model, ids, None, config, skip, smollm.eos_token_ids)
    with_drafter = speculative_generate(smollm.model, ids, SuffixAutomatonDrafter.from_target(smollm), config, skip, smollm.eos_token_ids)
    assert with_drafter.new_token_ids == sparse.new_token_ids


@pytest.mark.parametrize("skip", [(), (0, 7, 15, 29)])
def test_tree_drafts_are_lossless_on_the_real_model(smollm, summarization_prompts, skip):
    """SmolLM2 fp32: lookup trees, and SAM-Decoding with a Token Recycling tree, commit the target's
    own greedy output, dense and with layer 0 skipped."""
    config = GenerationConfig(max_new_tokens=24, num_draft_tokens=4)
    ids = summarization_prompts[0]
    plain = speculative_generate(smollm.model, ids, None, config, skip, smollm.eos_token_ids)
    for make in (lambda: PromptLookupDrafter(branches=3),
                 lambda: SuffixAutomatonDrafter.from_target(smollm, recycling_tree=[3, 2])):
        tree = speculative_generate(smollm.model, ids, make(), config, skip, smollm.eos_token_ids)
        assert tree.new_token_ids == plain.new_token_ids
        assert sum(tree.accept_lengths) == tree.new_tokens
