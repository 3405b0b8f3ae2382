"""The Study: a job's search and measurements through one object, equal to the driver handed the
same keys, descriptions and pricing by hand (so stores written before it serve it, row for row)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from specsparse.data import get_domain
from specsparse.measuring.evaluation import EvaluationSpec, Evaluator, Evaluators
from specsparse.search.bfs import BFSSearch
from specsparse.search.rule import TSSRule
from specsparse.study.driver import FunctionMeasurer, measure_through_store, run_search
from specsparse.study.keys import describe, store_key
from specsparse.study.runners.local import LocalRunner, measure_in_passes
from specsparse.study.store import ResultsStore
from specsparse.study.study import Study
from specsparse.types import Component, GenerationConfig

SPEC = EvaluationSpec(model="tiny", drafter=Component("specsparse.drafters.samd.SuffixAutomatonDrafter",
                                                      {"corpus": ["builtin:qa"], "recycling_fallback": False}),
                      domain=get_domain("qa", limit=12), generation=GenerationConfig(max_new_tokens=8, num_draft_tokens=3))
RULE = TSSRule(max_depth=2, max_pool=2, feasibility="point", guard="task")


def stored(store: ResultsStore) -> list[tuple]:
    return [(key, meta, measurement) for key, meta, measurement, _ in store._iter_raw()]


def test_a_study_searches_and_measures_as_the_driver_by_hand(tmp_path):
    runner = LocalRunner(progress=False)
    by_hand = ResultsStore(tmp_path / "by_hand.sqlite")
    calibration, test = Evaluator(SPEC), Evaluator(SPEC.with_split("test"))
    strategy = BFSSearch(num_layers=calibration.target.num_layers, rule=RULE)
    thresholds = strategy.feasibility_thresholds()
    described = {split: describe(evaluator) for split, evaluator in (("calibration", calibration), ("test", test))}
    description = {**described["calibration"], "search": strategy.name}
    expected = run_search(strategy, FunctionMeasurer(
        lambda todo, on_measured: measure_in_passes(calibration, todo, thresholds, on_measured, False),
        key=lambda c: store_key(described["calibration"], c, thresholds), meta=lambda c: description,
        price=calibration.pricer.price), store=by_hand, progress=False)
    expected_test = measure_through_store([expected.baseline, expected.selected], FunctionMeasurer(
        lambda todo, on_measured: measure_in_passes(test, todo, None, on_measured, False),
        key=lambda c: store_key(described["test"], c), meta=lambda c: described["test"], price=test.pricer.price), by_hand)

    study = Study(SPEC, runner, ResultsStore(tmp_path / "study.sqlite"), progress=False)
    context = study.search_context(BFSSearch.context_arguments)
    result = study.search(context.build(Component("specsparse.search.bfs.BFSSearch", {"rule": RULE})))
    measured = study.measure([result.baseline, result.selected], "test")
    assert [(c, replace(m, wall_time_s=0)) for c, m in result.history] == [
        (c, replace(m, wall_time_s=0)) for c, m in expected.history]
    assert (result.selected, measured[1].accept_length) == (expected.selected, expected_test[1].accept_length)
    assert [row[:2] for row in stored(study.store)] == [row[:2] for row in stored(by_hand)]  # same keys and metadata

    again = Study(SPEC, runner, ResultsStore(tmp_path / "by_hand.sqlite"), progress=False)  # a store written before
    served = again.search(BFSSearch(num_layers=calibration.target.num_layers, rule=RULE))
    assert served.n_measured == 0 and served.n_cache_hits == len(expected.history)
    assert served.selected == expected.selected


def test_evaluators_are_made_once_and_other_splits_share_the_calibration_vocabulary():
    evaluators = Evaluators()
    calibration = evaluators(SPEC)
    test = evaluators(SPEC.with_split("test"))
    assert evaluators(SPEC) is calibration and test.calibration is calibration and calibration.calibration is calibration
    assert [ex.id for ex in test.examples] != [ex.id for ex in calibration.examples]
    with pytest.raises(ValueError, match="calibration split"):
        Evaluator(SPEC.with_split("test"), calibration=test)
