"""A study: what one job measures of one `EvaluationSpec`, and the one way it measures.

    study = Study(spec, runner, store)
    strategy = study.search_context(names).build(search)     # the model's depth, the vocabulary's C(k), ...
    result = study.search(strategy, budget)                  # on the calibration split
    dense, selected = study.measure([result.baseline, result.selected], "test")
    timing = study.time("test", {"dense": result.baseline, "selected": result.selected}, prompts=24)

The study owns the results-store keys and descriptions of what it measures (`specsparse.study.keys`)
and the pricing of what the store serves (the cost profile of the hardware that measures, never a
stored timing): on each split it is the driver's `Measurer` (`Study.on`). Everything that needs the
model goes through the runner (`Runner.call`), which holds the Evaluators where it measures: in the
job's process (local) or on Ray workers, so with `runner=ray` the job's process loads no model. A job's
recipe (`specsparse.jobs.job.run_job`) only says what to measure.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from operator import attrgetter
from typing import TYPE_CHECKING, Any, TypeVar

from specsparse.measuring.timing import SideBySide, time_side_by_side
from specsparse.search.base import SearchResult, SearchStrategy
from specsparse.search.context import DraftShares, SearchContext
from specsparse.study.driver import OnMeasured, OnTold, measure_through_store, run_search
from specsparse.study.keys import describe, store_key
from specsparse.study.vocab_comparison import VocabComparisonSpec, compare_vocabularies
from specsparse.types import Candidate, Component, Measurement

if TYPE_CHECKING:
    from specsparse.data import Example
    from specsparse.measuring.evaluation import EvaluationSpec, Evaluator
    from specsparse.measuring.vocabulary import DraftVocabulary
    from specsparse.search.tpe_vocab import TPEVocabSearch
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

    def on(self, split: str, thresholds: tuple | None = None, search: str | None = None) -> SplitMeasurer:
        """This study's `Measurer` on `split` (with early-rejection `thresholds`, for a `search` by name)."""
        return SplitMeasurer(self, split, thresholds, search)

    def search_context(self, names: Sequence[str] = ()) -> SearchContext:
        """What a strategy whose `context_arguments` are `names` is built from, measured where the model is."""
        return self.call("calibration", partial(search_context_of, names=tuple(names)))

    @functools.cached_property
    def vocabulary(self) -> DraftVocabulary:
        """The job's trimmed draft vocabulary (chosen on the calibration split, shared by every split)."""
        return self.call("calibration", attrgetter("vocabulary"))

    @functools.cached_property
    def recorded_drafter(self) -> Component:
        """The drafter as measured, class and options (what a config map records for serving)."""
        return self.call("calibration", attrgetter("recorded_drafter"))

    def examples(self, split: str) -> list[Example]:
        return self.call(split, attrgetter("examples"))

    def search(self, strategy: SearchStrategy, budget: int | None = None) -> SearchResult:
        """Run `strategy` on the calibration split to completion (or `budget` new measurements)."""
        measurer = self.on("calibration", strategy.feasibility_thresholds(), strategy.name)
        return run_search(strategy, measurer, budget=budget, store=self.store, progress=self.progress,
                          on_told=self.on_told)

    def measure(self, candidates: Sequence[Candidate], split: str) -> list[Measurement]:
        """`candidates` measured on `split` (in order), served by the store where it has them."""
        return measure_through_store(candidates, self.on(split), self.store)

    def time(self, split: str, candidates: Mapping[str, Candidate], prompts: int | None, repeats: int = 1,
             progress: bool = True) -> SideBySide:
        """Plain decoding and `candidates` timed side by side on `split` (`time_with_plain`), where the
        runner measures (a Ray worker's device with runner=ray)."""
        return self.call(split, partial(time_with_plain, candidates=candidates, prompts=prompts, repeats=repeats,
                                        progress=progress))

    def compare_vocabularies(self, strategy: TPEVocabSearch, options: VocabComparisonSpec, timing_prompts: int | None,
                             progress: bool = True) -> tuple[dict[str, Any], SideBySide]:
        """The vocabulary paper's comparison on the test split, and the job's own timing taken from it
        (`specsparse.study.vocab_comparison`)."""
        return self.call("test", partial(compare_vocabularies, strategy=strategy, options=options,
                                         timing_prompts=timing_prompts, progress=progress))


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


@dataclass(frozen=True)
class SplitMeasurer:
    """A study's `Measurer` on one split: measures through its runner, keys and describes by its
    description, and prices what the store serves where the runner measures."""

    study: Study
    split: str
    thresholds: tuple | None = None
    search: str | None = None

    def evaluate_batch(self, candidates: list[Candidate], on_measured: OnMeasured) -> Sequence[Measurement]:
        spec = self.study.spec.with_split(self.split)
        return self.study.runner.evaluate_batch(spec, candidates, self.thresholds, on_measured)

    def key(self, candidate: Candidate) -> str:
        return store_key(self.study.description(self.split), candidate, self.thresholds)

    def meta(self, candidate: Candidate) -> dict[str, Any]:
        description = self.study.description(self.split)
        return description if self.search is None else {**description, "search": self.search}

    def price(self, candidate: Candidate, measurement: Measurement) -> Measurement:
        return self.study.call(self.split, partial(priced, candidate=candidate, measurement=measurement))


def priced(evaluator: Evaluator, candidate: Candidate, measurement: Measurement) -> Measurement:
    """`measurement` priced by `evaluator`'s pricer (never by a stored timing)."""
    return evaluator.pricer.price(candidate, measurement)


def search_context_of(evaluator: Evaluator, names: tuple[str, ...] = ()) -> SearchContext:
    """The model's depth and vocabulary size; C(k) and R(k) of the job's draft vocabulary (which count
    the dense replies of the corpus) and the drafter's share of a step by skip-set size only when
    `names` (a strategy's `context_arguments`) ask for them."""
    coverage = latency_reduction = draft_share = None
    if {"coverage", "latency_reduction"} & set(names):
        coverage, latency_reduction = evaluator.vocabulary.objective()
    if "draft_share" in names:
        draft_tokens = evaluator.spec.generation.num_draft_tokens
        draft_share = DraftShares(tuple(evaluator.pricer.draft_share(range(skipped), draft_tokens)
                                        for skipped in range(evaluator.target.num_layers)))
    return SearchContext(evaluator.target.num_layers, evaluator.target.model.config.vocab_size, coverage,
                         latency_reduction, draft_share)
