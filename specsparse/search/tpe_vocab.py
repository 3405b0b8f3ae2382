"""Choose the drafter's vocabulary size k with TPE, then measure it end to end.

Phase 1 (no model): Optuna's TPE sampler searches integer k on a log scale, maximising
alpha * C(k) + (1 - alpha) * R(k) subject to C(k) >= min_coverage, passed to the sampler as an Optuna
constraint via `Trial.set_constraint` (not a penalty). Trials that land on the same k are merged.
Phase 2: `ask()` proposes the full-vocabulary baseline and the chosen k; the driver measures both.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from specsparse.search.base import SearchStrategy, Selection
from specsparse.types import Candidate, Measurement

if TYPE_CHECKING:
    import optuna

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class VocabTrial:
    """One distinct k TPE evaluated."""

    k: int
    coverage: float
    latency_reduction: float
    objective: float

    def feasible(self, min_coverage: float) -> bool:
        return self.coverage >= min_coverage


@dataclass(frozen=True)
class VocabChoice:
    """Outcome of the TPE phase: the chosen trial and every distinct k tried (sorted by k)."""

    chosen: VocabTrial
    trials: tuple[VocabTrial, ...]
    n_trials: int
    constraint_met: bool


class TPEVocabSearch(SearchStrategy):
    """TPE over the draft vocabulary size.

    coverage: C(k), share of domain tokens covered by the top-k ids (e.g. `vocab.coverage_curve`).
    latency_reduction: R(k), share of drafter cost saved (e.g. `vocab.head_latency_reduction`).
    skip_layers: the target skip set both measured candidates use (() = dense target).
    Among trials meeting the constraint the best objective wins, ties to the smaller k. If no trial meets
    it, k_max is chosen (full coverage when k_max = vocab_size) and a note says so.
    """

    name = "tpe_vocab"
    context_arguments = ("vocab_size", "coverage", "latency_reduction")
    trims_vocabulary = True
    supports_vocab_comparison = True

    def __init__(
        self,
        vocab_size: int,
        coverage: Callable[[int], float],
        latency_reduction: Callable[[int], float],
        alpha: float = 0.5,
        min_coverage: float = 0.9,
        n_trials: int = 40,
        k_min: int = 1,
        k_max: int | None = None,
        seed: int = 0,
        skip_layers: Sequence[int] = (),
    ) -> None:
        k_max = vocab_size if k_max is None else k_max
        if not 1 <= k_min <= k_max <= vocab_size:
            raise ValueError(f"need 1 <= k_min <= k_max <= vocab_size, got {k_min}, {k_max}, {vocab_size}")
        if not 0 <= alpha <= 1:
            raise ValueError(f"alpha must be in [0, 1], got {alpha}")
        if n_trials < 1:
            raise ValueError(f"n_trials must be >= 1, got {n_trials}")
        self.vocab_size = vocab_size
        self.coverage = coverage
        self.latency_reduction = latency_reduction
        self.alpha = alpha
        self.min_coverage = min_coverage
        self.n_trials = n_trials
        self.k_min, self.k_max = k_min, k_max
        self.seed = seed
        self.baseline = Candidate(skip_layers, None)
        self.measured: dict[Candidate, Measurement] = {}
        self.choice: VocabChoice | None = None
        self._evaluated: dict[int, VocabTrial] = {}
        self._asked = False

    # -- phase 1 ---------------------------------------------------------------------------------
    def _evaluate(self, k: int) -> VocabTrial:
        """C(k), R(k) and the objective, each k computed once (TPE re-proposes integers it has seen)."""
        if k not in self._evaluated:
            c, r = float(self.coverage(k)), float(self.latency_reduction(k))
            self._evaluated[k] = VocabTrial(k, c, r, self.alpha * c + (1.0 - self.alpha) * r)
        return self._evaluated[k]

    def optimise(self) -> VocabChoice:
        """Run TPE once (cached) and return the choice."""
        if self.choice is not None:
            return self.choice
        import optuna  # imported here: only this strategy needs it  # noqa: PLC0415

        by_k: dict[int, VocabTrial] = {}

        def objective(trial: optuna.Trial) -> float:
            k = trial.suggest_int("k", self.k_min, self.k_max, log=True)
            by_k[k] = self._evaluate(k)
            # Feasible when <= 0. Optuna 5 reads constraints set on the trial (constraints_func is
            # deprecated there); TPE ranks infeasible trials below every feasible one.
            trial.set_constraint("min_coverage", self.min_coverage - by_k[k].coverage)
            return by_k[k].objective

        sampler = optuna.samplers.TPESampler(seed=self.seed)
        verbosity = optuna.logging.get_verbosity()
        optuna.logging.set_verbosity(optuna.logging.WARNING)  # one summary line below, not one per trial
        try:
            study = optuna.create_study(direction="maximize", sampler=sampler)
            study.optimize(objective, n_trials=self.n_trials)
        finally:
            optuna.logging.set_verbosity(verbosity)
        trials = tuple(sorted(by_k.values(), key=lambda t: t.k))
        feasible = [t for t in trials if t.feasible(self.min_coverage)]
        if feasible:
            chosen = min(feasible, key=lambda t: (-t.objective, t.k))
        else:
            chosen = self._evaluate(self.k_max)
        self.choice = VocabChoice(chosen, trials, self.n_trials, chosen.feasible(self.min_coverage))
        log.info(
            "tpe_vocab: k=%d C=%.4f R=%.4f (%d distinct k over %d trials)",
            chosen.k, chosen.coverage, chosen.latency_reduction, len(trials), self.n_trials,
        )
        return self.choice

    def curve(self, points: int = 64) -> list[VocabTrial]:
        """C(k) and R(k) on a log-spaced grid of k from k_min to k_max, the chosen k included (the
        coverage-vs-k figure)."""
        grid = np.unique(np.geomspace(self.k_min, self.k_max, points).round().astype(int))
        return [self._evaluate(int(k)) for k in sorted({*grid.tolist(), self.optimise().chosen.k})]

    # -- phase 2 ---------------------------------------------------------------------------------
    @property
    def chosen_candidate(self) -> Candidate:
        return Candidate(self.baseline.skip_layers, self.optimise().chosen.k)

    def ask(self) -> list[Candidate]:
        if self._asked:
            return []
        self._asked = True
        return [self.baseline, self.chosen_candidate]

    def tell(self, candidate: Candidate, measurement: Measurement) -> None:
        self.measured[candidate] = measurement

    def select(self) -> Selection:
        choice = self.optimise()
        notes = []
        if not choice.constraint_met:
            notes.append(f"no sampled k reached coverage {self.min_coverage}: k_max={self.k_max} chosen")
        cand = self.chosen_candidate
        m = self.measured.get(cand)
        if m is None or m.early_stopped:
            notes.append(f"{cand.label} was not measured to the end: baseline selected")
            selected, feasible = self.baseline, ()
        else:
            selected, feasible = cand, (cand,)
        info = {
            "k": choice.chosen.k,
            "coverage": choice.chosen.coverage,
            "latency_reduction": choice.chosen.latency_reduction,
            "objective": choice.chosen.objective,
            "constraint_met": choice.constraint_met,
            "n_trials": choice.n_trials,
            "n_distinct_k": len(choice.trials),
            "trials": [(t.k, t.coverage, t.latency_reduction, t.objective) for t in choice.trials],
            "alpha": self.alpha,
            "min_coverage": self.min_coverage,
            "curve": [(t.k, t.coverage, t.latency_reduction) for t in self.curve()],
        }
        return Selection(self.baseline, selected, feasible=feasible, notes=tuple(notes), info=info)
