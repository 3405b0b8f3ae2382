"""A study: what one job measures of one `EvaluationSpec`, and the one way it measures.

    study = Study(spec, runner, store)
    result = study.search(strategy, budget)                  # on the calibration split
    dense, selected = study.measure([result.baseline, result.selected], "test")

The study owns an `Evaluator` per split (the model loads once for both), the results-store keys and
descriptions of what it measures (`specsparse.study.keys`), and the pricing of what the store serves (the runner's cost
profile, never a stored timing). The driver's loop (`run_search`) and the store lookups
(`measure_through_store`) are handed these, so a job's recipe (`specsparse.jobs.job.run_job`) only
says what to measure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from specsparse.measuring.evaluation import EvaluationSpec, Evaluator, Evaluators
from specsparse.search.base import SearchResult, SearchStrategy
from specsparse.study.driver import OnTold, measure_through_store, run_search
from specsparse.study.keys import describe, store_key
from specsparse.types import Candidate, Measurement

if TYPE_CHECKING:
    from specsparse.study.runners import Runner
    from specsparse.study.store import ResultsStore


class Study:
    """One job's measurements of `spec`: a search on its calibration split and measurements on
    any split, each measured by `runner` unless `store` holds it."""

    def __init__(self, spec: EvaluationSpec, runner: Runner, store: ResultsStore, progress: bool = True,
                 on_told: OnTold | None = None):
        self.spec = spec
        self.runner = runner
        self.store = store
        self.progress = progress
        self.on_told = on_told
        self._evaluators = Evaluators()
        self._descriptions: dict[str, dict[str, Any]] = {}

    def evaluator(self, split: str = "calibration") -> Evaluator:
        """The Evaluator of `split`, made once (another split's keeps the calibration split's vocabulary:
        a trimmed head is chosen there)."""
        return self._evaluators(self.spec.with_split(split))

    def description(self, split: str = "calibration") -> dict[str, Any]:
        """What a measurement on `split` depends on (`keys.describe`): the store's meta and key base."""
        if split not in self._descriptions:
            self._descriptions[split] = describe(self.evaluator(split))
        return self._descriptions[split]

    def search(self, strategy: SearchStrategy, budget: int | None = None) -> SearchResult:
        """Run `strategy` on the calibration split to completion (or `budget` new measurements)."""
        calibration = self.evaluator("calibration")
        thresholds = strategy.feasibility_thresholds()
        description = self.description("calibration")
        meta = {**description, "search": strategy.name}
        return run_search(
            strategy,
            lambda candidates, on_measured: self.runner.evaluate_batch(calibration, candidates, thresholds,
                                                                      on_measured),
            budget=budget, store=self.store, key_fn=lambda c: store_key(description, c, thresholds),
            meta_fn=lambda c: meta, progress=self.progress, on_told=self.on_told,
            price=lambda c, m: self.runner.price(calibration, c, m),
        )

    def measure(self, candidates: Sequence[Candidate], split: str) -> list[Measurement]:
        """`candidates` measured on `split` (in order), served by the store where it has them."""
        evaluator = self.evaluator(split)
        description = self.description(split)
        return measure_through_store(
            candidates, lambda todo, on_measured: self.runner.evaluate_batch(evaluator, todo, None, on_measured),
            self.store, lambda c: store_key(description, c), lambda c: description,
            price=lambda c, m: self.runner.price(evaluator, c, m),
        )
