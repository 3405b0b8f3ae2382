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

from specsparse.decoding.drafter import Drafter
from specsparse.decoding.engine import Request
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
            committed = request.commit(None, _predictions(verified, request.input_parents,
                                                          continuation[len(request.new_tokens):]))
            if committed[-1] == NEVER:
                break
        if request.new_tokens != continuation:
            raise RuntimeError(
                "replay diverged from the greedy continuation: it was generated with other stopping rules "
                f"({len(request.new_tokens)} vs {len(continuation)} tokens)"
            )
        results.append(request.result())
    return results


def _predictions(verified: list[int], parents: tuple[int, ...] | None, ahead: list[int]) -> list[int]:
    """The target's greedy token after each verified input, as far as the continuation `ahead`
    fixes it: an input at depth d whose path from the root equals ahead[:d] predicts ahead[d]; any
    other input predicts NEVER (greedy acceptance never reads it)."""
    if parents is None:
        parents = tuple(range(-1, len(verified) - 1))
    depth = [0] * len(verified)
    on_path = [True] * len(verified)
    for i in range(1, len(verified)):
        depth[i] = depth[parents[i]] + 1
        on_path[i] = on_path[parents[i]] and depth[i] <= len(ahead) and verified[i] == ahead[depth[i] - 1]
    return [ahead[depth[i]] if on_path[i] and depth[i] < len(ahead) else NEVER for i in range(len(verified))]
