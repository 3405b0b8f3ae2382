"""The lean decode step: a Llama-family decoder's forward over one sequence on the fast path, written
as a few operations per layer in place of HF's modules.

A one-token forward of a small model on a CPU pays, beside its matrix products, for every module call
and small operation of every layer (HF's norms, rotary embedding, attention dispatch, mask building).
Here each layer is four packed products (`forward_path`: q/k/v fused, the output projection, gate/up
fused, down) and, between them, three native kernels (`lean_kernels.cpp`): the residual add with
RMSNorm; the rotary embedding of q and k with the KV-cache write and attention; SiLU-gate. SmolLM2-135M's
one-token forward on 2 cores takes 0.82x the time of the same step on PyTorch calls and 0.72x HF's
modules on the same packed weights (BENCHMARKS.md, "Native kernels between the products").

Where the kernels do not build (no C++ compiler), the same step runs as PyTorch calls: RMSNorm, one
packed q/k/v product, rotary embedding of q and k together, the cache write, SDPA, the output
projection, RMSNorm, one packed gate/up product, SiLU-gate, down projection (`on_pytorch_calls`).

Which models: decoders of the Llama family (Llama / SmolLM2, Mistral without a sliding window, Qwen2,
Qwen3): RMSNorm before attention and MLP, rotary positions, a SiLU-gated MLP. Others (Gemma 3: sliding
windows, extra norms, scaled embeddings) run HF's modules on the same packed weights. Only single
sequences (`ModelSession`: the engine and LM drafters) take this step; batched rows run HF's modules.

It keeps what the session relies on: skip sets (layer 0 too: positions come from the session, never
from a cache layer), tree masks, the session's KV cache and its rollback, and feature capture. Its
outputs equal HF's modules' on the same weights within float rounding, on kernels and on PyTorch calls
alike (tests/decoding/test_lean_step.py).

Verification equals one-token decoding bit for bit in bfloat16, where attention over several queries
would round differently from one query at a time: the kernels compute every query's row in the same
order at any row count; on PyTorch calls each query of a verification (tokens after a context) attends
alone, over exactly the keys it sees (`per_query_attention`), and the packed products give each row the
same result at any row count. A bfloat16 target's speculative output then equals its own greedy output,
token for token (tests/decoding/test_lean_step.py). float32 on PyTorch calls keeps one attention call:
there, outputs equal within rounding, as everywhere else.
"""

from __future__ import annotations

import copy
import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional

from specsparse.decoding.forward_path import FusedPart, FusedProjection, is_fast
from specsparse.decoding.lean_kernels import kernels_for
from specsparse.decoding.skipping import SkipAwareCache, decoder_layers, feature_sources

FULL_ATTENTION = "full_attention"


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """HF's Llama RMSNorm: normalised in float32, scaled in the model's dtype."""
    if x.dtype == torch.float32:
        return functional.rms_norm(x, weight.shape, weight, eps)
    return weight * functional.rms_norm(x.float(), weight.shape, None, eps).to(x.dtype)


