"""Prompt lookup decoding: draft the tokens that followed an earlier occurrence of the context's tail."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from specsparse.decoding.drafter import Proposal, tree_from_branches
from specsparse.drafters.base import ConfiguredDrafter


class PromptLookupDrafter(ConfiguredDrafter):
    """N-gram prompt lookup, proposing exactly what HF's `PromptLookupCandidateGenerator` proposes.

    For n from `max_ngram_size` down to `min_ngram_size`, take the last n tokens of the context and
    find their first (leftmost) occurrence that is not the tail itself; the tokens after it are the
    draft. HF rescans the whole sequence each step; here an index maps every n-gram to the start of
    its first occurrence and grows as tokens are committed, so a step costs O(max_ngram_size + k).

    branches > 1 (a deviation from HF, which drafts one chain) drafts a tree: the continuations after
    the first occurrences of the tail at the next n-gram sizes too, up to `branches` distinct ones,
    merged where they share a prefix.
    """

    name = "pld"

    def __init__(self, max_ngram_size: int = 3, min_ngram_size: int = 1, branches: int = 1) -> None:
        if not 1 <= min_ngram_size <= max_ngram_size:
            raise ValueError(f"need 1 <= min_ngram_size <= max_ngram_size, got {min_ngram_size}, {max_ngram_size}")
        if branches < 1:
            raise ValueError(f"branches must be >= 1, got {branches}")
        self.max_ngram_size = max_ngram_size
        self.min_ngram_size = min_ngram_size
        self.branches = branches
        self._ids: list[int] = []
        # Only the first start is kept: HF picks the leftmost match, and later ones never change it.
        self._first: dict[tuple[int, ...], int] = {}

    @property
    def drafts_trees(self) -> bool:  # type: ignore[override]
        return self.branches > 1

    @classmethod
    def drafts_trees_with(cls, options: Mapping[str, Any]) -> bool:
        """More than one of `branches` drafts trees."""
        return (options.get("branches") or 1) > 1

    def reset(self) -> None:
        self._ids = []
        self._first = {}

    def begin(self, prompt_ids: list[int]) -> None:
        self.reset()
        self._extend(prompt_ids)

    def propose(self, k: int) -> Proposal:
        ids = self._ids
        n_ids = len(ids)
        if k <= 0:
            return Proposal(tokens=[])
        drafts: list[list[int]] = []
        # HF never matches an n-gram as long as the whole sequence (n <= len - 1).
        for n in range(min(self.max_ngram_size, n_ids - 1), self.min_ngram_size - 1, -1):
            start = self._first[tuple(ids[n_ids - n :])]
            # The tail itself is always indexed; a first occurrence at the tail means no earlier one.
            if start < n_ids - n:
                draft = ids[start + n : start + n + k]
                if draft not in drafts:
                    drafts.append(draft)
                if len(drafts) == self.branches:
                    break
        return tree_from_branches(drafts)

    def observe(self, committed: list[int], verified_ids: list[int], verified_logits: torch.Tensor) -> None:
        self._extend(committed)

    def _extend(self, tokens: list[int]) -> None:
        ids, first = self._ids, self._first
        for tok in tokens:
            ids.append(int(tok))
            end = len(ids)
            for n in range(self.min_ngram_size, min(self.max_ngram_size, end) + 1):
                first.setdefault(tuple(ids[end - n :]), end - n)
