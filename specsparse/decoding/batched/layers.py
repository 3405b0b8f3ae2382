"""What one padded forward of many rows (`BatchedSession`) swaps into the model: a KV cache written at
per-row positions, decoder layers run once per class of rows with equal input, linear maps run on
token positions only, and attention that reads grouped-query keys and values in place.

Rows may have different skip sets (a search measures many candidates at once). When the rows of a
forward share one, the kept layers alone run (`LayerSkipper`). Otherwise each layer runs on the rows
that keep it (`SharedRowsLayer`), and rows that skip it pass their input on. A layer's input depends
only on the row's tokens and on which earlier layers it skipped, so rows with the same token history
(one prompt under several skip sets) that agree on the layers below are computed once at that layer
and the result shared: skip sets first differing at layer l share the work of every layer below l.

Rows of one forward have chunks of different lengths (a draft of k tokens beside an empty one, a
long prompt beside a short one) and run padded to the longest. On CPU, when padding is a large share
of the positions, the layers' linear maps run on the token positions only (`PackedLinear`; padding
positions carry zeros, and nothing reads them: their keys and values are never stored and their
outputs are dropped), and attention reads grouped-query keys and values in place instead of
repeating them per query head (`ROWS_ATTENTION`). Both give the same numbers as the padded forward.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import AttentionInterface


class RowCache:
    """Per-layer K/V buffers [batch, kv_heads, capacity, head_dim] written at per-row positions.

    Implements the one method HF attention layers call (`update`); positions and masks are given to
    the model explicitly, so nothing asks this cache for its length.
    """

    is_compileable = False

    def __init__(self, batch_size: int, capacity: int):
        self.batch_size = batch_size
        self.capacity = capacity
        self._keys: dict[int, torch.Tensor] = {}
        self._values: dict[int, torch.Tensor] = {}
        self.rows: torch.Tensor | None = None  # rows in this forward (None: all, in order)
        self.positions = torch.zeros(0)  # [rows, chunk] cache positions of this forward's queries
        self.written = torch.zeros(0, dtype=torch.bool)  # [rows, chunk] which of them are tokens (not padding)
        self.tokens_at = (torch.zeros(0, dtype=torch.long),) * 2  # written.nonzero(): (row, column) of each token
        self.kv_length = 0  # keys returned per row: max over rows of length + chunk
        self.layer_plans: dict[int, LayerPlan] = {}  # layers that run on shared or fewer rows this forward

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        if layer_idx not in self._keys:
            batch, heads, _, dim = key_states.shape
            shape = (self.batch_size, heads, self.capacity, dim)
            self._keys[layer_idx] = key_states.new_zeros(shape)
            self._values[layer_idx] = value_states.new_zeros(shape)
        keys, values = self._keys[layer_idx], self._values[layer_idx]
        rows = torch.arange(self.batch_size) if self.rows is None else self.rows
        plan = self.layer_plans.get(layer_idx)
        # Only real tokens are stored: (row, column) pairs of `written`; padding is never stored.
        if plan is None:
            row, column = self.tokens_at
            source = row
        else:  # key_states hold the plan's computed rows; each row keeping the layer takes its class's
            local, column = self.written[plan.running].nonzero(as_tuple=True)
            row, source = plan.running[local], plan.source[local]
        index = (rows[row], slice(None), self.positions[row, column])  # advanced indices -> [tokens, heads, dim]
        keys[index] = key_states.transpose(1, 2)[source, column]
        values[index] = value_states.transpose(1, 2)[source, column]
        if plan is not None:
            return keys[rows[plan.computed], :, : self.kv_length], values[rows[plan.computed], :, : self.kv_length]
        if self.rows is None:
            return keys[:, :, : self.kv_length], values[:, :, : self.kv_length]
        return keys[self.rows, :, : self.kv_length], values[self.rows, :, : self.kv_length]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.kv_length

    def copy_positions(self, source: int, destination: int, start: int, stop: int) -> None:
        """Every layer's keys and values at positions [start, stop) of row `source` into row `destination`."""
        for buffers in (self._keys, self._values):
            for buffer in buffers.values():
                buffer[destination, :, start:stop] = buffer[source, :, start:stop]


@dataclass(frozen=True)
class LayerPlan:
    """Which rows of a forward one layer runs on. Indices are into the forward's rows.

    computed: [c] one row per class of rows with the same input at this layer (the layer runs on these);
    running: [n] the rows that keep the layer; source: [n] for each of them, its class's place in `computed`.
    """

    computed: torch.Tensor
    running: torch.Tensor
    source: torch.Tensor


