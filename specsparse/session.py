"""A model under one skip set with its own KV cache: the unit the engine and LM drafters run."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedModel

from specsparse.skipping import SkipAwareCache, skipper_for, validate_skip_layers


class ModelSession:
    """A model under one skip set, with its own KV cache, for one request (target or LM drafter)."""

    def __init__(self, model: PreTrainedModel, skip_layers: tuple[int, ...]):
        self.model = model
        self.skipper = skipper_for(model)
        self.skip_layers = validate_skip_layers(skip_layers, self.skipper.num_layers)
        self.cache = SkipAwareCache(model.config, self.skip_layers)
        self.length = 0  # positions held in the cache
        self.softcap = getattr(model.config, "final_logit_softcapping", None)

    def hidden_states(self, token_ids: Sequence[int]) -> torch.Tensor:
        """Run `token_ids` [n] after the cached context; return final-norm hidden states [n, hidden]."""
        ids = torch.tensor([list(token_ids)], device=self.model.device)
        positions = torch.arange(self.length, self.length + len(token_ids), device=self.model.device).unsqueeze(0)
        with self.skipper.skipping(self.skip_layers):
            out = self.skipper.base(input_ids=ids, cache=self.cache, position_ids=positions, use_cache=True)
        self.length += len(token_ids)
        return out.last_hidden_state[0]

    def logits(self, hidden: torch.Tensor, head_weight: torch.Tensor | None = None) -> torch.Tensor:
        """Float logits [n, vocab'] from hidden [n, hidden]; `head_weight` [vocab', hidden] trims the head."""
        weight = self.model.get_output_embeddings().weight if head_weight is None else head_weight
        logits = torch.nn.functional.linear(hidden, weight).float()
        if self.softcap:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        return logits

    def forward(self, token_ids: Sequence[int]) -> torch.Tensor:
        """Full-vocabulary logits [n, vocab] for `token_ids` [n] after the cached context."""
        return self.logits(self.hidden_states(token_ids))

    def prefill(self, token_ids: Sequence[int]) -> None:
        """Fill the cache with `token_ids` (no logits are computed)."""
        if token_ids:
            self.hidden_states(token_ids)

    def rollback(self, length: int) -> None:
        """Keep only the first `length` cached positions."""
        self.cache.crop_to(length)
        self.length = min(self.length, length)
