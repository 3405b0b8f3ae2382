"""Runners measure batches of candidates for the job's `Evaluator`: `LocalRunner` with that Evaluator in
the job's process, `RayRunner` as Ray Tune trials on workers that keep their own Evaluator of its spec
(and the model) loaded. Both measure through `local.measure_in_passes`; the search driver, the results
store and all writing stay in the job's process, so results do not depend on which runner measured them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from specsparse.types import Candidate, Measurement

if TYPE_CHECKING:
    from specsparse.measuring.evaluation import Evaluator
    from specsparse.study.driver import OnMeasured


class Runner(Protocol):
    """Measures candidates for an Evaluator the job holds; returns them in candidate order and calls
    on_measured(candidate, measurement) as each one exists (so the caller can store it before the
    batch ends)."""

    def evaluate_batch(
        self,
        evaluator: Evaluator,
        candidates: Sequence[Candidate],
        thresholds: tuple | None = None,
        on_measured: OnMeasured | None = None,
    ) -> list[Measurement]: ...

    def price(self, evaluator: Evaluator, candidate: Candidate, measurement: Measurement) -> Measurement:
        """`measurement` (e.g. served by the results store) priced by the cost profile that prices
        what this runner measures (a Ray worker's, not the driver's)."""
        ...

    def close(self) -> None: ...
