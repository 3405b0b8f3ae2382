"""pass@1: the share of completions whose program passes its unit tests (HumanEval)."""

import os
from concurrent.futures import ThreadPoolExecutor

import datasets
import evaluate

from specsparse.metrics.code import extract_code, humaneval_program, run_program

_DESCRIPTION = (
    "Fraction of completions that pass their tests: each completion (the first fenced code block of "
    "the output, else the output) is run with the task's prompt and tests in a fresh Python process "
    "with a timeout, memory limits and no network (specsparse.metrics.code). One sample per task: pass@1."
)
_INPUTS = """
predictions: list of str, the model outputs.
references: list of list of str: [reference solution, prompt, tests ending in the check call] per task.
Returns: {"pass_at_1": float in [0, 1]}.
"""


class CodePass(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="Chen et al., 2021. Evaluating Large Language Models Trained on Code.",
            inputs_description=_INPUTS,
            features=datasets.Features(
                {
                    "predictions": datasets.Value("string"),
                    "references": datasets.Sequence(datasets.Value("string")),
                }
            ),
        )

    def _compute(self, predictions, references):
        programs = [humaneval_program(extract_code(pred), refs[1], refs[2]) for pred, refs in zip(predictions, references)]
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            passed = sum(pool.map(run_program, programs))
        return {"pass_at_1": passed / max(len(predictions), 1)}
