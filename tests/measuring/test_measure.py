"""Measuring one configuration: determinism, early rejection, keys that never go stale."""

import json
from collections import Counter
from dataclasses import replace

import pytest
import torch

from specsparse.data import build_messages, get_domain, load_examples
from specsparse.data.corpus import builtin_responses
from specsparse.decoding.generation import generate_text
from specsparse.drafters import PromptLookupDrafter, SuffixAutomatonDrafter, TokenRecyclingDrafter
from specsparse.measuring.evaluation import EvaluationSpec, Evaluator
from specsparse.measuring.measure import EarlyReject, layer_flops_fraction, measure
from specsparse.types import Candidate, Component, GenerationConfig

CONFIG = GenerationConfig(max_new_tokens=12, num_draft_tokens=3)


def test_measure_is_deterministic_and_complete(tiny):
    domain = get_domain("summarization")
    examples = load_examples("summarization", limit=3)
    first = measure(tiny, domain, examples, lambda: SuffixAutomatonDrafter.from_target(tiny), (1,), CONFIG, progress=False)
    second = measure(tiny, domain, examples, lambda: SuffixAutomatonDrafter.from_target(tiny), (1,), CONFIG, progress=False)
    assert (first.accept_length, first.metric, first.new_tokens) == (second.accept_length, second.metric, second.new_tokens)
    assert [p.output_text for p in first.per_prompt] == [p.output_text for p in second.per_prompt]
    assert len(first.per_prompt) == 3 and first.metric is not None and 0 <= first.metric <= 1
    assert first.target_forwards == sum(len(p.accept_lengths) for p in first.per_prompt)
    assert first.new_tokens == sum(p.new_tokens for p in first.per_prompt)
    assert first.verified_tokens >= first.target_forwards and first.flops_fraction < 1


def test_domain_without_references_has_no_metric_and_runs_both_turns(tiny):
    examples = load_examples("mt_bench", limit=2)
    domain = get_domain("mt_bench")
    result = measure(tiny, domain, examples, PromptLookupDrafter, (), CONFIG, progress=False)
    assert result.metric is None
    for example, prompt in zip(examples, result.per_prompt):  # both turns, each after the first reply
        replies, tokens = [], 0
        for turn in range(2):
            text, plain = generate_text(tiny, build_messages(domain, example, turn, replies), None, CONFIG)
            replies.append(text)
            tokens += plain.new_tokens
        assert prompt.new_tokens == tokens


def test_flops_fraction_counts_skipped_layers(tiny):
    assert layer_flops_fraction(tiny, ()) == 1.0
    one, two = layer_flops_fraction(tiny, (0,)), layer_flops_fraction(tiny, (0, 1))
    assert 1 > one > two > 0 and (1 - one) == pytest.approx((1 - two) / 2)


def test_early_reject_stops_a_hopeless_configuration(tiny):
    domain = get_domain("translation")
    examples = load_examples("translation", limit=6)
    hopeless = EarlyReject(min_accept=100.0, min_metric=None)
    result = measure(tiny, domain, examples, PromptLookupDrafter, (), CONFIG, mode="engine", early_reject=hopeless,
                     progress=False)
    assert result.early_stopped and len(result.per_prompt) == 3
    fine = EarlyReject(min_accept=0.5, min_metric=None)
    full = measure(tiny, domain, examples, PromptLookupDrafter, (), CONFIG, mode="engine", early_reject=fine,
                   progress=False)
    assert not full.early_stopped and len(full.per_prompt) == 6


def test_no_examples_is_a_clear_error(tiny):
    with pytest.raises(ValueError, match="no examples"):
        measure(tiny, get_domain("qa"), [])


@pytest.fixture(scope="module")
def spec():
    return EvaluationSpec(
        model="tiny",
        drafter=Component("specsparse.drafters.self_skip.SelfSkipDrafter", {"skip_layers": [1, 2]}),
        domain=get_domain("qa", limit=10),
        generation=CONFIG,
    )


def test_trimmed_vocabulary_keeps_end_of_sequence_and_the_output(spec):
    evaluator = Evaluator(spec)
    ids = evaluator.vocabulary.ids(20)
    assert 20 <= len(ids) <= 21 and set(evaluator.target.eos_token_ids) <= set(ids)
    coverage, reduction = evaluator.vocabulary.objective()
    assert 0 < coverage(20) <= coverage(40) <= 1
    assert reduction(20) > reduction(200) > 0
    trimmed, full = evaluator.evaluate_many([Candidate(vocab_size=20), Candidate()], progress=False)
    # The same target outputs (lossless), whatever head the drafter has.
    assert [p.output_text for p in trimmed.per_prompt] == [p.output_text for p in full.per_prompt]
    assert 0 < trimmed.modeled_cost and 0 < full.modeled_cost
    assert trimmed.modeled_tokens_per_s == pytest.approx(1 / trimmed.modeled_cost)


