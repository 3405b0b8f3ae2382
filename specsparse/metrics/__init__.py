"""Task metrics, computed by local `evaluate` modules (no Hub access), all on a 0-1 scale inside the
library; what a job writes and prints is on the 0-100 scale of sacreBLEU and the papers (`SCALE`).

    >>> score("squad", ["Paris"], [["Paris", "paris, France"]])
    {'exact_match': 1.0, 'f1': 1.0, 'score': 1.0}

`score` returns the module's values plus "score", the headline value of that metric (BLEU for
sacrebleu, ROUGE-L F for rouge, F1 for squad and entity_f1, pass@1 for code_pass, accuracy
otherwise). It returns None, not 0, when nothing can be scored (no metric, or no example has a
reference); callers display that as "n/a".
`evaluate` is imported on first use, because importing it pulls in most of transformers.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

MODULES_DIR = Path(__file__).resolve().parent / "modules"


@dataclass(frozen=True)
class MetricSpec:
    """A local evaluate module (file under metrics/modules/), the key of its headline value and the
    name tables show for it. runs_code: the metric executes model-written programs (a domain must opt
    in with `execute_code`)."""

    module: str
    headline: str
    label: str
    runs_code: bool = False

    @property
    def path(self) -> Path:
        return MODULES_DIR / self.module


METRICS: dict[str, MetricSpec] = {
    "sacrebleu": MetricSpec("sacrebleu_local.py", "bleu", "BLEU"),
    "rouge": MetricSpec("rouge_local.py", "rougeL", "ROUGE-L"),
    "squad": MetricSpec("squad_local.py", "f1", "F1"),
    "answer_in_list": MetricSpec("answer_in_list.py", "accuracy", "answer accuracy"),
    "numeric_match": MetricSpec("numeric_match.py", "accuracy", "numeric accuracy"),
    "choice_accuracy": MetricSpec("choice_accuracy.py", "accuracy", "choice accuracy"),
    "code_pass": MetricSpec("code_pass.py", "pass_at_1", "pass@1", runs_code=True),
    "call_match": MetricSpec("call_match.py", "accuracy", "call accuracy"),
    "math_equiv": MetricSpec("math_equiv.py", "accuracy", "answer accuracy"),
    "entity_f1": MetricSpec("entity_f1.py", "f1", "entity F1"),
}
SCALE = 100.0  # outputs show metrics as 0-100


def metric_description(name: str | None) -> dict[str, str] | None:
    """What a job's files say of its metric: {"name": "ROUGE-L", "module": "rouge", "key": "rougeL",
    "scale": "0-100"}; None for a domain without one."""
    if name is None:
        return None
    spec = get_metric_spec(name)
    return {"name": spec.label, "module": name, "key": spec.headline, "scale": f"0-{SCALE:g}"}


def get_metric_spec(name: str) -> MetricSpec:
    """The MetricSpec registered under `name`; ValueError naming the known metrics otherwise."""
    try:
        return METRICS[name]
    except KeyError:
        raise ValueError(f"unknown metric {name!r}; known: {', '.join(sorted(METRICS))}") from None


@functools.cache
def load_metric(name: str) -> Any:
    """The loaded `evaluate` module for metric `name` (loaded once per process, kept in memory)."""
    import evaluate  # noqa: PLC0415

    spec = get_metric_spec(name)
    log.debug("loading metric %s from %s", name, spec.path)
    return evaluate.load(str(spec.path), keep_in_memory=True)


def score(
    metric_name: str | None,
    predictions: Sequence[str],
    references: Sequence[Sequence[str]],
) -> dict[str, float] | None:
    """Score predictions against references with one metric.

    predictions: n output strings. references: n sequences of acceptable answers; examples whose
    sequence is empty are left out. Returns the metric's values plus "score" (the headline), or
    None when `metric_name` is None or no example has a reference.
    """
    if len(predictions) != len(references):
        raise ValueError(f"{len(predictions)} predictions but {len(references)} reference lists")
    if metric_name is None:
        return None
    spec = get_metric_spec(metric_name)
    pairs = [(str(p), [str(r) for r in refs]) for p, refs in zip(predictions, references) if len(refs) > 0]
    if not pairs:
        return None
    if len(pairs) < len(predictions):
        log.debug("%s: %d of %d examples have no reference", metric_name, len(predictions) - len(pairs), len(predictions))
    result = dict(_compute(metric_name, tuple(p for p, _ in pairs), tuple(tuple(r) for _, r in pairs)))
    result["score"] = result[spec.headline]
    return result


@functools.lru_cache(maxsize=1 << 16)
def _compute(metric_name: str, predictions: tuple[str, ...], references: tuple[tuple[str, ...], ...]) -> tuple:
    """The module's values for these pairs, computed once per process: a search scores every prompt
    under every skip set, most replies repeat (MMLU's extracted letters above all), and a module call
    costs far more than a lookup. The metrics are deterministic."""
    values = load_metric(metric_name).compute(predictions=list(predictions), references=[list(r) for r in references])
    return tuple((key, float(value)) for key, value in values.items())


__all__ = ["METRICS", "SCALE", "MetricSpec", "get_metric_spec", "load_metric", "metric_description", "score"]
