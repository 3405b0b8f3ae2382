"""The metrics of the papers' benchmarks: pass@1 by running code, BFCL's call match, competition-math
answers and CoNLL entity F1, each on known answers, wrong answers and the edges that decide them."""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specsparse.metrics import score
from specsparse.metrics.calls import calls_match, parse_calls
from specsparse.metrics.code import extract_code, humaneval_program, run_program
from specsparse.metrics.entities import entity_f1, parse_entities
from specsparse.metrics.math_answers import extract_boxed, final_answer, math_equal

PROMPT = 'def add(a, b):\n    """Return a + b."""\n'
TESTS = "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n\ncheck(add)"
REFS = [PROMPT + "    return a + b\n", PROMPT, TESTS]


# ----------------------------------------------------------------------------- code


def test_a_right_completion_passes_and_a_wrong_one_fails():
    whole = "```python\ndef add(a, b):\n    return a + b\n```\nThis adds the numbers."
    body = "    return a + b\n"
    wrong = "```python\ndef add(a, b):\n    return a - b\n```"
    renamed = "```python\ndef plus(a, b):\n    return a + b\n```"  # the prompt's function stays a stub
    result = score("code_pass", [whole, body, wrong, renamed], [REFS] * 4)
    assert result["pass_at_1"] == result["score"] == 0.5
    assert score("code_pass", [REFS[0]], [REFS])["score"] == 1.0  # the reference solution


def test_programs_run_with_a_timeout_no_network_and_a_memory_limit():
    start = time.perf_counter()
    assert not run_program("while True:\n    pass\n", timeout_s=1.0)
    assert time.perf_counter() - start < 5
    assert not run_program("x = bytearray(8 << 30)\n")  # above the 2 GiB address-space limit
    assert run_program("import socket\ntry:\n    socket.create_connection(('127.0.0.1', 80))\n"
                       "except OSError as e:\n    assert 'disabled' in str(e)\nelse:\n    raise SystemExit(1)\n")
    assert run_program("import os\nassert os.getcwd() == os.environ['HOME']\n")  # its own folder


def test_a_body_continues_the_prompt_and_a_whole_function_replaces_it():
    assert humaneval_program("    return a + b", PROMPT, TESTS).startswith(PROMPT + "    return a + b")
    program = humaneval_program("import math\ndef add(a, b):\n    return a + b", PROMPT, TESTS)
    assert "    pass\n\n\nimport math\ndef add" in program and program.rstrip().endswith("check(add)")


@given(st.text(alphabet="abc xyz()=:\n`", max_size=60))
def test_extracting_code_is_idempotent(text):
    assert extract_code(extract_code(text)) == extract_code(text)


def test_code_is_the_first_fence_or_the_reply():
    assert extract_code("Here:\n```python\nx = 1\n```\nand\n```\ny = 2\n```") == "x = 1"
    assert extract_code("```py\nx = 1\n") == "x = 1"  # an unclosed fence runs to the end
    assert extract_code("x = 1\n") == "x = 1"


# ----------------------------------------------------------------------------- function calls

TRUTH = [{"calculate_triangle_area": {"base": [10], "height": [5], "unit": ["units", ""]}}]


@pytest.mark.parametrize("reply, expected", [
    ("calculate_triangle_area(base=10, height=5)", True),          # the optional unit left out
    ("[calculate_triangle_area(base=10, height=5, unit='Units')]", True),  # strings compare loosely
    ("calculate_triangle_area(base=10.0, height=5)", True),        # 10.0 == 10
    ("calculate_triangle_area(base=10)", False),                   # a required argument missing
    ("calculate_triangle_area(base=10, height=6)", False),         # a wrong value
    ("calculate_triangle_area(base=10, height=5, colour='red')", False),  # an unknown argument
    ("area(base=10, height=5)", False),                            # another function
    ("calculate_triangle_area(10, 5)", False),                     # positional: BFCL wants names
    ("The area is 25.", False),
])
def test_a_call_matches_by_name_and_arguments(reply, expected):
    assert calls_match(reply, TRUTH) is expected