def _rotated(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding of x [1, n, heads, head_dim] (cos, sin [1, n, 1, head_dim]), as HF's rotate_half."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


@dataclass(frozen=True)
class LeanLayer:
    """One decoder layer's weights as the lean step reads them."""

    index: int
    input_norm: torch.Tensor
    post_norm: torch.Tensor
    eps: float
    qkv: FusedProjection
    o_proj: nn.Module
    gate_up: FusedProjection
    down_proj: nn.Module
    heads: int
    kv_heads: int
    head_dim: int
    scaling: float
    q_norm: torch.Tensor | None  # Qwen3: an RMSNorm of each head's q and k
    k_norm: torch.Tensor | None


class LeanStep:
    """The lean forward of one model (built by `lean_step_of`)."""

    def __init__(self, model: nn.Module, layers: list[LeanLayer]):
        self.base = model.get_decoder() if hasattr(model, "get_decoder") else model.model
        self.layers = layers
        self.final_norm = self.base.norm.weight
        self.final_eps = self.base.norm.variance_epsilon
        self.intermediate = layers[0].down_proj.in_features
        self.per_query_attention = model.dtype != torch.float32
        kernels = kernels_for(model.dtype)
        self.kernels = kernels if kernels and kernels.take(layers) else None

    @property
    def kind(self) -> str:
        """What runs between the products ("lean, native kernels" or "lean, PyTorch calls"): recorded in
        a cost profile's identity, as it changes what a forward costs."""
        return "lean, native kernels" if self.kernels is not None else "lean, PyTorch calls"

    def on_pytorch_calls(self) -> LeanStep:
        """This step running its operations between products as PyTorch calls, as it does where the
        native kernels do not build (what they replace; for comparisons)."""
        step = copy.copy(self)
        step.kernels = None
        return step

    def hidden_states(
        self,
        ids: torch.Tensor,
        positions: torch.Tensor,
        cache: SkipAwareCache,
        tree_mask: torch.Tensor | None = None,
        feature_layers: Sequence[int] = (),
    ) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
        """Final-norm hidden states [1, n, hidden] of `ids` [1, n] at `positions` [1, n] after the cache's
        context, skipping `cache.skip_layers`, and the residual stream entering each of `feature_layers`
        (as `LayerSkipper.capturing` records it).

        tree_mask: a tree's bool mask [1, 1, n, context + n] (True: visible); None for a chain."""
        if self.kernels is not None:
            return self._native_hidden_states(ids, positions, cache, tree_mask, feature_layers)
        n = ids.shape[1]
        context = int(positions[0, 0]) if tree_mask is None else tree_mask.shape[-1] - n
        mask = tree_mask
        if mask is None and n > 1:  # a chain: each token sees the context and the chain up to itself
            mask = torch.ones(n, context + n, dtype=torch.bool, device=ids.device).tril(context)
        if mask is not None and context and self.per_query_attention:  # a verification, one query at a time
            mask = visible_keys(mask.reshape(n, context + n))
        hidden = self.base.embed_tokens(ids)
        cos, sin = self.base.rotary_emb(hidden, positions)
        cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)
        sources = feature_sources(cache.skip_layers, feature_layers, len(self.layers))
        captured: dict[int, torch.Tensor] = {}
        skipped = set(cache.skip_layers)
        for layer in self.layers:
            if layer.index in skipped:
                continue
            for feature in sources.get(layer.index, ()):
                captured[feature] = hidden
            hidden = hidden + self._attention(layer, hidden, cos, sin, mask, cache)
            x = _rms_norm(hidden, layer.post_norm, layer.eps)
            gate, up = layer.gate_up(x).split(self.intermediate, dim=-1)
            hidden = hidden + layer.down_proj(functional.silu(gate) * up)
        for feature in sources.get(len(self.layers), ()):
            captured[feature] = hidden
        return _rms_norm(hidden, self.final_norm, self.final_eps), captured

    def _native_hidden_states(self, ids: torch.Tensor, positions: torch.Tensor, cache: SkipAwareCache,
                              tree_mask: torch.Tensor | None, feature_layers: Sequence[int]
                              ) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
        """`hidden_states` with the operations between the products in `lean_kernels` (one call each).
        The residual stream `hidden` is updated in place; each layer's last product (`delta`) is added
        by the next RMSNorm."""
        kernels, first = self.kernels, self.layers[0]
        n = ids.shape[1]
        keys_total = int(positions[0, 0]) + n if tree_mask is None else tree_mask.shape[-1]
        if tree_mask is None:  # a chain: token t sees the context and the chain up to itself
            limit, mask = torch.arange(keys_total - n + 1, keys_total + 1, dtype=torch.int32), None
        else:
            limit, mask = torch.full((n,), keys_total, dtype=torch.int32), tree_mask.reshape(n, keys_total).to(torch.uint8).contiguous()
        hidden = self.base.embed_tokens(ids)
        cos, sin = (part.contiguous() for part in self.base.rotary_emb(hidden.float(), positions))
        normed, attended = torch.empty_like(hidden), hidden.new_empty(1, n, first.heads * first.head_dim)
        gated, key_shape = hidden.new_empty(1, n, self.intermediate), hidden.new_empty(1, first.kv_heads, n, first.head_dim)
        sources = feature_sources(cache.skip_layers, feature_layers, len(self.layers))
        captured: dict[int, torch.Tensor] = {}
        skipped = set(cache.skip_layers)
        delta = None
        for layer in [*self.layers, None]:
            index = len(self.layers) if layer is None else layer.index
            if index in skipped:
                continue
            if index in sources and delta is not None:
                hidden += delta
                delta = None
            for feature in sources.get(index, ()):
                captured[feature] = hidden.clone()
            if layer is None:
                break
            kernels.add_rms_norm(hidden.data_ptr(), _pointer(delta), layer.input_norm.data_ptr(), layer.eps,
                                 normed.data_ptr(), n, hidden.shape[-1])
            qkv = layer.qkv(normed)
            start = cache.layers[layer.index].reserve(key_shape)
            keys, values = cache.layers[layer.index].buffers()
            kernels.attention(qkv.data_ptr(), n, layer.heads, layer.kv_heads, layer.head_dim, cos.data_ptr(),
                              sin.data_ptr(), _pointer(layer.q_norm), _pointer(layer.k_norm), layer.eps,
                              keys.data_ptr(), values.data_ptr(), keys.shape[-2], start, limit.data_ptr(),
                              _pointer(mask), keys_total, layer.scaling, attended.data_ptr())
            projected = layer.o_proj(attended)
            kernels.add_rms_norm(hidden.data_ptr(), projected.data_ptr(), layer.post_norm.data_ptr(), layer.eps,
                                 normed.data_ptr(), n, hidden.shape[-1])
            gate_up = layer.gate_up(normed)
            kernels.silu_mul(gate_up.data_ptr(), n, self.intermediate, gated.data_ptr())
            delta = layer.down_proj(gated)
        final = torch.empty_like(hidden)
        kernels.add_rms_norm(hidden.data_ptr(), _pointer(delta), self.final_norm.data_ptr(), self.final_eps,
                             final.data_ptr(), n, hidden.shape[-1])
        return final, captured

    @staticmethod
    def _attention(layer: LeanLayer, hidden: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                   mask: torch.Tensor | None, cache: SkipAwareCache) -> torch.Tensor:
        n = hidden.shape[1]
        qkv = layer.qkv(_rms_norm(hidden, layer.input_norm, layer.eps)).view(
            1, n, layer.heads + 2 * layer.kv_heads, layer.head_dim)
        values = qkv[:, :, layer.heads + layer.kv_heads :]
        if layer.q_norm is None:
            query_keys = _rotated(qkv[:, :, : layer.heads + layer.kv_heads], cos, sin)
            queries, keys = query_keys[:, :, : layer.heads], query_keys[:, :, layer.heads :]
        else:
            queries = _rotated(_rms_norm(qkv[:, :, : layer.heads], layer.q_norm, layer.eps), cos, sin)
            keys = _rotated(_rms_norm(qkv[:, :, layer.heads : layer.heads + layer.kv_heads], layer.k_norm, layer.eps),
                            cos, sin)
        keys, values = cache.layers[layer.index].update(keys.transpose(1, 2), values.transpose(1, 2))
        queries = queries.transpose(1, 2)
        if isinstance(mask, list):  # per query: the keys each one sees (`visible_keys`)
            out = torch.cat([_attend(layer, queries[:, :, i : i + 1], keys[:, :, seen], values[:, :, seen], None)
                             for i, seen in enumerate(mask)], dim=2)
        else:
            out = _attend(layer, queries, keys, values, mask)
        return layer.o_proj(out.transpose(1, 2).reshape(1, n, layer.heads * layer.head_dim))


