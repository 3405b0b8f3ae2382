"""Domains, built-in sets, loaders for the public formats, and the deterministic split."""

import os

for _var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "HF_EVALUATE_OFFLINE"):
    os.environ[_var] = "1"

import json
import random
import re
from collections import Counter
from dataclasses import asdict, fields
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from specsparse.data import (
    BUILTIN_SETS,
    DOMAINS,
    SPEC_BENCH_CATEGORIES,
    Domain,
    Example,
    build_messages,
    get_domain,
    load_examples,
    overlapping_ids,
    split_examples,
    split_unit,
)
from specsparse.data.domain import DEFINITIONS
from specsparse.metrics.text import extract_number

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"
SPEC_BENCH = SHARED / "spec_bench" / "question.jsonl"
GSM8K = SHARED / "gsm8k" / "test.jsonl"
MMLU = SHARED / "mmlu"

needs_spec_bench = pytest.mark.skipif(not SPEC_BENCH.is_file(), reason=f"Spec-Bench data not found at {SPEC_BENCH}")
needs_gsm8k = pytest.mark.skipif(not GSM8K.is_file(), reason=f"GSM8K data not found at {GSM8K}")
needs_mmlu = pytest.mark.skipif(not MMLU.is_dir(), reason=f"MMLU data not found at {MMLU}")


# ----------------------------------------------------------------------------- domains


def test_get_domain_and_one_line_error():
    assert get_domain("math").metric == "numeric_match"
    assert get_domain("mt_bench").metric is None
    with pytest.raises(ValueError, match="unknown domain 'chat'; known: translation, summarization") as err:
        get_domain("chat")
    assert "\n" not in str(err.value)
    custom = get_domain("math", turn_template="{turn}\nEnd with the final number.")
    assert custom.format_turn("2+2?") == "2+2?\nEnd with the final number."
    assert get_domain("math").turn_template == "{turn}"  # the registry is unchanged
    with pytest.raises(ValueError, match="turn_template"):
        get_domain("qa", turn_template="no placeholder")


def test_each_domain_is_one_file_that_holds_every_field():
    """The file Hydra's `domain` group selects is the whole definition: every field is there to override,
    and the registry is those files as read."""
    files = sorted(DEFINITIONS.glob("*.yaml"))
    assert [f.stem for f in files] == sorted(DOMAINS)
    for file in files:
        definition = yaml.safe_load(file.read_text())
        assert list(definition) == [f.name for f in fields(Domain)], file.name
        assert Domain(**definition) == DOMAINS[file.stem]


def test_a_domain_record_reads_back_as_the_domain_it_was():
    domain = get_domain("qa", limit=12, split_seed=3, exclude_ids=["qa-001"], turn_template="Q: {turn}")
    assert Domain.from_record(json.loads(json.dumps(asdict(domain)))) == domain
    # a record of an earlier version: tests/test_old_formats.py


def test_extract_answer_per_domain():
    assert get_domain("math").extract_answer("so she makes $1,800 a year.") == "1800"
    assert get_domain("math").extract_answer("no idea") == ""
    assert get_domain("mmlu").extract_answer(" B. Paris") == "B"
    assert get_domain("mmlu").extract_answer(" Paris ") == "Paris"
    assert get_domain("qa").extract_answer("  Ottawa\n") == "Ottawa"


def test_build_messages_multi_turn():
    ex = Example("w-1", "mt_bench", ("Write a poem.", "Make it shorter."))
    domain = get_domain("mt_bench")
    assert build_messages(domain, ex, 0) == [{"role": "user", "content": "Write a poem."}]
    assert build_messages(domain, ex, 1, ["Roses are red."]) == [
        {"role": "user", "content": "Write a poem."},
        {"role": "assistant", "content": "Roses are red."},
        {"role": "user", "content": "Make it shorter."},
    ]
    with pytest.raises(ValueError, match="needs 1 previous replies"):
        build_messages(domain, ex, 1)
    with pytest.raises(ValueError, match="out of range"):
        build_messages(domain, ex, 2, ["a", "b"])
    wrapped = get_domain("qa", turn_template="Answer briefly. {turn}")
    assert build_messages(wrapped, Example("q", "qa", ("Who?",)), 0)[0]["content"] == "Answer briefly. Who?"


def test_example_is_frozen_and_normalises_sequences():
    ex = Example("a", "qa", ["q"], ["r1", "r2"])
    assert ex.turns == ("q",) and ex.references == ("r1", "r2")
    with pytest.raises(AttributeError):
        ex.id = "b"
    with pytest.raises(ValueError, match="no turns"):
        Example("a", "qa", ())


