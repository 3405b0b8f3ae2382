"""Score drafters on the target's known greedy output, with no target forward per step.

Greedy speculative decoding commits exactly the (sparse) target's greedy continuation, whatever the
drafter. So one batched greedy generation per (skip set, prompts) fixes every committed token, and a
replayable drafter (see `Drafter.replayable`) can be stepped over it with the engine's own step rule
(`engine.Request`): propose from the committed prefix, accept the longest prefix equal to the
continuation, append the bonus token, observe. Accept lengths and verified chunk lengths are then
those the engine gives, for any drafter and any k, from the one generation.
"""

from __future__ import annotations

from collections.abc import Sequence

from specsparse.decoding.engine import Request
from specsparse.drafters.base import Drafter
from specsparse.types import GenerationConfig, GenerationResult

NEVER = -1  # stands for the target's prediction after its final EOS: never a drafted token


def replay(
    drafters: Sequence[Drafter],
    prompts: Sequence[Sequence[int]],
    continuations: Sequence[Sequence[int]],
    config: GenerationConfig,
    eos_token_ids: Sequence[int] = (),
) -> list[GenerationResult]:
    """What the engine gives for each (drafter, prompt), given the target's greedy `continuations`
    (generated with the same `config` stopping rules)."""
    results = []
    for drafter, prompt, continuation in zip(drafters, prompts, continuations, strict=True):
        if not drafter.replayable:
            raise ValueError(f"drafter {drafter.name!r} reads the target's logits: measure it by lockstep verification")
        continuation = list(continuation)
        request = Request(prompt, drafter, config, eos_token_ids)
        while not request.done:
            verified = request.draft()
            start = len(request.new_tokens)
            predicted = continuation[start : start + len(verified)]
            committed = request.commit(None, predicted + [NEVER] * (len(verified) - len(predicted)))
            if committed[-1] == NEVER:
                break
        if request.new_tokens != continuation:
            raise RuntimeError(
                "replay diverged from the greedy continuation: it was generated with other stopping rules "
                f"({len(request.new_tokens)} vs {len(continuation)} tokens)"
            )
        results.append(request.result())
    return results
