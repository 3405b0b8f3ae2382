"""A study: what one job measures of one `EvaluationSpec`, and the one way it measures.

    study = Study(spec, runner, store)
    context = study.call("calibration", methodcaller("search_context", names))   # where the model is
    result = study.search(strategy, budget)                  # on the calibration split
    dense, selected = study.measure([result.baseline, result.selected], "test")
    timing = study.time("test", {"dense": result.baseline, "selected": result.selected}, prompts=24)

The study owns the results-store keys and descriptions of what it measures (`specsparse.study.keys`)
and the pricing of what the store serves (the cost profile of the hardware that measures, never a
stored timing). Everything that needs the model goes through the runner (`Runner.call`), which holds
the Evaluators where it measures: in the job's process (local) or on Ray workers, so with `runner=ray`
the job's process loads no model. The driver's loop (`run_search`) and the store lookups
(`measure_through_store`) are handed these, so a job's recipe (`specsparse.jobs.job.run_job`) only says
what to measure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from operator import methodcaller
from typing import TYPE_CHECKING, Any, TypeVar

from specsparse.measuring.timing import SideBySide, time_side_by_side
from specsparse.search.base import SearchResult, SearchStrategy
from specsparse.study.driver import OnTold, Price, measure_through_store, run_search
from specsparse.study.keys import describe, store_key
from specsparse.types import Candidate, Measurement

if TYPE_CHECKING:
    from specsparse.measuring.evaluation import EvaluationSpec, Evaluator
    from specsparse.study.runners import Runner
    from specsparse.study.store import ResultsStore

T = TypeVar("T")


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
        self._descriptions: dict[str, dict[str, Any]] = {}

    def call(self, split: str, function: Callable[[Evaluator], T]) -> T:
        """`function(evaluator)` with the runner's Evaluator of `split` (see `Runner.call`)."""
        return self.runner.call(self.spec.with_split(split), function)

    def description(self, split: str = "calibration") -> dict[str, Any]:
        """What a measurement on `split` depends on (`keys.describe`): the store's meta and key base."""
        if split not in self._descriptions:
            self._descriptions[split] = self.call(split, describe)
        return self._descriptions[split]

    def price(self, split: str) -> Price:
        """Prices a measurement of `split` (one the store serves) with the runner's cost profile."""
        return lambda candidate, measurement: self.call(split, methodcaller("price", candidate, measurement))

    def search(self, strategy: SearchStrategy, budget: int | None = None) -> SearchResult:
        """Run `strategy` on the calibration split to completion (or `budget` new measurements)."""
        spec = self.spec.with_split("calibration")
        thresholds = strategy.feasibility_thresholds()
        description = self.description("calibration")
        meta = {**description, "search": strategy.name}
        return run_search(
            strategy,
            lambda candidates, on_measured: self.runner.evaluate_batch(spec, candidates, thresholds, on_measured),
            budget=budget, store=self.store, key_fn=lambda c: store_key(description, c, thresholds),
            meta_fn=lambda c: meta, progress=self.progress, on_told=self.on_told, price=self.price("calibration"),
        )

    def measure(self, candidates: Sequence[Candidate], split: str) -> list[Measurement]:
        """`candidates` measured on `split` (in order), served by the store where it has them."""
        spec = self.spec.with_split(split)
        description = self.description(split)
        return measure_through_store(
            candidates, lambda todo, on_measured: self.runner.evaluate_batch(spec, todo, None, on_measured),
            self.store, lambda c: store_key(description, c), lambda c: description, price=self.price(split),
        )

    def time(self, split: str, candidates: Mapping[str, Candidate], prompts: int | None, repeats: int = 1,
             progress: bool = True) -> SideBySide:
        """Plain decoding and `candidates` timed side by side on `split` (`time_with_plain`), where the
        runner measures (a Ray worker's device with runner=ray)."""
        return self.call(split, partial(time_with_plain, candidates=candidates, prompts=prompts, repeats=repeats,
                                        progress=progress))


def time_with_plain(evaluator: Evaluator, candidates: Mapping[str, Candidate], prompts: int | None, repeats: int = 1,
                    progress: bool = True) -> SideBySide:
    """Plain decoding (label "plain": the dense target, no drafter) and `candidates` ({label: candidate})
    timed side by side with the engine on the first `prompts` prompts of the evaluator's split (None:
    all), each beside its modeled terms (`Pricer.with_modeled_terms`). Plain runs beside the speculative
    configurations, so a setup slower than not speculating cannot hide. A trimmed drafter keeps its
    calibration vocabulary."""
    configurations = [("plain", (), lambda: None)]
    configurations += [(label, c.skip_layers, evaluator.calibration.drafter_factory(c.vocab_size))
                       for label, c in candidates.items()]
    examples = evaluator.examples[:prompts] if prompts else evaluator.examples
    timing = time_side_by_side(evaluator.target, evaluator.domain, examples, configurations, evaluator.spec.generation,
                               repeats=repeats, progress=progress)
    return evaluator.pricer.with_modeled_terms(timing, [None, *candidates.values()])
