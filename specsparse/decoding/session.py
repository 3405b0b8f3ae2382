"""A model under one skip set with its own KV cache: the unit the engine and LM drafters run.

`ModelSession` holds one sequence. `BatchedSession` holds many rows, each at its own length: row b's
chunk is written at positions [L_b, L_b + C) of its slot and its queries see keys j <= their own
position. No cache crop is ever needed: positions below L_b are always the row's committed context,
and each step rewrites [L_b, L_b + C) before any query reads it, so stale keys of rejected drafts or
padding beyond L_b are never visible; rolling a row back is only setting L_b. Positions and masks come
from the row lengths, never from a cache layer, so skipping layer 0 is safe here too.

Rows may have different skip sets (a search measures many candidates at once). When the rows of a
forward share one, the kept layers alone run (`LayerSkipper`). Otherwise each layer runs on the rows
that keep it (`_SharedRowsLayer`), and rows that skip it pass their input on. A layer's input depends
only on the row's tokens and on which earlier layers it skipped, so rows with the same token history
(one prompt under several skip sets) that agree on the layers below are computed once at that layer
and the result shared: skip sets first differing at layer l share the work of every layer below l.

Rows of one forward have chunks of different lengths (a draft of k tokens beside an empty one, a
long prompt beside a short one) and run padded to the longest. On CPU, when padding is a large share
of the positions, the layers' linear maps run on the token positions only (`_PackedLinear`; padding
positions carry zeros, and nothing reads them: their keys and values are never stored and their
outputs are dropped), and attention reads grouped-query keys and values in place instead of
repeating them per query head (`ROWS_ATTENTION`). Both give the same numbers as the padded forward.

Prefill shares prompt prefixes (`BatchedSession.prefill`): prompts of one domain repeat the chat
template's system turn and often few-shot exemplars, and the keys and values of a prefix depend only
on its tokens and the skip set. A prefix shared by rows of one skip set is computed once, in one of
those rows, and copied into the others (a row still holding its context can give its prefix to a new
row). Results are those of prefilling each row alone, up to float summation order.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from transformers import AttentionInterface, PreTrainedModel

from specsparse.decoding.skipping import FINAL_HIDDEN, SkipAwareCache, skipper_for, validate_skip_layers


class ModelSession:
    """A model under one skip set, with its own KV cache, for one request (target or LM drafter).

    feature_layers: hidden states every forward also records in `features` (a feature drafter's
    inputs, see `Drafter.feature_layers`): the residual stream entering each listed layer, or the
    final-norm output for `FINAL_HIDDEN`, concatenated per token, of the sparse model.
    """

    def __init__(self, model: PreTrainedModel, skip_layers: tuple[int, ...], feature_layers: Sequence[int] = ()):
        self.model = model
        self.skipper = skipper_for(model)
        self.skip_layers = validate_skip_layers(skip_layers, self.skipper.num_layers)
        self.cache = SkipAwareCache(model.config, self.skip_layers)
        self.length = 0  # positions held in the cache
        self.softcap = getattr(model.config, "final_logit_softcapping", None)
        self.feature_layers = tuple(feature_layers)
        self.features: torch.Tensor | None = None  # [n, features] of the last forward's n tokens

    def hidden_states(self, token_ids: Sequence[int], parents: Sequence[int] | None = None) -> torch.Tensor:
        """Run `token_ids` [n] after the cached context; return final-norm hidden states [n, hidden].

        parents: for a token tree, the index of each token's parent among `token_ids` (-1: the
        cached context). Each token then sits at the position after its parent and attends to the
        context and its own ancestors only (a tree attention mask)."""
        device = self.model.device
        ids = torch.tensor([list(token_ids)], device=device)
        mask = None
        if parents is None:
            positions = torch.arange(self.length, self.length + len(token_ids), device=device).unsqueeze(0)
        else:
            positions, mask = self._tree_inputs(parents)
        with self.skipper.skipping(self.skip_layers), \
                self.skipper.capturing(self.skip_layers, self.feature_layers) as captured:
            out = self.skipper.base(input_ids=ids, attention_mask=mask, cache=self.cache, position_ids=positions,
                                    use_cache=True)
        self.length += len(token_ids)
        hidden = out.last_hidden_state[0]
        if self.feature_layers:
            self.features = torch.cat(
                [hidden if layer == FINAL_HIDDEN else captured[layer][0] for layer in self.feature_layers], dim=-1)
        return hidden

    def _tree_inputs(self, parents: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Position ids [1, n] and the attention mask [1, 1, n, context + n] of a token tree."""
        if self.cache.has_sliding_layers:
            raise ValueError("tree drafts need a model without sliding-window layers: use a chain drafter")
        n = len(parents)
        sees = torch.eye(n, dtype=torch.bool)
        depth = [0] * n
        for i, parent in enumerate(parents):
            if parent >= 0:
                if parent >= i:
                    raise ValueError(f"tree parents must come first: token {i} has parent {parent}")
                sees[i] |= sees[parent]
                depth[i] = depth[parent] + 1
        visible = torch.cat([torch.ones(n, self.length, dtype=torch.bool), sees], dim=1)[None, None]
        if getattr(self.model.config, "_attn_implementation", "sdpa") == "eager":  # eager adds the mask to the scores
            dtype = self.model.dtype
            visible = torch.zeros(visible.shape, dtype=dtype).masked_fill(~visible, torch.finfo(dtype).min)
        positions = (self.length + torch.tensor(depth)).unsqueeze(0)
        return positions.to(self.model.device), visible.to(self.model.device)

    def logits(self, hidden: torch.Tensor, head_weight: torch.Tensor | None = None) -> torch.Tensor:
        """Float logits [n, vocab'] from hidden [n, hidden]; `head_weight` [vocab', hidden] trims the head."""
        weight = self.model.get_output_embeddings().weight if head_weight is None else head_weight
        logits = torch.nn.functional.linear(hidden, weight).float()
        if self.softcap:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        return logits

    def forward(self, token_ids: Sequence[int], parents: Sequence[int] | None = None) -> torch.Tensor:
        """Full-vocabulary logits [n, vocab] for `token_ids` [n] (a chain, or a tree: `parents`) after
        the cached context."""
        return self.logits(self.hidden_states(token_ids, parents))

    def prefill(self, token_ids: Sequence[int]) -> None:
        """Fill the cache with `token_ids` (no logits are computed)."""
        if token_ids:
            self.hidden_states(token_ids)

    def rollback(self, length: int) -> None:
        """Keep only the first `length` cached positions."""
        self.cache.crop_to(length)
        self.length = min(self.length, length)

    def keep(self, start: int, kept: Sequence[int]) -> None:
        """After a forward of inputs from position `start` on: keep the inputs `kept` (offsets from
        `start`, increasing), moved to `start`, `start` + 1, ...; drop the rest. For a chain `kept`
        is 0..m-1 and this is a rollback; for a tree, the accepted path is compacted."""
        if list(kept) != list(range(len(kept))):
            self.cache.compact(start, kept)
        self.rollback(start + len(kept))


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

