"""Runners measure for a job's `Study`, where the model is: `LocalRunner` in the job's process, `RayRunner`
on Ray workers that hold the resources they asked for (the job's process then loads no model). Both
hold their Evaluators in an `EvaluatorHost` and measure through `local.measure_in_passes`; the search
driver, the results store and all writing stay in the job's process, so results do not depend on which
runner measured them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from specsparse.types import Candidate, Measurement

if TYPE_CHECKING:
    from specsparse.measuring.evaluation import EvaluationSpec, Evaluator
    from specsparse.study.driver import OnMeasured

T = TypeVar("T")


class RunnerError(ValueError):
    """The runner cannot measure: resources the cluster does not have, a worker lost for good (one-line
    message; the job fails with it, and its finished measurements stay in the store)."""


class Runner(Protocol):
    """Measures candidates of an `EvaluationSpec` and answers what else a job asks of the model, on the
    hardware that measures."""

    def evaluate_batch(
        self,
        spec: EvaluationSpec,
        candidates: Sequence[Candidate],
        thresholds: tuple | None = None,
        on_measured: OnMeasured | None = None,
    ) -> list[Measurement]:
        """Measurements of `candidates` in candidate order; on_measured(candidate, measurement) is called
        in the job's process as each one exists (so the caller can store it before the batch ends)."""
        ...

    def call(self, spec: EvaluationSpec, function: Callable[[Evaluator], T]) -> T:
        """`function(evaluator)` with this runner's Evaluator of `spec` (the model loaded where the runner
        measures), returning plain data: pricing, the search context, the side-by-side timing. On Ray it
        runs on a worker, so `function` must be importable there (a module-level function, a
        `functools.partial` of one, an `operator.methodcaller`)."""
        ...

    def profile_records(self) -> list[dict[str, Any]]:
        """Records (`specsparse.measuring.profile.profile_record`) of the cost profiles that priced what
        this runner measured and called, one per distinct profile."""
        ...

    def close(self) -> None: ...
