"""SAM-Decoding: draft from an earlier occurrence of the context's longest repeated suffix."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from specsparse.drafters.base import Drafter, Proposal


class SuffixAutomatonDrafter(Drafter):
    """Suffix-automaton retrieval over prompt + committed tokens (SAM-Decoding style).

    An incremental suffix automaton (Blumer et al.) is built over the context, and the drafter tracks
    the longest suffix of the context that also occurs earlier in it, by matching each new token
    against the automaton of the previous prefix before adding the token. Both are amortised O(1)
    per token. The draft is the tokens after the first occurrence of that suffix. When the match is
    shorter than `min_match`, `fallback` (e.g. Token Recycling) proposes instead; it is also fed
    every begin/observe/reset so it keeps learning while unused.
    """

    name = "samd"

    @classmethod
    def from_target(
        cls, target, vocab_ids=None, min_match: int = 2, recycling_fallback: bool = True, recycling_top_k: int = 8,
        recycling_tree: Sequence[int] | None = None,
    ) -> SuffixAutomatonDrafter:
        """SAMD; with `recycling_fallback` (the default) short matches fall back to Token Recycling
        (drafting the static tree `recycling_tree` when given, see `TokenRecyclingDrafter`)."""
        super().from_target(target, vocab_ids)  # rejects a trimmed vocabulary
        from specsparse.drafters.recycling import TokenRecyclingDrafter  # noqa: PLC0415

        fallback = (TokenRecyclingDrafter(target.model.config.vocab_size, recycling_top_k, recycling_tree)
                    if recycling_fallback else None)
        return cls(min_match=min_match, fallback=fallback)

    @classmethod
    def check_options(cls, min_match: int = 2, recycling_fallback: bool = True, recycling_top_k: int = 8,
                      recycling_tree: Sequence[int] | None = None) -> None:
        from specsparse.drafters.recycling import TokenRecyclingDrafter  # noqa: PLC0415

        cls(min_match=min_match)
        if recycling_fallback:
            TokenRecyclingDrafter.check_options(top_k=recycling_top_k, tree=recycling_tree)

    def __init__(self, min_match: int = 2, fallback: Drafter | None = None) -> None:
        if min_match < 1:
            raise ValueError(f"min_match must be >= 1, got {min_match}")
        self.min_match = min_match
        self.fallback = fallback
        self._clear()

    def _clear(self) -> None:
        self._ids: list[int] = []
        # Automaton state i: longest string length, suffix link, transitions, and the end index of
        # the first occurrence of its strings. State 0 is the root (empty string).
        self._len: list[int] = [0]
        self._link: list[int] = [-1]
        self._next: list[dict[int, int]] = [{}]
        self._endpos: list[int] = [-1]
        self._last = 0
        # The current match: the state holding the longest earlier-occurring suffix, and its length.
        self._state = 0
        self.match_length = 0

    @property
    def replayable(self) -> bool:  # type: ignore[override]
        return self.fallback is None or self.fallback.replayable

    @property
    def drafts_trees(self) -> bool:  # type: ignore[override]
        return self.fallback is not None and self.fallback.drafts_trees

    @property
    def num_states(self) -> int:
        return len(self._len)

    def reset(self) -> None:
        self._clear()
        if self.fallback is not None:
            self.fallback.reset()

    def begin(self, prompt_ids: list[int]) -> None:
        self._clear()
        for tok in prompt_ids:
            self._push(int(tok))
        if self.fallback is not None:
            self.fallback.begin(prompt_ids)

    def propose(self, k: int) -> Proposal:
        if self.match_length < self.min_match:
            return self.fallback.propose(k) if self.fallback is not None else Proposal(tokens=[])
        # The match was found before the current token was added, so it ends before the context does
        # and at least one following token exists.
        end = self._endpos[self._state]
        return Proposal(tokens=self._ids[end + 1 : end + 1 + max(k, 0)])

    def observe(self, committed: list[int], verified_ids: list[int], verified_logits: torch.Tensor) -> None:
        for tok in committed:
            self._push(int(tok))
        if self.fallback is not None:
            self.fallback.observe(committed, verified_ids, verified_logits)

    def _push(self, tok: int) -> None:
        """Advance the match with `tok` in the automaton of the context so far, then add `tok`."""
        length, link, nxt = self._len, self._link, self._next
        state, n = self._state, self.match_length
        while state and tok not in nxt[state]:
            state = link[state]
            n = length[state]
        if tok in nxt[state]:
            state, n = nxt[state][tok], n + 1
        else:
            state, n = 0, 0
        self._ids.append(tok)
        self._extend(tok)
        # Extending may split the matched state; the match then lives in the clone, a link ancestor.
        while state and length[link[state]] >= n:
            state = link[state]
        self._state, self.match_length = state, n

    def _extend(self, tok: int) -> None:
        """Standard online suffix-automaton extension by one token."""
        length, link, nxt, endpos = self._len, self._link, self._next, self._endpos
        cur = len(length)
        length.append(length[self._last] + 1)
        link.append(0)
        nxt.append({})
        endpos.append(len(self._ids) - 1)
        p = self._last
        while p != -1 and tok not in nxt[p]:
            nxt[p][tok] = cur
            p = link[p]
        if p != -1:
            q = nxt[p][tok]
            if length[p] + 1 == length[q]:
                link[cur] = q
            else:
                clone = len(length)
                length.append(length[p] + 1)
                link.append(link[q])
                nxt.append(dict(nxt[q]))
                endpos.append(endpos[q])
                while p != -1 and nxt[p].get(tok) == q:
                    nxt[p][tok] = clone
                    p = link[p]
                link[q] = link[cur] = clone
        self._last = cur
