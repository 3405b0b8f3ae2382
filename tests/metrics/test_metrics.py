"""Metrics: answer extraction rules and each local evaluate module against hand-computed values."""

import os

for _var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "HF_EVALUATE_OFFLINE"):
    os.environ[_var] = "1"

import math

import pytest
import sacrebleu
from hypothesis import given, settings
from hypothesis import strategies as st

from specsparse.data import Example, get_domain
from specsparse.metrics import METRICS, get_metric_spec, load_metric, score
from specsparse.metrics.text import (
    choice_is_correct,
    contains_answer,
    extract_choice_letter,
    extract_number,
    normalize_answer,
    numbers_equal,
    token_f1,
)

# ----------------------------------------------------------------------------- extraction rules


@pytest.mark.parametrize(
    "text, expected",
    [
        ("The answer is $1,200.", "1200"),
        ("She has 3 apples and buys 4 more, so 7 apples.", "7"),
        ("Step 1: 16 - 3 - 4 = 9\nStep 2: 9 * 2 = 18\n#### 18", "18"),
        ("#### 1,000\nI hope 5 people like it", "1000"),
        ("It costs 3.50 dollars.", "3.5"),
        ("The temperature fell to -5 degrees.", "-5"),
        ("5-3=2", "2"),
        ("Total: 18.", "18"),
        ("12.0", "12"),
        ("no digits here", None),
        ("", None),
    ],
)
def test_extract_number(text, expected):
    assert extract_number(text) == expected


def test_extract_number_is_idempotent_and_numbers_compare_by_value():
    assert extract_number(extract_number("paid $2,500.00 in total")) == "2500"
    assert numbers_equal("so she spends $11.750", "The pen ... \n#### 11.75")
    assert not numbers_equal("I do not know", "#### 4")
    assert not numbers_equal("4", "no number")


@pytest.mark.parametrize(
    "text, letter",
    [
        ("Answer: B", "B"),
        ("answer: c", None),  # lower-case letters are words, not choices
        ("The answer is B", "B"),
        ("The correct answer is (D) because ...", "D"),
        ("the answer is: C.", "C"),
        ("(B)", "B"),
        ("B.", "B"),
        (" C", "C"),
        ("C\nBecause the tilt ...", "C"),
        ("B) Paris", "B"),
        ("I think it is C. The others are wrong.", "C"),
        ("It must be option D", "D"),
        ("A. Sahara\nThe Sahara is the largest.", "A"),
        ("A cell is the smallest unit of life.", None),
        ("Canada is the answer", None),
        ("", None),
    ],
)
def test_extract_choice_letter(text, letter):
    assert extract_choice_letter(text) == letter


def test_choice_falls_back_to_option_text():
    reference = ["C", "the Indian Ocean"]
    assert choice_is_correct("It is the Indian Ocean.", reference)
    assert not choice_is_correct("It is the Pacific.", reference)
    assert not choice_is_correct("Answer: B, the Indian Ocean", reference)  # an explicit letter decides
    assert choice_is_correct("Answer: C", reference)


def test_normalisation_and_token_f1_by_hand():
    assert normalize_answer("The  Big, red BARN!") == "big red barn"
    # pred "big red barn" vs ref "red barn": 2 common tokens, P = 2/3, R = 1, F1 = 2PR/(P+R) = 0.8
    assert token_f1("the big red barn", "a red barn") == pytest.approx(0.8)
    assert token_f1("", "") == 1.0 and token_f1("x", "") == 0.0


def test_contains_answer_matches_whole_words_only():
    assert contains_answer("I think it was Ottawa, Canada.", ["Toronto", "ottawa"])
    assert not contains_answer("Parisian cafés", ["Paris"])
    assert not contains_answer("anything", ["", "!!"])  # empty answers never match
    assert contains_answer("About 3,870 metres.", ["3870"])


# ----------------------------------------------------------------------------- evaluate modules


def test_every_metric_is_a_local_evaluate_module():
    import evaluate

    for name, spec in METRICS.items():
        assert spec.path.is_file(), spec.path
        assert isinstance(load_metric(name), evaluate.Metric)
    assert load_metric("squad") is load_metric("squad")  # cached


def test_bleu_matches_hand_computation_and_sacrebleu():
    # "the cat sat on the mat" vs "the cat sat on a mat": clipped n-gram precisions 5/6, 3/5, 2/4, 1/3,
    # equal lengths (brevity penalty 1): BLEU = geometric mean.
    result = score("sacrebleu", ["the cat sat on the mat"], [["the cat sat on a mat"]])
    assert result["bleu"] == pytest.approx((5 / 6 * 3 / 5 * 2 / 4 * 1 / 3) ** 0.25)
    assert result["score"] == result["bleu"]

    preds = ["The train to Berlin is late today.", "I forgot my phone in the bus."]
    refs = [["The train to Berlin is twenty minutes late today."], ["I left my phone on the bus."]]
    direct = sacrebleu.corpus_bleu(preds, [[r[0] for r in refs]]).score / 100
    assert score("sacrebleu", preds, refs)["bleu"] == pytest.approx(direct)