PACK_BELOW = 0.9  # linear maps run on token positions only when these are under this share of the padded ones


class _TokenPositions:
    """The token (not padding) positions of a padded forward, for the linear maps of the rows now running."""

    def __init__(self) -> None:
        self.written: torch.Tensor | None = None  # [rows, width]; None: linear maps run on every position
        self.index: torch.Tensor | None = None  # flat positions of tokens among the running rows' [rows * width]
        self.size = 0  # rows * width of the running rows
        self._all: tuple[torch.Tensor | None, int] = (None, 0)  # (index, size) of all the forward's rows

    def use(self, written: torch.Tensor | None) -> None:
        """A new forward's token mask (None: no packing); all its rows run."""
        self.written = written
        self._all = (None, 0) if written is None else _flat_tokens(written)
        self.index, self.size = self._all

    def select(self, rows: torch.Tensor | None) -> None:
        """The running rows: all of the forward's (None) or a subset (indices into them)."""
        if self.written is not None:
            self.index, self.size = self._all if rows is None else _flat_tokens(self.written[rows])


def _flat_tokens(mask: torch.Tensor) -> tuple[torch.Tensor, int]:
    return mask.reshape(-1).nonzero().squeeze(1), mask.numel()


class _PackedLinear(torch.nn.Module):
    """A linear map computed at the token positions only; padding positions get zeros."""

    def __init__(self, linear: torch.nn.Linear, positions: _TokenPositions):
        super().__init__()
        self.linear = linear
        self.positions = positions

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        index = self.positions.index
        if index is None or x.shape[:-1].numel() != self.positions.size:
            return self.linear(x)
        flat = x.reshape(-1, x.shape[-1])
        out = flat.new_zeros(flat.shape[0], self.linear.out_features)
        out.index_copy_(0, index, self.linear(flat.index_select(0, index)))
        return out.view(*x.shape[:-1], self.linear.out_features)


class _SharedRowsLayer(torch.nn.Module):
    """A decoder layer run on `plan.computed` rows only; each row that keeps it takes its class's output,
    a row that skips it passes its input on (plan None: every row runs it, as usual)."""

    def __init__(self, layer: torch.nn.Module, positions: _TokenPositions):
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


