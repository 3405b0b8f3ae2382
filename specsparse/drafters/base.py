"""The one interface every drafter implements.

Lifecycle for one request (the engine drives it):

    drafter.begin(prompt_ids)            # once, with the full prompt
    loop:
        p = drafter.propose(k)           # up to k tokens continuing prompt + committed tokens
        ... target verifies ...
        drafter.observe(committed, verified_ids, verified_logits)

`reset()` clears any state kept across requests (e.g. Token Recycling's adjacency matrix), so a
measurement that calls it first is a pure function of its inputs.

Replay (`specsparse.measuring.replay`) scores a drafter against the target's known greedy continuation with no
target forward: it needs drafters whose proposals depend on the committed context only
(`replayable`). `replay_drafters` may precompute them for a batch (LM drafters do).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from specsparse.decoding.models import LoadedModel


@dataclass(frozen=True)
class Proposal:
    """Draft tokens, and (for sampling) the drafter's distribution at each drafted position.

    tokens: list of n <= k token ids (n may be 0: the engine then runs plain decoding for one step).
    probs: [n, vocab] float tensor of the draft distributions q_i the tokens were drawn from,
        or None for deterministic drafters (treated as one-hot at each token).
    """

    tokens: list[int]
    probs: torch.Tensor | None = None


class Drafter:
    """Base class; subclasses override what they need."""

    name: str = "drafter"
    # Proposals are a deterministic function of the committed context. Not so for drafters that learn
    # from the target's logits at every verified input, rejected drafts included (replay cannot know
    # those), or that sample: they are measured by lockstep batched verification instead.
    replayable: bool = True

    @classmethod
    def from_target(cls, target: LoadedModel, vocab_ids: list[int] | None = None, **options) -> Drafter:
        """Build the drafter for `target` (what configs instantiate). Drafters without an LM head
        cannot take a trimmed vocabulary."""
        if vocab_ids is not None:
            raise ValueError(
                f"drafter {cls.name!r} has no LM head, so it cannot use a trimmed vocabulary: "
                "use drafter=self_skip or drafter=draft_model for vocabulary trimming"
            )
        return cls(**options)

    def reset(self) -> None:
        """Forget state carried across requests."""

    def replay_drafters(
        self, prompts: Sequence[Sequence[int]], continuations: Sequence[Sequence[int]], batch_size: int
    ) -> list[Drafter]:
        """One drafter per prompt for replaying it over the target's greedy `continuations`.

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

    def close(self) -> None:
        """Release per-request resources (caches)."""