def _attend(layer: LeanLayer, queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
            mask: torch.Tensor | None) -> torch.Tensor:
    return functional.scaled_dot_product_attention(queries, keys, values, attn_mask=mask, scale=layer.scaling,
                                                   enable_gqa=layer.kv_heads != layer.heads)


def _pointer(tensor: torch.Tensor | None) -> int | None:
    return None if tensor is None else tensor.data_ptr()


def visible_keys(mask: torch.Tensor) -> list[slice | torch.Tensor]:
    """For each row of a bool mask [n, keys]: the keys it sees, as a slice where they are a prefix (a
    chain: the very keys one-token decoding reads, laid out alike), else as their indices (a tree)."""
    counts = mask.sum(dim=1).tolist()
    prefixes = mask.cumprod(dim=1).sum(dim=1).tolist()
    return [slice(0, count) if count == prefix else row.nonzero().squeeze(1)
            for row, count, prefix in zip(mask, counts, prefixes)]


def lean_step_of(model: nn.Module) -> LeanStep | None:
    """The model's lean step, or None where it has none: not on the fast path, or not a decoder of the
    Llama family (`_lean_layer` says which parts it needs). Built once per decoder layer list (a copy
    of the model, or one whose layers were replaced, gets its own)."""
    layers = decoder_layers(model)
    known = _LEAN_STEPS.get(model)
    if known is None or known[0] is not layers:
        lean = [_lean_layer(layer, model.config) for layer in layers] if is_fast(model) else [None]
        known = _LEAN_STEPS[model] = (layers, LeanStep(model, lean) if all(lean) and _lean_decoder(model) else None)
    return known[1]


