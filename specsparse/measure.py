"""Measure one configuration (skip set, draft vocabulary) on a list of prompts of one domain.

`measure` decodes every prompt (every turn of multi-turn examples), scores the outputs with the
domain's metric and returns a `Measurement`: mean accept length over all verification steps, task
metric (None without references), the verification steps and verified tokens the cost model prices,
the analytic FLOPs fraction of the active target layers and per-prompt detail.

Modes (`mode`), all equal to running the engine prompt by prompt:
- "replay" (greedy default): one batched greedy generation per (skip set, prompts), shared through
  `continuations` by every drafter and k, then each drafter replayed over it (`specsparse.replay`).
  Drafters that are not replayable (Token Recycling reads the target's logits at rejected drafts)
  run lockstep batched verification (`specsparse.batched`) instead.
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

from specsparse.batched import generate_batch
from specsparse.data import Domain, Example, build_messages
from specsparse.drafters.base import Drafter
from specsparse.engine import speculative_generate
from specsparse.generation import encode_messages
from specsparse.metrics import score
from specsparse.models import LoadedModel
from specsparse.replay import replay
from specsparse.skipping import decoder_layers, validate_skip_layers
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


def measure(
    target: LoadedModel,
    domain: Domain,
    examples: Sequence[Example],
    make_drafter: Callable[[], Drafter | None] = lambda: None,
    skip_layers: Sequence[int] = (),
    config: GenerationConfig = GenerationConfig(),
    *,
    mode: str = "replay",
    batch_size: int = 16,
    continuations: Continuations | None = None,
    early_reject: EarlyReject | None = None,
    progress: bool = True,
    description: str = "",
) -> Measurement:
    """Decode every example (all its turns) and aggregate; see the module docstring.

    make_drafter: a new drafter (None: plain decoding), called once per example.
    continuations: greedy generations shared between calls (replay mode fills and reads it).
    early_reject: engine mode only (replay measures a whole split in a few batched passes).
    """
    if not examples:
        raise ValueError(f"no examples to measure for domain {domain.name!r}: check the domain source and split")
    if mode not in MODES:
        raise ValueError(f"unknown measure mode {mode!r}: use one of {MODES}")
    skip = validate_skip_layers(list(skip_layers), target.num_layers)
    start = time.perf_counter()
    bar = tqdm(total=sum(len(ex.turns) for ex in examples), disable=not progress, leave=False, unit="prompt",
               desc=description or f"{domain.name} {'skip' + str(list(skip)) if skip else 'dense'}")
    decode = _decode_engine if mode == "engine" or config.temperature > 0 else _decode_batched
    with bar:
        outcomes, early_stopped = decode(
            target, domain, examples, make_drafter, skip, config, batch_size, {} if continuations is None else continuations, early_reject, bar
        )
    return _aggregate(target, domain, examples[: len(outcomes)], outcomes, skip, early_stopped, time.perf_counter() - start)


Outcome = tuple[list[str], list[GenerationResult]]  # one example: replies per turn, results per turn


def _decode_engine(target, domain, examples, make_drafter, skip, config, batch_size, continuations, early_reject, bar):
    outcomes: list[Outcome] = []
    for done, example in enumerate(examples, start=1):
        drafter = make_drafter()
        replies: list[str] = []
        results: list[GenerationResult] = []
        for turn in range(len(example.turns)):
            prompt_ids = encode_messages(target.tokenizer, build_messages(domain, example, turn, replies))
            result = speculative_generate(target.model, prompt_ids, drafter, config, skip, target.eos_token_ids)
            replies.append(target.tokenizer.decode(result.new_token_ids, skip_special_tokens=True))
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


def _decode_batched(target, domain, examples, make_drafter, skip, config, batch_size, continuations, early_reject, bar):
    """Turn by turn (a later turn's prompt holds the earlier replies), all examples at once."""
    prototype = make_drafter()
    drafters = None
    if prototype is not None and not prototype.replayable:
        drafters = [prototype] + [make_drafter() for _ in examples[1:]]  # lockstep: one per example
    outcomes: list[Outcome] = [([], []) for _ in examples]
    for turn in range(max(len(ex.turns) for ex in examples)):
        active = [i for i, ex in enumerate(examples) if len(ex.turns) > turn]
        prompts = [
            encode_messages(target.tokenizer, build_messages(domain, examples[i], turn, outcomes[i][0])) for i in active
        ]
        if drafters is not None:
            results = generate_batch(target.model, prompts, [drafters[i] for i in active], config, skip,
                                     target.eos_token_ids, batch_size, on_done=lambda _: bar.update())
            for prompt, result in zip(prompts, results):
                continuations[(skip, tuple(prompt))] = result.new_token_ids
        else:
            greedy = _greedy(target, prompts, skip, config, batch_size, continuations, bar)
            if prototype is None:
                results = greedy
            else:
                tokens = [g.new_token_ids for g in greedy]
                results = replay(prototype.replay_drafters(prompts, tokens, batch_size), prompts, tokens, config,
                                 target.eos_token_ids)
        for i, result in zip(active, results):
            outcomes[i][0].append(target.tokenizer.decode(result.new_token_ids, skip_special_tokens=True))
            outcomes[i][1].append(result)
    return outcomes, False


def _greedy(target, prompts, skip, config, batch_size, continuations, bar) -> list[GenerationResult]:
    """Plain greedy decoding of `prompts`, generating only those not in `continuations`."""
    missing = list(dict.fromkeys(tuple(p) for p in prompts if (skip, tuple(p)) not in continuations))
    fresh = generate_batch(target.model, missing, None, config, skip, target.eos_token_ids, batch_size,
                           on_done=lambda _: bar.update())
    for prompt, result in zip(missing, fresh):
        continuations[(skip, prompt)] = result.new_token_ids
    bar.update(len(prompts) - len(missing))
    plain = []
    for prompt in prompts:
        tokens = continuations[(skip, tuple(prompt))]
        plain.append(GenerationResult(tokens, (1,) * len(tokens), (1,) * len(tokens)))
    return plain


def _aggregate(target, domain, examples, outcomes, skip, early_stopped, wall_time) -> Measurement:
    per_prompt = []
    for example, (replies, results) in zip(examples, outcomes):
        single = score(domain.metric, [domain.extract_answer(replies[-1])], [example.references])
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
    metric = score(domain.metric, [domain.extract_answer(replies[-1]) for replies, _ in outcomes],
                   [ex.references for ex in examples])
    steps = sum(r.target_forwards for r in results)
    return Measurement(
        accept_length=sum(r.new_tokens for r in results) / max(steps, 1),
        metric=None if metric is None else metric["score"],
        cost=0.0,
        flops_fraction=layer_flops_fraction(target, skip),
        tokens_per_s=0.0,
        new_tokens=sum(r.new_tokens for r in results),
        target_forwards=steps,
        wall_time_s=wall_time,
        draft_time_s=sum(r.draft_time_s for r in results),
        early_stopped=early_stopped,
        per_prompt=tuple(per_prompt),
        verified_tokens=sum(sum(r.verified_lengths) for r in results),
    )
