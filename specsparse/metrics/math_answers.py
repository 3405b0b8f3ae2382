"""Final answers of competition mathematics (MATH-500, AIME): the last `\\boxed{...}` of a solution,
and equivalence of two answers after the usual LaTeX normalisation (Hendrycks et al.'s MATH rules:
spacing, `\\left`/`\\right`, `\\dfrac`, units and degree signs, `a/b` as a fraction), or as numbers."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from specsparse.metrics.text import extract_number

_BOX = re.compile(r"\\(?:boxed|fbox)\s*\{")
_REMOVE = ("\\left", "\\right", "\\!", "\\,", "\\;", "\\:", "\\displaystyle", "^\\circ", "^{\\circ}", "\\$", "$",
           "\\%", "%", "\\text{ }", "degrees", "°")
_TEXT = re.compile(r"\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}")
_FRAC_SHORT = re.compile(r"\\frac(\d)(\d)")
_FRAC_HALF = re.compile(r"\\frac\{([^{}]*)\}(\d)")
_SQRT_SHORT = re.compile(r"\\sqrt(\w)")
_SLASH = re.compile(r"^(-?\d+)/(\d+)$")
_LEFT_SIDE = re.compile(r"^[a-zA-Z]\s*=")
_PROSE = re.compile(r"(?<![\\a-zA-Z])[a-zA-Z]{3,}")


def extract_boxed(text: str) -> str | None:
    """The contents of the last `\\boxed{...}` (braces balanced), or None when there is none."""
    starts = [m.end() for m in _BOX.finditer(text)]
    if not starts:
        return None
    depth, start = 1, starts[-1]
    for i in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[start:i].strip()
    return None


def final_answer(text: str) -> str:
    """The answer of a solution: its last boxed answer; else, for prose (a word of three letters or more
    outside a LaTeX command), its final number; else the stripped text (a bare answer such as `x^{2}`).
    Idempotent."""
    boxed = extract_boxed(text)
    if boxed is not None:
        return boxed
    if _PROSE.search(text):
        return extract_number(text) or text.strip()
    return text.strip()


def normalize_math(answer: str) -> str:
    """An answer in a canonical spelling: `\\dfrac{1}{2}`, `\\frac12`, `1/2` and ` \\frac{1}{2} ` all
    read `\\frac{1}{2}`; `x = 5` reads `5`; `0.5` and `.5` both read `0.5`."""
    text = answer.strip().rstrip(".")
    text = _TEXT.sub(r"\1", text)
    for token in _REMOVE:
        text = text.replace(token, "")
    text = text.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac").replace(" ", "")
    text = _FRAC_SHORT.sub(r"\\frac{\1}{\2}", text)
    text = _FRAC_HALF.sub(r"\\frac{\1}{\2}", text)
    text = _SQRT_SHORT.sub(r"\\sqrt{\1}", text)
    if _LEFT_SIDE.match(text) and len(text.split("=", 1)[0]) <= 2:
        text = text.split("=", 1)[1]
    if text.startswith("."):
        text = "0" + text
    text = _SLASH.sub(r"\\frac{\1}{\2}", text)
    return text


def _number(text: str) -> Decimal | None:
    match = re.fullmatch(r"\\frac\{(-?\d+)\}\{(\d+)\}", text)
    try:
        if match:
            return Decimal(match.group(1)) / Decimal(match.group(2))
        return Decimal(text.replace(",", "")) if re.fullmatch(r"-?[\d,]*\.?\d+", text) else None
    except (InvalidOperation, ZeroDivisionError):
        return None


def math_equal(prediction: str, reference: str) -> bool:
    """Whether two final answers are the same after `normalize_math`, or the same number."""
    pred, ref = normalize_math(final_answer(prediction)), normalize_math(final_answer(reference))
    if pred == ref:
        return bool(ref)
    a, b = _number(pred), _number(ref)
    return a is not None and b is not None and abs(a - b) <= Decimal("1e-9") * max(1, abs(b))