@pytest.mark.parametrize("corpus", [("dense_outputs", "builtin"), ("references",), ("builtin:qa", "dense_outputs")])
def test_no_test_split_text_can_change_the_trimmed_vocabulary(tmp_path, spec, corpus):
    """The test split measures exactly the ids chosen on calibration: rewriting every test prompt and
    reference leaves the vocabulary of both splits unchanged, whatever the corpus."""
    spec = replace(spec, vocab_corpus=corpus)
    records = [{"id": f"q{i}", "prompt": f"Question {i}?", "reference": f"answer {i} " + "common words here" * (i % 3)}
               for i in range(12)]
    original, rewritten = tmp_path / "original.jsonl", tmp_path / "rewritten.jsonl"
    original.write_text("".join(json.dumps(r) + "\n" for r in records))
    options = {"id_field": "id"}
    calibration = Evaluator(replace(spec, domain=get_domain("qa", source="jsonl", path=str(original), options=options)))
    calibration_ids = {ex.id for ex in calibration.examples}
    rows = [r if r["id"] in calibration_ids else {**r, "prompt": "Repeat: zebra zebra zebra", "reference": "zebra quantum " * 20}
            for r in records]
    rewritten.write_text("".join(json.dumps(r) + "\n" for r in rows))
    vocabularies = []
    for path in (original, rewritten):
        domain = get_domain("qa", source="jsonl", path=str(path), options=options)
        for split in ("calibration", "test"):
            vocabularies.append(Evaluator(replace(spec, domain=domain, split=split)).vocabulary.ids(12))
    assert all(ids == vocabularies[0] for ids in vocabularies)
    # ...and the rewritten test references would have changed it, had the test split been counted.
    test_texts = Evaluator(replace(spec, domain=get_domain("qa", source="jsonl", path=str(rewritten), options=options), split="test"))
    assert any("zebra" in ref for ex in test_texts.examples for ref in ex.references)


def test_builtin_corpus_leaves_out_the_jobs_test_split(spec):
    """On a built-in domain, "builtin" counts every other set, and this set's calibration examples only."""
    evaluator = Evaluator(replace(spec, domain=get_domain("qa"), vocab_corpus=("builtin",)))
    test = get_domain("qa").load("test")
    texts = Counter(builtin_responses("builtin", exclude_ids=[ex.id for ex in test]))
    # exactly the test split's references are gone (other sets may share a short answer such as "100")
    assert Counter(builtin_responses("builtin")) - Counter(ex.references[0] for ex in test) == texts
    assert set(ex.references[0] for ex in evaluator.examples) <= set(texts)
    assert set(builtin_responses("builtin:math")) < set(texts)


def test_tree_drafts_of_a_logit_reading_drafter_are_measured_by_the_engine(tiny):
    """Replay mode hands recycling trees to the engine (lockstep batches take chains): the same
    numbers as engine mode."""
    domain, examples = get_domain("summarization"), load_examples("summarization", limit=2)
    make = lambda: TokenRecyclingDrafter(tiny.model.config.vocab_size, tree=(2, 2))  # noqa: E731
    replayed = measure(tiny, domain, examples, make, (1,), CONFIG, progress=False)
    engine = measure(tiny, domain, examples, make, (1,), CONFIG, mode="engine", progress=False)
    assert (replayed.accept_length, replayed.verified_tokens) == (engine.accept_length, engine.verified_tokens)


@pytest.mark.parametrize("tree", [None, (2, 2)])
def test_a_warm_started_recycling_table_measures_the_same_in_batches_and_in_the_engine(tiny, tree):
    """Every request starts from a copy of the table the calibration replies leave: lockstep batches
    (chains) or the engine (trees) give the engine's per-request numbers, and the warm table is what
    observing those replies would have left."""
    from specsparse.decoding.generation import encode_messages
    from specsparse.drafters.recycling import warm_table

    domain, examples = get_domain("summarization"), load_examples("summarization", limit=4)
    model, vocab = tiny.model, tiny.model.config.vocab_size
    sequences = [encode_messages(tiny.tokenizer, [{"role": "user", "content": ex.turns[0]}]) + [5, 9, 5, 9]
                 for ex in examples[:2]]
    table = warm_table(model, sequences, 4)
    observed = TokenRecyclingDrafter(vocab, top_k=4)
    for sequence in sequences:
        with torch.inference_mode():
            logits = model(input_ids=torch.tensor([sequence])).logits[0]
        observed.observe(sequence[-1:], sequence, logits)
    assert torch.equal(table, observed.adj) and (table >= 0).any()
    make = lambda: TokenRecyclingDrafter(vocab, top_k=4, tree=tree, initial=table)  # noqa: E731
    batched = measure(tiny, domain, examples[2:], make, (1,), CONFIG, batch_size=2, progress=False)
    engine = measure(tiny, domain, examples[2:], make, (1,), CONFIG, mode="engine", progress=False)
    assert [(p.output_text, p.accept_lengths) for p in batched.per_prompt] == [
        (p.output_text, p.accept_lengths) for p in engine.per_prompt]
    cold = measure(tiny, domain, examples[2:], lambda: TokenRecyclingDrafter(vocab, top_k=4, tree=tree), (1,), CONFIG,
                   mode="engine", progress=False)
    assert [p.output_text for p in cold.per_prompt] == [p.output_text for p in engine.per_prompt]  # lossless
    drafter = make()
    drafter.observe([1], [3, 4], torch.randn(2, vocab))
    drafter.reset()  # back to the warm table, not to an empty one
    assert torch.equal(drafter.adj, table)


