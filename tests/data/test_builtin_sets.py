"""The grown built-in example sets (specsparse/data/builtin/*.jsonl, kept in normal form by
scripts/build_builtin_sets.py).

The original rows of every file are pinned by the SHA-256 of their lines; the rows after them are
checked here for size, uniqueness, reference format and (math) exact arithmetic.
"""

import hashlib
import importlib.util
import json
import re
import sys
from collections import Counter
from fractions import Fraction
from pathlib import Path

import pytest

from specsparse.data import BUILTIN_SETS, Example, get_domain, load_examples, split_examples

ROOT = Path(__file__).resolve().parents[2]
BUILTIN = ROOT / "specsparse" / "data" / "builtin"
SCRIPT = ROOT / "scripts" / "build_builtin_sets.py"

# domain: (original rows, SHA-256 of those lines, first original id, last original id)
ORIGINALS = {
    "translation": (28, "05ea1366fe3676f81034cf26ecd0ceab34356272c8778a72256a47ceeb39d738", "translation-001", "translation-028"),
    "summarization": (26, "42e5f3625442844a4f8544bc1f39066a41772eeee8d543dc247099693ab73daf", "summarization-001", "summarization-026"),
    "qa": (28, "392254a24307cf8b4f67427443972bcd871af7e2d8186f6d2b40f3832b76a778", "qa-001", "qa-028"),
    "math": (27, "d5d37479d85072f53837519e0ceb1c725e1f5810a8e0bb6a06cd76e2c6751ae2", "math-001", "math-027"),
    "rag": (26, "971b86f7a59df9fffaf8ae7f45ae2de9e438727dc379af7b2d03896114d8b28f", "rag-001", "rag-026"),
    "mt_bench": (24, "2e372098ec5443515c2db82bf2c793606520482bc7e55ee357a2582c6430c8df", "mt_bench-001", "mt_bench-024"),
    "mmlu": (28, "c37de92fdedcb10e14bcce6126123b6863282c38c0daa8989bb14115d3345620", "mmlu-001", "mmlu-028"),
}
MMLU_DEV_SHA256 = "50ad1e208e2d9537ee49121c5dd6db91c8d0836ca674791c97684974e5fba241"


def _lines(domain: str) -> list[bytes]:
    return (BUILTIN / f"{domain}.jsonl").read_bytes().splitlines(keepends=True)


def _new(domain: str, examples: list[Example]) -> list[Example]:
    return examples[ORIGINALS[domain][0]:]


def test_every_domain_is_covered():
    assert set(ORIGINALS) == set(BUILTIN_SETS)


# ----------------------------------------------------------------------------- every domain


@pytest.mark.parametrize("domain", list(BUILTIN_SETS))
def test_size_ids_turns_and_split(domain):
    examples = load_examples(domain)
    assert 100 <= len(examples) <= 130
    ids = [ex.id for ex in examples]
    assert len(set(ids)) == len(ids)
    assert ids == [f"{domain}-{i:03d}" for i in range(1, len(ids) + 1)]  # numbering continues without gaps
    first_turns = [ex.turns[0] for ex in examples]
    assert len(set(first_turns)) == len(first_turns)
    calibration, test = split_examples(examples, 0.2, 0)
    assert len(calibration) >= 20 and len(calibration) + len(test) == len(examples)


@pytest.mark.parametrize("domain", list(BUILTIN_SETS))
def test_references_match_the_metric(domain):
    examples = load_examples(domain)
    if get_domain(domain).metric is None:
        assert all(len(ex.turns) == 2 and not ex.references for ex in examples)
    else:
        assert all(len(ex.turns) == 1 and ex.references and all(r.strip() for r in ex.references) for ex in examples)


@pytest.mark.parametrize("domain", list(BUILTIN_SETS))
def test_original_rows_are_unchanged(domain):
    rows, sha, first_id, last_id = ORIGINALS[domain]
    head = _lines(domain)[:rows]
    assert hashlib.sha256(b"".join(head)).hexdigest() == sha
    examples = load_examples(domain)
    by_id = {ex.id: ex for ex in examples}
    assert first_id in by_id and last_id in by_id
    # The loader still returns the original rows first, in order and unchanged.
    originals = [json.loads(line) for line in head]
    assert [ex.id for ex in examples[:rows]] == [row["id"] for row in originals]
    if domain != "mmlu":
        for ex, row in zip(examples[:rows], originals):
            assert ex.turns == tuple(row["turns"]) and ex.references == tuple(row.get("references") or ())


def test_mmlu_dev_exemplars_are_unchanged():
    assert hashlib.sha256((BUILTIN / "mmlu_dev.jsonl").read_bytes()).hexdigest() == MMLU_DEV_SHA256


# ----------------------------------------------------------------------------- per domain

_EQUATION = re.compile(r"(\d+(?:\s*[-+*/]\s*\d+)+)\s*=\s*\$?(\d+)")


def _evaluate(expr: str) -> Fraction:
    """An integer expression with + - * / and the usual precedence, computed exactly."""
    terms, sign, term, op = [], 1, None, None
    for token in re.findall(r"\d+|[-+*/]", expr):
        if token.isdigit():
            value = Fraction(int(token))
            term = value if op is None else (term * value if op == "*" else term / value)
            op = None
        elif token in "*/":
            op = token
        else:
            terms.append(sign * term)
            sign, term, op = (1 if token == "+" else -1), None, None
    return sum(terms, Fraction(0)) + sign * term


def test_evaluate_helper():
    assert _evaluate("2 * 35 + 2 * 11") == 92
    assert _evaluate("37 - 9 + 14") == 42
    assert _evaluate("170 * 3 / 5") == 102


