"""Many requests in lockstep: one padded target forward per step, each row at its own length.

`generate_batch` runs the engine's step rule (`engine.Request`) for every prompt, with all active rows
verified in one forward of a `BatchedSession` (see session.py). A row's result equals what the engine
gives for that prompt alone (up to float summation order: a near-tie can flip). A finished row takes
the next waiting prompt (continuous batching).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from transformers import PreTrainedModel

from specsparse.decoding.batched.session import BatchedSession
from specsparse.decoding.drafter import Drafter
from specsparse.decoding.engine import Request
from specsparse.types import GenerationConfig, GenerationResult


# One function on purpose: the lockstep loop (admit, draft, verify, commit, retire) reads best whole.
def generate_batch(
    target: PreTrainedModel,
    prompts: Sequence[Sequence[int]],
    drafters: Sequence[Drafter | None] | None = None,
    config: GenerationConfig = GenerationConfig(),
    skip_layers: Sequence[int] | Sequence[Sequence[int]] = (),
    eos_token_ids: Sequence[int] = (),
    batch_size: int = 16,
    on_done: Callable[[int], None] | None = None,
) -> list[GenerationResult]:
    """What `speculative_generate` gives for each prompt, computed in lockstep batches.

    drafters: one per prompt (each sees only its own request; None entries decode plainly), or None
        for plain greedy decoding of every prompt.
    skip_layers: one skip set for every prompt, or one per prompt (rows then mix skip sets).
    on_done(index) is called as each prompt finishes (for progress bars). Greedy only: sampling draws
    from one generator per request and stays on the engine.
    """
    if config.temperature > 0:
        raise ValueError("generate_batch is greedy only: use the engine for temperature > 0")
    if drafters is not None and len(drafters) != len(prompts):
        raise ValueError(f"{len(drafters)} drafters for {len(prompts)} prompts: give one per prompt")
    if drafters is not None and any(d is not None and d.feature_layers is not None for d in drafters):
        raise ValueError("lockstep verification passes no target features: measure a feature drafter (eagle) "
                         "with the engine (measure.mode=engine)")
    if not prompts:
        return []
    if all(isinstance(i, int) for i in skip_layers):
        skips = [tuple(skip_layers)] * len(prompts)  # type: ignore[arg-type]
    else:
        skips = [tuple(s) for s in skip_layers]  # type: ignore[union-attr]
        if len(skips) != len(prompts):
            raise ValueError(f"{len(skips)} skip sets for {len(prompts)} prompts: give one, or one per prompt")
    batch_size = max(1, min(batch_size, len(prompts)))
    capacity = max(len(p) for p in prompts) + config.max_new_tokens + config.num_draft_tokens + 1
    results: list[GenerationResult | None] = [None] * len(prompts)
    waiting = list(range(len(prompts)))[::-1]
    slots: dict[int, tuple[int, Request]] = {}  # row -> (prompt index, request)
    with torch.inference_mode():
        session = BatchedSession(target, (), batch_size, capacity)

        def start(rows: list[int]) -> None:
            """Put the next waiting prompts into `rows` and prefill them (prompt minus its last token;
            prefixes shared with other rows of the same skip set are computed once)."""
            prefill: dict[int, list[int]] = {}
            for row in rows:
                if not waiting:
                    break
                index = waiting.pop()
                drafter = None if drafters is None else drafters[index]
                slots[row] = (index, Request(prompts[index], drafter, config, eos_token_ids))
                session.reset_row(row, skips[index])
                if len(prompts[index]) > 1:
                    prefill[row] = list(prompts[index][:-1])
            session.prefill(prefill)

        start(list(range(batch_size)))
        while slots:
            chunks = {row: request.draft() for row, (_, request) in slots.items()}
            if any(request.input_parents is not None for _, request in slots.values()):
                raise ValueError("lockstep verification takes chain drafts; a tree-drafting drafter that reads "
                                 "the target's logits is measured by the engine: use measure.mode=engine")
            logits = session.forward(chunks, all_rows=len(slots) * 2 > batch_size)
            finished = []
            for row, (index, request) in slots.items():
                committed = request.commit(logits[row])
                session.keep(row, session.lengths[row] - len(chunks[row]) + len(committed))
                if request.done:
                    results[index] = request.result()
                    finished.append(row)
                    if on_done is not None:
                        on_done(index)
            for row in finished:
                del slots[row]
            if finished:
                start(finished)
    return results  # type: ignore[return-value]
