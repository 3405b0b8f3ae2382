"""The fast forward path (specsparse/decoding/forward_path.py) computes what eager computes, up to float
rounding, through every way the model is run: chains, token trees, skip sets (layer 0 included),
batched rows with their own skip sets, and trimmed heads. The lossless-decoding invariants themselves
run on the fast path (the shared fixtures are on it); these tests hold the two paths side by side."""

import pytest
import torch
from conftest import NUM_LAYERS, skip_sets
from hypothesis import given, settings
from hypothesis import strategies as st

from specsparse.decoding.batched.session import BatchedSession
from specsparse.decoding.engine import speculative_generate
from specsparse.decoding.forward_path import (
    ForwardPathError,
    PrepackedLinear,
    forward_path_of,
    head_rows,
    lm_head,
    release_file_pages,
    resolve_forward_path,
    use_forward_path,
)
from specsparse.decoding.models import load_model, tiny_model
from specsparse.decoding.session import ModelSession
from specsparse.drafters import PromptLookupDrafter, SelfSkipDrafter
from specsparse.types import GenerationConfig

TOLERANCE = {"rtol": 1e-4, "atol": 1e-4}  # float32 summation order


@pytest.fixture(scope="module")
def pair():
    """The same tiny Llama twice: eager, and on the fast path."""
    eager, fast = (tiny_model(num_layers=NUM_LAYERS, hidden_size=64, seed=5).model for _ in range(2))
    use_forward_path(fast, "fast")
    return eager, fast


@settings(max_examples=40, deadline=None)
@given(out_features=st.integers(1, 300), in_features=st.integers(1, 200), rows=st.integers(0, 20),
       bias=st.booleans(), seed=st.integers(0, 2**16))
def test_a_prepacked_linear_equals_f_linear(out_features, in_features, rows, bias, seed):
    generator = torch.Generator().manual_seed(seed)
    weight = torch.randn(out_features, in_features, generator=generator)
    b = torch.randn(out_features, generator=generator) if bias else None
    x = torch.randn(rows, in_features, generator=generator)
    packed = PrepackedLinear(weight, b)
    torch.testing.assert_close(packed(x), torch.nn.functional.linear(x, weight, b), **TOLERANCE)
    assert torch.equal(packed.weight.to_dense(), weight)  # the packing loses nothing
    assert sum(p.numel() for p in packed.parameters()) == weight.numel() + (out_features if bias else 0)


@settings(max_examples=25, deadline=None)
@given(skip=skip_sets(NUM_LAYERS), prompt=st.lists(st.integers(0, 250), min_size=1, max_size=20),
       chunks=st.lists(st.lists(st.integers(0, 250), min_size=1, max_size=8), min_size=1, max_size=4))
def test_fast_sessions_give_eagers_logits_chunk_by_chunk(pair, skip, prompt, chunks):
    """Chunks of any length after a cached context, under any skip set (layer 0 included)."""
    sessions = [ModelSession(model, skip) for model in pair]
    with torch.inference_mode():
        for session in sessions:
            session.prefill(prompt)
        for chunk in chunks:
            eager, fast = (session.forward(chunk) for session in sessions)
            torch.testing.assert_close(fast, eager, **TOLERANCE)


@settings(max_examples=15, deadline=None)
@given(skip=skip_sets(NUM_LAYERS), parents=st.sampled_from([(-1, 0, 0, 1), (-1, 0, 1, 1, 0), (-1, 0, 0, 0)]))
def test_fast_tree_forwards_give_eagers_logits(pair, skip, parents):
    sessions = [ModelSession(model, skip) for model in pair]
    tokens = [11 + 3 * i for i in range(len(parents))]
    with torch.inference_mode():
        eager, fast = (session.prefill(list(range(40, 60))) or session.forward(tokens, parents) for session in sessions)
    torch.testing.assert_close(fast, eager, **TOLERANCE)


