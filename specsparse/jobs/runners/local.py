"""Measuring candidates in this process: the one function every runner measures with, and the
runner that calls it directly."""

from __future__ import annotations

from collections.abc import Sequence

from specsparse.jobs.runners import OnResult
from specsparse.measuring.evaluation import EvaluationSpec, evaluator_for
from specsparse.types import Candidate, Measurement


def measure_candidates(
    spec: EvaluationSpec,
    candidates: Sequence[Candidate],
    thresholds: tuple | None = None,
    on_result: OnResult | None = None,
    progress: bool = True,
) -> list[Measurement]:
    """Measure `candidates` with this process's Evaluator for `spec`, a group at a time (batched
    together in replay mode), handing each measurement to `on_result` as its group finishes, so a
    killed job loses at most one group."""
    evaluator = evaluator_for(spec)
    # About two batches of rows per group: full batches, and little lost to a kill.
    group = max(1, 2 * evaluator.batch_size // len(evaluator.examples)) if spec.measure.mode == "replay" else 1
    results = []
    for first in range(0, len(candidates), group):
        chunk = list(candidates[first : first + group])
        for candidate, measurement in zip(chunk, evaluator.evaluate_many(chunk, thresholds, progress)):
            results.append(measurement)
            if on_result is not None:
                on_result(candidate, measurement)
    return results


class LocalRunner:
    """Runner protocol in the job's process."""

    def __init__(self, progress: bool = True):
        self.progress = progress

    def evaluate_batch(self, spec, candidates, thresholds=None, on_result=None) -> list[Measurement]:
        return measure_candidates(spec, candidates, thresholds, on_result, self.progress)

    def price(self, spec: EvaluationSpec, candidate: Candidate, measurement: Measurement) -> Measurement:
        """`measurement` priced by this process's cost profile, as what it measures is."""
        return evaluator_for(spec).price(candidate, measurement)

    def close(self) -> None:
        """Nothing to release: evaluators live for the process (`evaluator_for`)."""
