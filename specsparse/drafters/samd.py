"""SAM-Decoding: draft from the longest suffix match, in the request's own text (a dynamic suffix
automaton) or in a text corpus (a static one)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch

from specsparse.decoding.drafter import Drafter, Proposal
from specsparse.drafters.base import ConfiguredDrafter

SEPARATOR = -1  # between corpus documents: no token matches it, so a match never spans two documents


class SuffixAutomaton:
    """An online suffix automaton (Blumer et al.) over the token sequence `ids`: every substring of
    `ids` is a path from the root. State i holds the length of its longest string, its suffix link,
    its transitions and the end index of its strings' first occurrence; state 0 is the root."""

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.length: list[int] = [0]
        self.link: list[int] = [-1]
        self.next: list[dict[int, int]] = [{}]
        self.endpos: list[int] = [-1]
        self.last = 0

    @classmethod
    def of_documents(cls, documents: Iterable[Sequence[int]]) -> SuffixAutomaton:
        """The automaton of the documents, each followed by `SEPARATOR`."""
        automaton = cls()
        for document in documents:
            for tok in (*document, SEPARATOR):
                automaton.extend(int(tok))
        return automaton

    @property
    def num_states(self) -> int:
        return len(self.length)

    def advance(self, state: int, n: int, tok: int) -> tuple[int, int]:
        """From the state of a matched suffix of length n, the state and length of the longest suffix
        of (that suffix + tok) occurring in `ids`. Amortised O(1)."""
        length, link, nxt = self.length, self.link, self.next
        while state and tok not in nxt[state]:
            state = link[state]
            n = length[state]
        if tok in nxt[state]:
            return nxt[state][tok], n + 1
        return 0, 0

    def continuation(self, state: int, k: int) -> list[int]:
        """Up to k tokens after the first occurrence of the state's strings (never past a document's end)."""
        end = self.endpos[state]
        following = self.ids[end + 1 : end + 1 + max(k, 0)]
        return following[: following.index(SEPARATOR)] if SEPARATOR in following else following

    def extend(self, tok: int) -> None:
        """Standard online extension by one token."""
        length, link, nxt, endpos = self.length, self.link, self.next, self.endpos
        self.ids.append(tok)
        cur = len(length)
        length.append(length[self.last] + 1)
        link.append(0)
        nxt.append({})
        endpos.append(len(self.ids) - 1)
        p = self.last
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
        self.last = cur