# ----------------------------------------------------------------------------- built-in sets


@pytest.mark.parametrize("name", list(BUILTIN_SETS))
def test_builtin_sets(name):
    examples = load_examples(name)
    assert len(examples) >= 24
    assert all(ex.domain == name and ex.source == "builtin" for ex in examples)
    assert all(re.fullmatch(rf"{name}-\d{{3}}", ex.id) for ex in examples)
    assert len({ex.id for ex in examples}) == len(examples)
    if name == "mt_bench":
        assert all(len(ex.turns) == 2 and not ex.references for ex in examples)
    else:
        assert all(len(ex.turns) == 1 and ex.references for ex in examples)
    if name == "translation":
        assert all(ex.turns[0].startswith("Translate German to English: ") for ex in examples)
    if name == "summarization":
        assert all(ex.turns[0].startswith("Summarize: ") for ex in examples)
    if name == "math":
        assert all("####" in ex.references[0] and extract_number(ex.references[0]) for ex in examples)


def test_builtin_mmlu_is_five_shot_with_letter_and_text_references():
    examples = load_examples("mmlu")
    counts = Counter(ex.references[0] for ex in examples)
    assert set(counts) == set("ABCD") and min(counts.values()) >= 5
    for ex in examples:
        prompt = ex.turns[0]
        assert prompt.startswith("The following are multiple choice questions (with answers) about ")
        assert prompt.endswith("\nAnswer:") and prompt.count("Answer:") == 6
        letter, text = ex.references
        assert f"\n{letter}. {text}\n" in prompt.rsplit("\n\n", 1)[1]
    one = load_examples("mmlu", subjects=["astronomy"], shots=1)
    assert one and all("about astronomy." in ex.turns[0] and ex.turns[0].count("Answer:") == 2 for ex in one)
    with pytest.raises(ValueError, match="no subject"):
        load_examples("mmlu", subjects=["cooking"])


def test_load_examples_limit_and_errors():
    assert [ex.id for ex in load_examples("qa", limit=3)] == ["qa-001", "qa-002", "qa-003"]
    with pytest.raises(ValueError, match="unknown source 'web'; known: builtin"):
        load_examples("qa", source="web")
    with pytest.raises(ValueError, match="unknown domain"):
        load_examples("poetry")


# ----------------------------------------------------------------------------- public formats


@needs_spec_bench
def test_spec_bench_categories():
    path = str(SPEC_BENCH)
    by_domain = {name: load_examples(name, "spec_bench", path=path) for name in SPEC_BENCH_CATEGORIES}
    assert {name: len(exs) for name, exs in by_domain.items()} == dict.fromkeys(SPEC_BENCH_CATEGORIES, 80)
    assert all(len(ex.turns) == 2 and not ex.references for ex in by_domain["mt_bench"])
    assert all(len(ex.turns) == 1 for name, exs in by_domain.items() if name != "mt_bench" for ex in exs)
    assert all(not ex.references for ex in by_domain["qa"])
    assert all(len(ex.references) == 1 for name in ("translation", "summarization", "math") for ex in by_domain[name])
    assert all("####" in ex.references[0] for ex in by_domain["math"])
    rag = {ex.id: ex for ex in by_domain["rag"]}
    assert all(ex.references and all(isinstance(r, str) for r in ex.references) for ex in rag.values())
    assert "a source of lumber" in rag["spec_bench-rag-481"].references
    assert by_domain["translation"][0].turns[0].startswith("Translate German to English:")
    assert by_domain["translation"][0].id == "spec_bench-translation-161"


@needs_spec_bench
def test_spec_bench_category_selection_and_errors(tmp_path):
    coding = load_examples("mt_bench", "spec_bench", path=str(SPEC_BENCH), categories=["coding", "math"])
    assert len(coding) == 20 and {ex.id.split("-")[1] for ex in coding} == {"coding", "math"}
    with pytest.raises(ValueError, match="not mt_bench categories"):
        load_examples("mt_bench", "spec_bench", path=str(SPEC_BENCH), categories=["qa"])
    with pytest.raises(ValueError, match="no 'mmlu' prompts"):
        load_examples("mmlu", "spec_bench", path=str(SPEC_BENCH))


def test_missing_files_name_the_option(tmp_path):
    missing = tmp_path / "question.jsonl"
    with pytest.raises(FileNotFoundError, match=r"Spec-Bench file not found: .*question.jsonl \(set domain.path=...\)"):
        load_examples("qa", "spec_bench", path=str(missing))
    with pytest.raises(FileNotFoundError, match=r"GSM8K file: no path given \(set domain.path=...\)"):
        load_examples("math", "gsm8k")
    with pytest.raises(FileNotFoundError, match="MMLU directory not found"):
        load_examples("mmlu", "mmlu", path=str(tmp_path / "mmlu"))


