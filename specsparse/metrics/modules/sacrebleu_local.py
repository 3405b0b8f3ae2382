"""Corpus BLEU with sacreBLEU (default 13a tokenisation), on a 0-1 scale (BLEU / 100)."""

import datasets
import evaluate
import sacrebleu

_DESCRIPTION = "Corpus-level sacreBLEU of predictions against one or more references each, divided by 100."
_INPUTS = """
predictions: list of str, one translation per example.
references: list of list of str, the acceptable translations of each example (at least one).
Returns: {"bleu": float in [0, 1], "brevity_penalty": float}.
"""


class SacreBleuLocal(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="Post, 2018. A Call for Clarity in Reporting BLEU Scores.",
            inputs_description=_INPUTS,
            features=datasets.Features(
                {
                    "predictions": datasets.Value("string"),
                    "references": datasets.Sequence(datasets.Value("string")),
                }
            ),
        )

    def _compute(self, predictions, references):
        if any(len(refs) == 0 for refs in references):
            raise ValueError("every prediction needs at least one reference")
        # sacreBLEU wants the same number of references per example. Repeating an example's last
        # reference leaves its score unchanged (n-gram clipping and closest length use a max/min).
        width = max(len(refs) for refs in references)
        padded = [list(refs) + [refs[-1]] * (width - len(refs)) for refs in references]
        streams = [[refs[i] for refs in padded] for i in range(width)]
        result = sacrebleu.corpus_bleu(list(predictions), streams)
        return {"bleu": result.score / 100.0, "brevity_penalty": result.bp}
