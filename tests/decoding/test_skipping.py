"""Skipping layers on the full model equals physically removing them (re-indexed)."""


import pytest
import torch
from conftest import physically_removed, skip_sets
from hypothesis import given, settings
from hypothesis import strategies as st

from specsparse.decoding.forward_path import use_forward_path
from specsparse.decoding.models import tiny_model
from specsparse.decoding.session import ModelSession
from specsparse.decoding.skipping import SkipSetError, validate_skip_layers

NUM_LAYERS = 5


@pytest.fixture(scope="module")
def model():
    model = tiny_model(num_layers=NUM_LAYERS, hidden_size=64, seed=3).model
    use_forward_path(model, "fast")  # the CPU default
    return model


def run_chunks(model, skip, token_ids, chunks):
    """Logits [len, vocab] from feeding `token_ids` in the given chunk sizes through a cached session."""
    session = ModelSession(model, skip)
    out, start = [], 0
    with torch.inference_mode():
        for size in chunks:
            out.append(session.forward(token_ids[start : start + size]))
            start += size
    return torch.cat(out)


def tokens_and_chunks(data, vocab, min_size, max_size, max_cuts):
    """A token sequence and chunk sizes splitting it (prefill, then multi-token chunks)."""
    tokens = data.draw(st.lists(st.integers(0, vocab - 1), min_size=min_size, max_size=max_size))
    cuts = sorted(data.draw(st.sets(st.integers(1, len(tokens) - 1), max_size=max_cuts)))
    return tokens, [b - a for a, b in zip([0, *cuts], [*cuts, len(tokens)])]


def no_cache_logits(model, tokens):
    with torch.inference_mode():
        return model(input_ids=torch.tensor([tokens]), use_cache=False).logits[0]


@settings(max_examples=25, deadline=None)
@given(skip=skip_sets(NUM_LAYERS), data=st.data())
def test_skip_equals_physical_removal(model, skip, data):
    tokens, chunks = tokens_and_chunks(data, 256, 2, 24, 4)
    pruned = physically_removed(model, skip)
    no_cache = no_cache_logits(pruned, tokens)
    ours = run_chunks(model, skip, tokens, chunks)  # prefill + multi-token chunks through the cache
    reference = run_chunks(pruned, (), tokens, chunks)
    torch.testing.assert_close(ours, reference, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours, no_cache, rtol=1e-4, atol=1e-4)


def test_empty_skip_set_is_dense_bit_for_bit(model):
    """On PyTorch calls the lean step runs HF's own operations: bit for bit; on its native kernels (another
    summation order), within float32 rounding."""
    tokens = list(range(10, 30))
    on_calls = ModelSession(model, ())
    on_calls.lean = on_calls.lean.on_pytorch_calls()
    with torch.inference_mode():
        hf = model(input_ids=torch.tensor([tokens])).logits[0]
        assert torch.equal(on_calls.forward(tokens), hf)
    torch.testing.assert_close(run_chunks(model, (), tokens, [len(tokens)]), hf, rtol=1e-5, atol=1e-5)


def test_skipping_layer_zero_keeps_positions(model):
    """With layer 0 skipped, the cache length must come from a kept layer (HF reads layer 0)."""
    session = ModelSession(model, (0,))
    with torch.inference_mode():
        session.forward([1, 2, 3, 4])
        assert session.cache.get_seq_length() == 4
        assert session.cache.get_mask_sizes(2, 0) == (6, 0)


def test_model_is_restored_after_skipping(model):
    before = list(model.model.layers)
    run_chunks(model, (0, 2), [5, 6, 7], [3])
    assert list(model.model.layers) == before


@pytest.mark.parametrize(
    "skip, message",
    [((5,), "out of range"), ((-1,), "out of range"), ((1, 1), "more than once"), (tuple(range(5)), "all 5 layers")],
)
def test_bad_skip_sets_fail_clearly(skip, message):
    with pytest.raises(SkipSetError, match=message):
        validate_skip_layers(skip, NUM_LAYERS)


@pytest.fixture(scope="module")
def gemma_like():
    """A tiny random Gemma 3 text model: sliding-window and full layers, picked by position in
    config.layer_types, and a window shorter than the sequences below."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    config = Gemma3TextConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, sliding_window=4, max_position_embeddings=256,
        layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
        initializer_range=0.3,
    )
    torch.manual_seed(0)
    model = Gemma3ForCausalLM(config).eval()
    use_forward_path(model, "fast")
    return model


@settings(max_examples=15, deadline=None)
@given(skip=skip_sets(4), data=st.data())
def test_skip_equals_physical_removal_with_sliding_window_layers(gemma_like, skip, data):
    tokens, chunks = tokens_and_chunks(data, 64, 8, 20, 3)
    no_cache = no_cache_logits(physically_removed(gemma_like, skip), tokens)
    torch.testing.assert_close(run_chunks(gemma_like, skip, tokens, chunks), no_cache, rtol=1e-4, atol=1e-4)


def test_speculative_decoding_is_lossless_with_sliding_window_layers(gemma_like):
    from specsparse.decoding.engine import speculative_generate
    from specsparse.drafters import PromptLookupDrafter
    from specsparse.types import GenerationConfig

    prompt = [3, 4, 5, 6, 3, 4, 5, 6, 3, 4]
    for skip in [(), (0,), (1, 2)]:
        config = GenerationConfig(max_new_tokens=20, num_draft_tokens=4, stop_on_eos=False)
        plain = speculative_generate(gemma_like, prompt, None, config, skip)
        drafted = speculative_generate(gemma_like, prompt, PromptLookupDrafter(), config, skip)
        assert drafted.new_token_ids == plain.new_token_ids
        tokens = list(prompt)
        with torch.inference_mode():
            for _ in range(20):  # no-cache reference on the physically pruned model
                logits = physically_removed(gemma_like, skip)(input_ids=torch.tensor([tokens]), use_cache=False).logits
                tokens.append(int(logits[0, -1].argmax()))
        assert list(plain.new_token_ids) == tokens[len(prompt):]


def test_batched_rows_equal_the_engine_with_sliding_window_layers(gemma_like):
    """Lockstep rows of different prompt lengths and skip sets (chunks of 1 to 5 tokens, padded and
    packed) on a model whose layers attend through a sliding window: each row equals the engine."""
    from specsparse.decoding.batched import generate_batch
    from specsparse.decoding.engine import speculative_generate
    from specsparse.drafters import PromptLookupDrafter
    from specsparse.types import GenerationConfig

    prompts = [[3, 4, 5, 6, 3, 4, 5, 6, 3, 4], [7, 8], [9, 10, 11, 9, 10, 11, 9, 10, 11, 9, 10, 11, 9], [12, 13, 14]]
    skips = [(), (0,), (1, 2), (3,)]
    config = GenerationConfig(max_new_tokens=16, num_draft_tokens=4, stop_on_eos=False)
    batched = generate_batch(gemma_like, prompts, [PromptLookupDrafter() for _ in prompts], config, skips, batch_size=4)
    for prompt, skip, result in zip(prompts, skips, batched):
        alone = speculative_generate(gemma_like, prompt, PromptLookupDrafter(), config, skip)
        assert result.new_token_ids == alone.new_token_ids
        assert result.accept_lengths == alone.accept_lengths
