"""Drafters that run a causal LM: the target itself with a draft skip set (`self_skip`) or an
independent small model sharing the target's tokenizer (`draft_model`).

The drafter keeps its own KV cache. After each verification it keeps the cached drafts the target
accepted and feeds the rest of the committed tokens on the next proposal, so its cache always holds
exactly its own (sparse) model's states for the committed context. Sharing the target's cache instead
would leave layers the target skips without the accepted tokens: acceptance would drop silently.

An optional trimmed vocabulary (`vocab_ids`) makes the head compute only those logits; proposals are
mapped back to full-vocabulary ids.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedModel

from specsparse.decoding.batched.session import BatchedSession
from specsparse.decoding.drafter import Drafter, Proposal
from specsparse.decoding.forward_path import head_rows, is_fast
from specsparse.decoding.session import ModelSession
from specsparse.decoding.skipping import decoder_layers
from specsparse.drafters.base import ConfiguredDrafter


class LMDrafter(ConfiguredDrafter):
    """Greedy (or, with temperature > 0, sampled) chain drafts from a causal LM."""

    name = "lm"
    trims_vocabulary = True

    def __init__(
        self,
        model: PreTrainedModel,
        skip_layers: Sequence[int] = (),
        vocab_ids: Sequence[int] | None = None,
        temperature: float = 0.0,
        seed: int = 0,
    ):
        self.model = model
        self.skip_layers = tuple(sorted(skip_layers))
        self.temperature = temperature
        self.seed = seed
        head = model.get_output_embeddings().weight
        if vocab_ids is None:
            self.vocab_ids = None
            self.head = None  # the model's own LM head
        else:
            ids = torch.as_tensor(sorted(set(int(i) for i in vocab_ids)), dtype=torch.long)
            if len(ids) == 0 or int(ids.min()) < 0 or int(ids.max()) >= head.shape[0]:
                raise ValueError(f"draft vocabulary ids must be within 0..{head.shape[0] - 1} and non-empty")
            self.vocab_ids = ids.to(head.device)
            self.head = head_rows(model.get_output_embeddings(), self.vocab_ids, is_fast(model))  # hidden -> k
        self.full_vocab_size = head.shape[0]
        self.session: ModelSession | None = None

    @property
    def replayable(self) -> bool:  # type: ignore[override]
        return self.temperature <= 0

    def replay_drafters(self, prompts, continuations, batch_size, skip_layers=()) -> list[Drafter]:
        """Greedy chains need no drafting loop: after an accepted draft the drafter's context is the
        target's own continuation, so its i-th draft at a step is its greedy prediction at that position
        of the continuation. One teacher-forced batched forward gives all of them."""
        sequences = [[*p, *c] for p, c in zip(prompts, continuations)]
        predictions = []
        for first in range(0, len(sequences), batch_size):
            group = sequences[first : first + batch_size]
            session = BatchedSession(self.model, self.skip_layers, len(group), max(len(s) for s in group))
            with torch.inference_mode():
                logits = session.forward(dict(enumerate(group)), head=self.head)
            for row in range(len(group)):
                best = logits[row].argmax(dim=-1)
                predictions.append((best if self.vocab_ids is None else self.vocab_ids[best]).tolist())
        return [
            PredictedChainDrafter(len(p), c, pred) for p, c, pred in zip(prompts, continuations, predictions)
        ]

    @property
    def vocab_size(self) -> int:
        return self.full_vocab_size if self.vocab_ids is None else len(self.vocab_ids)

    def head_shape(self) -> tuple[int, int, float]:
        skipped = set(self.skip_layers)
        layer_params = sum(p.numel() for i, layer in enumerate(decoder_layers(self.model)) if i not in skipped
                           for p in layer.parameters())
        vocab, hidden = self.model.get_output_embeddings().weight.shape
        return vocab, hidden, 2.0 * layer_params

    def begin(self, prompt_ids: list[int]) -> None:
        self.session = ModelSession(self.model, self.skip_layers)
        self.context = list(prompt_ids)
        self.drafted: list[int] = []
        self.generator = torch.Generator().manual_seed(self.seed)

    def propose(self, k: int) -> Proposal:
        session = self.session
        pending = self.context[session.length :]  # committed tokens not yet in the cache (>= 1)
        tokens: list[int] = []
        probs: list[torch.Tensor] = []
        with torch.inference_mode():
            for _ in range(k):
                hidden = session.hidden_states(pending)[-1:]
                logits = session.logits(hidden, self.head)[0]
                token, dist = self._choose(logits)
                tokens.append(token)
                if dist is not None:
                    probs.append(dist)
                pending = [token]
        self.drafted = tokens
        return Proposal(tokens, torch.stack(probs) if probs else None)

    def _choose(self, logits: torch.Tensor) -> tuple[int, torch.Tensor | None]:
        """Pick the next draft token from (possibly trimmed) logits [vocab'] -> (full id, full dist)."""
        if self.temperature <= 0:
            index = int(logits.argmax())
            return (index if self.vocab_ids is None else int(self.vocab_ids[index])), None
        dist = torch.softmax(logits / self.temperature, dim=-1)
        index = int(torch.multinomial(dist, 1, generator=self.generator))
        if self.vocab_ids is None:
            return index, dist
        full = torch.zeros(self.full_vocab_size, dtype=dist.dtype, device=dist.device)
        full[self.vocab_ids] = dist
        return int(self.vocab_ids[index]), full

    def observe(self, committed: list[int], verified_ids: list[int], verified_logits: torch.Tensor) -> None:
        accepted = 0
        while accepted < len(committed) - 1 and accepted < len(self.drafted) and committed[accepted] == self.drafted[accepted]:
            accepted += 1
        # The cache holds context + drafts[:-1]; keep the accepted ones, re-feed the rest next time.
        keep = len(self.context) + min(accepted, max(len(self.drafted) - 1, 0))
        self.session.rollback(min(keep, self.session.length))
        self.context.extend(committed)
        self.drafted = []

    def close(self) -> None:
        self.session = None


class PredictedChainDrafter(Drafter):
    """Replays a greedy LM drafter from its teacher-forced predictions over one known continuation.

    predictions[j]: the drafter's greedy token after the first j + 1 tokens of prompt + continuation.
    A step at continuation position i proposes predictions from i on while they equal the
    continuation, then the first wrong one; later tokens cannot be accepted, so the chain is filled
    with it to the drafter's usual length (the verified chunk length stays exact).
    """

    name = "predicted_chain"

    def __init__(self, prompt_length: int, continuation: Sequence[int], predictions: Sequence[int]):
        self.continuation = list(continuation)
        self.predictions = list(predictions[prompt_length - 1 :])  # [i]: the prediction for continuation[i]
        self.position = 0

    def begin(self, prompt_ids: list[int]) -> None:
        self.position = 0

    def propose(self, k: int) -> Proposal:
        tokens: list[int] = []
        i = self.position
        while len(tokens) < k and i < len(self.predictions):
            tokens.append(self.predictions[i])
            if i >= len(self.continuation) or self.predictions[i] != self.continuation[i]:
                break
            i += 1
        return Proposal(tokens + tokens[-1:] * (k - len(tokens)) if tokens else [])

    def observe(self, committed: list[int], verified_ids: list[int], verified_logits) -> None:
        self.position += len(committed)
