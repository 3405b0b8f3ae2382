"""Measure one configuration (skip set, draft vocabulary) on a list of prompts of one domain.

`measure` runs the speculative engine over the prompts (every turn of multi-turn examples), scores the
outputs with the domain's metric and returns a `Measurement`: mean accept length over all verification
steps, task metric (None without references), measured verification cost per generated token, the
analytic FLOPs fraction of the active target layers, tokens/s and per-prompt detail. For greedy decoding
the same inputs give the same accept length and metric every time.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from tqdm.auto import tqdm

from specsparse.data import Domain, Example, build_messages
from specsparse.drafters.base import Drafter
from specsparse.generation import encode_messages
from specsparse.engine import speculative_generate
from specsparse.metrics import score
from specsparse.models import LoadedModel
from specsparse.skipping import decoder_layers, validate_skip_layers
from specsparse.types import GenerationConfig, Measurement, PromptResult

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


def measure(
    target: LoadedModel,
    domain: Domain,
    examples: Sequence[Example],
    drafter: Drafter | None = None,
    skip_layers: Sequence[int] = (),
    config: GenerationConfig = GenerationConfig(),
    early_reject: EarlyReject | None = None,
    progress: bool = True,
    description: str = "",
) -> Measurement:
    """Run every example (all its turns) and aggregate; see the module docstring."""
    if not examples:
        raise ValueError(f"no examples to measure for domain {domain.name!r}: check the domain source and split")
    skip = validate_skip_layers(list(skip_layers), target.num_layers)
    if drafter is not None:
        drafter.reset()  # state carried across requests starts empty: a measurement is a pure function
    results: list[PromptResult] = []
    outputs: list[str] = []
    accept_lengths: list[int] = []
    totals = {"wall": 0.0, "verify": 0.0, "draft": 0.0, "tokens": 0}
    early_stopped = False
    bar = tqdm(examples, desc=description or f"{domain.name} {'skip' + str(list(skip)) if skip else 'dense'}",
               disable=not progress, leave=False, unit="prompt")
    for done, example in enumerate(bar, start=1):
        replies: list[str] = []
        example_accepts: list[int] = []
        example_wall = example_verify = 0.0
        example_tokens = 0
        for turn in range(len(example.turns)):
            prompt_ids = encode_messages(target.tokenizer, build_messages(domain, example, turn, replies))
            result = speculative_generate(target.model, prompt_ids, drafter, config, skip, target.eos_token_ids)
            replies.append(target.tokenizer.decode(result.new_token_ids, skip_special_tokens=True))
            example_accepts.extend(result.accept_lengths)
            example_wall += result.wall_time_s
            example_verify += result.verify_time_s
            example_tokens += result.new_tokens
            totals["draft"] += result.draft_time_s
        single = score(domain.metric, [domain.extract_answer(replies[-1])], [example.references])
        results.append(PromptResult(
            example_id=example.id,
            output_text=replies[-1] if len(replies) == 1 else "\n\n".join(replies),
            accept_lengths=tuple(example_accepts),
            new_tokens=example_tokens,
            wall_time_s=example_wall,
            verify_time_s=example_verify,
            metric=None if single is None else single["score"],
        ))
        outputs.append(replies[-1])
        accept_lengths.extend(example_accepts)
        totals["wall"] += example_wall
        totals["verify"] += example_verify
        totals["tokens"] += example_tokens
        bar.set_postfix(accept=f"{sum(accept_lengths) / len(accept_lengths):.2f}")
        if early_reject is not None:
            partial = _aggregate(target, domain, examples[:done], outputs, accept_lengths, totals, skip, results, False)
            if early_reject.should_stop(partial, done, len(examples)):
                log.info("early reject %s after %d/%d prompts (A=%.2f)", list(skip), done, len(examples), partial.accept_length)
                early_stopped = True
                break
    return _aggregate(target, domain, examples[: len(outputs)], outputs, accept_lengths, totals, skip, results, early_stopped)


def _aggregate(target, domain, examples, outputs, accept_lengths, totals, skip, results, early_stopped) -> Measurement:
    metric = score(domain.metric, [domain.extract_answer(o) for o in outputs], [ex.references for ex in examples])
    tokens = max(totals["tokens"], 1)
    return Measurement(
        accept_length=sum(accept_lengths) / max(len(accept_lengths), 1),
        metric=None if metric is None else metric["score"],
        cost=totals["verify"] / tokens,
        flops_fraction=layer_flops_fraction(target, skip),
        tokens_per_s=totals["tokens"] / totals["wall"] if totals["wall"] > 0 else 0.0,
        new_tokens=totals["tokens"],
        target_forwards=len(accept_lengths),
        wall_time_s=totals["wall"],
        draft_time_s=totals["draft"],
        early_stopped=early_stopped,
        per_prompt=tuple(results),
    )