class SuffixAutomatonDrafter(ConfiguredDrafter):
    """SAM-Decoding: suffix-automaton retrieval over the request's context and, optionally, a corpus.

    The dynamic automaton is built incrementally over prompt + committed tokens; the drafter tracks
    the longest suffix of the context that also occurs earlier in it, by matching each new token
    against the automaton of the previous prefix before adding the token. The static automaton
    (`corpus`) is built once over a corpus of texts; the drafter tracks the longest suffix of the
    context that occurs in it. Both are amortised O(1) per token. A step drafts the tokens after the
    first occurrence of the longer match (ties: the request's own text), if that match reaches
    `min_match` and has a continuation; else `fallback` (e.g. Token Recycling) proposes. The fallback
    is also fed every begin/observe/reset so it keeps learning while unused.
    """

    name = "samd"
    job_context = ("exclude_ids", "verification_costs")

    @classmethod
    def from_target(
        cls, target, vocab_ids=None, min_match: int = 2, recycling_fallback: bool = True, recycling_top_k: int = 8,
        recycling_tree: Sequence[int] | str | None = None, recycling_warm_start: bool = False,
        corpus: Sequence[str] = (), exclude_ids: Sequence[str] = (),
        verification_costs: Callable[[], Sequence[float]] | None = None,
    ) -> SuffixAutomatonDrafter:
        """SAMD; with `recycling_fallback` (the default) short matches fall back to Token Recycling
        (drafting the static tree `recycling_tree` when given, "sized" by the job's
        `verification_costs` as `TokenRecyclingDrafter` sizes it, from the table the dense target leaves
        after verifying `corpus` (or the built-in sets without one) with `recycling_warm_start`: see
        `TokenRecyclingDrafter`).
        corpus: entries of the static automaton's texts, as `specsparse.data.corpus` reads them
        ("builtin", "builtin:<domain>", a .jsonl, a saved `datasets` folder, "hf:<id>"); () for
        none. exclude_ids: given by a job (`ConfiguredDrafter.job_context`), its domain's calibration and test
        examples, kept out of the corpus and the warm table."""
        super().from_target(target, vocab_ids)  # rejects a trimmed vocabulary
        from specsparse.drafters.recycling import TokenRecyclingDrafter  # noqa: PLC0415

        fallback = TokenRecyclingDrafter.from_target(
            target, top_k=recycling_top_k, tree=recycling_tree, warm_start=recycling_warm_start,
            warm_corpus=tuple(corpus) or ("builtin",), exclude_ids=exclude_ids,
            verification_costs=verification_costs) if recycling_fallback else None
        static = corpus_automaton(target.tokenizer, tuple(corpus), tuple(sorted(exclude_ids))) if corpus else None
        return cls(min_match=min_match, fallback=fallback, corpus=static)

    @classmethod
    def check_options(cls, min_match: int = 2, recycling_fallback: bool = True, recycling_top_k: int = 8,
                      recycling_tree: Sequence[int] | str | None = None, recycling_warm_start: bool = False,
                      corpus: Sequence[str] = ()) -> None:
        """Option values, before anything loads (the corpus entries are checked with the job's paths)."""
        from specsparse.drafters.recycling import TokenRecyclingDrafter  # noqa: PLC0415

        cls(min_match=min_match)
        if recycling_fallback:
            TokenRecyclingDrafter.check_options(top_k=recycling_top_k, tree=recycling_tree)

    @classmethod
    def drafts_trees_with(cls, options: Mapping[str, Any]) -> bool:
        """A `recycling_tree` (widths, or sized) drafts trees."""
        return bool(options.get("recycling_tree"))

    def __init__(self, min_match: int = 2, fallback: Drafter | None = None, corpus: SuffixAutomaton | None = None) -> None:
        if min_match < 1:
            raise ValueError(f"min_match must be >= 1, got {min_match}")
        self.min_match = min_match
        self.fallback = fallback
        self.corpus = corpus
        self._clear()

    def _clear(self) -> None:
        self._automaton = SuffixAutomaton()
        # The current matches: (state, length) of the longest earlier-occurring suffix in the context,
        # and of the longest suffix occurring in the corpus.
        self._state, self.match_length = 0, 0
        self._corpus_state, self.corpus_match_length = 0, 0

    @property
    def replayable(self) -> bool:  # type: ignore[override]
        return self.fallback is None or self.fallback.replayable

    @property
    def drafts_trees(self) -> bool:  # type: ignore[override]
        return self.fallback is not None and self.fallback.drafts_trees

    @property
    def num_states(self) -> int:
        return self._automaton.num_states

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
        # The context match was found before the current token was added, so it ends before the
        # context does and at least one following token exists.
        matches = [(self.match_length, self._automaton, self._state)]
        if self.corpus is not None:
            matches.append((self.corpus_match_length, self.corpus, self._corpus_state))
        for n, automaton, state in sorted(matches, key=lambda match: -match[0]):  # stable: the context wins ties
            if n >= self.min_match and (tokens := automaton.continuation(state, k)):
                return Proposal(tokens=tokens)
        return self.fallback.propose(k) if self.fallback is not None else Proposal(tokens=[])

    def observe(self, committed: list[int], verified_ids: list[int], verified_logits: torch.Tensor) -> None:
        for tok in committed:
            self._push(int(tok))
        if self.fallback is not None:
            self.fallback.observe(committed, verified_ids, verified_logits)

    def _push(self, tok: int) -> None:
        """Advance both matches with `tok` (the context's in the automaton of the context so far), then add it."""
        automaton = self._automaton
        state, n = automaton.advance(self._state, self.match_length, tok)
        automaton.extend(tok)
        # Extending may split the matched state; the match then lives in the clone, a link ancestor.
        while state and automaton.length[automaton.link[state]] >= n:
            state = automaton.link[state]
        self._state, self.match_length = state, n
        if self.corpus is not None:
            self._corpus_state, self.corpus_match_length = self.corpus.advance(
                self._corpus_state, self.corpus_match_length, tok)


@functools.lru_cache(maxsize=8)
def corpus_automaton(tokenizer, entries: tuple[str, ...], exclude_ids: tuple[str, ...]) -> SuffixAutomaton:
    """The static automaton of a corpus for this tokenizer, built once per process and arguments."""
    from specsparse.data.corpus import corpus_token_ids  # noqa: PLC0415

    return SuffixAutomaton.of_documents(corpus_token_ids(tokenizer, entries, exclude_ids))
