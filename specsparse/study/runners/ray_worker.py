"""What runs in Ray's processes for `RayRunner`: the worker actor that keeps the model loaded and
measures, the Tune trial that borrows a worker for one candidate, and the plain-dict form in which
specs, candidates and measurements travel between them and the job's process.

Light imports only: Tune's trial processes import this module to run `run_trial`, and they never need
torch or transformers (the worker actors do, once).
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specsparse.data import Domain
from specsparse.study.store import measurement_from_dict, measurement_to_dict
from specsparse.types import Candidate, Component, GenerationConfig
from specsparse.util import atomic_write_text, content_hash

if TYPE_CHECKING:
    from specsparse.measuring.evaluation import EvaluationSpec, Evaluator


# -- plain-dict round trip of the specs (what travels in the Tune config) ----------------------------
def spec_to_dict(spec: EvaluationSpec) -> dict[str, Any]:
    return asdict(spec)


def spec_from_dict(data: dict[str, Any]) -> EvaluationSpec:
    from specsparse.measuring.evaluation import EvaluationSpec, MeasureSpec  # noqa: PLC0415

    return EvaluationSpec(
        model=data["model"],
        dtype=data["dtype"],
        device=data["device"],
        drafter=Component(**data["drafter"]),
        domain=Domain.from_record(data["domain"]),
        split=data["split"],
        generation=GenerationConfig(**data["generation"]),
        measure=MeasureSpec(**data.get("measure", {})),
        vocab_corpus=tuple(data.get("vocab_corpus", EvaluationSpec.vocab_corpus)),
        cost_profile=data.get("cost_profile"),
    )


def candidate_from_dict(data: dict[str, Any]) -> Candidate:
    return Candidate(tuple(data["skip_layers"]), data.get("vocab_size"))


# -- the worker actor ------------------------------------------------------------------------------
class EvaluationWorker:
    """Holds the loaded model (an Evaluator per spec, kept across trials and batches); measures one
    candidate per call."""

    def __init__(self, threads: int = 1):
        import torch  # noqa: PLC0415

        from specsparse.measuring.evaluation import Evaluators  # noqa: PLC0415

        torch.set_num_threads(max(1, threads))
        self.profiles: dict[str, dict[str, Any]] = {}  # records of the cost profiles it priced with
        self.evaluators = Evaluators()

    def ready(self) -> int:
        return os.getpid()

    def evaluate(self, spec: dict[str, Any], candidate: dict[str, Any], thresholds: list | None,
                 cost_profile_text: str | None = None) -> dict[str, Any]:
        from specsparse.study.runners.local import measure_in_passes  # noqa: PLC0415

        threshold = None if thresholds is None else tuple(thresholds)
        evaluator = self._evaluator(spec, cost_profile_text)
        [measurement] = measure_in_passes(evaluator, [candidate_from_dict(candidate)], threshold, progress=False)
        self._record_profile(evaluator)
        return {"measurement": measurement_to_dict(measurement), "pid": os.getpid()}

    def price(self, spec: dict[str, Any], candidate: dict[str, Any], measurement: dict[str, Any],
              cost_profile_text: str | None = None) -> dict[str, Any]:
        evaluator = self._evaluator(spec, cost_profile_text)
        priced = evaluator.price(candidate_from_dict(candidate), measurement_from_dict(measurement))
        self._record_profile(evaluator)
        return measurement_to_dict(priced)

    def profile_records(self) -> list[dict[str, Any]]:
        return list(self.profiles.values())

    def _evaluator(self, spec: dict[str, Any], cost_profile_text: str | None) -> Evaluator:
        """This worker's Evaluator for `spec` (made once), its pinned cost profile a file of this machine."""
        return self.evaluators(_local_profile(spec_from_dict(spec), cost_profile_text))

    def _record_profile(self, evaluator: Evaluator) -> None:
        """Keep a record of the profile `evaluator` just priced with (after pricing: pricing a new
        drafter adds its step time to the profile)."""
        from specsparse.measuring.profile import profile_record  # noqa: PLC0415

        record = profile_record(evaluator.profile)
        self.profiles[json.dumps(record, sort_keys=True)] = record


def _local_profile(spec: EvaluationSpec, text: str | None) -> EvaluationSpec:
    """`spec` with its pinned cost profile as a file of this machine: the driver's path when the file
    there holds the same text, else a copy of the text (a worker on another machine)."""
    path = spec.cost_profile
    if path is None or text is None or (Path(path).is_file() and Path(path).read_text() == text):
        return spec
    copy = Path(tempfile.gettempdir()) / "specsparse-pinned-profiles" / f"{content_hash(text)[:16]}.json"
    atomic_write_text(copy, text)
    return replace(spec, cost_profile=str(copy))


# -- the trial -------------------------------------------------------------------------------------
def run_trial(config: dict[str, Any], pool: dict[str, Any]) -> None:
    """One Tune trial: borrow a free worker, measure the candidate, report the measurement."""
    import ray  # noqa: PLC0415
    from ray import tune  # noqa: PLC0415

    index = pool["free"].get()
    try:
        out = ray.get(pool["workers"][index].evaluate.remote(config["spec"], config["candidate"], config["thresholds"],
                                                             config.get("cost_profile_text")))
    finally:
        pool["free"].put(index)
    m = out["measurement"]
    report = {k: m[k] for k in ("accept_length", "modeled_cost", "modeled_tokens_per_s", "flops_fraction", "new_tokens")
              if m.get(k) is not None}
    if m.get("metric") is not None:
        report["metric"] = m["metric"]
    report.update(worker=index, worker_pid=out["pid"], early_stopped=int(bool(m.get("early_stopped"))),
                  measurement_json=json.dumps(m))
    tune.report(report)