@pytest.mark.parametrize("drafter", [
    Component("specsparse.drafters.samd.SuffixAutomatonDrafter",
              {"corpus": ["builtin:translation"], "recycling_warm_start": True}),
    Component("specsparse.drafters.recycling.TokenRecyclingDrafter",
              {"warm_start": True, "warm_corpus": ["builtin:translation"]}),
])
def test_nothing_a_drafter_learns_before_a_search_comes_from_the_prompts_a_job_measures(monkeypatch, drafter):
    """A corpus (SAMD's static automaton) and a warm Token Recycling table hold texts of the job's
    domain, but none of its calibration or test examples: neither their prompts nor their references
    reach the drafter before they are measured. The table is built once, by the dense target."""
    import specsparse.drafters.recycling as recycling

    warmed: list[list[int]] = []
    real_warm_table = recycling.warm_table
    monkeypatch.setattr(recycling, "warm_table",
                        lambda model, sequences, top_k: warmed.extend(sequences) or real_warm_table(model, sequences, top_k))
    domain = get_domain("translation", limit=20)
    evaluator = Evaluator(EvaluationSpec(model="tiny", drafter=drafter, domain=domain, generation=CONFIG))
    built = evaluator.drafter_factory(None)()
    tokenizer = evaluator.target.tokenizer
    table = getattr(built, "fallback", built).initial
    assert warmed and table is not None and (table >= 0).any()
    assert getattr(evaluator.drafter_factory(None)(), "fallback", built).initial is table  # built once

    def retrieves(text: str) -> bool:
        state, n = 0, 0
        ids = tokenizer(text, add_special_tokens=False).input_ids
        for tok in ids:
            state, n = built.corpus.advance(state, n, tok)
        return n == len(ids)

    learned = [tokenizer.decode(sequence) for sequence in warmed]
    measured = [ex for split in ("calibration", "test") for ex in domain.load(split)]
    for example in measured:
        for text in (*example.turns, *example.references):
            assert not any(text in seen for seen in learned), f"{example.id} reached the warm table"
            if isinstance(built, SuffixAutomatonDrafter) and len(text.split()) >= 6:
                assert not retrieves(text), f"{example.id} reached the corpus"
    others = [ex for ex in load_examples("translation") if ex.id not in {m.id for m in measured}]
    assert any(ex.references[0] in seen for ex in others for seen in learned)  # the domain's other texts warm it
    if isinstance(built, SuffixAutomatonDrafter):
        assert retrieves(others[0].references[0])


@pytest.mark.parametrize("tree", [None, "sized"])
def test_only_a_sized_tree_reads_the_cost_profile_when_its_drafter_is_built(monkeypatch, tree):
    """The job hands every recycling drafter `verification_costs`, but the profile is read (and measured,
    where none is stored) only by a tree sized by it."""
    import specsparse.measuring.evaluation as evaluation

    read = []
    monkeypatch.setattr(evaluation, "profile_for", lambda model: read.append(model) or _flat_profile(model))
    drafter = Component("specsparse.drafters.recycling.TokenRecyclingDrafter", {"tree": tree})
    evaluator = Evaluator(EvaluationSpec(model="tiny", drafter=drafter, domain=get_domain("qa", limit=10),
                                         generation=CONFIG))
    built = evaluator.drafter_factory(None)()
    assert bool(read) == (tree == "sized")
    assert built.max_nodes == (3 if tree == "sized" else None)  # 4 inputs within 1.1 one-token forwards


def _flat_profile(model):
    """A profile whose verification of n inputs costs 1 + 0.03 (n - 1) one-token forwards."""
    from specsparse.measuring.profile_fit import CostProfile

    layers = model.config.num_hidden_layers
    return CostProfile({}, layers, model.config.vocab_size, (0.0, 1.0 / layers), (0.0, 0.97 / layers, 0.0, 0.03 / layers),
                       head_per_row=0.0)
