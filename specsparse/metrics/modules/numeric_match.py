"""Numeric exact match: the final number of the output against the final number of the reference."""

import datasets
import evaluate

from specsparse.metrics.text import numbers_equal

_DESCRIPTION = (
    "Fraction of outputs whose final number (after '####' if present, else the last number; "
    "commas and '$' stripped) equals the reference's final number."
)
_INPUTS = """
predictions: list of str, the model outputs.
references: list of list of str; the first reference of each example holds the answer
    (a bare number or a GSM8K rationale ending in '#### <number>').
Returns: {"accuracy": float in [0, 1]}.
"""


class NumericMatch(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="Cobbe et al., 2021. Training Verifiers to Solve Math Word Problems.",
            inputs_description=_INPUTS,
            features=datasets.Features(
                {
                    "predictions": datasets.Value("string"),
                    "references": datasets.Sequence(datasets.Value("string")),
                }
            ),
        )

    def _compute(self, predictions, references):
        hits = sum(
            any(numbers_equal(pred, ref) for ref in refs) for pred, refs in zip(predictions, references)
        )
        return {"accuracy": hits / max(len(predictions), 1)}
