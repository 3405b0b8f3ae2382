"""Measuring in this process: the one function every runner measures with, the `EvaluatorHost` that
holds a process's Evaluators (the job's, or a Ray worker's), and the runner that uses one directly."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from specsparse.types import Candidate, Measurement

if TYPE_CHECKING:
    from specsparse.measuring.evaluation import EvaluationSpec, Evaluator
    from specsparse.study.driver import OnMeasured

T = TypeVar("T")


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
    group = pass_size(evaluator)
    results = []
    for first in range(0, len(candidates), group):
        chunk = list(candidates[first : first + group])
        for candidate, measurement in zip(chunk, evaluator.evaluate_many(chunk, thresholds, progress)):
            results.append(measurement)
            if on_measured is not None:
                on_measured(candidate, measurement)
    return results


def pass_size(evaluator: Evaluator) -> int:
    """How many configurations `evaluator` measures in one pass: one batched replay fills a batch with
    `configurations_per_pass` of them; the engine measures one at a time."""
    if evaluator.spec.measure.mode != "replay":
        return 1
    return configurations_per_pass(evaluator.batch_size, len(evaluator.examples))


def configurations_per_pass(batch_size: int, n_examples: int) -> int:
    """The fewest configurations whose rows (one per example) fill a batch: a kill then loses less than
    a batch of rows plus one configuration's, and no pass runs part-empty batches, which cost more than
    full ones (BENCHMARKS.md, "Search passes sized to one batch")."""
    return max(1, -(-batch_size // n_examples))


class EvaluatorHost:
    """A process's Evaluators, one per spec, made on first use and kept (the model loads once and every
    greedy generation serves every later candidate), and the cost profiles they priced with."""

    def __init__(self) -> None:
        # Imported here: torch and transformers load with the first host, not with the runner classes
        # (a sweep's launcher reads a runner class without measuring anything).
        from specsparse.measuring.evaluation import Evaluators  # noqa: PLC0415

        self.evaluators = Evaluators()
        self._profiles: dict[str, dict[str, Any]] = {}

    def evaluate(self, spec: EvaluationSpec, candidates: Sequence[Candidate], thresholds: tuple | None = None,
                 on_measured: OnMeasured | None = None, progress: bool = True) -> list[Measurement]:
        return self.call(spec, lambda evaluator: measure_in_passes(evaluator, candidates, thresholds, on_measured,
                                                                   progress))

    def call(self, spec: EvaluationSpec, function: Callable[[Evaluator], T]) -> T:
        evaluator = self.evaluators(spec)
        try:
            return function(evaluator)
        finally:
            self._record_profile(evaluator)

    def profile_records(self) -> list[dict[str, Any]]:
        return list(self._profiles.values())

    def _record_profile(self, evaluator: Evaluator) -> None:
        """Keep a record of the profile `evaluator` priced with, once it has one (a cached property: after
        pricing, as pricing a new drafter adds its step time to the profile)."""
        if "pricer" in vars(evaluator):
            from specsparse.measuring.profile import profile_record  # noqa: PLC0415

            record = profile_record(evaluator.pricer.profile)
            self._profiles[json.dumps(record, sort_keys=True)] = record


class LocalRunner:
    """Runner protocol in the job's process: the model loads here, on first use."""

    loads_models_here = True  # the job's own device must exist (checked with the config)

    def __init__(self, progress: bool = True):
        self.progress = progress
        self.host = EvaluatorHost()

    def evaluate_batch(
        self,
        spec: EvaluationSpec,
        candidates: Sequence[Candidate],
        thresholds: tuple | None = None,
        on_measured: OnMeasured | None = None,
    ) -> list[Measurement]:
        return self.host.evaluate(spec, candidates, thresholds, on_measured, self.progress)

    def call(self, spec: EvaluationSpec, function: Callable[[Evaluator], T]) -> T:
        return self.host.call(spec, function)

    def profile_records(self) -> list[dict[str, Any]]:
        return self.host.profile_records()

    def close(self) -> None:
        """Nothing to release: the Evaluators go with the runner."""
