"""Token Recycling (Luo et al. 2024): reuse the target's own top-k predictions as a successor table."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from specsparse.drafters.base import Drafter, Proposal


class TokenRecyclingDrafter(Drafter):
    """Chain drafts from an adjacency matrix of each token's top-k successors.

    `adj[t]` holds the top-k tokens the target predicted after `t` the last time `t` was verified
    (-1 = never seen). Every verification step refreshes the rows of all verified inputs at once.
    `propose` follows the top-1 successor from the last context token. The matrix persists across
    requests (that is the point of recycling); only `reset()` clears it.

    tree: a static draft tree, as the paper drafts (e.g. [3, 2]): the root's top-3 successors, each
    with its top-2, then top-1 chains to depth k; None drafts the top-1 chain.
    """

    name = "recycling"
    replayable = False

    @classmethod
    def from_target(cls, target, vocab_ids=None, **options) -> TokenRecyclingDrafter:
        if vocab_ids is not None:
            super().from_target(target, vocab_ids)  # rejects a trimmed vocabulary
        return cls(vocab_size=target.model.config.vocab_size, **options)

    @classmethod
    def check_options(cls, **options) -> None:
        cls(vocab_size=1, **options)  # the vocabulary comes from the target; the rest is checked as built

    def __init__(self, vocab_size: int, top_k: int = 8, tree: Sequence[int] | None = None) -> None:
        if vocab_size < 1 or top_k < 1:
            raise ValueError(f"vocab_size and top_k must be >= 1, got {vocab_size}, {top_k}")
        if tree is not None and not all(1 <= int(b) <= top_k for b in tree):
            raise ValueError(f"tree branching {list(tree)} must be between 1 and top_k={top_k} per depth")
        self.vocab_size = vocab_size
        self.top_k = top_k
        self.tree = None if tree is None else tuple(int(b) for b in tree)
        self.adj = torch.full((vocab_size, top_k), -1, dtype=torch.long)
        self._last: int | None = None

    @property
    def drafts_trees(self) -> bool:  # type: ignore[override]
        return self.tree is not None

    def reset(self) -> None:
        self.adj.fill_(-1)
        self._last = None

    def begin(self, prompt_ids: list[int]) -> None:
        self._last = int(prompt_ids[-1]) if len(prompt_ids) else None

    def propose(self, k: int) -> Proposal:
        if self._last is None or k <= 0:
            return Proposal(tokens=[])
        tokens: list[int] = []
        parents: list[int] = []
        level = [(-1, self._last)]  # (index of the node, its token); -1: the last context token
        for depth in range(k):
            width = self.tree[depth] if self.tree is not None and depth < len(self.tree) else 1
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
