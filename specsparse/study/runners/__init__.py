"""Runners measure batches of candidates for an `EvaluationSpec`: `LocalRunner` in the job's process,
`RayRunner` as Ray Tune trials on workers that keep the model loaded. Both measure through
`local.measure_candidates`; the search driver, the results store and all writing stay in the job's
process, so results do not depend on which runner measured them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from specsparse.study.driver import OnResult
from specsparse.types import Candidate, Measurement

if TYPE_CHECKING:
    from specsparse.measuring.evaluation import EvaluationSpec

__all__ = ["OnResult", "Runner"]


class Runner(Protocol):
    """Measures candidates for a spec; returns them in candidate order and calls on_result(candidate,
    measurement) as each one exists (so the caller can store it before the batch ends)."""

    def evaluate_batch(
        self,
        spec: EvaluationSpec,
        candidates: Sequence[Candidate],
        thresholds: tuple | None = None,
        on_result: OnResult | None = None,
    ) -> list[Measurement]: ...

    def price(self, spec: EvaluationSpec, candidate: Candidate, measurement: Measurement) -> Measurement:
        """`measurement` (e.g. served by the results store) priced by the cost profile that prices
        what this runner measures (a Ray worker's, not the driver's)."""
        ...

    def close(self) -> None: ...
