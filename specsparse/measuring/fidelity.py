"""Output fidelity: how close a configuration's replies stay to the dense target's own replies.

An extension of the papers (which guard quality with the task metric only). A domain without a task
metric (mt_bench), or whose metric the dense model cannot score (its interval reaches near 0), has no
quality check: a skip set that turns the replies into repetitions raises accept length and "holds".
Fidelity is the chrF (sacreBLEU, 0-100) of each prompt's reply under the configuration against the
dense reply to the same prompt, averaged over prompts: 100 for identical replies, near 0 for
unrelated ones. It needs no references, so it exists for every domain.
"""

from __future__ import annotations

import functools

import sacrebleu

from specsparse.measuring.intervals import Interval, mean_interval
from specsparse.types import Measurement

NAME = "chrF vs dense output"


@functools.lru_cache(maxsize=4096)
def _chrf(reply: str, dense_reply: str) -> float:
    if reply == dense_reply:  # chrF scores two empty or all-blank replies 0; they are the same reply
        return 100.0
    return float(sacrebleu.sentence_chrf(reply, [dense_reply]).score)


def fidelity_scores(dense: Measurement, candidate: Measurement) -> list[float] | None:
    """Per prompt chrF (0-100) of `candidate`'s reply against `dense`'s; None unless both ran the same
    prompts in the same order (an early-stopped measurement covers fewer)."""
    if not dense.per_prompt or [p.example_id for p in dense.per_prompt] != [p.example_id for p in candidate.per_prompt]:
        return None
    return [_chrf(c.output_text, d.output_text) for d, c in zip(dense.per_prompt, candidate.per_prompt)]


def fidelity_interval(dense: Measurement, candidate: Measurement, seed: int = 0) -> Interval | None:
    """Mean fidelity over prompts with its 95% bootstrap interval; None when the prompts differ."""
    scores = fidelity_scores(dense, candidate)
    return None if scores is None else mean_interval(scores, seed)
