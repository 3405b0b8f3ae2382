"""Answer accuracy for competition mathematics: the final (boxed) answer equals the reference."""

import datasets
import evaluate

from specsparse.metrics.math_answers import math_equal

_DESCRIPTION = (
    "Fraction of outputs whose final answer (the last \\boxed{...}, else the final number) equals the "
    "reference after LaTeX normalisation (MATH's rules: spacing, \\left/\\right, \\dfrac, units, a/b), "
    "or as a number."
)
_INPUTS = """
predictions: list of str, the model outputs.
references: list of list of str; any reference may match (a bare answer or a solution with \\boxed{}).
Returns: {"accuracy": float in [0, 1]}.
"""


class MathEquiv(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="Hendrycks et al., 2021. Measuring Mathematical Problem Solving With the MATH Dataset.",
            inputs_description=_INPUTS,
            features=datasets.Features(
                {
                    "predictions": datasets.Value("string"),
                    "references": datasets.Sequence(datasets.Value("string")),
                }
            ),
        )

    def _compute(self, predictions, references):
        hits = sum(any(math_equal(pred, ref) for ref in refs) for pred, refs in zip(predictions, references))
        return {"accuracy": hits / max(len(predictions), 1)}