def test_parallel_calls_match_in_any_order_and_dotted_names_may_use_underscores():
    truth = [{"math.factorial": {"number": [5]}}, {"math.hypot": {"x": [4], "y": [5]}}]
    assert calls_match("[math.hypot(x=4, y=5), math.factorial(number=5)]", truth)
    assert calls_match("[math_factorial(number=5), math.hypot(x=4, y=5)]", truth)
    assert not calls_match("math.factorial(number=5)", truth)
    assert parse_calls("[f(a=[1, 2], b={'k': True})]") == [("f", {"a": [1, 2], "b": {"k": True}})]
    assert parse_calls("f(a=g(1))") is None  # arguments are literals


def test_the_call_metric_reads_fenced_replies_and_json_references():
    reference = [json.dumps(TRUTH)]
    result = score("call_match", ["```python\ncalculate_triangle_area(base=10, height=5)\n```", "no call"],
                   [reference, reference])
    assert result["accuracy"] == result["score"] == 0.5


# ----------------------------------------------------------------------------- competition math


def test_the_boxed_answer_is_the_last_with_balanced_braces():
    assert extract_boxed(r"so \boxed{2} then \boxed{\frac{1}{2}}.") == r"\frac{1}{2}"
    assert extract_boxed("no box, 42") is None
    assert final_answer("no box, the answer is 42.") == "42"
    assert final_answer(final_answer(r"\boxed{x^{2}}")) == "x^{2}"


@pytest.mark.parametrize("prediction, reference", [
    (r"\boxed{\dfrac{1}{2}}", r"\frac{1}{2}"), (r"\boxed{1/2}", r"\frac12"), (r"\boxed{0.5}", r"\frac{1}{2}"),
    (r"\boxed{x = 5}", "5"), (r"\boxed{\left( 3, \frac{\pi}{2} \right)}", r"\left( 3, \frac{\pi}{2} \right)"),
    (r"\boxed{90^\circ}", "90"), (r"\boxed{\text{Evelyn}}", r"\text{Evelyn}"), ("The answer is 204.", "204"),
])
def test_equal_answers_match(prediction, reference):
    assert math_equal(prediction, reference)


@pytest.mark.parametrize("prediction, reference", [(r"\boxed{\frac{1}{3}}", r"\frac{1}{2}"), (r"\boxed{}", "0"),
                                                   ("no answer", "5"), (r"\boxed{204}", "240")])
def test_different_answers_do_not(prediction, reference):
    assert not math_equal(prediction, reference)


def test_the_math_metric_scores_any_reference():
    assert score("math_equiv", [r"\boxed{7}", r"\boxed{8}"], [["7"], ["9"]])["score"] == 0.5


# ----------------------------------------------------------------------------- entities


def test_entity_f1_counts_type_and_text():
    reference = "PER: John Smith\nLOC: Paris"
    assert parse_entities("- PER: John Smith\nThat is all.\nloc: Paris") == parse_entities(reference)
    # one right (PER), one wrong type (ORG Paris), one missing: P = 1/2, R = 1/2
    result = entity_f1(["PER: John Smith\nORG: Paris"], [reference])
    assert result == pytest.approx({"precision": 0.5, "recall": 0.5, "f1": 0.5})
    assert entity_f1(["none"], ["none"])["f1"] == 1.0
    assert score("entity_f1", ["PER: John Smith\nLOC: Paris", "none"], [[reference], ["ORG: EU"]])["score"] == pytest.approx(0.8)


@given(st.text(alphabet="ab xy12{}\\=.,boxedfrac", max_size=40))
def test_reading_the_final_answer_is_idempotent(text):
    assert final_answer(final_answer(text)) == final_answer(text)
