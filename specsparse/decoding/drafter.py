"""The engine's side of a drafter: `Drafter`, the protocol the decoding engine drives, and
`Proposal`, what a drafter proposes. Nothing here knows of jobs: building a drafter from its config
options, checking those options, pricing its step and recording it live in
`specsparse.drafters.base` (`ConfiguredDrafter`, `PlannedJob`), which every drafter of
`specsparse.drafters` derives from.

Lifecycle for one request (the engine drives it):

    drafter.begin(prompt_ids)            # once, with the full prompt
    loop:
        p = drafter.propose(k)           # up to k tokens continuing prompt + committed tokens
        ... target verifies ...
        drafter.observe(committed, verified_ids, verified_logits)

Feature drafters (EAGLE: `feature_layers` set) also read the target's hidden states:
`observe_features(features)` gives them the (sparse) target's features of the next context positions,
those of prompt[:-1] after the prefill and those of the step's kept inputs (the last committed token
and the accepted drafts) before each `observe`.

`reset()` clears any state kept across requests (e.g. Token Recycling's adjacency matrix), so a
measurement that calls it first is a pure function of its inputs.

Replay (`specsparse.measuring.replay`) scores a drafter against the target's known greedy continuation with no
target forward: it needs drafters whose proposals depend on the committed context only
(`replayable`). `replay_drafters` may precompute them for a batch (LM drafters do).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Proposal:
    """Draft tokens, and (for sampling) the drafter's distribution at each drafted position.

    tokens: list of n token ids (n may be 0: the engine then runs plain decoding for one step).
    probs: [n, vocab] float tensor of the draft distributions q_i the tokens were drawn from,
        or None for deterministic drafters (treated as one-hot at each token).
    parents: None for a chain (token i follows token i - 1). For a tree draft, parents[i] is the
        index of the token that tokens[i] follows, -1 for the last committed token; parents come
        first (parents[i] < i). A chain is at most k tokens long; a tree at most k deep.
    """

    tokens: list[int]
    probs: torch.Tensor | None = None
    parents: tuple[int, ...] | None = None

    @classmethod
    def tree(cls, tokens: list[int], parents: Sequence[int]) -> Proposal:
        """A tree draft, or a chain when every token follows the one before it."""
        if list(parents) == list(range(-1, len(tokens) - 1)):
            return cls(tokens)
        return cls(tokens, parents=tuple(parents))

    def depths(self) -> list[int]:
        """Depth of every token: 1 for a child of the last committed token."""
        if self.parents is None:
            return list(range(1, len(self.tokens) + 1))
        depths: list[int] = []
        for parent in self.parents:
            depths.append(1 if parent < 0 else depths[parent] + 1)
        return depths

    def within(self, depth: int) -> Proposal:
        """The tokens at most `depth` deep (a tree's kept tokens stay in order, parents renumbered)."""
        if self.parents is None:
            return Proposal(self.tokens[:depth], None if self.probs is None else self.probs[:depth])
        kept = [i for i, d in enumerate(self.depths()) if d <= depth]
        index = {old: new for new, old in enumerate(kept)}
        return Proposal([self.tokens[i] for i in kept], None if self.probs is None else self.probs[kept],
                        tuple(index.get(self.parents[i], -1) for i in kept))


def tree_from_branches(branches: Sequence[Sequence[int]]) -> Proposal:
    """The trie of several drafted continuations: shared prefixes become one path. One branch gives
    a chain (parents None)."""
    branches = [list(b) for b in branches if b]
    if len(branches) <= 1:
        return Proposal(branches[0] if branches else [])
    tokens: list[int] = []
    parents: list[int] = []
    children: dict[tuple[int, int], int] = {}  # (parent index, token) -> index
    for branch in branches:
        parent = -1
        for token in branch:
            if (parent, token) not in children:
                children[(parent, token)] = len(tokens)
                tokens.append(token)
                parents.append(parent)
            parent = children[(parent, token)]
    return Proposal.tree(tokens, parents)


class Drafter:
    """What the engine asks of a drafter: the request lifecycle (begin, propose, observe,
    observe_features, reset, close), replay's per-prompt drafters, and the flags below. Subclasses
    override what they need; drafters a job builds derive from `specsparse.drafters.base.ConfiguredDrafter`."""

    name: str = "drafter"
    # Proposals are a deterministic function of the committed context. Not so for drafters that learn
    # from the target's logits at every verified input, rejected drafts included (replay cannot know
    # those), or that sample: they are measured by lockstep batched verification instead.
    replayable: bool = True
    # Proposals may be trees (`Proposal.parents`): greedy verification only, and the engine measures
    # them when the drafter is not replayable (lockstep batches take chains).
    drafts_trees: bool = False
    # Target hidden states the drafter reads (`ModelSession` feature_layers; `FINAL_HIDDEN` is the
    # final-norm output), or None.
    feature_layers: tuple[int, ...] | None = None

    def reset(self) -> None:
        """Forget state carried across requests."""

    def replay_drafters(
        self, prompts: Sequence[Sequence[int]], continuations: Sequence[Sequence[int]], batch_size: int,
        skip_layers: Sequence[int] = (),
    ) -> list[Drafter]:
        """One drafter per prompt for replaying it over the target's greedy `continuations` (generated
        under the target's `skip_layers`).

        Context-only drafters restart on `begin`, so this one instance serves every prompt in turn.
        """
        return [self] * len(prompts)

    def begin(self, prompt_ids: list[int]) -> None:
        """Start a request whose context is `prompt_ids` (chat template already applied)."""
        raise NotImplementedError

    def propose(self, k: int) -> Proposal:
        """Propose up to k tokens that continue the current context."""
        raise NotImplementedError

    def observe(self, committed: list[int], verified_ids: list[int], verified_logits: torch.Tensor) -> None:
        """Feedback after one verification step.

        committed: tokens appended to the context this step (accepted drafts, then the bonus token).
        verified_ids: the target's inputs this step: [last context token, *draft tokens] (length n+1).
        verified_logits: [n+1, vocab] target logits at those positions (row i predicts the token after
            verified_ids[i]); Token Recycling learns successor lists from them.
        """
        raise NotImplementedError

    def observe_features(self, features: torch.Tensor) -> None:
        """The target's features [m, features] of the next m context positions (feature drafters)."""

    def close(self) -> None:
        """Release per-request resources (caches)."""
