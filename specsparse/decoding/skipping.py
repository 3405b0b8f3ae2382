"""Run a HF decoder with a set of its layers skipped, on the full loaded model (no pruned copies).

Mechanism: for the duration of a forward, the model's decoder `layers` ModuleList is swapped for one
holding only the kept layers. Each kept layer keeps its original `layer_idx`, so it reads and writes
its own slot of one shared KV cache; skipped layers' slots stay empty.

Pitfall handled here: HF reads the cache length and mask sizes from layer 0 (or the first layer of
a kind). When that layer is skipped its slot is empty, positions silently restart at 0 and the output
is garbage. `SkipAwareCache` answers those questions from the first *kept* layer of the same kind.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import nn
from transformers import DynamicCache, PreTrainedModel
from transformers.cache_utils import DynamicLayer

# A feature layer (`LayerSkipper.capturing`) naming the final hidden state, after the final norm.
FINAL_HIDDEN = -1


class SkipSetError(ValueError):
    """An invalid skip set (out of range, duplicate, or every layer)."""


def validate_skip_layers(skip_layers: Iterable[int], num_layers: int) -> tuple[int, ...]:
    """Return the skip set sorted, or raise a one-line SkipSetError naming the problem."""
    layers = list(skip_layers)
    bad = [i for i in layers if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < num_layers]
    if bad:
        raise SkipSetError(f"skip layer indices {bad} out of range: this model has layers 0..{num_layers - 1}")
    if len(set(layers)) != len(layers):
        dupes = sorted({i for i in layers if layers.count(i) > 1})
        raise SkipSetError(f"skip set lists layers {dupes} more than once: give each layer index once")
    if len(layers) >= num_layers:
        raise SkipSetError(f"skip set removes all {num_layers} layers: keep at least one layer")
    return tuple(sorted(layers))


def decoder_layers(model: PreTrainedModel) -> nn.ModuleList:
    """The decoder layer list of a HF causal LM (Llama, Mistral, Qwen, Gemma 3 text, ...)."""
    base = model.get_decoder() if hasattr(model, "get_decoder") else model.model
    layers = getattr(base, "layers", None)
    if not isinstance(layers, nn.ModuleList):
        raise TypeError(f"{type(model).__name__} has no `layers` ModuleList on its decoder: layer skipping unsupported")
    return layers


class LayerSkipper:
    """Swaps a model's decoder layers for the kept subset. One per model; caches the subsets.

    Not thread-safe: run one forward at a time per model (the engine does).
    """

    def __init__(self, model: PreTrainedModel):
        self.model = model
        self.base = model.get_decoder() if hasattr(model, "get_decoder") else model.model
        self.all_layers = decoder_layers(model)
        self.num_layers = len(self.all_layers)
        self._subsets: dict[tuple[int, ...], nn.ModuleList] = {(): self.all_layers}
        # Some models (Gemma 3) pick each layer's mask and rotary embedding by its position in the list
        # through config.layer_types, not by the layer itself: that list must shrink with the layers.
        self.all_layer_types = getattr(self.base.config, "layer_types", None)

    def kept_layers(self, skip_layers: tuple[int, ...]) -> nn.ModuleList:
        if skip_layers not in self._subsets:  # a valid skip set (sessions check theirs)
            skipped = set(skip_layers)
            self._subsets[skip_layers] = nn.ModuleList(
                layer for index, layer in enumerate(self.all_layers) if index not in skipped
            )
        return self._subsets[skip_layers]

    @contextmanager
    def skipping(self, skip_layers: tuple[int, ...]) -> Iterator[None]:
        """Inside the block the model runs without `skip_layers` (a sorted tuple)."""
        if not skip_layers:
            yield
            return
        # Bypass nn.Module.__setattr__ bookkeeping: this runs on every forward.
        self.base._modules["layers"] = self.kept_layers(skip_layers)
        if self.all_layer_types is not None:
            skipped = set(skip_layers)
            self.base.config.layer_types = [t for i, t in enumerate(self.all_layer_types) if i not in skipped]
        try:
            yield
        finally:
            self.base._modules["layers"] = self.all_layers
            if self.all_layer_types is not None:
                self.base.config.layer_types = self.all_layer_types

    @contextmanager
    def capturing(self, skip_layers: tuple[int, ...], feature_layers: Sequence[int]) -> Iterator[dict[int, torch.Tensor]]:
        """Record the residual stream entering each of `feature_layers` (HF's hidden_states[l]) in a
        forward under `skip_layers`: the dict fills with {layer: [batch, tokens, hidden]} as the
        model runs. A skipped layer passes its input on, so the stream entering layer l is the input of
        the first kept layer >= l, or of the final norm when every later layer is skipped.
        `FINAL_HIDDEN` entries are left to the caller (the model's output)."""
        captured: dict[int, torch.Tensor] = {}
        watchers = {self.base.norm if index == self.num_layers else self.all_layers[index]: layers
                    for index, layers in feature_sources(skip_layers, feature_layers, self.num_layers).items()}

        def record(layers):
            def hook(module, args, kwargs):
                stream = args[0] if args else kwargs["hidden_states"]
                for layer in layers:
                    captured[layer] = stream
            return hook

        handles = [module.register_forward_pre_hook(record(layers), with_kwargs=True)
                   for module, layers in watchers.items()]
        try:
            yield captured
        finally:
            for handle in handles:
                handle.remove()


def feature_sources(skip_layers: tuple[int, ...], feature_layers: Sequence[int], num_layers: int) -> dict[int, list[int]]:
    """Where each of `feature_layers` (but `FINAL_HIDDEN`) is read in a forward under `skip_layers`: {index
    of the first kept layer at or after it, whose input it is (`num_layers`: the final norm's): [features]}."""
    skipped = set(skip_layers)
    sources: dict[int, list[int]] = {}
    for layer in feature_layers:
        if layer != FINAL_HIDDEN:
            first_kept = next((i for i in range(layer, num_layers) if i not in skipped), num_layers)
            sources.setdefault(first_kept, []).append(layer)
    return sources


def skipper_for(model: PreTrainedModel) -> LayerSkipper:
    """The model's LayerSkipper (created once and attached to the model)."""
    skipper = getattr(model, "_specsparse_skipper", None)
    if skipper is None:
        skipper = LayerSkipper(model)
        model._specsparse_skipper = skipper
    return skipper


class GrowingLayer(DynamicLayer):
    """A full-attention cache layer with a preallocated buffer that doubles when full.

    HF's DynamicLayer concatenates on every step (O(n) copy per token); this writes in place, and
    rollback is O(1). Behaves like DynamicLayer for every caller (`keys`/`values` are views).
    """

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = key_states.device
        self.length = 0
        self._key_buffer = key_states.new_empty((*key_states.shape[:2], 64, key_states.shape[3]))
        self._value_buffer = value_states.new_empty((*value_states.shape[:2], 64, value_states.shape[3]))
        self.keys = self._key_buffer[:, :, :0]
        self.values = self._value_buffer[:, :, :0]
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:  # values may have another head size than keys
            self.lazy_initialization(key_states, value_states)
        start = self.reserve(key_states)
        self._key_buffer[:, :, start : self.length] = key_states
        self._value_buffer[:, :, start : self.length] = value_states
        return self.keys, self.values

    def reserve(self, like: torch.Tensor) -> int:
        """Make room for like.shape[-2] more positions (like: keys [batch, kv_heads, n, head_dim], values
        alike when the buffers do not exist yet) and take them; returns where they start in `buffers()`,
        for the caller to write them there."""
        if not self.is_initialized:
            self.lazy_initialization(like, like)
        start, new_length = self.length, self.length + like.shape[-2]
        if new_length > self._key_buffer.shape[-2]:
            capacity = max(new_length, 2 * self._key_buffer.shape[-2])
            self._key_buffer = _grow(self._key_buffer, start, capacity)
            self._value_buffer = _grow(self._value_buffer, start, capacity)
        self.length = new_length
        self.keys = self._key_buffer[:, :, :new_length]
        self.values = self._value_buffer[:, :, :new_length]
        return start

    def buffers(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The key and value buffers [batch, kv_heads, capacity, head_dim], valid up to `length`."""
        return self._key_buffer, self._value_buffer

    def get_seq_length(self) -> int:
        return self.length if self.is_initialized else 0

    def compact(self, start: int, kept: Sequence[int]) -> None:
        """Move positions start + kept[j] to start + j (kept increasing, so no source is overwritten
        before it is read)."""
        if not self.is_initialized:
            return
        source = torch.tensor([start + i for i in kept], device=self._key_buffer.device)
        target = slice(start, start + len(kept))
        self._key_buffer[:, :, target] = self._key_buffer[:, :, source]
        self._value_buffer[:, :, target] = self._value_buffer[:, :, source]

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove == 0 or not self.is_initialized:
            return
        self.length = max(self.length - abs(tokens_to_remove), 0)
        self.keys = self._key_buffer[:, :, : self.length]
        self.values = self._value_buffer[:, :, : self.length]


def _grow(buffer: torch.Tensor, used: int, capacity: int) -> torch.Tensor:
    grown = buffer.new_empty((*buffer.shape[:2], capacity, buffer.shape[3]))
    grown[:, :, :used] = buffer[:, :, :used]
    return grown


class SkipAwareCache(DynamicCache):
    """A DynamicCache for a model that runs with `skip_layers` skipped for the whole request.

    Length and mask-size queries about a skipped layer are answered by the first kept layer of the
    same kind (full or sliding attention), so skipping layer 0 keeps positions right.
    """

    def __init__(self, config, skip_layers: tuple[int, ...] = ()):
        super().__init__(config=config)
        self.layers = [GrowingLayer() if type(layer) is DynamicLayer else layer for layer in self.layers]
        num_layers = len(self.layers)
        skipped = set(skip_layers)
        kept = [i for i in range(num_layers) if i not in skipped]
        self.skip_layers = tuple(sorted(skipped))
        self._stand_in = list(range(num_layers))
        for index in skipped:
            same_kind = [k for k in kept if self.layers[k].is_sliding == self.layers[index].is_sliding]
            self._stand_in[index] = (same_kind or kept)[0]
        if any(layer.is_sliding for layer in self.layers):
            self.activate_past_recording()  # sliding layers must be able to roll back

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return super().get_seq_length(self._stand_in[layer_idx] if layer_idx < len(self._stand_in) else layer_idx)

    def get_mask_sizes(self, query_length: int, layer_idx: int) -> tuple[int, int]:
        return super().get_mask_sizes(query_length, self._stand_in[layer_idx] if layer_idx < len(self._stand_in) else layer_idx)

    def get_query_offset(self, layer_idx: int = 0) -> int:
        return self.get_seq_length(layer_idx)

    @property
    def has_sliding_layers(self) -> bool:
        return any(layer.is_sliding for layer in self.layers)

    def compact(self, start: int, kept: Sequence[int]) -> None:
        """Keep the positions start + kept[j] at start + j in every layer (a tree's accepted path)."""
        for layer in self.layers:
            layer.compact(start, kept)

    def crop_to(self, length: int) -> None:
        """Roll back to the first `length` positions. Skipped layers hold nothing and are left alone;
        sliding-window layers are cropped even by 0, which trims them back to their window."""
        remove = max(self.get_seq_length() - length, 0)
        for layer in self.layers:
            if layer.is_initialized:
                layer.crop(-remove)
