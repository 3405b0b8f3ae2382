"""Answer-in-list accuracy: an output is correct when any acceptable answer appears in it."""

import datasets
import evaluate

from specsparse.metrics.text import contains_answer

_DESCRIPTION = (
    "Fraction of outputs whose normalised text (SQuAD normalisation) contains, as whole words, "
    "at least one normalised acceptable answer."
)
_INPUTS = """
predictions: list of str, the model outputs.
references: list of list of str, the acceptable answers of each example (at least one).
Returns: {"accuracy": float in [0, 1]}.
"""


class AnswerInList(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="",
            inputs_description=_INPUTS,
            features=datasets.Features(
                {
                    "predictions": datasets.Value("string"),
                    "references": datasets.Sequence(datasets.Value("string")),
                }
            ),
        )

    def _compute(self, predictions, references):
        hits = sum(contains_answer(pred, list(refs)) for pred, refs in zip(predictions, references))
        return {"accuracy": hits / max(len(predictions), 1)}