class BatchedSession:
    """A model with `batch_size` independent rows, each with its own skip set (a `ModelSession` per row)."""

    def __init__(self, model: PreTrainedModel, skip_layers: Sequence[int], batch_size: int, capacity: int):
        self.model = model
        self.skipper = skipper_for(model)
        self.row_skips = [validate_skip_layers(skip_layers, self.skipper.num_layers)] * batch_size
        self.cache = RowCache(batch_size, capacity)
        self.lengths = [0] * batch_size
        self.tokens: list[list[int]] = [[] for _ in range(batch_size)]  # each row's cached tokens
        config = model.config
        self.softcap = getattr(config, "final_logit_softcapping", None)
        layer_types = getattr(config, "layer_types", None) or []
        # Models with sliding-window layers take one mask per layer kind (Gemma 3).
        self.sliding_window = getattr(config, "sliding_window", None) if "sliding_attention" in layer_types else None
        self.eager = getattr(config, "_attn_implementation", "sdpa") == "eager"
        # CPU only: on CUDA a masked grouped-query SDPA falls back to the math kernel, and padding costs
        # little where a forward is bound by latency, not arithmetic.
        on_cpu = model.device.type == "cpu"
        self.attention = ROWS_ATTENTION if on_cpu and getattr(config, "_attn_implementation", None) == "sdpa" else None
        self.pack_below = PACK_BELOW if on_cpu else 0.0
        self.pad_id = 0
        self.positions = _TokenPositions()
        self._linears: list[tuple[torch.nn.Module, str, torch.nn.Linear, _PackedLinear]] | None = None

    def forward(
        self, chunks: dict[int, list[int]], all_rows: bool = False, head_weight: torch.Tensor | None = None
    ) -> dict[int, torch.Tensor]:
        """Run each row's `chunks[row]` after its cached context; return its logits [len, vocab].

        head_weight: [vocab', hidden] rows of the LM head to compute (a trimmed head), default all.
        all_rows: run every row of the batch (rows missing from `chunks` run one padding token that
        is never kept), which avoids gathering the cache for a subset.
        """
        rows, lengths, hidden = self._run(chunks, all_rows)
        weight = self.model.get_output_embeddings().weight if head_weight is None else head_weight
        logits = torch.nn.functional.linear(hidden, weight).float()
        if self.softcap:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        return dict(zip([r for r, n in zip(rows, lengths) if n], logits.split([n for n in lengths if n])))

    def prefill(self, chunks: dict[int, Sequence[int]], min_shared: int = 8) -> None:
        """Fill new rows (just reset) with `chunks[row]`, no logits, computing each prefix of at least
        `min_shared` tokens that rows of one skip set share only once (see the module docstring)."""
        chunks = {row: tuple(tokens) for row, tokens in chunks.items() if tokens}
        for row, tokens in chunks.items():
            donor, shared = self._best_donor(row, tokens)
            if shared >= min_shared:
                self._copy(donor, row, shared)
        for segments in _prefix_rounds(chunks, self.row_skips, min_shared):
            runs, copies = {}, []
            for rows, stop in segments:
                needy = [r for r in rows if self.lengths[r] < stop]
                if needy:
                    runs[needy[0]] = list(chunks[needy[0]][self.lengths[needy[0]] : stop])
                    copies += [(needy[0], r, stop) for r in needy[1:]]
            for bucket in _length_buckets(runs):  # rows of one history have one length: sharing is kept
                self._run(bucket)
            for source, row, stop in copies:
                self._copy(source, row, stop)

    def _copy(self, source: int, row: int, stop: int) -> None:
        """Give `row` positions [its length, stop) of `source`, which holds the same tokens there."""
        self.cache.copy_positions(source, row, self.lengths[row], stop)
        self.tokens[row] = self.tokens[source][:stop]
        self.lengths[row] = stop

    def _best_donor(self, row: int, tokens: tuple[int, ...]) -> tuple[int, int]:
        """The row (other than `row`, same skip set) whose cached context shares the longest prefix."""
        best = (row, 0)
        for other, context in enumerate(self.tokens):
            if other != row and context and self.row_skips[other] == self.row_skips[row]:
                shared = _common_prefix(tokens, context)
                if shared > best[1]:
                    best = (other, shared)
        return best

    def _run(self, chunks: dict[int, list[int]], all_rows: bool = False) -> tuple[list[int], list[int], torch.Tensor]:
        """One padded forward; returns (rows, chunk lengths, final hidden states [sum of lengths, hidden])."""
        rows = list(range(len(self.lengths))) if all_rows else sorted(chunks)
        width = max(len(chunks.get(r, ())) for r in rows) or 1
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        for i, r in enumerate(rows):
            chunk = chunks.get(r, ())
            ids[i, : len(chunk)] = torch.tensor(chunk, dtype=torch.long)
        starts = torch.tensor([self.lengths[r] for r in rows])
        sizes = torch.tensor([len(chunks.get(r, ())) for r in rows])
        kv_length = int((starts + sizes.clamp(min=1)).max())  # a row without a chunk pads one query
        if kv_length > self.cache.capacity:
            raise ValueError(f"batched cache capacity {self.cache.capacity} exceeded: size it for the longest sequence")
        # Padding columns of a row that starts late may run past the cache: they take the last
        # position (their outputs are dropped and the cache never stores them, see RowCache.written).
        positions = torch.clamp(starts[:, None] + torch.arange(width), max=kv_length - 1)  # [rows, width]
        self.cache.rows = None if all_rows else torch.tensor(rows)
        self.cache.positions = positions
        self.cache.written = torch.arange(width)[None, :] < sizes[:, None]
        self.cache.tokens_at = self.cache.written.nonzero(as_tuple=True)  # once per forward, not per layer
        self.cache.kv_length = kv_length
        device = self.model.device
        packed = int(sizes.sum()) < self.pack_below * len(rows) * width
        with self._skipping(rows, chunks), self._packing(self.cache.written if packed else None), \
                self._attention():
            out = self.skipper.base(
                input_ids=ids.to(device), attention_mask=self._mask(positions), position_ids=positions.to(device),
                cache=self.cache, use_cache=True,
            )
        lengths = [len(chunks.get(r, ())) for r in rows]
        hidden = torch.cat([out.last_hidden_state[i, :n] for i, n in enumerate(lengths) if n])
        for r, n in zip(rows, lengths):
            self.lengths[r] += n
            self.tokens[r].extend(chunks.get(r, ()))
        return rows, lengths, hidden

    @contextmanager
    def _skipping(self, rows: list[int], chunks: dict[int, list[int]]) -> Iterator[None]:
        """Skip each row's layers: kept layers only when the working rows agree, else shared rows per layer."""
        skips = {self.row_skips[r] for r in rows if chunks.get(r)}
        if len(skips) == 1:  # rows without a chunk only pad: any skip set serves them
            with self.skipper.skipping(skips.pop()):
                yield
            return
        base = self.skipper.base
        wrapped = torch.nn.ModuleList(_SharedRowsLayer(layer, self.positions) for layer in self.skipper.all_layers)
        for index, plan in enumerate(self._layer_plans(rows, chunks)):
            wrapped[index].plan = plan
            if plan is not None:
                self.cache.layer_plans[index] = plan
        base._modules["layers"] = wrapped
        try:
            yield
        finally:
            base._modules["layers"] = self.skipper.all_layers
            self.cache.layer_plans = {}

    @contextmanager
    def _attention(self) -> Iterator[None]:
        """The model's attention is `self.attention` inside the block (None: as loaded)."""
        if self.attention is None:
            yield
            return
        config = self.model.config
        loaded, config._attn_implementation = config._attn_implementation, self.attention
        try:
            yield
        finally:
            config._attn_implementation = loaded

    @contextmanager
    def _packing(self, written: torch.Tensor | None) -> Iterator[None]:
        """With `written` [rows, width], every decoder layer's linear maps run on its token positions only."""
        if written is None:
            yield
            return
        if self._linears is None:
            self._linears = [(module, name, child, _PackedLinear(child, self.positions))
                             for layer in self.skipper.all_layers for module in layer.modules()
                             for name, child in module._modules.items() if isinstance(child, torch.nn.Linear)]
        self.positions.use(written)
        for module, name, _, wrapper in self._linears:
            module._modules[name] = wrapper
        try:
            yield
        finally:
            for module, name, linear, _ in self._linears:
                module._modules[name] = linear
            self.positions.use(None)

    def _layer_plans(self, rows: list[int], chunks: dict[int, list[int]]) -> list[LayerPlan | None]:
        """Per layer, the classes of rows with equal input there: same cached tokens, same chunk and the
        same skipped layers below it (None where every row runs the layer on its own)."""
        device = self.model.device
        # A number per distinct (cached tokens, chunk): equal token histories split at different
        # lengths run different inputs. Rows without a chunk get their own.
        ids: dict[tuple[tuple[int, ...], tuple[int, ...]], int] = {}
        histories = [ids.setdefault((tuple(self.tokens[r]), tuple(chunks[r])), i) if chunks.get(r) else i
                     for i, r in enumerate(rows)]
        plans: list[LayerPlan | None] = []
        for layer in range(self.skipper.num_layers):
            classes: dict[tuple, int] = {}
            running, source = [], []
            for i, r in enumerate(rows):
                skip = self.row_skips[r]
                if layer in skip:
                    continue
                key = (histories[i], tuple(s for s in skip if s < layer))
                running.append(i)
                source.append(classes.setdefault(key, len(classes)))
            if len(classes) == len(rows):
                plans.append(None)
                continue
            first: dict[int, int] = {}
            for i, c in zip(running, source):
                first.setdefault(c, i)
            plans.append(LayerPlan(
                computed=torch.tensor([first[c] for c in range(len(classes))], dtype=torch.long, device=device),
                running=torch.tensor(running, dtype=torch.long, device=device),
                source=torch.tensor(source, dtype=torch.long, device=device),
            ))
        return plans

    def _mask(self, positions: torch.Tensor):
        """Query at position p sees keys j <= p (and p - j < window on sliding layers): [rows, 1, width, kv]."""
        keys = torch.arange(self.cache.kv_length)
        visible = keys[None, None, :] <= positions[:, :, None]
        masks = {"full_attention": visible}
        if self.sliding_window is not None:
            masks["sliding_attention"] = visible & (positions[:, :, None] - keys[None, None, :] < self.sliding_window)
        dtype = self.model.dtype
        for kind, mask in masks.items():
            mask = mask[:, None].to(self.model.device)
            if self.eager:  # eager attention adds the mask to the scores
                mask = torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, torch.finfo(dtype).min)
            masks[kind] = mask
        return masks if self.sliding_window is not None else masks["full_attention"]

    def keep(self, row: int, length: int) -> None:
        """Keep only the first `length` positions of `row` (a rollback is only a new length)."""
        self.lengths[row] = min(self.lengths[row], length)
        del self.tokens[row][self.lengths[row] :]

    def reset_row(self, row: int, skip_layers: tuple[int, ...]) -> None:
        """Start a new sequence in `row` under `skip_layers` (validated)."""
        self.lengths[row] = 0
        self.tokens[row] = []
        self.row_skips[row] = validate_skip_layers(skip_layers, self.skipper.num_layers)


