"""Measuring candidates in this process: the one function every runner measures with, and the
runner that calls it directly with the job's Evaluator."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from specsparse.types import Candidate, Measurement

if TYPE_CHECKING:
    from specsparse.measuring.evaluation import Evaluator
    from specsparse.study.driver import OnMeasured


def measure_in_passes(
    evaluator: Evaluator,
    candidates: Sequence[Candidate],
    thresholds: tuple | None = None,
    on_measured: OnMeasured | None = None,
    progress: bool = True,
) -> list[Measurement]:
    """Measurements of `candidates` (in order) by `evaluator`, a pass at a time (in replay mode one
    batched pass measures `configurations_per_pass` of them together), each handed to `on_measured` as
    its pass ends, so a killed job loses at most the pass in flight."""
    replay = evaluator.spec.measure.mode == "replay"
    group = configurations_per_pass(evaluator.batch_size, len(evaluator.examples)) if replay else 1
    results = []
    for first in range(0, len(candidates), group):
        chunk = list(candidates[first : first + group])
        for candidate, measurement in zip(chunk, evaluator.evaluate_many(chunk, thresholds, progress)):
            results.append(measurement)
            if on_measured is not None:
                on_measured(candidate, measurement)
    return results


def configurations_per_pass(batch_size: int, n_examples: int) -> int:
    """The fewest configurations whose rows (one per example) fill a batch: a kill then loses less than
    a batch of rows plus one configuration's, and no pass runs part-empty batches, which cost more than
    full ones (BENCHMARKS.md, "Search passes sized to one batch")."""
    return max(1, -(-batch_size // n_examples))


class LocalRunner:
    """Runner protocol in the job's process, with the Evaluators the job hands it."""

    def __init__(self, progress: bool = True):
        self.progress = progress

    def evaluate_batch(
        self,
        evaluator: Evaluator,
        candidates: Sequence[Candidate],
        thresholds: tuple | None = None,
        on_measured: OnMeasured | None = None,
    ) -> list[Measurement]:
        return measure_in_passes(evaluator, candidates, thresholds, on_measured, self.progress)

    def price(self, evaluator: Evaluator, candidate: Candidate, measurement: Measurement) -> Measurement:
        """`measurement` priced by the job's cost profile, as what it measures is."""
        return evaluator.price(candidate, measurement)

    def close(self) -> None:
        """Nothing to release: the Evaluators are the job's."""
