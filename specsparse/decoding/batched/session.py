"""A model with many independent rows, each at its own length and with its own skip set.

Row b's chunk is written at positions [L_b, L_b + C) of its slot and its queries see keys j <= their
own position. No cache crop is ever needed: positions below L_b are always the row's committed
context, and each step rewrites [L_b, L_b + C) before any query reads it, so stale keys of rejected
drafts or padding beyond L_b are never visible; rolling a row back is only setting L_b. Positions
and masks come from the row lengths, never from a cache layer, so skipping layer 0 is safe here too.
How rows with different skip sets or chunk lengths share one forward: see layers.py.

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

import torch
from transformers import PreTrainedModel

from specsparse.decoding.batched.layers import (
    ROWS_ATTENTION,
    LayerPlan,
    PackedLinear,
    RowCache,
    SharedRowsLayer,
    TokenPositions,
)
from specsparse.decoding.forward_path import LINEAR_MAPS, lm_head
from specsparse.decoding.skipping import skipper_for, validate_skip_layers

PACK_BELOW = 0.9  # linear maps run on token positions only when these are under this share of the padded ones


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
        self.positions = TokenPositions()
        self._linears: list[tuple[torch.nn.Module, str, torch.nn.Module, PackedLinear]] | None = None

    def forward(
        self, chunks: dict[int, list[int]], all_rows: bool = False, head: torch.nn.Module | None = None
    ) -> dict[int, torch.Tensor]:
        """Run each row's `chunks[row]` after its cached context; return its logits [len, vocab].

        head: hidden -> vocab' in place of the model's LM head (a trimmed head), default the model's.
        all_rows: run every row of the batch (rows missing from `chunks` run one padding token that
        is never kept), which avoids gathering the cache for a subset.
        """
        rows, lengths, hidden = self._run(chunks, all_rows)
        logits = (lm_head(self.model) if head is None else head)(hidden).float()
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
        wrapped = torch.nn.ModuleList(SharedRowsLayer(layer, self.positions) for layer in self.skipper.all_layers)
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
            self._linears = [(module, name, child, PackedLinear(child, self.positions))
                             for layer in self.skipper.all_layers for module in layer.modules()
                             for name, child in module._modules.items() if isinstance(child, LINEAR_MAPS)]
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