@needs_mmlu
def test_mmlu_loader_reads_ten_subjects_five_shot():
    examples = load_examples("mmlu", "mmlu", path=str(MMLU))
    subjects = Counter(ex.id.rsplit("-", 1)[0][len("mmlu-"):] for ex in examples)
    assert len(subjects) == 10 and len(examples) == 1924
    assert subjects["anatomy"] == 135 and subjects["philosophy"] == 311
    ex = next(e for e in examples if e.id == "mmlu-world_religions-0000")
    prompt = ex.turns[0]
    assert prompt.startswith("The following are multiple choice questions (with answers) about world religions.\n\n")
    assert prompt.count("\nAnswer: ") == 5 and prompt.endswith("\nAnswer:")
    assert ex.references[0] in "ABCD" and f"\n{ex.references[0]}. {ex.references[1]}\n" in prompt.rsplit("\n\n", 1)[1]
    some = load_examples("mmlu", "mmlu", path=str(MMLU), subjects=["anatomy"], limit=7)
    assert [e.id for e in some] == [f"mmlu-anatomy-{i:04d}" for i in range(7)]
    with pytest.raises(ValueError, match="no subject"):
        load_examples("mmlu", "mmlu", path=str(MMLU), subjects=["astrology"])


@needs_gsm8k
def test_gsm8k_loader():
    examples = load_examples("math", "gsm8k", path=str(GSM8K))
    assert len(examples) == 1319 and examples[0].id == "gsm8k-0000"
    assert all(len(ex.references) == 1 and "####" in ex.references[0] for ex in examples)
    assert extract_number(examples[0].references[0]) == "18"


@needs_gsm8k
@needs_spec_bench
def test_gsm8k_spec_bench_overlap_is_excluded_from_both_splits():
    gsm8k = load_examples("math", "gsm8k", path=str(GSM8K))
    spec_math = load_examples("math", "spec_bench", path=str(SPEC_BENCH))
    overlap = overlapping_ids(gsm8k, spec_math)
    assert len(overlap) == 80
    calibration, test = split_examples(gsm8k, exclude_ids=overlap)
    assert len(calibration) + len(test) == 1319 - 80
    assert not overlap & {ex.id for ex in calibration + test}


