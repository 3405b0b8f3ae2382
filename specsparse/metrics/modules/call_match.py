"""Function-call accuracy: BFCL's AST match of the calls in an output against the possible answers."""

import datasets
import evaluate

from specsparse.metrics.calls import calls_match
from specsparse.metrics.code import extract_code

_DESCRIPTION = (
    "Fraction of outputs whose calls (Python syntax, `f(a=1)` or `[f(a=1), g(b=2)]`, optionally fenced) "
    "match the expected calls by function name and arguments, as BFCL's AST checker does."
)
_INPUTS = """
predictions: list of str, the model outputs.
references: list of list of str: [BFCL ground truth as JSON] per example.
Returns: {"accuracy": float in [0, 1]}.
"""


class CallMatch(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="Patil et al., 2025. The Berkeley Function Calling Leaderboard (BFCL).",
            inputs_description=_INPUTS,
            features=datasets.Features(
                {
                    "predictions": datasets.Value("string"),
                    "references": datasets.Sequence(datasets.Value("string")),
                }
            ),
        )

    def _compute(self, predictions, references):
        hits = sum(calls_match(extract_code(pred), refs[0]) for pred, refs in zip(predictions, references))
        return {"accuracy": hits / max(len(predictions), 1)}
