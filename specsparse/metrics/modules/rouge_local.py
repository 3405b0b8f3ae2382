"""ROUGE-1/2/L F-measure with Google's rouge_score (Porter stemming), averaged over examples."""

import logging

import datasets
import evaluate
from rouge_score import rouge_scorer

# rouge_score logs "Using default tokenizer." through absl at INFO on every scorer it builds.
logging.getLogger("absl").setLevel(logging.WARNING)

_DESCRIPTION = "Mean ROUGE F-measures; with several references an example takes the best one per ROUGE type."
_INPUTS = """
predictions: list of str, one summary per example.
references: list of list of str, the reference summaries of each example (at least one).
Returns: {"rouge1", "rouge2", "rougeL"}: mean F-measures in [0, 1].
"""
_TYPES = ("rouge1", "rouge2", "rougeL")


class RougeLocal(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="Lin, 2004. ROUGE: A Package for Automatic Evaluation of Summaries.",
            inputs_description=_INPUTS,
            features=datasets.Features(
                {
                    "predictions": datasets.Value("string"),
                    "references": datasets.Sequence(datasets.Value("string")),
                }
            ),
        )

    def _compute(self, predictions, references):
        scorer = rouge_scorer.RougeScorer(list(_TYPES), use_stemmer=True)
        totals = dict.fromkeys(_TYPES, 0.0)
        for prediction, refs in zip(predictions, references):
            if len(refs) == 0:
                raise ValueError("every prediction needs at least one reference")
            scores = scorer.score_multi(list(refs), prediction)
            for name in _TYPES:
                totals[name] += scores[name].fmeasure
        n = max(len(predictions), 1)
        return {name: total / n for name, total in totals.items()}
