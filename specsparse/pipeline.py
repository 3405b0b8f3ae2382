"""One job: search on a domain's calibration split, evaluate dense vs the selected configuration on
the held-out test split, and write the domain config map, the measured configurations and a summary.

Runners measure batches of candidates for an EvaluationSpec (`LocalRunner` here; `RayRunner` fans
them out as Ray Tune trials). The search driver, the results store and all writing stay in this
process, so results do not depend on which runner measured them.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from specsparse.config_map import ConfigMap, domain_config_from_result, write_config_map, write_measurements_csv
from specsparse.evaluation import EvaluationSpec, Evaluator, evaluator_for, locate
from specsparse.search.base import SearchResult, SearchStrategy
from specsparse.search.driver import OnResult, candidate_meta, run_search
from specsparse.search.tpe_vocab import TPEVocabSearch
from specsparse.store import ResultsStore, atomic_write_text, measurement_to_dict
from specsparse.timing import SideBySide, time_side_by_side
from specsparse.types import Candidate, Measurement

log = logging.getLogger(__name__)


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


class LocalRunner:
    """Measures candidates in this process, a group at a time (batched together in replay mode), and
    hands each group to `on_result` as it finishes, so a killed job loses at most one group."""

    def __init__(self, progress: bool = True):
        self.progress = progress

    def evaluate_batch(self, spec, candidates, thresholds=None, on_result=None) -> list[Measurement]:
        evaluator = evaluator_for(spec)
        # About two batches of rows per group: full batches, and little lost to a kill.
        group = max(1, 2 * evaluator.batch_size // len(evaluator.examples)) if spec.measure.mode == "replay" else 1
        results = []
        for first in range(0, len(candidates), group):
            chunk = list(candidates[first : first + group])
            for candidate, measurement in zip(chunk, evaluator.evaluate_many(chunk, thresholds, self.progress)):
                results.append(measurement)
                if on_result is not None:
                    on_result(candidate, measurement)
        return results

    def close(self) -> None:
        """Nothing to release: evaluators live for the process (`evaluator_for`)."""


@dataclass(frozen=True)
class SearchSpec:
    """A search strategy by public dotpath (Hydra `_target_`) with its options and budget."""

    target: str = "specsparse.search.bfs.BFSSearch"
    options: dict[str, Any] = field(default_factory=dict)
    budget: int | None = None

    @property
    def name(self) -> str:
        return self.target.rsplit(".", 1)[-1]

    def build(self, evaluator: Evaluator) -> SearchStrategy:
        strategy_class = locate(self.target)
        if issubclass(strategy_class, TPEVocabSearch):
            coverage, latency_reduction = evaluator.vocab_objective()
            vocab_size = evaluator.target.model.config.vocab_size
            return strategy_class(vocab_size=vocab_size, coverage=coverage, latency_reduction=latency_reduction, **self.options)
        return strategy_class(num_layers=evaluator.target.num_layers, **self.options)


@dataclass(frozen=True)
class JobResult:
    domain: str
    search: SearchResult
    test_dense: Measurement | None
    test_selected: Measurement | None
    output_dir: Path
    wall_time_s: float
    num_layers: int = 0
    description: dict[str, Any] = field(default_factory=dict, compare=False)  # Evaluator.describe() of the search
    timing: SideBySide | None = None  # dense vs selected on the test split, timed side by side

    def summary(self) -> dict[str, Any]:
        """The job's headline numbers (what tables and W&B summaries are built from)."""
        def numbers(m: Measurement | None) -> dict[str, Any] | None:
            if m is None:
                return None
            return {k: v for k, v in measurement_to_dict(m).items() if k != "per_prompt"}

        s = self.search
        return {
            "domain": self.domain,
            "strategy": s.strategy,
            "selected_skip_layers": list(s.selected.skip_layers),
            "selected_vocab_size": s.selected.vocab_size,
            "calibration": {"dense": numbers(s.dense), "selected": numbers(s.selected_measurement)},
            "test": {"dense": numbers(self.test_dense), "selected": numbers(self.test_selected)},
            # Measured: the engine, dense and selected interleaved in this process. Modeled: the cost profile.
            "speedup_test": None if self.timing is None else self.timing.speedup,
            "speedup_test_interval": None if self.timing is None else list(self.timing.interval),
            "speedup_test_modeled": _ratio(self.test_selected, self.test_dense, "tokens_per_s"),
            "timing_test": None if self.timing is None else self.timing.as_dict(),
            "search_cost": {
                "configurations_measured": s.n_measured,
                "cache_hits": s.n_cache_hits,
                "target_forwards": s.target_forwards,
                "wall_time_s": s.wall_time_s,
            },
            "alternatives": [list(c.skip_layers) for c, _ in s.alternatives],
            "notes": list(s.notes),
            "info": {k: v for k, v in s.info.items() if isinstance(v, (int, float, str, list, type(None)))},
            "job_wall_time_s": self.wall_time_s,
        }