def test_jsonl_loader_field_mapping(tmp_path):
    path = tmp_path / "my_qa.jsonl"
    rows = [
        {"key": "x1", "q": "Capital of Peru?", "answers": ["Lima"]},
        {"key": "x2", "q": "2+2?", "answers": "4"},
        {"key": "x3", "q": "Unknown?"},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    examples = load_examples("qa", "jsonl", path=str(path), prompt_field="q", reference_field="answers", id_field="key")
    assert [(ex.id, ex.turns, ex.references, ex.source) for ex in examples] == [
        ("x1", ("Capital of Peru?",), ("Lima",), "jsonl"),
        ("x2", ("2+2?",), ("4",), "jsonl"),
        ("x3", ("Unknown?",), (), "jsonl"),
    ]
    translated = load_examples("translation", "jsonl", path=str(path), prompt_field="q", reference_field=None, limit=1)
    assert translated[0].id == "my_qa-00000" and translated[0].turns == ("Translate German to English: Capital of Peru?",)
    with pytest.raises(KeyError, match="no prompt field 'text'"):
        load_examples("qa", "jsonl", path=str(path), prompt_field="text")


def test_hf_loader_through_a_local_json_file(tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_text('{"question": "Who?", "answer": ["Ada", "Ada Lovelace"]}\n', encoding="utf-8")
    examples = load_examples(
        "qa", "hf", path="json", data_files=str(path), split="train", cache_dir=str(tmp_path / "cache"),
        prompt_field="question", reference_field="answer",
    )
    assert examples == [Example("json-train-00000", "qa", ("Who?",), ("Ada", "Ada Lovelace"), "hf")]


# ----------------------------------------------------------------------------- split


def _examples(ids):
    return [Example(i, "qa", ("q",)) for i in ids]


def _ids(examples):
    return [ex.id for ex in examples]


def test_split_unit_is_pinned():
    # SHA-256 based: these values hold on every machine and Python version.
    assert split_unit("gsm8k-0000", 0) == pytest.approx(0.15410201885534858, abs=1e-15)
    assert split_unit("translation-001", 7) == pytest.approx(0.006712500983103177, abs=1e-15)


ids_strategy = st.lists(st.text(min_size=1, max_size=12), min_size=2, max_size=40, unique=True)


@settings(max_examples=60, deadline=None)
@given(ids=ids_strategy, seed=st.integers(0, 2**31), fraction=st.floats(0.05, 0.95), shuffle_seed=st.integers(0, 1000))
def test_split_ignores_order(ids, seed, fraction, shuffle_seed):
    calibration, test = split_examples(_examples(ids), fraction, seed)
    shuffled = list(ids)
    random.Random(shuffle_seed).shuffle(shuffled)
    calibration2, test2 = split_examples(_examples(shuffled), fraction, seed)
    assert set(_ids(calibration)) == set(_ids(calibration2)) and set(_ids(test)) == set(_ids(test2))
    assert calibration and test  # at least one each
    assert _ids(calibration) == [i for i in ids if i in set(_ids(calibration))]  # input order kept


@settings(max_examples=60, deadline=None)
@given(ids=ids_strategy, new=st.text(min_size=1, max_size=12), seed=st.integers(0, 1000), fraction=st.floats(0.05, 0.95))
def test_adding_an_example_moves_at_most_one_other(ids, new, seed, fraction):
    if new in ids:
        return
    before, _ = split_examples(_examples(ids), fraction, seed)
    after, _ = split_examples(_examples(ids + [new]), fraction, seed)
    assert len(set(_ids(before)) ^ (set(_ids(after)) - {new})) <= 1


def test_split_fractions_and_small_sets():
    ids = [f"ex-{i:05d}" for i in range(4000)]
    for fraction in (0.1, 0.2, 0.5):
        calibration, test = split_examples(_examples(ids), fraction, seed=3)
        assert len(calibration) == round(fraction * len(ids))
        assert len(calibration) + len(test) == len(ids)
    for seed in range(20):
        for fraction in (0.01, 0.99):
            calibration, test = split_examples(_examples(["a", "b"]), fraction, seed)
            assert len(calibration) == len(test) == 1
    assert split_examples(_examples(["only"]), 0.2) in (([], _examples(["only"])), (_examples(["only"]), []))


def test_split_is_stable_and_excludes_ids():
    examples = load_examples("qa")
    first = split_examples(examples, 0.25, seed=1)
    assert split_examples(examples, 0.25, seed=1) == first
    reversed_calibration, _ = split_examples(examples[::-1], 0.25, seed=1)
    assert reversed_calibration[::-1] == first[0]
    assert split_examples(examples, 0.25, seed=2) != first
    calibration, test = split_examples(examples, 0.25, seed=1, exclude_ids={"qa-001", "qa-002"})
    assert {"qa-001", "qa-002"}.isdisjoint(_ids(calibration) + _ids(test))
    assert len(calibration) + len(test) == len(examples) - 2
    with pytest.raises(ValueError, match="unique"):
        split_examples(_examples(["a", "a"]))
    with pytest.raises(ValueError, match="calibration_fraction"):
        split_examples(examples, 1.0)


def test_spec_bench_qa_takes_its_answers_from_a_references_file(tmp_path):
    """Spec-Bench qa ships no answers: a question_id -> answers JSONL gives them; a question without
    a row is an error naming it."""
    questions = tmp_path / "question.jsonl"
    rows = [{"question_id": 81 + i, "category": "qa", "turns": [f"Question {i}?"]} for i in range(3)]
    rows.append({"question_id": 200, "category": "translation", "turns": ["Translate: Hallo"], "reference": "Hello"})
    questions.write_text("".join(json.dumps(r) + "\n" for r in rows))
    answers = tmp_path / "answers.jsonl"
    answers.write_text('{"question_id": 81, "answers": ["a", "b"]}\n{"question_id": 82, "answer": "c"}\n'
                       '{"question_id": 83, "answers": ["d"]}\n')
    assert all(ex.references == () for ex in load_examples("qa", "spec_bench", path=str(questions)))
    joined = load_examples("qa", "spec_bench", path=str(questions), references=str(answers))
    assert [(ex.id, ex.references) for ex in joined] == [
        ("spec_bench-qa-81", ("a", "b")), ("spec_bench-qa-82", ("c",)), ("spec_bench-qa-83", ("d",))]
    answers.write_text('{"question_id": 81, "answers": ["a"]}\n')
    with pytest.raises(ValueError, match="no answers for 2 questions .*spec_bench-qa-82"):
        load_examples("qa", "spec_bench", path=str(questions), references=str(answers))
    answers.write_text('{"question_id": 81}\n')
    with pytest.raises(ValueError, match="line 1: need a question_id and answers"):
        load_examples("qa", "spec_bench", path=str(questions), references=str(answers))
