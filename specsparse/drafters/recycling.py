"""Token Recycling (Luo et al. 2024): reuse the target's own top-k predictions as a successor table."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from specsparse.data.corpus import corpus_token_ids
from specsparse.decoding.drafter import Proposal
from specsparse.drafters.base import ConfiguredDrafter
from specsparse.util import content_hash

MAX_TOP_K = 256
SIZED = "sized"  # `tree: sized`: the largest tree whose verification costs about one forward (`sized_node_budget`)
SIZED_TOLERANCE = 0.10  # a sized tree's verification costs at most this much more than a one-token forward


def tree_nodes(widths: Sequence[int], depth: int) -> int:
    """Draft tokens of the static tree `widths` (each level's branching, then top-1 chains) `depth` deep."""
    nodes, level = 0, 1
    for d in range(depth):
        level *= widths[d] if d < len(widths) else 1
        nodes += level
    return nodes


def sized_node_budget(verification_costs: Sequence[float], tolerance: float = SIZED_TOLERANCE) -> int:
    """Draft tokens a verification can hold while it costs at most 1 + `tolerance` one-token forwards.
    verification_costs[n - 1]: a verification of n inputs (root included) over a one-token forward."""
    return max(n for n, cost in enumerate(verification_costs, start=1) if cost <= 1 + tolerance) - 1


@functools.lru_cache(maxsize=256)
def sized_widths(max_nodes: int, depth: int, top_k: int) -> tuple[int, ...]:
    """The branching of the largest static tree with at most `max_nodes` draft tokens `depth` deep
    (non-increasing widths of 2..top_k, widest at the root; ties go to the wider root), () for a
    chain when no branching fits."""
    best: tuple[int, ...] = ()
    for levels in range(1, depth + 1):
        for widths in itertools.combinations_with_replacement(range(top_k, 1, -1), levels):
            nodes = tree_nodes(widths, depth)
            if nodes <= max_nodes and (nodes > tree_nodes(best, depth) or (
                    nodes == tree_nodes(best, depth) and widths > best)):
                best = widths
    return best


class TokenRecyclingDrafter(ConfiguredDrafter):
    """Chain or tree drafts from an adjacency matrix of each token's top-k successors.

    `adj[t]` holds the top-k tokens the target predicted after `t` the last time `t` was verified
    (-1 = never seen). Every verification step refreshes the rows of all verified inputs at once.
    `propose` follows the successors of the last context token. The matrix persists across the
    requests a drafter serves (that is the point of recycling: the serving controller keeps one
    drafter per domain); `reset()` returns it to its starting table.

    tree: a static draft tree, as the paper drafts (e.g. [3, 2]): the root's top-3 successors, each
    with its top-2, then top-1 chains to depth k; None drafts the top-1 chain. "sized" (a deviation
    from the paper's fixed tree, for hardware where a large verification costs more than one forward,
    like a CPU) drafts, at each depth k, the largest such tree whose verification the cost profile
    prices at about one forward (`SIZED_TOLERANCE`); never less than the top-1 chain.
    max_nodes: the sized tree's draft tokens (`from_target` derives it from the job's cost profile).
    initial: the starting table (None: empty). Measurements start every request from the same
    table, so requests stay independent and batched measurement stays exact. With `warm_start`, the
    table the dense target leaves after verifying the texts of `warm_corpus` (`warm_table`), as a
    deployment that had served such text would hold it; else empty.
    """

    name = "recycling"
    replayable = False
    job_context = ("exclude_ids", "verification_costs")

    @classmethod
    def from_target(cls, target, vocab_ids=None, top_k: int = 8, tree: Sequence[int] | str | None = None,
                    warm_start: bool = False, warm_corpus: Sequence[str] = ("builtin",),
                    exclude_ids: Sequence[str] = (),
                    verification_costs: Callable[[], Sequence[float]] | None = None) -> TokenRecyclingDrafter:
        """warm_start: start from the table the dense target leaves after verifying every text of
        `warm_corpus` (entries as `specsparse.data.corpus` reads them: by default the built-in sets'
        references), built once per process. A job gives `exclude_ids`, its domain's calibration and
        test examples: no prompt under measurement, nor its reference, reaches the table before it is
        measured, and `verification_costs`, the cost profile's verification cost by input count over a
        one-token forward (read for `tree: sized` only). Serving gives neither."""
        if vocab_ids is not None:
            super().from_target(target, vocab_ids)  # rejects a trimmed vocabulary
        max_nodes = None
        if tree == SIZED:
            if verification_costs is None:
                raise ValueError("tree=sized sizes the tree by the job's cost profile: outside a job give the "
                                 "widths (e.g. tree=[4, 3, 2])")
            tree, max_nodes = None, sized_node_budget(verification_costs())
        initial = None
        if warm_start:
            initial = warm_table(target.model, corpus_token_ids(target.tokenizer, tuple(warm_corpus),
                                                                tuple(sorted(exclude_ids))), top_k)
        return cls(vocab_size=target.model.config.vocab_size, top_k=top_k, tree=tree, initial=initial,
                   max_nodes=max_nodes)

    @classmethod
    def check_options(cls, top_k: int = 8, tree: Sequence[int] | str | None = None, warm_start: bool = False,
                      warm_corpus: Sequence[str] = ("builtin",)) -> None:
        """Option values, before anything loads (corpus entries are checked with the job's paths)."""
        if isinstance(tree, str) and tree != SIZED:
            raise ValueError(f"tree={tree!r}: give the widths per depth (e.g. [4, 3, 2]), {SIZED} or null")
        cls(vocab_size=1, top_k=top_k, tree=None if tree == SIZED else tree)  # the vocabulary comes from the target
        if warm_start and not warm_corpus:
            raise ValueError("warm_start needs a warm_corpus to warm from: give one (e.g. [builtin]) or warm_start=false")

    @classmethod
    def drafts_trees_with(cls, options: Mapping[str, Any]) -> bool:
        """A `tree` (widths, or sized) drafts trees."""
        return bool(options.get("tree"))

    def __init__(self, vocab_size: int, top_k: int = 8, tree: Sequence[int] | None = None,
                 initial: torch.Tensor | None = None, max_nodes: int | None = None) -> None:
        if vocab_size < 1 or not 1 <= top_k <= MAX_TOP_K:
            raise ValueError(f"top_k must be in 1..{MAX_TOP_K} (the table keeps top_k successors of every token; Token "
                             f"Recycling keeps 8) and vocab_size >= 1, got {top_k}, {vocab_size}")
        if tree is not None and not all(1 <= int(b) <= top_k for b in tree):
            raise ValueError(f"tree branching {list(tree)} must be between 1 and top_k={top_k} per depth")
        if initial is not None and tuple(initial.shape) != (vocab_size, top_k):
            raise ValueError(f"initial table of shape {tuple(initial.shape)}, expected {(vocab_size, top_k)}")
        self.vocab_size = vocab_size
        self.top_k = top_k
        self.tree = None if tree is None else tuple(int(b) for b in tree)
        self.max_nodes = max_nodes
        self.initial = initial
        self.adj = torch.full((vocab_size, top_k), -1, dtype=torch.long) if initial is None else initial.clone()
        self._last: int | None = None

    @property
    def drafts_trees(self) -> bool:  # type: ignore[override]
        return self.tree is not None or self.max_nodes is not None

    def reset(self) -> None:
        if self.initial is None:
            self.adj.fill_(-1)
        else:
            self.adj.copy_(self.initial)
        self._last = None

    def begin(self, prompt_ids: list[int]) -> None:
        self._last = int(prompt_ids[-1]) if len(prompt_ids) else None

    def propose(self, k: int) -> Proposal:
        if self._last is None or k <= 0:
            return Proposal(tokens=[])
        tokens: list[int] = []
        parents: list[int] = []
        level = [(-1, self._last)]  # (index of the node, its token); -1: the last context token
        widths = self.tree if self.max_nodes is None else sized_widths(self.max_nodes, k, self.top_k)
        for depth in range(k):
            width = widths[depth] if widths is not None and depth < len(widths) else 1
            next_level = []
            for index, token in level:
                for successor in self.adj[token, :width].tolist():
                    if successor >= 0:
                        next_level.append((len(tokens), successor))
                        tokens.append(successor)
                        parents.append(index)
            level = next_level
        return Proposal.tree(tokens, parents)

    def observe(self, committed: list[int], verified_ids: list[int], verified_logits: torch.Tensor) -> None:
        if len(committed):
            self._last = int(committed[-1])
        if not len(verified_ids):
            return
        # Keep the last row per id: index_put with duplicate indices has no defined winner.
        last_row = {int(t): i for i, t in enumerate(verified_ids)}
        rows = torch.tensor(list(last_row.values()), device=verified_logits.device)
        # Padded LM heads can be wider than the vocabulary; ids past it are never valid tokens.
        logits = verified_logits[rows, : self.vocab_size]
        width = min(self.top_k, logits.shape[-1])
        top = torch.topk(logits, width, dim=-1).indices.to(self.adj.device)
        self.adj[torch.tensor(list(last_row.keys())), :width] = top


def warm_table(model, sequences: Sequence[Sequence[int]], top_k: int, batch_size: int = 16) -> torch.Tensor:
    """The adjacency table after the dense target has verified `sequences` in order (each row: the
    top-k successors the target predicts after the token, at its last occurrence), in padded
    batches of `batch_size`; cached per model, sequences and top_k."""
    key = (id(model), content_hash([list(s) for s in sequences]), top_k)
    if key not in _WARM_TABLES:
        vocab = model.config.vocab_size
        adj = torch.full((vocab, top_k), -1, dtype=torch.long)
        with torch.inference_mode():
            for start in range(0, len(sequences), batch_size):
                batch = [list(s) for s in sequences[start:start + batch_size]]
                width = max(len(s) for s in batch)
                ids = torch.tensor([s + [0] * (width - len(s)) for s in batch], device=model.device)
                mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in batch], device=model.device)
                logits = model(input_ids=ids, attention_mask=mask).logits  # right padding: real positions are exact
                for row, sequence in enumerate(batch):
                    last_row = {int(t): i for i, t in enumerate(sequence)}
                    top = torch.topk(logits[row, list(last_row.values()), :vocab].float(), min(top_k, vocab), dim=-1)
                    adj[list(last_row), : top.indices.shape[1]] = top.indices.cpu()
        _WARM_TABLES[key] = adj
    return _WARM_TABLES[key]


_WARM_TABLES: dict[tuple, torch.Tensor] = {}
