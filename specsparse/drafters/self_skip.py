"""Self-speculative drafting (SWIFT / Draft&Verify): the target itself with a draft skip set."""

from __future__ import annotations

from collections.abc import Sequence

from specsparse.drafters.lm import LMDrafter


class SelfSkipDrafter(LMDrafter):
    """The target model skipping `skip_layers` while drafting (its own KV cache; see LMDrafter)."""

    name = "self_skip"

    @classmethod
    def from_target(
        cls, target, vocab_ids=None, skip_layers: Sequence[int] = (), temperature: float = 0.0, seed: int = 0
    ) -> SelfSkipDrafter:
        return cls(target.model, skip_layers=tuple(sorted(skip_layers)), vocab_ids=vocab_ids, temperature=temperature, seed=seed)