def _ratio(a: Measurement | None, b: Measurement | None, field_name: str) -> float | None:
    if a is None or b is None or not getattr(b, field_name):
        return None
    return getattr(a, field_name) / getattr(b, field_name)


OnMeasurement = Callable[[Candidate, Measurement, bool], None]


def measure_with_store(
    runner: Runner, evaluator: Evaluator, candidates: Sequence[Candidate], store: ResultsStore
) -> list[Measurement]:
    """Measurements of `candidates`, served from the store when present, stored otherwise."""
    keys = {c: evaluator.key(c) for c in candidates}
    missing = [c for c in dict.fromkeys(candidates) if store.get(keys[c]) is None]

    def store_now(candidate: Candidate, measurement: Measurement) -> None:
        store.put(keys[candidate], measurement, {**evaluator.describe(), "candidate": candidate_meta(candidate)})

    if missing:
        runner.evaluate_batch(evaluator.spec, missing, on_result=store_now)
    return [evaluator.price(c, store.get(keys[c])) for c in candidates]


def run_job(
    spec: EvaluationSpec,
    search: SearchSpec,
    runner: Runner,
    store: ResultsStore,
    output_dir: Path,
    evaluate_test: bool = True,
    on_measurement: OnMeasurement | None = None,
    progress: bool = True,
) -> JobResult:
    """Search on `spec`'s calibration split, evaluate on its test split, write outputs to `output_dir`."""
    start = time.perf_counter()
    calibration = evaluator_for(spec.with_split("calibration"))
    strategy = search.build(calibration)

    def evaluate_batch(candidates: list[Candidate], on_result) -> list[Measurement]:
        return runner.evaluate_batch(calibration.spec, candidates, strategy.feasibility_thresholds(), on_result)

    description = calibration.describe()
    result = run_search(
        strategy,
        evaluate_batch,
        budget=search.budget,
        store=store,
        key_fn=lambda c: calibration.key(c, strategy.feasibility_thresholds()),
        meta_fn=lambda c: {**description, "search": search.name},
        progress=progress,
        on_measurement=on_measurement,
        price=calibration.price,
    )
    test_dense = test_selected = timing = None
    if evaluate_test:
        test = evaluator_for(spec.with_split("test"))
        test_dense, test_selected = measure_with_store(runner, test, [result.baseline, result.selected], store)
        if result.selected != result.baseline:
            timing = time_side_by_side(
                test.target, test.domain, test.examples,
                [(c.label, c.skip_layers, _drafter_factory(calibration, c)) for c in (result.baseline, result.selected)],
                spec.generation, progress=progress,
            )
    job = JobResult(spec.domain.name, result, test_dense, test_selected, Path(output_dir),
                    time.perf_counter() - start, calibration.target.num_layers, description, timing)
    write_job_outputs(job, calibration)
    return job


def _drafter_factory(calibration: Evaluator, candidate: Candidate):
    """New drafters for `candidate`, with the vocabulary chosen on the calibration split."""
    vocab_ids = None if candidate.vocab_size is None else calibration.vocab_ids(candidate.vocab_size)
    return lambda: calibration.spec.drafter.build(calibration.target, vocab_ids)


def write_job_outputs(job: JobResult, calibration: Evaluator) -> None:
    """config_map.{yaml,json} (with the trimmed head's token ids when searched), measurements.csv, summary.json."""
    out = job.output_dir
    out.mkdir(parents=True, exist_ok=True)
    target = calibration.target
    vocab_size = job.search.selected.vocab_size
    vocab_ids = None if vocab_size is None else calibration.vocab_ids(vocab_size)
    config_map = ConfigMap(
        model=calibration.spec.model,
        num_layers=target.num_layers,
        domains={job.domain: domain_config_from_result(job.domain, job.search, target.num_layers, vocab_ids)},
        drafter=calibration.spec.drafter.name,
    )
    write_config_map(out / "config_map", config_map)
    write_measurements_csv(out / "measurements.csv", job.search)
    atomic_write_text(out / "summary.json", json.dumps(job.summary(), indent=2))
