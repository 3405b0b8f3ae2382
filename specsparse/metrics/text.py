"""Text normalisation and answer extraction shared by the metric modules and the domains.

Every extractor is idempotent (extracting from an already extracted answer returns it unchanged), so
it does not matter whether a caller extracts before scoring or lets the metric do it.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from decimal import Decimal, InvalidOperation

CHOICE_LETTERS = ("A", "B", "C", "D")

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation)
# A number: optional sign and currency, digits with optional thousands commas, optional decimals.
_NUMBER = re.compile(r"(?:(?<![\w.])-)?\$?\d(?:[\d,]*\d)?(?:\.\d+)?")


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lower case, drop punctuation and articles (a/an/the), collapse spaces."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(prediction: str, reference: str) -> float:
    """1.0 when both strings are equal after `normalize_answer`, else 0.0."""
    return float(normalize_answer(prediction) == normalize_answer(reference))


def token_f1(prediction: str, reference: str) -> float:
    """SQuAD token-overlap F1 of the normalised strings (bag of words, multiplicities counted)."""
    pred = normalize_answer(prediction).split()
    ref = normalize_answer(reference).split()
    if not pred or not ref:
        # Both empty counts as a match, as in the official SQuAD v2 script.
        return float(pred == ref)
    common = sum((Counter(pred) & Counter(ref)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def contains_answer(output: str, answers: list[str] | tuple[str, ...]) -> bool:
    """True when any non-empty normalised answer appears in the normalised output as whole words."""
    padded = f" {normalize_answer(output)} "
    for answer in answers:
        norm = normalize_answer(answer)
        if norm and f" {norm} " in padded:
            return True
    return False


def canonical_number(token: str) -> str | None:
    """'$1,250.50' -> '1250.5'; returns None when `token` is not a number."""
    cleaned = token.replace("$", "").replace(",", "")
    try:
        value = Decimal(cleaned)
    except InvalidOperation:
        return None
    if value == value.to_integral_value():
        return format(value.to_integral_value(), "f")
    return format(value.normalize(), "f")


def extract_number(text: str) -> str | None:
    """The final numeric answer in `text`, canonicalised; None when there is no number.

    The first number after the last '####' wins when present (GSM8K style; text generated after
    it is ignored), else the last number in the text. Commas and '$' are stripped:
    'The answer is $1,200.' -> '1200'.
    """
    if "####" in text:
        match = _NUMBER.search(text.rsplit("####", 1)[1])
        if match:
            return canonical_number(match.group(0))
    matches = _NUMBER.findall(text)
    return canonical_number(matches[-1]) if matches else None


def numbers_equal(prediction: str, reference: str) -> bool:
    """Numeric exact match of the extracted final numbers (3.50 == 3.5; no number never matches)."""
    pred, ref = extract_number(prediction), extract_number(reference)
    return pred is not None and ref is not None and Decimal(pred) == Decimal(ref)


# Ordered from most to least explicit; the first pattern that matches decides.
_CHOICE_PATTERNS = (
    re.compile(r"(?i:answer)\s*(?:(?i:is)|:)?\s*[:\-]?\s*(?:(?i:option)\s+)?\(?([ABCD])\b"),
    re.compile(r"\A\s*\(?([ABCD])(?:[.):]|[ \t]*(?:\n|\Z))"),
    re.compile(r"\(([ABCD])\)"),
    re.compile(r"(?<![\w.])([ABCD])[.)](?!\w)"),
    re.compile(r"(?i:option)\s+([ABCD])\b"),
)


def extract_choice_letter(text: str) -> str | None:
    """The option letter a model's output picks, or None.

    Recognised, in this order: 'Answer: B' / 'The answer is B' / 'answer is (B)', a leading letter
    ('B', 'B.', '(B)', 'B)'), '(B)' anywhere, 'B.' or 'B)' anywhere, 'option B'. A bare capital
    'A' starting a sentence ('A cell is ...') is not read as a choice.
    """
    for pattern in _CHOICE_PATTERNS:
        match = pattern.search(text)
        if match:
            return match.group(1)
    return None


def choice_is_correct(output: str, reference: list[str] | tuple[str, ...]) -> bool:
    """Whether `output` picks the reference choice.

    reference: (letter, *acceptable option texts). The letter found by `extract_choice_letter`
    decides when there is one; otherwise the output counts as correct when it contains one of the
    option texts (normalised, whole words).
    """
    if not reference:
        raise ValueError("choice reference must start with the answer letter")
    letter = extract_choice_letter(output)
    if letter is not None:
        return letter == reference[0].strip().upper()
    return contains_answer(output, list(reference[1:]))