def _length_buckets(runs: dict[int, list[int]], ratio: float = 1.5) -> list[dict[int, list[int]]]:
    """`runs` split into forwards whose chunks are within `ratio` of each other's length, so a long
    prefix segment and short suffixes do not pad each other (padded attention is the cost)."""
    buckets: list[dict[int, list[int]]] = []
    shortest = 0  # of the open bucket: rows come shortest first
    for row in sorted(runs, key=lambda r: len(runs[r])):
        if not buckets or len(runs[row]) > ratio * shortest:
            buckets.append({})
            shortest = len(runs[row])
        buckets[-1][row] = runs[row]
    return buckets


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _prefix_rounds(
    chunks: dict[int, tuple[int, ...]], row_skips: Sequence[tuple[int, ...]], min_shared: int
) -> list[list[tuple[list[int], int]]]:
    """Plan a shared-prefix prefill: rounds of segments (rows, stop). A segment brings all its rows to
    `stop` tokens: one of them runs the tokens, the others copy them. Its rows share chunks[:stop] and
    skip set; shared segments (two or more rows) are at least `min_shared` tokens long. A segment's
    rows have all their earlier tokens from segments of earlier rounds, so one forward per round.
    Rows of a sorted group that share a prefix are planned as a radix tree over their tokens."""
    rounds: list[list[tuple[list[int], int]]] = []

    def plan(rows: list[int], start: int, depth: int) -> None:
        if len(rows) == 1:
            stop = len(chunks[rows[0]])
        else:
            stop = min(_common_prefix(chunks[rows[0]], chunks[r]) for r in rows[1:])
        if len(rows) == 1 or stop - start >= min_shared:
            while len(rounds) <= depth:
                rounds.append([])
            rounds[depth].append((rows, stop))
            start, depth = stop, depth + 1
        branches: dict[int, list[int]] = defaultdict(list)
        for r in rows:
            if len(chunks[r]) > stop:
                branches[chunks[r][stop]].append(r)
            elif start < stop:  # ends inside a prefix too short to share: it runs its own tokens
                plan([r], start, depth)
        for branch in branches.values():
            plan(branch, start, depth)

    groups: dict[tuple[int, ...], list[int]] = defaultdict(list)
    for row in sorted(chunks):
        groups[row_skips[row]].append(row)
    for rows in groups.values():
        plan(rows, 0, 0)
    return rounds
