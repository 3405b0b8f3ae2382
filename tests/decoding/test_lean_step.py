"""The lean decode step (specsparse/decoding/lean_step.py) computes what HF's modules compute, for every
decoder family it takes (Llama, Qwen2 with q/k/v biases, Qwen3 with q/k norms, Mistral), through every
way a session runs: chunks after a cached context, token trees, skip sets (layer 0 included) and
feature capture. Models it does not take (Gemma 3) run HF's modules on the same packed weights."""

import copy

import pytest
import torch
from conftest import HAS_COMPILER, NEEDS_COMPILER, NUM_LAYERS, skip_sets
from hypothesis import given, settings
from hypothesis import strategies as st

from specsparse.decoding.batched.session import BatchedSession
from specsparse.decoding.engine import speculative_generate
from specsparse.decoding.forward_path import FusedPart, FusedProjection, use_forward_path
from specsparse.decoding.lean_step import lean_step_of
from specsparse.decoding.session import ModelSession
from specsparse.decoding.skipping import FINAL_HIDDEN
from specsparse.drafters import PromptLookupDrafter
from specsparse.types import GenerationConfig

TOLERANCE = {"rtol": 1e-4, "atol": 1e-4}  # float32 summation order
VOCAB = 200


def _family(name: str) -> torch.nn.Module:
    import transformers

    shape = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=NUM_LAYERS,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, initializer_range=0.2,
                 tie_word_embeddings=name == "qwen3")
    config, model_class = {
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
        "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM),
        "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
    }[name]
    extra = {"sliding_window": None} if name == "mistral" else {"head_dim": 16} if name == "qwen3" else {}
    torch.manual_seed(3)
    return model_class(config(**shape, **extra)).eval()


FAMILIES = ("llama", "qwen2", "qwen3", "mistral")


@pytest.fixture(scope="module", params=FAMILIES)
def family(request):
    """(eager model, the same weights on the fast path with its lean step)."""
    eager = _family(request.param)
    fast = copy.deepcopy(eager)
    use_forward_path(fast, "fast")
    assert lean_step_of(fast) is not None, f"{request.param} has no lean step"
    return eager, fast


def test_qwen2_biases_are_fused_and_kept(family):
    eager, fast = family
    bias = eager.model.layers[0].self_attn.q_proj.bias
    fused = fast.model.layers[0].self_attn.q_proj
    assert isinstance(fused, FusedPart)
    assert (fused.bias is not None) == (bias is not None)


@settings(max_examples=20, deadline=None)
@given(skip=skip_sets(NUM_LAYERS), prompt=st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=20),
       chunks=st.lists(st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=8), min_size=1, max_size=4))
def test_lean_sessions_give_eagers_logits_chunk_by_chunk(family, skip, prompt, chunks):
    sessions = [ModelSession(model, skip) for model in family]
    assert sessions[0].lean is None and sessions[1].lean is not None
    with torch.inference_mode():
        for session in sessions:
            session.prefill(prompt)
        for chunk in chunks:
            eager, lean = (session.forward(chunk) for session in sessions)
            torch.testing.assert_close(lean, eager, **TOLERANCE)
        for session in sessions:  # and after a rollback into the context
            session.rollback(max(len(prompt) - 2, 0))
        eager, lean = (session.forward(chunks[0]) for session in sessions)
        torch.testing.assert_close(lean, eager, **TOLERANCE)


@settings(max_examples=10, deadline=None)
@given(skip=skip_sets(NUM_LAYERS), parents=st.sampled_from([(-1, 0, 0, 1), (-1, 0, 1, 1, 0), (-1, 0, 0, 0)]))
def test_lean_tree_forwards_give_eagers_logits(family, skip, parents):
    tokens = [11 + 3 * i for i in range(len(parents))]
    sessions = [ModelSession(model, skip) for model in family]
    with torch.inference_mode():
        eager, lean = (session.prefill(list(range(40, 60))) or session.forward(tokens, parents) for session in sessions)
    torch.testing.assert_close(lean, eager, **TOLERANCE)


@settings(max_examples=10, deadline=None)
@given(skip=skip_sets(NUM_LAYERS),
       features=st.lists(st.sampled_from([0, 1, 2, NUM_LAYERS - 1, FINAL_HIDDEN]), min_size=1, max_size=3, unique=True))
