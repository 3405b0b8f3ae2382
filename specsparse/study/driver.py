"""The one loop every search runs in.

    result = run_search(BFSSearch(num_layers=30), measurer, store=store)

The driver is handed everything it works with: a `Measurer` (a job's `Study` on one split, or
`FunctionMeasurer` around `evaluate_callable` for synthetic objectives), which measures batches, keys
and describes each candidate for the store and re-prices what the store serves, and the results store.
It builds none of them, so the same loop serves every runner and store.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from tqdm.auto import tqdm

from specsparse.metrics import SCALE
from specsparse.search.base import SearchResult, SearchStrategy
from specsparse.types import Candidate, Measurement

if TYPE_CHECKING:
    from specsparse.study.store import ResultsStore

log = logging.getLogger(__name__)

# A runner calls on_measured(candidate, measurement) with each NEW measurement the moment it exists (the
# driver stores it then, so a killed job loses at most what is in flight); one that cannot may ignore it.
OnMeasured = Callable[[Candidate, Measurement], None]
# evaluate_batch(candidates, on_measured) -> measurements in candidate order.
EvaluateBatch = Callable[[list[Candidate], OnMeasured], Sequence[Measurement]]
# The driver calls on_told(candidate, measurement, cached) once the strategy has been told a measurement,
# new or served from the store (cached): what a search saw, in the order it saw it.
OnTold = Callable[[Candidate, Measurement, bool], None]
# price(candidate, measurement) -> the measurement priced by the cost profile that prices new ones.
Price = Callable[[Candidate, Measurement], Measurement]


class Measurer(Protocol):
    """What the driver measures through: `evaluate_batch` (see EvaluateBatch), the store key and
    description of a candidate's measurement, and `price`, which re-prices a measurement the store
    serves by the cost profile that prices new ones (so a cost stored by another run never comes back)."""

    def evaluate_batch(self, candidates: list[Candidate], on_measured: OnMeasured) -> Sequence[Measurement]: ...

    def key(self, candidate: Candidate) -> str: ...

    def meta(self, candidate: Candidate) -> dict[str, Any]: ...

    def price(self, candidate: Candidate, measurement: Measurement) -> Measurement: ...


def no_key(candidate: Candidate) -> str:
    raise ValueError("a results store needs a key for each candidate: give FunctionMeasurer(key=...)")


@dataclass(frozen=True)
class FunctionMeasurer:
    """A `Measurer` from functions (synthetic objectives, tests, scripts): no description and no
    re-pricing unless given; `key` only where a store is used."""

    evaluate_batch: EvaluateBatch
    key: Callable[[Candidate], str] = no_key
    meta: Callable[[Candidate], dict[str, Any]] = lambda candidate: {}
    price: Price = lambda candidate, measurement: measurement


def candidate_meta(candidate: Candidate) -> dict[str, Any]:
    """The candidate part of a store description."""
    return {"skip_layers": list(candidate.skip_layers), "vocab_size": candidate.vocab_size}


# One function on purpose: each round (ask, serve from the store, measure, tell) reads best whole.
def run_search(
    strategy: SearchStrategy,
    measurer: Measurer,
    *,
    budget: int | None = None,
    store: ResultsStore | None = None,
    progress: bool = True,
    on_told: OnTold | None = None,
) -> SearchResult:
    """Run `strategy` to completion (or until the budget is spent) and return its result.

    Each round: ask the strategy for a batch; drop candidates already measured in this search (they are
    told their recorded measurement again, never re-measured); serve candidates whose `measurer.key` is in
    `store` without evaluating them (re-priced by `measurer.price`); evaluate the rest as one batch; store
    the new measurements (described by `measurer.meta`, with the candidate under "candidate" and, for an
    early-stopped measurement, the strategy's thresholds under "early_stop_thresholds"); tell the strategy
    every candidate in proposal order; call `on_told(candidate, measurement, cached)`.

    budget: maximum number of NEW measurements (None: unlimited). Cache hits are free, so a batch that
        the store fully serves never touches it; when a batch needs more than what is left, the first
        ones (in proposal order) are measured and the search stops with a note. Consequently a rerun with
        the same budget over a warm store replays the cached part and spends its budget further on.
    progress: show a tqdm bar (new measurements; cache hits in the postfix).
    New measurements keep the price the runner gave them: it priced them where it measured them (a Ray
    worker on its own hardware; the local runner with the job's evaluator, the same profile as `measurer.price`).
    """
    if budget is not None and budget < 0:
        raise ValueError(f"budget must be >= 0 or None, got {budget}")
    start = time.perf_counter()
    measured: dict[Candidate, Measurement] = {}
    n_new = n_hits = forwards = 0
    notes: list[str] = []
    bar = tqdm(total=budget, disable=not progress, desc=strategy.name, unit="config", leave=False)
    try:
        round_ = 0
        while batch := strategy.ask():
            round_ += 1
            fresh = list(dict.fromkeys(c for c in batch if c not in measured))
            for c in dict.fromkeys(c for c in batch if c in measured):
                strategy.tell(c, measured[c])
            if not fresh:
                log.warning("%s proposed only configurations it already has; stopping", strategy.name)
                break
            keys = {c: measurer.key(c) for c in fresh} if store is not None else {}
            results = {c: (m, True) for c, m in _stored(store, keys, measurer.price).items()}
            todo = [c for c in fresh if c not in results]
            left = None if budget is None else budget - n_new
            cut = left is not None and len(todo) > left
            if cut:
                todo = todo[:left]
            if todo:
                meta = functools.partial(_meta, strategy=strategy, describe=measurer.meta)
                for c, m in zip(todo, _measure_and_store(todo, measurer.evaluate_batch, store, keys, meta)):
                    results[c] = (m, False)
            n_round_hits = 0
            for c in fresh:
                if c not in results:
                    continue
                m, cached = results[c]
                measured[c] = m
                n_hits += cached
                n_round_hits += cached
                if not cached:
                    n_new += 1
                    forwards += m.target_forwards
                strategy.tell(c, m)
                if on_told is not None:
                    on_told(c, m, cached)
            bar.update(len(todo))
            bar.set_postfix(cached=n_hits)
            log.info(
                "%s round %d: %d proposed, %d cached, %d measured", strategy.name, round_, len(batch),
                n_round_hits, len(todo),
            )
            if cut:
                notes.append(f"budget of {budget} new measurements exhausted; search stopped early")
                log.info("%s: %s", strategy.name, notes[-1])
                break
    finally:
        bar.close()
    return _result(strategy, measured, notes, n_new, n_hits, forwards, time.perf_counter() - start)


def measure_through_store(candidates: Sequence[Candidate], measurer: Measurer, store: ResultsStore) -> list[Measurement]:
    """Measurements of `candidates` (in order) outside a search, e.g. on the test split: served from
    `store` when present (re-priced, as in `run_search`), otherwise measured as one batch and stored the
    moment each one exists."""
    unique = list(dict.fromkeys(candidates))
    keys = {c: measurer.key(c) for c in unique}
    found = _stored(store, keys, measurer.price)
    missing = [c for c in unique if c not in found]

    def meta(c: Candidate, m: Measurement) -> dict[str, Any]:
        return {**measurer.meta(c), "candidate": candidate_meta(c)}

    found.update(zip(missing, _measure_and_store(missing, measurer.evaluate_batch, store, keys, meta)))
    return [found[c] for c in candidates]


def _stored(store: ResultsStore | None, keys: dict[Candidate, str], price: Price) -> dict[Candidate, Measurement]:
    """The candidates of `keys` whose measurement is in the store, each re-priced by `price`: the only
    place a stored measurement is priced, so a cost stored by another run never comes back."""
    if store is None:
        return {}
    found = {c: store.get(key) for c, key in keys.items()}
    return {c: price(c, m) for c, m in found.items() if m is not None}


def _measure_and_store(
    todo: list[Candidate],
    evaluate_batch: EvaluateBatch,
    store: ResultsStore | None,
    keys: dict[Candidate, str],
    meta: Callable[[Candidate, Measurement], dict[str, Any]],
) -> list[Measurement]:
    """Measure `todo` as one batch, storing each measurement as the runner hands it over (and again
    at the end for runners that cannot; `put` of an existing key is a no-op)."""
    if not todo:
        return []

    def store_now(c: Candidate, m: Measurement) -> None:
        if store is not None:
            store.put(keys[c], m, meta(c, m))

    measurements = list(evaluate_batch(list(todo), store_now))
    if len(measurements) != len(todo):
        raise RuntimeError(f"evaluate_batch returned {len(measurements)} measurements for {len(todo)} candidates")
    for c, m in zip(todo, measurements):
        store_now(c, m)
    return measurements


def _meta(c: Candidate, m: Measurement, strategy: SearchStrategy, describe: Callable) -> dict[str, Any]:
    meta = dict(describe(c))
    meta["candidate"] = candidate_meta(c)
    if m.early_stopped:
        meta["early_stop_thresholds"] = strategy.feasibility_thresholds()
    return meta


def _result(
    strategy: SearchStrategy,
    measured: dict[Candidate, Measurement],
    notes: list[str],
    n_new: int,
    n_hits: int,
    forwards: int,
    wall: float,
) -> SearchResult:
    sel = strategy.select()
    if sel.baseline not in measured:
        raise RuntimeError(f"{strategy.name}: the baseline {sel.baseline.label} was never measured (budget 0?)")
    if sel.selected not in measured:
        raise RuntimeError(f"{strategy.name} selected {sel.selected.label}, which was never measured")
    result = SearchResult(
        strategy=strategy.name,
        baseline=sel.baseline,
        dense=measured[sel.baseline],
        selected=sel.selected,
        selected_measurement=measured[sel.selected],
        alternatives=tuple((c, measured[c]) for c in sel.alternatives),
        history=tuple(measured.items()),
        feasible=sel.feasible,
        notes=sel.notes + tuple(notes),
        n_measured=n_new,
        n_cache_hits=n_hits,
        target_forwards=forwards,
        wall_time_s=wall,
        info=sel.info,
    )
    metric = result.selected_measurement.metric
    log.info(
        "%s: selected %s (A=%.2f, metric %s (0-100), modeled cost %.1f ms/token) after %d new measurements, "
        "%d cache hits", strategy.name, result.selected.label, result.selected_measurement.accept_length,
        "n/a" if metric is None else f"{SCALE * metric:.1f}", 1000 * result.selected_measurement.modeled_cost,
        n_new, n_hits,
    )
    return result


def evaluate_callable(fn: Callable[[Candidate], Any], key: Callable[[Candidate], str] = no_key) -> FunctionMeasurer:
    """The measurer of a synthetic objective `fn(candidate) -> Measurement | (accept, metric, cost)`,
    with `key` for a results store.

    A tuple becomes a Measurement with `flops_fraction = cost` (synthetic objectives treat the cost as
    the compute share) and zero timing counters. Lets every strategy run without a model; such
    measurements have no per-prompt results, so a layer-skip search takes the papers' rule on them
    (`TSSRule(feasibility="point", guard="task")`: intervals and reply fidelity need prompts).
    """

    def evaluate_batch(candidates: list[Candidate], on_measured: OnMeasured | None = None) -> list[Measurement]:
        out = []
        for c in candidates:
            r = fn(c)
            if not isinstance(r, Measurement):
                accept, metric, cost = r
                r = Measurement(
                    accept_length=float(accept),
                    metric=None if metric is None else float(metric),
                    modeled_cost=float(cost),
                    flops_fraction=float(cost),
                    modeled_tokens_per_s=0.0,
                    new_tokens=0,
                    target_forwards=0,
                    wall_time_s=0.0,
                )
            out.append(r)
            if on_measured is not None:
                on_measured(c, r)
        return out

    return FunctionMeasurer(evaluate_batch, key)