@settings(max_examples=15, deadline=None)
@given(skips=st.lists(skip_sets(NUM_LAYERS), min_size=1, max_size=3),
       contexts=st.lists(st.lists(st.integers(0, 250), min_size=1, max_size=12), min_size=1, max_size=4),
       chunk_lengths=st.lists(st.integers(0, 6), min_size=4, max_size=4))
def test_fast_batched_rows_give_eagers_logits(pair, skips, contexts, chunk_lengths):
    """Rows with their own skip sets and chunk lengths (shared layers, linear maps on token positions)."""
    chunk_lengths = [max(1, chunk_lengths[0]), *chunk_lengths[1:]]

    def run(model):
        with torch.inference_mode():
            session = BatchedSession(model, (), len(contexts), 64)
            for row, context in enumerate(contexts):
                session.reset_row(row, skips[row % len(skips)])
                session.prefill({row: context})
            return session.forward({row: [(5 * row + i) % 250 for i in range(chunk_lengths[row])]
                                    for row in range(len(contexts)) if chunk_lengths[row]})

    eager, fast = (run(model) for model in pair)
    assert eager.keys() == fast.keys()
    for row in eager:
        torch.testing.assert_close(fast[row], eager[row], **TOLERANCE)


def test_trimmed_heads_run_on_the_models_path_and_are_built_once(pair):
    eager, fast = pair
    ids = torch.tensor([3, 17, 42, 200])
    hidden = torch.randn(3, 64)
    head = head_rows(fast.get_output_embeddings(), ids, fast=True)
    assert isinstance(head, PrepackedLinear)
    assert head_rows(fast.get_output_embeddings(), ids.clone(), fast=True) is head
    expected = torch.nn.functional.linear(hidden, eager.get_output_embeddings().weight[ids])
    torch.testing.assert_close(head(hidden), expected, **TOLERANCE)
    torch.testing.assert_close(lm_head(fast)(hidden), lm_head(eager)(hidden), **TOLERANCE)


def test_an_lm_head_bias_is_kept_on_the_fast_path():
    """A head with a bias (the tiny model has none): the packed head, and a trimmed head's rows, add it."""
    eager, fast = (tiny_model(num_layers=NUM_LAYERS, hidden_size=64, seed=5).model for _ in range(2))
    bias = torch.randn(eager.config.vocab_size, generator=torch.Generator().manual_seed(0)) * 4
    for model in (eager, fast):
        head = model.get_output_embeddings()
        with_bias = torch.nn.Linear(head.in_features, head.out_features, bias=True)
        with_bias.weight, with_bias.bias = head.weight, torch.nn.Parameter(bias.clone())
        model.set_output_embeddings(with_bias)
    use_forward_path(fast, "fast")
    hidden = torch.randn(3, 64)
    torch.testing.assert_close(lm_head(fast)(hidden), lm_head(eager)(hidden), **TOLERANCE)
    ids = torch.tensor([3, 17, 42, 200])
    expected = torch.nn.functional.linear(hidden, eager.lm_head.weight[ids], bias[ids])
    for model, path in ((fast, True), (eager, False)):
        torch.testing.assert_close(head_rows(model.get_output_embeddings(), ids, fast=path)(hidden), expected, **TOLERANCE)
    config = GenerationConfig(max_new_tokens=12, num_draft_tokens=3, stop_on_eos=False)
    replies = [speculative_generate(model, [5, 9, 33, 7], PromptLookupDrafter(), config).new_token_ids
               for model in (eager, fast)]
    assert replies[0] == replies[1]