_LEAN_STEPS: weakref.WeakKeyDictionary[nn.Module, tuple[nn.ModuleList, LeanStep | None]] = weakref.WeakKeyDictionary()


def _lean_decoder(model: nn.Module) -> bool:
    """Whether the decoder around the layers is Llama's: plain embedding, RMSNorm, full attention only."""
    config = model.config
    base = model.get_decoder() if hasattr(model, "get_decoder") else model.model
    layer_types = getattr(config, "layer_types", None)
    full_attention = (all(kind == FULL_ATTENTION for kind in layer_types) if layer_types
                      else getattr(config, "sliding_window", None) is None)
    return (full_attention and type(base.embed_tokens) is nn.Embedding and _is_rms_norm(getattr(base, "norm", None))
            and hasattr(base, "rotary_emb") and getattr(config, "hidden_act", None) == "silu"
            and not getattr(config, "final_logit_softcapping", None))


def _is_rms_norm(module: nn.Module | None) -> bool:
    """Llama's RMSNorm (weight * normalised), not Gemma's (1 + weight)."""
    return module is not None and type(module).__name__.endswith("RMSNorm") and hasattr(module, "variance_epsilon") \
        and not type(module).__name__.startswith("Gemma")


LLAMA_LAYER_PARTS = {"self_attn", "mlp", "input_layernorm", "post_attention_layernorm"}


def _lean_layer(layer: nn.Module, config) -> LeanLayer | None:
    """The layer's weights, where it is a Llama-family layer on the fast path (its q/k/v and gate/up fused)."""
    attention, mlp = getattr(layer, "self_attn", None), getattr(layer, "mlp", None)
    if set(layer._modules) != LLAMA_LAYER_PARTS or not all(
            _is_rms_norm(getattr(layer, name)) for name in ("input_layernorm", "post_attention_layernorm")):
        return None
    q_proj, gate_proj = getattr(attention, "q_proj", None), getattr(mlp, "gate_proj", None)
    if not isinstance(q_proj, FusedPart) or not isinstance(gate_proj, FusedPart) \
            or not type(mlp).__name__.endswith("MLP") or not hasattr(attention, "head_dim"):
        return None
    q_norm, k_norm = getattr(attention, "q_norm", None), getattr(attention, "k_norm", None)
    if (q_norm is None) != (k_norm is None) or (q_norm is not None and not _is_rms_norm(q_norm)):
        return None
    return LeanLayer(
        index=attention.layer_idx,
        input_norm=layer.input_layernorm.weight,
        post_norm=layer.post_attention_layernorm.weight,
        eps=layer.input_layernorm.variance_epsilon,
        qkv=q_proj.projection,
        o_proj=attention.o_proj,
        gate_up=gate_proj.projection,
        down_proj=mlp.down_proj,
        heads=config.num_attention_heads,
        kv_heads=getattr(config, "num_key_value_heads", None) or config.num_attention_heads,
        head_dim=attention.head_dim,
        scaling=attention.scaling,
        q_norm=None if q_norm is None else q_norm.weight,
        k_norm=None if k_norm is None else k_norm.weight,
    )
