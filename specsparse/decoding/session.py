"""A model under one skip set with its own KV cache: the unit the engine and LM drafters run.

`ModelSession` holds one sequence (run by the lean decode step where the model has one,
`lean_step.py`); `batched.session.BatchedSession` holds many rows, each at its own length and with
its own skip set.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedModel

from specsparse.decoding.forward_path import lm_head
from specsparse.decoding.lean_step import lean_step_of
from specsparse.decoding.skipping import FINAL_HIDDEN, SkipAwareCache, skipper_for, validate_skip_layers


class ModelSession:
    """A model under one skip set, with its own KV cache, for one request (target or LM drafter).

    feature_layers: hidden states every forward also records in `features` (a feature drafter's
    inputs, see `Drafter.feature_layers`): the residual stream entering each listed layer, or the
    final-norm output for `FINAL_HIDDEN`, concatenated per token, of the sparse model.
    """

    def __init__(self, model: PreTrainedModel, skip_layers: tuple[int, ...], feature_layers: Sequence[int] = ()):
        self.model = model
        self.skipper = skipper_for(model)
        self.lean = lean_step_of(model)  # None: HF's modules run the forward
        self.skip_layers = validate_skip_layers(skip_layers, self.skipper.num_layers)
        self.cache = SkipAwareCache(model.config, self.skip_layers)
        self.length = 0  # positions held in the cache
        self.softcap = getattr(model.config, "final_logit_softcapping", None)
        self.feature_layers = tuple(feature_layers)
        self.features: torch.Tensor | None = None  # [n, features] of the last forward's n tokens

    def hidden_states(self, token_ids: Sequence[int], parents: Sequence[int] | None = None) -> torch.Tensor:
        """Run `token_ids` [n] after the cached context; return final-norm hidden states [n, hidden].

        parents: for a token tree, the index of each token's parent among `token_ids` (-1: the
        cached context). Each token then sits at the position after its parent and attends to the
        context and its own ancestors only (a tree attention mask)."""
        device = self.model.device
        ids = torch.tensor([list(token_ids)], device=device)
        mask = None
        if parents is None:
            positions = torch.arange(self.length, self.length + len(token_ids), device=device).unsqueeze(0)
        else:
            positions, mask = self._tree_inputs(parents)
        if self.lean is not None:
            hidden, captured = self.lean.hidden_states(ids, positions, self.cache, mask, self.feature_layers)
        else:
            if mask is not None and getattr(self.model.config, "_attn_implementation", "sdpa") == "eager":
                mask = torch.zeros(mask.shape, dtype=self.model.dtype, device=device).masked_fill(
                    ~mask, torch.finfo(self.model.dtype).min)  # eager attention adds the mask to the scores
            with self.skipper.skipping(self.skip_layers), \
                    self.skipper.capturing(self.skip_layers, self.feature_layers) as captured:
                hidden = self.skipper.base(input_ids=ids, attention_mask=mask, cache=self.cache,
                                           position_ids=positions, use_cache=True).last_hidden_state
        self.length += len(token_ids)
        hidden = hidden[0]
        if self.feature_layers:
            self.features = torch.cat(
                [hidden if layer == FINAL_HIDDEN else captured[layer][0] for layer in self.feature_layers], dim=-1)
        return hidden

    def _tree_inputs(self, parents: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Position ids [1, n] and the bool attention mask [1, 1, n, context + n] of a token tree."""
        if self.cache.has_sliding_layers:
            raise ValueError("tree drafts need a model without sliding-window layers: use a chain drafter")
        n = len(parents)
        sees = torch.eye(n, dtype=torch.bool)
        depth = [0] * n
        for i, parent in enumerate(parents):
            if parent >= 0:
                if parent >= i:
                    raise ValueError(f"tree parents must come first: token {i} has parent {parent}")
                sees[i] |= sees[parent]
                depth[i] = depth[parent] + 1
        visible = torch.cat([torch.ones(n, self.length, dtype=torch.bool), sees], dim=1)[None, None]
        positions = (self.length + torch.tensor(depth)).unsqueeze(0)
        return positions.to(self.model.device), visible.to(self.model.device)

    def logits(self, hidden: torch.Tensor, head: torch.nn.Module | None = None) -> torch.Tensor:
        """Float logits [n, vocab'] from hidden [n, hidden]; `head` (hidden -> vocab', e.g. a trimmed head
        from `forward_path.head_rows`) in place of the model's own."""
        logits = (lm_head(self.model) if head is None else head)(hidden).float()
        if self.softcap:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        return logits

    def forward(self, token_ids: Sequence[int], parents: Sequence[int] | None = None) -> torch.Tensor:
        """Full-vocabulary logits [n, vocab] for `token_ids` [n] (a chain, or a tree: `parents`) after
        the cached context."""
        return self.logits(self.hidden_states(token_ids, parents))

    def prefill(self, token_ids: Sequence[int]) -> None:
        """Fill the cache with `token_ids` (no logits are computed)."""
        if token_ids:
            self.hidden_states(token_ids)

    def rollback(self, length: int) -> None:
        """Keep only the first `length` cached positions."""
        self.cache.crop_to(length)
        self.length = min(self.length, length)

    def keep(self, start: int, kept: Sequence[int]) -> None:
        """After a forward of inputs from position `start` on: keep the inputs `kept` (offsets from
        `start`, increasing), moved to `start`, `start` + 1, ...; drop the rest. For a chain `kept`
        is 0..m-1 and this is a rollback; for a tree, the accepted path is compacted."""
        if list(kept) != list(range(len(kept))):
            self.cache.compact(start, kept)
        self.rollback(start + len(kept))
