"""Named entities as a reply lists them, one per line, `TYPE: text` (`PER: John Smith`), and the
entity-level F1 of CoNLL scoring: an entity counts when both its type and its exact text match."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

_LINE = re.compile(r"^\s*(?:[-*•]|\d+[.)])?\s*([A-Za-z]+)\s*[:=\-]\s*(.+?)\s*$")


def parse_entities(text: str) -> Counter[tuple[str, str]]:
    """The (TYPE, text) entities of a reply; lines of another shape (and a reply "none") give none."""
    found: Counter[tuple[str, str]] = Counter()
    for line in text.splitlines():
        match = _LINE.match(line)
        if match:
            found[(match.group(1).upper(), " ".join(match.group(2).strip("\"'.").split()))] += 1
    return found


def entity_counts(prediction: str, reference: str) -> tuple[int, int, int]:
    """(true positives, predicted, expected) entities of one reply."""
    predicted, expected = parse_entities(prediction), parse_entities(reference)
    return sum((predicted & expected).values()), sum(predicted.values()), sum(expected.values())


def entity_f1(predictions: Sequence[str], references: Sequence[str]) -> dict[str, float]:
    """Micro-averaged precision, recall and F1 over all entities (a set with no entity on either
    side scores 1)."""
    hits = predicted = expected = 0
    for prediction, reference in zip(predictions, references):
        h, p, e = entity_counts(prediction, reference)
        hits, predicted, expected = hits + h, predicted + p, expected + e
    precision = hits / predicted if predicted else float(expected == 0)
    recall = hits / expected if expected else float(predicted == 0)
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}