def test_lean_feature_capture_records_what_hfs_modules_record(family, skip, features):
    """The residual stream entering each feature layer (the first kept one at or after it)."""
    _, fast = family
    lean, modules = ModelSession(fast, skip, features), ModelSession(fast, skip, features)
    modules.lean = None  # HF's modules on the same packed weights
    with torch.inference_mode():
        for session in (lean, modules):
            session.prefill(list(range(30, 45)))
            session.forward([7, 8, 9])
    torch.testing.assert_close(lean.features, modules.features, **TOLERANCE)


def test_the_lean_step_runs_no_hf_decoder_module(family, monkeypatch):
    _, fast = family

    def refuse(*args, **kwargs):
        raise AssertionError("HF's decoder ran")

    monkeypatch.setattr(type(fast.model), "forward", refuse)
    monkeypatch.setattr(type(fast.model.layers[0]), "forward", refuse)
    with torch.inference_mode():
        session = ModelSession(fast, (0,))
        session.prefill([1, 2, 3])
        assert session.forward([4, 5]).shape == (2, VOCAB)


def test_speculation_on_the_lean_step_equals_its_own_greedy_output(family):
    _, fast = family
    prompt = [5, 6, 7, 5, 6, 7, 5, 6]
    config = GenerationConfig(max_new_tokens=24, num_draft_tokens=4, stop_on_eos=False)
    for skip in ((), (0,), (1, 2)):
        plain = speculative_generate(fast, prompt, None, config, skip).new_token_ids
        assert speculative_generate(fast, prompt, PromptLookupDrafter(), config, skip).new_token_ids == plain


def test_a_copy_or_a_model_with_other_layers_gets_its_own_lean_step(family):
    _, fast = family
    twin = copy.deepcopy(fast)
    assert lean_step_of(twin) is not lean_step_of(fast)
    twin.model.layers = torch.nn.ModuleList(list(twin.model.layers)[:2])
    assert len(lean_step_of(twin).layers) == 2
    with torch.inference_mode():
        torch.testing.assert_close(ModelSession(twin, ()).forward([3, 4]), ModelSession(fast, (2, 3)).forward([3, 4]),
                                   **TOLERANCE)


def test_gemma3_runs_hfs_modules_on_fused_packed_weights():
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(0)
    config = Gemma3TextConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=NUM_LAYERS,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=16, sliding_window=4,
                              layer_types=["sliding_attention", "full_attention"] * (NUM_LAYERS // 2))
    eager = Gemma3ForCausalLM(config).eval()
    fast = copy.deepcopy(eager)
    use_forward_path(fast, "fast")
    assert lean_step_of(fast) is None
    assert isinstance(fast.model.layers[0].mlp.gate_proj, FusedPart)
    with torch.inference_mode():
        eager_logits, fast_logits = (ModelSession(m, (0,)).forward(list(range(10, 22))) for m in (eager, fast))
    torch.testing.assert_close(fast_logits, eager_logits, **TOLERANCE)


@settings(max_examples=30, deadline=None)
@given(sizes=st.lists(st.integers(1, 40), min_size=1, max_size=3), rows=st.integers(1, 9), bias=st.booleans(),
       seed=st.integers(0, 2**16))
def test_a_fused_projection_gives_each_maps_own_product(sizes, rows, bias, seed):
    generator = torch.Generator().manual_seed(seed)
    linears = []
    for size in sizes:
        linear = torch.nn.Linear(24, size, bias=bias)
        torch.nn.init.normal_(linear.weight, generator=generator)
        linears.append(linear)
    projection = FusedProjection(linears)
    parts = projection.parts()
    x = torch.randn(rows, 24, generator=generator)
    with torch.inference_mode():
        for _ in range(2):  # the second input object computes anew
            x = x + 1
            for part, linear in zip(parts, linears):
                torch.testing.assert_close(part(x), linear(x), **TOLERANCE)
    assert sum(p.numel() for part in parts for p in part.parameters()) == sum(
        p.numel() for linear in linears for p in linear.parameters())


def test_batched_rows_compute_a_fused_product_once_per_input(family, monkeypatch):
    """Padded rows run q/k/v on token positions only, one product for the three maps."""
    _, fast = family
    calls = []
    projection = fast.model.layers[0].self_attn.q_proj.projection
    original = projection.linear.forward
    monkeypatch.setattr(projection.linear, "forward", lambda x: calls.append(tuple(x.shape)) or original(x))
    session = BatchedSession(fast, (), batch_size=3, capacity=64)
    with torch.inference_mode():
        session.prefill({0: [1, 2, 3], 1: [3, 4], 2: [5]})
        calls.clear()
        session.forward({0: [6, 7, 8, 9, 10, 11], 1: [12], 2: [13, 14]})
    assert calls == [(9, 64)], f"q/k/v products in one padded forward: {calls}"


GLUES = ("kernels", "torch")  # the lean step's operations between products: lean_kernels.cpp, or PyTorch calls


@settings(max_examples=20, deadline=None)
@given(skip=skip_sets(NUM_LAYERS), prompt=st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=20),
       chunks=st.lists(st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=8), min_size=1, max_size=3),
       parents=st.sampled_from([None, (-1, 0, 0, 1), (-1, 0, 1, 1, 0), (-1, -1, 1)]))
