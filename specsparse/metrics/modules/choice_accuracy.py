"""Multiple-choice accuracy with robust answer-letter extraction (MMLU style)."""

import datasets
import evaluate

from specsparse.metrics.text import choice_is_correct

_DESCRIPTION = (
    "Fraction of outputs that pick the reference option. The letter is read from 'Answer: B', "
    "'The answer is B', a leading 'B' / 'B.' / '(B)', or '(B)' / 'B.' elsewhere; an output with no "
    "letter counts as correct when it contains the reference option's text."
)
_INPUTS = """
predictions: list of str, the model outputs.
references: list of list of str: [answer letter, *acceptable option texts] per example.
Returns: {"accuracy": float in [0, 1]}.
"""


class ChoiceAccuracy(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="Hendrycks et al., 2021. Measuring Massive Multitask Language Understanding.",
            inputs_description=_INPUTS,
            features=datasets.Features(
                {
                    "predictions": datasets.Value("string"),
                    "references": datasets.Sequence(datasets.Value("string")),
                }
            ),
        )

    def _compute(self, predictions, references):
        hits = sum(choice_is_correct(pred, list(refs)) for pred, refs in zip(predictions, references))
        return {"accuracy": hits / max(len(predictions), 1)}
