"""SQuAD-style exact match and token F1 (normalised text, best reference per example), 0-1 scale."""

import datasets
import evaluate

from specsparse.metrics.text import exact_match, token_f1

_DESCRIPTION = "SQuAD v1.1 exact match and F1 after lower-casing and removing punctuation and articles."
_INPUTS = """
predictions: list of str, one answer per example.
references: list of list of str, the acceptable answers of each example (at least one).
Returns: {"exact_match", "f1"}: means over examples in [0, 1].
"""


class SquadLocal(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="Rajpurkar et al., 2016. SQuAD: 100,000+ Questions for Machine Comprehension of Text.",
            inputs_description=_INPUTS,
            features=datasets.Features(
                {
                    "predictions": datasets.Value("string"),
                    "references": datasets.Sequence(datasets.Value("string")),
                }
            ),
        )

    def _compute(self, predictions, references):
        em = f1 = 0.0
        for prediction, refs in zip(predictions, references):
            if len(refs) == 0:
                raise ValueError("every prediction needs at least one reference")
            em += max(exact_match(prediction, ref) for ref in refs)
            f1 += max(token_f1(prediction, ref) for ref in refs)
        n = max(len(predictions), 1)
        return {"exact_match": em / n, "f1": f1 / n}
