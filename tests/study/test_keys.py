"""Results-store keys (`specsparse.study.keys`): every setting that can change a measurement changes
its key; what only prices it or only batches it does not."""

from __future__ import annotations

from dataclasses import replace

from specsparse.data import get_domain
from specsparse.measuring.evaluation import EvaluationSpec, Evaluator, MeasureSpec
from specsparse.study.keys import describe, store_key
from specsparse.types import Candidate, Component, GenerationConfig

SPEC = EvaluationSpec(
    model="tiny",
    drafter=Component("specsparse.drafters.self_skip.SelfSkipDrafter", {"skip_layers": [1, 2]}),
    domain=get_domain("qa", limit=10),
    generation=GenerationConfig(max_new_tokens=12, num_draft_tokens=3),
)


def key_of(evaluator: Evaluator, candidate: Candidate, thresholds: tuple | None = None) -> str:
    return store_key(describe(evaluator), candidate, thresholds)


def test_store_keys_change_with_every_setting():
    spec = SPEC
    base = Evaluator(spec)
    key = key_of(base, Candidate((1,)))
    assert key == key_of(Evaluator(spec), Candidate((1,)))
    variants = [
        replace(spec, generation=replace(SPEC.generation, num_draft_tokens=4)),
        replace(spec, drafter=Component(spec.drafter.class_path, {"skip_layers": [1]})),
        replace(spec, domain=replace(spec.domain, limit=9)),
        replace(spec, domain=replace(spec.domain, split_seed=1)),
        replace(spec, split="test"),
        replace(spec, dtype="bfloat16"),
    ]
    keys = {key_of(Evaluator(v), Candidate((1,))) for v in variants}
    assert key not in keys and len(keys) == len(variants)
    assert key_of(base, Candidate((2,))) != key and key_of(base, Candidate((1,), vocab_size=50)) != key
    assert key_of(base, Candidate((1,)), thresholds=(1.0, None)) == key  # replay measures every prompt anyway
    engine = Evaluator(replace(spec, measure=MeasureSpec(mode="engine")))
    assert key_of(engine, Candidate((1,)), thresholds=(1.0, None)) != key_of(engine, Candidate((1,))) != key
    assert key_of(Evaluator(replace(spec, measure=MeasureSpec(batch_size=3))), Candidate((1,))) == key  # batch size: same results


def test_a_changed_turn_template_is_a_new_key():
    """The domain's definition is part of what is measured: another chat template, another key."""
    base = key_of(Evaluator(SPEC), Candidate())
    other = replace(SPEC, domain=replace(SPEC.domain, turn_template="Answer briefly. {turn}"))
    assert key_of(Evaluator(other), Candidate()) != base
