"""The search loop (`specsparse.study.driver`): deduplication, the budget, the store and its meta,
callbacks, early-stopped measurements (synthetic objectives, no model)."""

from __future__ import annotations

import pytest
from conftest import TRAP, Counted, papers, search_on

from specsparse.search import BFSSearch, SearchStrategy, Selection
from specsparse.study.driver import FunctionMeasurer, candidate_meta, evaluate_callable, run_search
from specsparse.study.store import ResultsStore
from specsparse.types import Candidate, Measurement
from specsparse.util import content_hash


class Scripted(SearchStrategy):
    """Proposes fixed batches; records what it was told."""

    name = "scripted"

    def __init__(self, batches):
        self.batches = list(batches)
        self.told: list[Candidate] = []

    def ask(self):
        return self.batches.pop(0) if self.batches else []

    def tell(self, candidate, measurement):
        self.told.append(candidate)

    def select(self):
        return Selection(baseline=Candidate(), selected=Candidate())


def test_driver_dedups_within_and_across_batches():
    a, b = Candidate((1,)), Candidate((2,))
    strategy = Scripted([[Candidate(), a, a], [a, b], [b]])
    fn = Counted(TRAP)
    result = search_on(strategy, fn)
    assert fn.calls == [Candidate(), a, b]
    assert strategy.told == [Candidate(), a, a, b, b]  # repeats are told the recorded measurement
    assert result.n_measured == 3


def test_driver_checks_arguments_and_batch_length(tmp_path):
    with pytest.raises(ValueError, match="key for each candidate"):
        run_search(Scripted([[Candidate()]]), evaluate_callable(TRAP), store=ResultsStore(tmp_path / "s"))
    with pytest.raises(ValueError, match="budget"):
        search_on(Scripted([[Candidate()]]), TRAP, budget=-1)
    with pytest.raises(RuntimeError, match="returned 0"):
        run_search(Scripted([[Candidate()]]), FunctionMeasurer(lambda batch, on_measured: []), progress=False)


def test_driver_stores_meta_and_reports_measurements(tmp_path):
    events = []
    with ResultsStore(tmp_path / "r.sqlite") as store:
        def key_fn(c):
            return content_hash({"d": "qa", **candidate_meta(c)})

        kw = dict(store=store, key=key_fn, meta=lambda c: {"domain": "qa"},
                  on_told=lambda c, m, cached: events.append((c, cached)))
        search_on(Scripted([[Candidate(), Candidate((1,))]]), TRAP, **kw)
        search_on(Scripted([[Candidate(), Candidate((2,))]]), TRAP, **kw)
        rows = store.rows(domain="qa")
    assert events == [(Candidate(), False), (Candidate((1,)), False), (Candidate(), True), (Candidate((2,)), False)]
    assert [r["candidate.skip_layers"] for r in rows] == [(), (1,), (2,)]


def test_driver_budget_counts_only_new_measurements(tmp_path):
    with ResultsStore(tmp_path / "r.sqlite") as store:
        def key_fn(c):
            return content_hash(candidate_meta(c))

        r1 = search_on(BFSSearch(10, papers()), TRAP, store=store, key=key_fn, budget=5)
        assert r1.n_measured == 5 and any("budget" in n for n in r1.notes)
        fn = Counted(TRAP)
        r2 = search_on(BFSSearch(10, papers()), fn, store=store, key=key_fn, budget=5)
    assert r2.n_cache_hits == 5 and len(fn.calls) == r2.n_measured == 5  # resumes past the first run


def test_early_stopped_measurement_stored_with_thresholds(tmp_path):
    strategy = Scripted([[Candidate()], [Candidate((1,))]])
    strategy.feasibility_thresholds = lambda: (2.5, None)

    def fn(c):
        return Measurement(1.0, None, 0.5, 0.5, 0.0, 0, 0, 0.0, early_stopped=bool(c.skip_layers))

    with ResultsStore(tmp_path / "r.sqlite") as store:
        search_on(strategy, fn, store=store, key=lambda c: c.label)
        assert store.get("skip[1]").early_stopped
        assert store.get_meta("skip[1]")["early_stop_thresholds"] == [2.5, None]
        assert "early_stop_thresholds" not in store.get_meta("dense")
