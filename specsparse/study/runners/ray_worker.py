"""What runs in Ray's worker processes for `RayRunner`: the actor that keeps the model loaded (an
`EvaluatorHost`, as the job's process has with the local runner) and measures, prices, times and answers
the job's other questions about the model on its own resources."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from specsparse.study.runners.local import EvaluatorHost
from specsparse.types import Candidate, Measurement
from specsparse.util import atomic_write_text, content_hash

if TYPE_CHECKING:
    from specsparse.measuring.evaluation import EvaluationSpec, Evaluator

T = TypeVar("T")


class EvaluationWorker:
    """Holds the loaded model (an Evaluator per spec, kept across batches) on the CPUs and GPUs Ray gave
    it; measures the candidates of each `evaluate` call, in passes that fill its batches. Threaded (two calls at once), so `ready` answers while
    a measurement runs: the runner tells a busy worker from a lost one that way."""

    def __init__(self, threads: int = 1):
        import torch  # noqa: PLC0415

        torch.set_num_threads(max(1, threads))
        self.host = EvaluatorHost()

    def ready(self) -> dict[str, Any]:
        """Where this worker runs: its pid, node and the GPUs Ray assigned it."""
        import ray  # noqa: PLC0415

        context = ray.get_runtime_context()
        return {"pid": os.getpid(), "node_id": context.get_node_id(), "gpu_ids": [str(g) for g in ray.get_gpu_ids()]}

    def evaluate(self, spec: EvaluationSpec, candidates: Sequence[Candidate], thresholds: tuple | None,
                 cost_profile_text: str | None = None) -> list[Measurement]:
        return self.host.evaluate(_local_profile(spec, cost_profile_text), candidates, thresholds, progress=False)

    def call(self, spec: EvaluationSpec, function: Callable[[Evaluator], T], cost_profile_text: str | None = None) -> T:
        return self.host.call(_local_profile(spec, cost_profile_text), function)

    def profile_records(self) -> list[dict[str, Any]]:
        return self.host.profile_records()


def _local_profile(spec: EvaluationSpec, text: str | None) -> EvaluationSpec:
    """`spec` with its pinned cost profile as a file of this machine: the driver's path when the file
    there holds the same text, else a copy of the text (a worker on another machine)."""
    path = spec.cost_profile
    if path is None or text is None or (Path(path).is_file() and Path(path).read_text() == text):
        return spec
    copy = Path(tempfile.gettempdir()) / "specsparse-pinned-profiles" / f"{content_hash(text)[:16]}.json"
    atomic_write_text(copy, text)
    return replace(spec, cost_profile=str(copy))
