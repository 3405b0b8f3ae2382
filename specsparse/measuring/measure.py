"""Measure one configuration (skip set, draft vocabulary) on a list of prompts of one domain.

`measure` decodes every prompt (every turn of multi-turn examples), scores the outputs with the
domain's metric and returns a `Measurement`: mean accept length over all verification steps, task
metric (None without references), the verification steps and verified tokens the cost model prices,
the analytic FLOPs fraction of the active target layers and per-prompt detail.

Modes (`mode`), all equal to running the engine prompt by prompt:
- "replay" (greedy default): one batched greedy generation per (skip set, prompts), shared through
  `continuations` by every drafter and k, then each drafter replayed over it (`specsparse.measuring.replay`).
  Drafters that are not replayable (Token Recycling reads the target's logits at rejected drafts)
  run lockstep batched verification (`specsparse.decoding.batched`) instead; those drafting trees
  run the engine (lockstep batches verify chains only). EAGLE replays with the target's features
  of the continuation.
- "engine": the speculative engine, one prompt at a time (and sampling, temperature > 0, always).

Every example starts from a fresh drafter (`make_drafter()`), kept across its turns: a prompt's
result depends on that prompt only, never on which prompts share its split or batch. (Serving keeps
a drafter's state, e.g. the recycling table, across requests.)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tqdm.auto import tqdm

from specsparse.data import Domain, Example, build_messages
from specsparse.decoding.batched import generate_batch
from specsparse.decoding.drafter import Drafter
from specsparse.decoding.generation import encode_messages, generate_text
from specsparse.decoding.models import LoadedModel
from specsparse.decoding.skipping import decoder_layers
from specsparse.measuring.replay import replay
from specsparse.types import GenerationConfig, GenerationResult, Measurement, PromptResult

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EarlyReject:
    """Stop a measurement once its partial results make it (very likely) infeasible.

    After at least `min_fraction` of the prompts, a configuration whose running accept length or
    metric is below `(1 - margin)` times its threshold is stopped and marked early_stopped. The margin
    keeps borderline configurations running to the end, so only clear failures are cut short.
    """

    min_accept: float | None
    min_metric: float | None
    min_fraction: float = 0.5
    margin: float = 0.1

    def should_stop(self, partial: Measurement, done: int, total: int) -> bool:
        if done < max(2, self.min_fraction * total) or done >= total:
            return False
        if self.min_accept is not None and partial.accept_length < (1 - self.margin) * self.min_accept:
            return True
        return (
            self.min_metric is not None
            and partial.metric is not None
            and partial.metric < (1 - self.margin) * self.min_metric
        )


def layer_flops_fraction(target: LoadedModel, skip_layers: Sequence[int]) -> float:
    """Share of the dense model's per-token matmul FLOPs still active (~2 x parameters per token).

    The embedding lookup costs no matmul; the LM head (tied or not) always runs.
    """
    layers = decoder_layers(target.model)
    per_layer = [sum(p.numel() for p in layer.parameters()) for layer in layers]
    head = target.model.get_output_embeddings().weight.numel()
    total = sum(per_layer) + head
    return (total - sum(per_layer[i] for i in skip_layers)) / total


MODES = ("replay", "engine")
Continuations = dict[tuple[tuple[int, ...], tuple[int, ...]], tuple[int, ...]]  # (skip, prompt) -> greedy tokens
MakeDrafter = Callable[[], Drafter | None]
Outcome = tuple[list[str], list[GenerationResult]]  # one example: replies per turn, results per turn


def measure(
    target: LoadedModel,
    domain: Domain,
    examples: Sequence[Example],
    make_drafter: MakeDrafter = lambda: None,
    skip_layers: Sequence[int] = (),
    config: GenerationConfig = GenerationConfig(),
    **options,
) -> Measurement:
    """One configuration: `measure_many` with a single (skip set, drafter)."""
    return measure_many(target, domain, examples, [(skip_layers, make_drafter)], config, **options)[0]


def measure_many(
    target: LoadedModel,
    domain: Domain,
    examples: Sequence[Example],
    configurations: Sequence[tuple[Sequence[int], MakeDrafter]],
    config: GenerationConfig = GenerationConfig(),
    *,
    mode: str = "replay",
    batch_size: int = 16,
    continuations: Continuations | None = None,
    early_reject: EarlyReject | None = None,
    progress: bool = True,
    description: str = "",
) -> list[Measurement]:
    """Decode every example (all its turns) under each (skip set, make_drafter); see the module docstring.

    make_drafter: a new drafter (None: plain decoding), called once per example.
    Replay mode batches every (configuration, example) row together, so a search level with few
    prompts still fills the batch. continuations: greedy generations shared between calls with the
    same `config` (the Evaluator keeps one per spec).
    early_reject: engine mode only (replay measures everything in a few batched passes).
    """
    if not examples:
        raise ValueError(f"no examples to measure for domain {domain.name!r}: check the domain source and split")
    if mode not in MODES:
        raise ValueError(f"unknown measure mode {mode!r}: use one of {MODES}")
    skips = [tuple(sorted(skip)) for skip, _ in configurations]
    makers = [make for _, make in configurations]
    start = time.perf_counter()
    label = description or (f"{domain.name} {'skip' + str(list(skips[0])) if skips[0] else 'dense'}"
                            if len(skips) == 1 else f"{domain.name} {len(skips)} configurations")
    total = len(skips) * sum(len(ex.turns) for ex in examples)
    with tqdm(total=total, disable=not progress, leave=False, unit="prompt", desc=label) as bar:
        if mode == "engine" or config.temperature > 0 or _needs_engine(makers):
            decoded = [_decode_engine(target, domain, examples, make, skip, config, early_reject, bar)
                       for skip, make in zip(skips, makers)]
        else:
            outcomes = _decode_batched(target, domain, examples, makers, skips, config, batch_size,
                                       {} if continuations is None else continuations, bar)
            decoded = [(o, False) for o in outcomes]
    wall = (time.perf_counter() - start) / len(skips)
    return [_aggregate(target, domain, examples[: len(outcomes)], outcomes, skip, stopped, wall)
            for (outcomes, stopped), skip in zip(decoded, skips)]


def _needs_engine(makers: Sequence[MakeDrafter]) -> bool:
    """Tree drafts of a drafter that is not replayable: lockstep batches verify chains only."""
    return any(d is not None and d.drafts_trees and not d.replayable for d in (make() for make in makers[:1]))


def _decode_engine(target, domain, examples, make_drafter, skip, config, early_reject, bar) -> tuple[list[Outcome], bool]:
    outcomes: list[Outcome] = []
    for done, example in enumerate(examples, start=1):
        drafter = make_drafter()
        replies: list[str] = []
        results: list[GenerationResult] = []
        for turn in range(len(example.turns)):
            reply, result = generate_text(target, build_messages(domain, example, turn, replies), drafter, config, skip)
            replies.append(reply)
            results.append(result)
            bar.update()
        outcomes.append((replies, results))
        if early_reject is not None:
            partial = _aggregate(target, domain, examples[:done], outcomes, skip, False, 0.0)
            if early_reject.should_stop(partial, done, len(examples)):
                log.info("early reject %s after %d/%d prompts (A=%.2f)", list(skip), done, len(examples),
                         partial.accept_length)
                return outcomes, True
    return outcomes, False


def _decode_batched(target, domain, examples, makers, skips, config, batch_size, continuations, bar) -> list[list[Outcome]]:
    """Turn by turn (a later turn's prompt holds the earlier replies), every (configuration, example)
    row at once: lockstep rows for drafters that are not replayable, plain greedy rows for the
    continuations not yet known, then replay of the rest over those continuations."""
    prototypes = [make() for make in makers]
    lockstep = [p is not None and not p.replayable for p in prototypes]
    # Lockstep drafters keep their state across an example's turns: one per (configuration, example).
    drafters = {(c, i): (prototypes[c] if i == 0 else makers[c]())
                for c in range(len(makers)) if lockstep[c] for i in range(len(examples))}
    outcomes: list[list[Outcome]] = [[([], []) for _ in examples] for _ in makers]
    for turn in range(max(len(ex.turns) for ex in examples)):
        active = [i for i, ex in enumerate(examples) if len(ex.turns) > turn]
        # Example-major: a batch then holds one prompt under every configuration, whose rows share the
        # layers below their first differing skipped layer (see decoding/batched/layers.py).
        prompts = {(c, i): tuple(encode_messages(target.tokenizer, build_messages(domain, examples[i], turn, outcomes[c][i][0])))
                   for i in active for c in range(len(makers))}
        # Prompts in token order: those sharing a prefix (few-shot exemplars, a system turn) start
        # together, so each skip set computes the prefix once for all of them (BatchedSession.prefill).
        prompts = dict(sorted(prompts.items(), key=lambda item: (item[1], item[0][0])))
        rows = [(c, i) for (c, i) in prompts if lockstep[c]]
        greedy_rows = list({(skips[c], prompts[c, i]): (c, i) for (c, i) in prompts
                            if not lockstep[c] and (skips[c], prompts[c, i]) not in continuations}.values())
        bar.update(len(prompts) - len(rows) - len(greedy_rows))  # served by known continuations
        rows += greedy_rows
        results = generate_batch(
            target.model, [prompts[r] for r in rows], [drafters.get(r) for r in rows], config,
            [skips[c] for c, _ in rows], target.eos_token_ids, batch_size, on_done=lambda _: bar.update(),
        )
        by_row = dict(zip(rows, results))
        for (c, i), result in by_row.items():
            continuations[(skips[c], prompts[c, i])] = result.new_token_ids  # lockstep outputs are greedy too
        for c, prototype in enumerate(prototypes):
            if lockstep[c]:
                continue
            keys = [(c, i) for i in active]
            tokens = [continuations[(skips[c], prompts[key])] for key in keys]
            if prototype is None:
                replayed = [GenerationResult(t, (1,) * len(t), (1,) * len(t), prefill_tokens=len(prompts[k]) - 1)
                            for t, k in zip(tokens, keys)]
            else:
                replayed = replay(prototype.replay_drafters([prompts[k] for k in keys], tokens, batch_size, skips[c]),
                                  [prompts[k] for k in keys], tokens, config, target.eos_token_ids)
            by_row.update(zip(keys, replayed))
        for (c, i), result in by_row.items():
            outcomes[c][i][0].append(target.tokenizer.decode(result.new_token_ids, skip_special_tokens=True))
            outcomes[c][i][1].append(result)
    return outcomes


def _aggregate(target, domain, examples, outcomes, skip, early_stopped, wall_time) -> Measurement:
    per_prompt = []
    for example, (replies, results) in zip(examples, outcomes):
        single = domain.score_outputs([replies[-1]], [example])
        per_prompt.append(PromptResult(
            example_id=example.id,
            output_text=replies[-1] if len(replies) == 1 else "\n\n".join(replies),
            accept_lengths=tuple(a for r in results for a in r.accept_lengths),
            new_tokens=sum(r.new_tokens for r in results),
            wall_time_s=sum(r.wall_time_s for r in results),
            verify_time_s=sum(r.verify_time_s for r in results),
            metric=None if single is None else single["score"],
        ))
    results = [r for _, rs in outcomes for r in rs]
    metric = domain.score_outputs([replies[-1] for replies, _ in outcomes], examples)
    steps = sum(r.target_forwards for r in results)
    chunks = [length for r in results for length in r.verified_lengths]
    return Measurement(
        accept_length=sum(r.new_tokens for r in results) / max(steps, 1),
        metric=None if metric is None else metric["score"],
        modeled_cost=0.0,
        flops_fraction=layer_flops_fraction(target, skip),
        modeled_tokens_per_s=0.0,
        new_tokens=sum(r.new_tokens for r in results),
        target_forwards=steps,
        wall_time_s=wall_time,
        draft_time_s=sum(r.draft_time_s for r in results),
        early_stopped=early_stopped,
        per_prompt=tuple(per_prompt),
        verified_tokens=sum(chunks),
        chunk_counts=count_chunks(chunks),
        prefills=len(results),
        prefill_tokens=sum(r.prefill_tokens for r in results),
    )


def count_chunks(verified_lengths: Sequence[int]) -> tuple[int, ...]:
    """[i]: how many steps verified i + 1 tokens (what the cost profile prices)."""
    return tuple(list(verified_lengths).count(n) for n in range(1, max(verified_lengths, default=0) + 1))
