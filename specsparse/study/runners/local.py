"""Measuring candidates in this process: the one function every runner measures with, and the
runner that calls it directly."""

from __future__ import annotations

from collections.abc import Sequence

from specsparse.measuring.evaluation import EvaluationSpec, evaluator_for
from specsparse.study.runners import OnResult
from specsparse.types import Candidate, Measurement


def measure_candidates(
    spec: EvaluationSpec,
    candidates: Sequence[Candidate],
    thresholds: tuple | None = None,
    on_result: OnResult | None = None,
    progress: bool = True,
) -> list[Measurement]:
    """Measure `candidates` with this process's Evaluator for `spec`, a pass at a time (in replay mode
    one batched pass measures `configurations_per_pass` of them together), handing each measurement to
    `on_result` as its pass ends, so a killed job loses at most the pass in flight."""
    evaluator = evaluator_for(spec)
    group = configurations_per_pass(evaluator.batch_size, len(evaluator.examples)) if spec.measure.mode == "replay" else 1
    results = []
    for first in range(0, len(candidates), group):
        chunk = list(candidates[first : first + group])
        for candidate, measurement in zip(chunk, evaluator.evaluate_many(chunk, thresholds, progress)):
            results.append(measurement)
            if on_result is not None:
                on_result(candidate, measurement)
    return results


def configurations_per_pass(batch_size: int, n_examples: int) -> int:
    """The fewest configurations whose rows (one per example) fill a batch: a pass then loses less than
    a batch of rows plus one configuration's to a kill. Measured on SmolLM2-135M and the tiny model, a
    search level measured so takes no longer than in one pass; passes of fewer rows than a batch run
    part-empty batches and take longer."""
    return max(1, -(-batch_size // n_examples))


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
