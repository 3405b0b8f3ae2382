"""An independent draft model that shares the target's tokenizer."""

from __future__ import annotations

from transformers import PreTrainedModel

from specsparse.drafters.lm import LMDrafter


class DraftModelDrafter(LMDrafter):
    """A small causal LM drafting for a larger target (own KV cache; see LMDrafter)."""

    name = "draft_model"

    def __init__(self, model: PreTrainedModel, target_vocab_size: int | None = None, **kwargs):
        super().__init__(model, **kwargs)
        if target_vocab_size is not None and self.full_vocab_size > target_vocab_size:
            raise ValueError(
                f"draft model vocabulary ({self.full_vocab_size}) is larger than the target's ({target_vocab_size}): "
                "use a draft model with the target's tokenizer"
            )

    @classmethod
    def from_target(
        cls, target, vocab_ids=None, source: str = "tiny", dtype: str = "float32", temperature: float = 0.0, seed: int = 0
    ) -> DraftModelDrafter:
        """Load the draft model `source` (any `load_model` source; loaded once per process) next to `target`,
        on the target's forward path."""
        from specsparse.decoding.models import load_model_cached  # noqa: PLC0415

        draft = load_model_cached(source, dtype=dtype, device=str(target.model.device), forward_path=target.forward_path)
        if len(draft.tokenizer) != len(target.tokenizer):
            raise ValueError(
                f"draft model {source!r} has a different tokenizer ({len(draft.tokenizer)} tokens vs the target's "
                f"{len(target.tokenizer)}): pick a draft model from the target's family"
            )
        return cls(draft.model, target_vocab_size=target.model.config.vocab_size, vocab_ids=vocab_ids,
                   temperature=temperature, seed=seed)
