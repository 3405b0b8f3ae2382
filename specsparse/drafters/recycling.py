"""Token Recycling (Luo et al. 2024): reuse the target's own top-k predictions as a successor table."""

from __future__ import annotations

import torch

from specsparse.drafters.base import Drafter, Proposal


class TokenRecyclingDrafter(Drafter):
    """Chain drafts from an adjacency matrix of each token's top-k successors.

    `adj[t]` holds the top-k tokens the target predicted after `t` the last time `t` was verified
    (-1 = never seen). Every verification step refreshes the rows of all verified inputs at once.
    `propose` follows the top-1 successor from the last context token. The matrix persists across
    requests (that is the point of recycling); only `reset()` clears it.
    """

    name = "recycling"
    replayable = False

    @classmethod
    def from_target(cls, target, vocab_ids=None, **options) -> TokenRecyclingDrafter:
        if vocab_ids is not None:
            super().from_target(target, vocab_ids)  # rejects a trimmed vocabulary
        return cls(vocab_size=target.model.config.vocab_size, **options)

    def __init__(self, vocab_size: int, top_k: int = 8) -> None:
        if vocab_size < 1 or top_k < 1:
            raise ValueError(f"vocab_size and top_k must be >= 1, got {vocab_size}, {top_k}")
        self.vocab_size = vocab_size
        self.top_k = top_k
        self.adj = torch.full((vocab_size, top_k), -1, dtype=torch.long)
        self._last: int | None = None

    def reset(self) -> None:
        self.adj.fill_(-1)
        self._last = None

    def begin(self, prompt_ids: list[int]) -> None:
        self._last = int(prompt_ids[-1]) if len(prompt_ids) else None

    def propose(self, k: int) -> Proposal:
        tokens: list[int] = []
        tok = self._last
        if tok is None:
            return Proposal(tokens=tokens)
        for _ in range(k):
            tok = int(self.adj[tok, 0])
            if tok < 0:
                break
            tokens.append(tok)
        return Proposal(tokens=tokens)

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
