"""Entity-level F1 (CoNLL): predicted `TYPE: text` lines against the reference entities."""

import datasets
import evaluate

from specsparse.metrics.entities import entity_f1

_DESCRIPTION = (
    "Micro-averaged entity-level precision, recall and F1: an entity, one `TYPE: text` line of the "
    "output, counts when its type and exact text match a reference entity (CoNLL-2003 scoring)."
)
_INPUTS = """
predictions: list of str, the model outputs.
references: list of list of str: [the expected entities, one `TYPE: text` line each ("none": none)] per example.
Returns: {"precision", "recall", "f1"}: floats in [0, 1].
"""


class EntityF1(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="Tjong Kim Sang and De Meulder, 2003. Introduction to the CoNLL-2003 Shared Task.",
            inputs_description=_INPUTS,
            features=datasets.Features(
                {
                    "predictions": datasets.Value("string"),
                    "references": datasets.Sequence(datasets.Value("string")),
                }
            ),
        )

    def _compute(self, predictions, references):
        return entity_f1(predictions, [refs[0] for refs in references])