ROWS_ATTENTION = "specsparse_rows_sdpa"


def _rows_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """SDPA with each key/value head read in place by its group of query heads (`enable_gqa`), where
    HF's sdpa repeats keys and values for masked multi-token queries: a copy of every row's cache per
    layer, as long as the attention itself on CPU. Registered with transformers' AttentionInterface."""
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, scale=scaling,
        enable_gqa=getattr(module, "num_key_value_groups", 1) > 1)
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(ROWS_ATTENTION, _rows_attention)


class TokenPositions:
    """The token (not padding) positions of a padded forward, for the linear maps of the rows now running."""

    def __init__(self) -> None:
        self.written: torch.Tensor | None = None  # [rows, width]; None: linear maps run on every position
        self.index: torch.Tensor | None = None  # flat positions of tokens among the running rows' [rows * width]
        self.size = 0  # rows * width of the running rows
        self._all: tuple[torch.Tensor | None, int] = (None, 0)  # (index, size) of all the forward's rows
        self._gathered: tuple[torch.Tensor | None, torch.Tensor | None] = (None, None)  # (input, its tokens)

    def use(self, written: torch.Tensor | None) -> None:
        """A new forward's token mask (None: no packing); all its rows run."""
        self.written = written
        self._all = (None, 0) if written is None else _flat_tokens(written)
        self.index, self.size = self._all
        self._gathered = (None, None)

    def select(self, rows: torch.Tensor | None) -> None:
        """The running rows: all of the forward's (None) or a subset (indices into them)."""
        if self.written is not None:
            self.index, self.size = self._all if rows is None else _flat_tokens(self.written[rows])
        self._gathered = (None, None)

    def tokens_of(self, x: torch.Tensor) -> torch.Tensor:
        """The token positions of x [rows, width, features] as [tokens, features]; the same tensor for the
        same input, so linear maps of one input (q/k/v, a `FusedProjection`) compute their product once."""
        if x is not self._gathered[0]:
            self._gathered = (x, x.reshape(-1, x.shape[-1]).index_select(0, self.index))
        return self._gathered[1]


def _flat_tokens(mask: torch.Tensor) -> tuple[torch.Tensor, int]:
    return mask.reshape(-1).nonzero().squeeze(1), mask.numel()


class PackedLinear(torch.nn.Module):
    """A linear map (an `nn.Linear` or a `FusedPart`) computed at the token positions only; padding
    positions get zeros."""

    def __init__(self, linear: torch.nn.Module, positions: TokenPositions):
        super().__init__()
        self.linear = linear
        self.positions = positions

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        index = self.positions.index
        if index is None or x.shape[:-1].numel() != self.positions.size:
            return self.linear(x)
        out = x.new_zeros(self.positions.size, self.linear.out_features)
        out.index_copy_(0, index, self.linear(self.positions.tokens_of(x)))
        return out.view(*x.shape[:-1], self.linear.out_features)


class SharedRowsLayer(torch.nn.Module):
    """A decoder layer run on `plan.computed` rows only; each row that keeps it takes its class's output,
    a row that skips it passes its input on (plan None: every row runs it, as usual)."""

    def __init__(self, layer: torch.nn.Module, positions: TokenPositions):
        super().__init__()
        self.layer = layer
        self.positions = positions
        self.plan: LayerPlan | None = None

    def forward(self, hidden_states: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        plan = self.plan
        self.positions.select(None if plan is None else plan.computed)
        if plan is None:
            out = self.layer(hidden_states, *args, **kwargs)
            return out[0] if isinstance(out, tuple) else out
        if len(plan.computed) == 0:
            return hidden_states
        rows = hidden_states.shape[0]

        def subset(value):  # per-row inputs (hidden states, masks, positions, rotary tables) of the computed rows
            if isinstance(value, torch.Tensor) and value.dim() >= 2 and value.shape[0] == rows:
                return value[plan.computed]
            return tuple(subset(v) for v in value) if isinstance(value, tuple) else value

        out = self.layer(subset(hidden_states), *map(subset, args), **{k: subset(v) for k, v in kwargs.items()})
        out = out[0] if isinstance(out, tuple) else out
        result = hidden_states.clone()
        result[plan.running] = out[plan.source]
        return result