def test_math_references_end_in_a_checked_integer():
    examples = load_examples("math")
    assert all(re.search(r"\n#### -?\d[\d,]*(\.\d+)?$", ex.references[0]) for ex in examples)
    for ex in _new("math", examples):
        body, final = ex.references[0].rsplit("\n#### ", 1)
        assert re.fullmatch(r"\d+", final), ex.id
        results = []
        for line in body.split("\n"):
            found = _EQUATION.findall(line)
            assert len(found) == 1, (ex.id, line)
            expr, value = found[0]
            assert _evaluate(expr) == int(value), (ex.id, line)
            results.append(int(value))
        assert results[-1] == int(final), ex.id
        # The numbers of the first step come from the question.
        first_numbers = re.findall(r"\d+", _EQUATION.findall(body.split("\n")[0])[0][0])
        question_numbers = set(re.findall(r"\d+", ex.turns[0])) | {"2", "7", "100", "1000", "60", "3"}
        assert set(first_numbers) <= question_numbers, ex.id


def test_rag_answers_appear_verbatim_in_the_passages():
    examples = load_examples("rag")
    for ex in examples:
        assert ex.turns[0].startswith("Answer the question using the passages below.\n\nPassage 1: ")
        passages, question = ex.turns[0].rsplit("\n\nQuestion: ", 1)
        assert any(ref.lower() in passages.lower() for ref in ex.references), ex.id
    for ex in _new("rag", examples):
        passages, question = ex.turns[0].rsplit("\n\nQuestion: ", 1)
        assert passages.count("\n\nPassage ") == 2 and question.endswith("?")
        assert ex.references[0] in passages and ex.references[0] not in question, ex.id
        # The answer comes from exactly one passage.
        blocks = passages.split("\n\nPassage ")[1:]
        assert sum(ex.references[0] in block for block in blocks) == 1, ex.id


def test_qa_is_closed_book_with_short_answers():
    # The original qa rows are closed-book questions (no passage in the turn); the new rows follow them.
    for ex in load_examples("qa"):
        assert ex.turns[0].endswith("?") and "\n" not in ex.turns[0]
        assert all(len(ref.split()) <= 4 for ref in ex.references), ex.id


def test_translation_and_summarization_format():
    translation = load_examples("translation")
    assert all(ex.turns[0].startswith("Translate German to English: ") for ex in translation)
    for ex in _new("translation", translation):
        words = len(ex.turns[0].removeprefix("Translate German to English: ").split())
        assert 8 <= words <= 20, ex.id
    summarization = load_examples("summarization")
    assert all(ex.turns[0].startswith("Summarize: ") for ex in summarization)
    for ex in _new("summarization", summarization):
        text = ex.turns[0].removeprefix("Summarize: ")
        assert 4 <= len(re.findall(r"[.!?](?:\s|$)", text)) <= 7, ex.id
        assert len(ex.references) == 1 and len(ex.references[0]) < len(text) / 2, ex.id


def test_mmlu_answers_are_letters_and_balanced():
    rows = [json.loads(line) for line in _lines("mmlu")]
    dev_subjects = Counter(json.loads(line)["subject"] for line in (BUILTIN / "mmlu_dev.jsonl").read_text().splitlines())
    assert {row["subject"] for row in rows} <= {s for s, n in dev_subjects.items() if n >= 5}
    for row in rows:
        assert row["answer"] in "ABCD" and len(row["answer"]) == 1
        assert len(row["choices"]) == 4 and len(set(row["choices"])) == 4, row["id"]
        assert "\n\n" not in row["question"] and "Answer:" not in row["question"]
    letters = Counter(row["answer"] for row in rows)
    assert set(letters) == set("ABCD")
    assert max(letters.values()) - min(letters.values()) <= 0.05 * len(rows)
    examples = load_examples("mmlu")
    assert [ex.references[0] for ex in examples] == [row["answer"] for row in rows]
    assert all(ex.turns[0].count("Answer:") == 6 for ex in examples)


def test_mt_bench_categories():
    rows = [json.loads(line) for line in _lines("mt_bench")]
    counts = Counter(row["category"] for row in rows)
    assert set(counts) == {"writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities"}
    assert min(counts.values()) >= 10


# ----------------------------------------------------------------------------- the generator


@pytest.fixture(scope="module")
def builder():
    spec = importlib.util.spec_from_file_location("build_builtin_sets", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


@pytest.mark.parametrize("domain", list(ORIGINALS))
def test_files_match_the_generator(builder, domain):
    """The files are in the script's normal form: originals first, then the added rows, numbered."""
    assert builder.ORIGINAL[domain] == ORIGINALS[domain][:2]
    assert builder.build(domain) == (BUILTIN / f"{domain}.jsonl").read_bytes()


@pytest.mark.parametrize("domain", list(ORIGINALS))
def test_generator_numbers_and_reformats_added_rows(builder, domain):
    """Added rows written without ids and in another JSON style come out as the shipped lines."""
    rows = ORIGINALS[domain][0]
    lines = _lines(domain)
    added = [{k: v for k, v in json.loads(line).items() if k != "id"} for line in lines[rows:]]
    loose = b"".join(lines[:rows]) + "".join(json.dumps(row, separators=(",", ":")) + "\n\n" for row in added).encode()
    assert builder.normal_form(domain, loose) == b"".join(lines)


def test_generator_refuses_changed_originals_and_duplicates(builder):
    lines = _lines("qa")
    with pytest.raises(SystemExit, match="original"):
        builder.normal_form("qa", lines[1] + lines[0] + b"".join(lines[2:]))
    with pytest.raises(SystemExit, match="duplicate"):
        builder.normal_form("qa", b"".join(lines) + lines[-1])