def test_decoding_never_packs_weights_again(models, monkeypatch):
    """Weights are packed once, when the model loads (and a trimmed head when it is first built): a
    decode step, a drafter's step, a verification forward pack nothing."""
    target = models[0]
    config = GenerationConfig(max_new_tokens=24, num_draft_tokens=4, stop_on_eos=False)
    drafters = [lambda: PromptLookupDrafter(), lambda: SelfSkipDrafter(target, (1, 2), vocab_ids=range(0, 259, 2))]
    for make in drafters:  # first builds: a trimmed head packs here
        make()
    packed = []
    pack = torch.ops.mkldnn._reorder_linear_weight
    monkeypatch.setattr(torch.ops.mkldnn, "_reorder_linear_weight", lambda *a, **k: packed.append(1) or pack(*a, **k))
    prompt = list(range(30, 60)) * 2
    for make in drafters:
        speculative_generate(target, prompt, make(), config, skip_layers=(0,))
    speculative_generate(target, prompt, None, config)
    assert packed == []


def test_speculation_on_the_fast_path_equals_its_own_greedy_output(models):
    """Chains and trees, a sparse target, on the fast path: the output is the fast target's greedy output."""
    target = models[0]
    config = GenerationConfig(max_new_tokens=40, num_draft_tokens=5, stop_on_eos=False)
    prompt = [7, 8, 9, 10] * 6
    for skip in ((), (0,), (1, 3)):
        plain = speculative_generate(target, prompt, None, config, skip).new_token_ids
        for drafter in (PromptLookupDrafter(), PromptLookupDrafter(branches=3), SelfSkipDrafter(target, (2,))):
            assert speculative_generate(target, prompt, drafter, config, skip).new_token_ids == plain


def test_the_forward_path_resolves_per_device_and_dtype(monkeypatch):
    assert resolve_forward_path("auto", "cpu", "float32") == "fast"
    assert resolve_forward_path("auto", "cpu", "float16") == "eager"
    assert resolve_forward_path("auto", "cuda:0", "float32") == "eager"
    assert resolve_forward_path("eager", "cpu", "float32") == "eager"
    for path, device, dtype, named in (("fast", "cuda", "float32", "device 'cuda'"),
                                       ("fast", "cpu", "float16", "dtype float16"),
                                       ("compiled", "cpu", "float32", "compiled")):
        with pytest.raises(ForwardPathError, match=named):
            resolve_forward_path(path, device, dtype)
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: False)
    assert resolve_forward_path("auto", "cpu", "bfloat16") == "eager"
    with pytest.raises(ForwardPathError, match="dtype bfloat16 on this CPU, which has no bfloat16 instructions"):
        resolve_forward_path("fast", "cpu", "bfloat16")
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: True)
    assert resolve_forward_path("auto", "cpu", "bfloat16") == "fast"


def test_load_model_puts_the_model_on_the_path_it_names():
    assert load_model("tiny").forward_path == "fast"
    assert load_model("tiny", forward_path="eager").forward_path == "eager"
    assert forward_path_of(load_model("tiny", dtype="float16").model) == "eager"


def test_packing_a_mapped_checkpoint_releases_its_pages_and_keeps_every_value(tmp_path):
    """A checkpoint on disk is memory-mapped: the fast path packs it and drops the file pages of what it
    packed. Weights still read afterwards (the tied embedding) fault back in unchanged, so the fast
    model still gives eager's logits; memory that is not file-backed is never touched."""
    saved = tiny_model(num_layers=NUM_LAYERS, hidden_size=256, seed=3)
    saved.model.save_pretrained(tmp_path)
    saved.tokenizer.save_pretrained(tmp_path)
    eager, fast = (load_model(str(tmp_path), forward_path=path).model for path in ("eager", "fast"))
    embedding = eager.get_input_embeddings().weight
    before = embedding.detach().clone()
    assert release_file_pages([embedding]) > 0  # mapped from the file
    assert torch.equal(embedding, before)  # read back from the file, unchanged
    ids = torch.randint(0, eager.config.vocab_size, (1, 12))
    with torch.no_grad():
        torch.testing.assert_close(fast(ids).logits, eager(ids).logits, **TOLERANCE)
    anonymous = torch.randn(64, 1024)
    kept = anonymous.clone()
    assert release_file_pages([anonymous]) == 0 and torch.equal(anonymous, kept)
