"""The speculative decoding step loop: draft k tokens, verify them in one target forward, accept the
longest matching prefix, append the bonus token, roll the cache back.

Greedy verification (temperature 0) is lossless: the output equals the (possibly sparse) target's own
greedy output token for token. Sampling (temperature > 0) uses standard speculative rejection sampling
(Leviathan et al. 2023; Chen et al. 2023), so samples follow the target's distribution.

The prompt minus its last token is prefilled; every generated token then comes out of a verification
step, so the accept lengths sum to the number of new tokens and plain decoding scores exactly 1.00.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import torch
from transformers import PreTrainedModel

from specsparse.drafters.base import Drafter, Proposal
from specsparse.session import ModelSession
from specsparse.types import GenerationConfig, GenerationResult


def greedy_accept(draft: list[int], logits: torch.Tensor) -> list[int]:
    """Accepted drafts followed by the bonus token. logits: [n+1, vocab] for inputs [last, *draft]."""
    predicted = logits.argmax(dim=-1).tolist()
    accepted = 0
    while accepted < len(draft) and draft[accepted] == predicted[accepted]:
        accepted += 1
    return draft[:accepted] + [predicted[accepted]]


def sampling_accept(
    proposal: Proposal, logits: torch.Tensor, temperature: float, generator: torch.Generator
) -> list[int]:
    """Speculative rejection sampling. logits: [n+1, vocab]; proposal.probs [n, vocab] or None (one-hot)."""
    target_probs = torch.softmax(logits / temperature, dim=-1)
    committed: list[int] = []
    for i, token in enumerate(proposal.tokens):
        p = target_probs[i]
        q_token = 1.0 if proposal.probs is None else float(proposal.probs[i, token])
        if torch.rand((), generator=generator).item() * q_token < float(p[token]):
            committed.append(token)
            continue
        if proposal.probs is None:
            residual = p.clone()
            residual[token] = 0.0
        else:
            residual = torch.clamp(p - proposal.probs[i].to(p), min=0.0)
        if residual.sum() <= 0:  # p == q exactly: rejection had probability 0; keep the draft
            committed.append(token)
            continue
        committed.append(int(torch.multinomial(residual / residual.sum(), 1, generator=generator)))
        return committed
    bonus = torch.multinomial(target_probs[len(proposal.tokens)], 1, generator=generator)
    return committed + [int(bonus)]


def speculative_generate(
    target: PreTrainedModel,
    prompt_ids: Sequence[int],
    drafter: Drafter | None = None,
    config: GenerationConfig = GenerationConfig(),
    skip_layers: Sequence[int] = (),
    eos_token_ids: Sequence[int] = (),
    on_step: Callable[[list[int]], None] | None = None,
) -> GenerationResult:
    """Generate up to `config.max_new_tokens` tokens after `prompt_ids` (chat template applied).

    drafter None (or k = 0) is plain autoregressive decoding with the same loop.
    skip_layers: target layers skipped for this request (validated; () is the dense model).
    on_step: called with the tokens committed by each verification step (for streaming).
    """
    if len(prompt_ids) == 0:
        raise ValueError("empty prompt: give at least one token")
    start = time.perf_counter()
    eos = set(eos_token_ids) if config.stop_on_eos else set()
    generator = torch.Generator().manual_seed(config.seed) if config.temperature > 0 else None
    with torch.inference_mode():
        session = ModelSession(target, tuple(skip_layers))
        session.prefill(prompt_ids[:-1])
        prefill_time = time.perf_counter() - start
        if drafter is not None:
            drafter.begin(list(prompt_ids))
        last = int(prompt_ids[-1])
        new_tokens: list[int] = []
        accept_lengths: list[int] = []
        draft_time = verify_time = 0.0
        while len(new_tokens) < config.max_new_tokens:
            # Never draft past the budget: the bonus token is one more.
            budget = min(config.num_draft_tokens, config.max_new_tokens - len(new_tokens) - 1)
            tick = time.perf_counter()
            proposal = drafter.propose(budget) if drafter is not None and budget > 0 else Proposal([])
            if len(proposal.tokens) > budget:
                probs = None if proposal.probs is None else proposal.probs[:budget]
                proposal = Proposal(proposal.tokens[:budget], probs)
            tock = time.perf_counter()
            draft_time += tock - tick
            verified_ids = [last, *proposal.tokens]
            logits = session.forward(verified_ids)
            verify_time += time.perf_counter() - tock
            if generator is None:
                committed = greedy_accept(proposal.tokens, logits)
            else:
                committed = sampling_accept(proposal, logits, config.temperature, generator)
            # Keep [last, accepted drafts] in the cache; the bonus token becomes the next `last`.
            session.rollback(session.length - len(verified_ids) + len(committed))
            stop_at = next((i for i, token in enumerate(committed) if token in eos), None)
            if stop_at is not None:
                committed = committed[: stop_at + 1]
            new_tokens.extend(committed)
            accept_lengths.append(len(committed))
            if on_step is not None:
                on_step(committed)
            last = committed[-1]
            if stop_at is not None:
                break
            if drafter is not None:
                drafter.observe(committed, verified_ids, logits)
        if drafter is not None:
            drafter.close()
    return GenerationResult(
        new_token_ids=tuple(new_tokens),
        accept_lengths=tuple(accept_lengths),
        draft_time_s=draft_time,
        verify_time_s=verify_time,
        wall_time_s=time.perf_counter() - start,
        prefill_time_s=prefill_time,
    )