@NEEDS_COMPILER
def test_the_native_kernels_compute_what_the_pytorch_calls_compute(family, skip, prompt, chunks, parents):
    """Chunks after a context, a token tree after them, and a rollback: the lean step on its kernels gives
    the logits (and the cache) of the same step on PyTorch calls."""
    _, fast = family
    native, calls = ModelSession(fast, skip), ModelSession(fast, skip)
    assert native.lean.kernels is not None, "the lean step's kernels did not build (see the log)"
    calls.lean = lean_step_of(fast).on_pytorch_calls()
    tree = [13 + 5 * i for i in range(len(parents or ()))]
    with torch.inference_mode():
        for session in (native, calls):
            session.prefill(prompt)
        for chunk in chunks:
            torch.testing.assert_close(native.forward(chunk), calls.forward(chunk), **TOLERANCE)
        if parents:
            torch.testing.assert_close(native.forward(tree, parents), calls.forward(tree, parents), **TOLERANCE)
        for session in (native, calls):
            session.rollback(len(prompt))
        torch.testing.assert_close(native.forward(chunks[0]), calls.forward(chunks[0]), **TOLERANCE)


BFLOAT16 = pytest.mark.skipif(not torch.ops.mkldnn._is_mkldnn_bf16_supported(),
                              reason="this CPU has no bfloat16 instructions: the fast path runs bfloat16 only with them")


@pytest.fixture(scope="module", params=[(family, glue) for family in ("llama", "qwen3") for glue in GLUES])
def bfloat16_model(request):
    """A decoder in bfloat16 on the fast path, its weights small enough for near-ties between tokens, its
    lean step on the native kernels or on PyTorch calls."""
    family, glue = request.param
    model = _family(family).to(torch.bfloat16)
    use_forward_path(model, "fast")
    step = lean_step_of(model)
    assert step.per_query_attention
    if glue == "torch":
        step.kernels = None
    elif not HAS_COMPILER:
        pytest.skip("no C++ compiler here to build the lean step's kernels")
    else:
        assert step.kernels is not None, "the lean step's kernels did not build (see the log)"
    return model


def _path(parents, node):
    """The tree's tokens from its root to `node` (indices)."""
    return [*(_path(parents, parents[node]) if parents[node] >= 0 else []), node]


@BFLOAT16
@settings(max_examples=15, deadline=None)
@given(skip=skip_sets(NUM_LAYERS), prompt=st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=30),
       parents=st.sampled_from([(-1, 0, 1, 2, 3), (-1, 0, 0, 1), (-1, 0, 1, 1, 0), (-1, -1, 1)]))
def test_a_bfloat16_verification_equals_one_token_decoding_bit_for_bit(bfloat16_model, skip, prompt, parents):
    """Each verified token's logits, chain or tree, equal those of decoding its path one token at a time."""
    tokens = [11 + 3 * i for i in range(len(parents))]
    with torch.inference_mode():
        verifier = ModelSession(bfloat16_model, skip)
        verifier.prefill(prompt)
        verified = verifier.forward(tokens, parents)
        for node in range(len(tokens)):
            decoder = ModelSession(bfloat16_model, skip)
            decoder.prefill(prompt)
            decoded = [decoder.forward([tokens[i]]) for i in _path(parents, node)][-1]
            assert torch.equal(verified[node], decoded[0])


@BFLOAT16
def test_speculation_in_bfloat16_equals_its_own_greedy_output(bfloat16_model):
    prompt = [5, 6, 7, 5, 6, 7, 5, 6, 9, 5, 6, 7]
    config = GenerationConfig(max_new_tokens=32, num_draft_tokens=5, stop_on_eos=False)
    for skip in ((), (1,)):
        plain = speculative_generate(bfloat16_model, prompt, None, config, skip).new_token_ids
        assert speculative_generate(bfloat16_model, prompt, PromptLookupDrafter(), config, skip).new_token_ids == plain