def test_bleu_accepts_unequal_reference_counts():
    preds = ["a b c d e", "f g h i j"]
    one = score("sacrebleu", preds, [["a b c d x"], ["f g h i j"]])["bleu"]
    # repeating a reference must not change the score
    assert score("sacrebleu", preds, [["a b c d x", "a b c d x"], ["f g h i j"]])["bleu"] == pytest.approx(one)
    # a second, better reference can only help
    assert score("sacrebleu", preds, [["a b c d x", "a b c d e"], ["f g h i j"]])["bleu"] == pytest.approx(1.0)


def test_rouge_matches_hand_computation():
    # pred "the cat sat on the mat", ref "the cat was on the mat" (6 tokens each):
    # LCS "the cat on the mat" = 5 -> ROUGE-L F = 5/6; unigram overlap 5 -> 5/6;
    # bigrams in common: "the cat", "on the", "the mat" = 3 of 5 -> 3/5.
    result = score("rouge", ["the cat sat on the mat"], [["the cat was on the mat"]])
    assert result["rougeL"] == pytest.approx(5 / 6)
    assert result["rouge1"] == pytest.approx(5 / 6)
    assert result["rouge2"] == pytest.approx(3 / 5)
    assert result["score"] == result["rougeL"]
    # several references: the best one counts; the mean is over examples
    two = score("rouge", ["x y", "the cat sat on the mat"], [["p q", "x y"], ["the cat was on the mat"]])
    assert two["rougeL"] == pytest.approx((1 + 5 / 6) / 2)


def test_squad_matches_hand_computation():
    result = score("squad", ["the big red barn", "Paris"], [["a red barn"], ["London", "paris!"]])
    assert result["exact_match"] == pytest.approx(0.5)
    assert result["f1"] == pytest.approx((0.8 + 1.0) / 2)
    assert result["score"] == result["f1"]


def test_accuracy_metrics():
    assert score("answer_in_list", ["It is Ottawa.", "Toronto"], [["Ottawa"], ["Montreal"]])["accuracy"] == 0.5
    math_result = score("numeric_match", ["so 18 dollars", "#### 7", "I give up"], [["16 - 3 - 4 = 9\n#### 18"], ["8"], ["3"]])
    assert math_result["accuracy"] == pytest.approx(1 / 3)
    choice = score("choice_accuracy", [" B", "The answer is (C)", "It is Saturn."], [["B", "x"], ["D", "y"], ["A", "Saturn"]])
    assert choice["accuracy"] == pytest.approx(2 / 3)


def test_no_reference_gives_none_not_zero():
    assert score(None, ["anything"], [[]]) is None
    assert score("squad", ["anything", "else"], [[], []]) is None
    assert score("squad", [], []) is None
    # examples without a reference are left out of the mean
    assert score("squad", ["Paris", "whatever"], [["Paris"], []])["f1"] == 1.0


def test_score_errors_are_one_line():
    with pytest.raises(ValueError, match="known: answer_in_list") as err:
        score("bleurt", ["x"], [["x"]])
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="2 predictions but 1"):
        score("squad", ["a", "b"], [["a"]])


def test_headline_metric_per_domain():
    assert get_domain("translation").headline_metric == "bleu"
    assert get_domain("summarization").headline_metric == "rougeL"
    assert get_domain("qa").headline_metric == "f1"
    assert get_domain("mmlu").headline_metric == "accuracy"
    assert get_domain("mt_bench").headline_metric is None
    assert get_metric_spec("rouge").headline == "rougeL"


def test_score_outputs_extracts_with_the_domain_rule():
    math_domain = get_domain("math")
    examples = [Example("m1", "math", ("q",), ("3 * 4 = 12\n#### 12",)), Example("m2", "math", ("q",), ("#### 5",))]
    result = math_domain.score_outputs(["3 times 4 is 12.", "The answer is 6"], examples)
    assert result["score"] == 0.5
    mt = [Example("w1", "mt_bench", ("a", "b"))]
    assert get_domain("mt_bench").score_outputs(["text"], mt) is None
    assert not math.isnan(get_domain("mmlu").score_outputs(["A"], [Example("x", "mmlu", ("p",), ("A", "t"))])["score"])


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(sorted(set(METRICS) - {"code_pass", "call_match"})),  # references: programs, JSON
       st.lists(st.tuples(st.sampled_from(["Paris", "the red barn", "B", "#### 7", "", "x y z"]),
                          st.lists(st.sampled_from(["Paris", "a red barn", "B", "7", "y"]), min_size=1, max_size=2)),
                min_size=1, max_size=4))
def test_remembered_scores_equal_the_module_called_afresh(metric, pairs):
    """`score` answers repeated pairs from memory: its values equal a fresh module call's, and a caller
    changing the returned dict changes nothing remembered."""
    predictions, references = [p for p, _ in pairs], [r for _, r in pairs]
    first = score(metric, predictions, references)
    first["score"] = -1.0
    again = score(metric, predictions, references)
    fresh = load_metric(metric).compute(predictions=predictions, references=references)
    assert {key: again[key] for key in fresh} == pytest.approx({key: float(value) for key, value in fresh.items()})
    assert again["score"] == again[get_metric_spec(metric).headline]
