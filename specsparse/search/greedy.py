"""GM-Skip (arXiv 2508.18227), the greedy baseline of the TSS paper's Table 2: metric-guided block
deletion under a score-sparsity balance objective, later blocks preferred.

Myopic by design: each step keeps the best single deletion and never revisits it, so it can miss sets
that are only jointly good, and it looks at the task metric alone, so acceptance may fall.
"""

from __future__ import annotations

import dataclasses
import logging

from specsparse.search.base import NOTE_DENSE_SELECTED, LayerSkipSearch, Selection, Thresholds
from specsparse.search.rule import TSSRule
from specsparse.types import Candidate, Measurement

log = logging.getLogger(__name__)


BALANCE_TOLERANCE = 1e-12


class GreedySearch(LayerSkipSearch):
    """GM-Skip's greedy deletion. Each step measures, in one batch, the current model with each
    remaining free block deleted (later blocks first), and deletes the least harmful one: the highest
    score, ties going to the later block (GM-Skip's reverse order, which keeps early blocks). The
    deletion is kept while the score-sparsity balance does not fall:

        J(S) = score(S) / score(dense) + sparsity_weight * |S| / num_layers,   keep if J(S + {l}) >= J(S),

    so a deletion may cost at most sparsity_weight * score(dense) / num_layers. The first deletion
    that would lower J ends the search, as does running out of free blocks or `max_deletions`
    (None: no cap; GM-Skip is not bound to the BFS depth, so `rule.max_depth`, like the BFS pool
    settings, does not apply; the rest of `rule` does). The score
    is the task metric; a domain without one (or with `metric_floor` dropping it) uses accept length
    instead, with a note. The pick is where the deletions end: GM-Skip knows no acceptance constraint,
    which is what Table 2 compares. Step d measures num_free - d + 1 sets: O(L^2) in all, batched.
    """

    name = "greedy"

    def __init__(self, num_layers: int, rule: TSSRule = TSSRule(), sparsity_weight: float = 1.0,
                 max_deletions: int | None = None) -> None:
        if max_deletions is not None and max_deletions < 1:
            raise ValueError(f"max_deletions must be >= 1 or None, got {max_deletions}")
        super().__init__(num_layers, rule)
        if sparsity_weight < 0:
            raise ValueError(f"sparsity_weight must be >= 0, got {sparsity_weight}")
        self.sparsity_weight = sparsity_weight
        self.max_deletions = max_deletions
        self.current: tuple[int, ...] = ()
        self.path: list[tuple[int, ...]] = []
        self._step: list[Candidate] = []  # the deletions measured for the current step, not yet decided
        self._started = self._stopped = False

    def score(self, m: Measurement) -> tuple[float, float]:
        """(score, dense score): the metric, or accept length where the metric does not guide."""
        assert self.dense is not None
        if self._constraints()[1]:
            return m.metric or 0.0, self.dense.metric or 0.0
        return m.accept_length, self.dense.accept_length

    def balance(self, m: Measurement, depth: int) -> float:
        """J = score / dense score + sparsity_weight * depth / num_layers."""
        score, dense = self.score(m)
        retained = score / dense if dense else 1.0 + score
        return retained + self.sparsity_weight * depth / self.num_layers

    def ask(self) -> list[Candidate]:
        if not self._started:
            self._started = True
            return [self.dense_candidate]
        if self.dense is None or self._stopped or (self._step and not self._decide()):
            return []
        remaining = [layer for layer in reversed(self.free_layers) if layer not in self.current]
        cap = min(self.max_deletions or self.num_layers, self.num_layers - 1)  # keep one layer
        if not remaining or len(self.current) >= cap:
            return []
        self._step = [Candidate(tuple(sorted((*self.current, layer)))) for layer in remaining]
        return list(self._step)

    def _decide(self) -> bool:
        """Delete the step's least harmful block if the balance does not fall; False ends the search
        (also when a deletion of the step was cut short or never measured, e.g. at the end of the budget:
        the least harmful one is then unknown)."""
        step, self._step = self._step, []
        measured = [(c, self.measured.get(c)) for c in step]
        if any(m is None or m.early_stopped for _, m in measured):
            self._stopped = True
            return False

        def least_harmful(item: tuple[Candidate, Measurement]) -> tuple[float, int]:
            candidate, m = item
            (deleted,) = set(candidate.skip_layers) - set(self.current)
            return self.score(m)[0], deleted  # the highest score; on a tie, the later block

        best, m = max(measured, key=least_harmful)
        before = self.measured[Candidate(self.current)]
        # "Does not fall", up to float rounding: M/M0 and depth/L of an unchanged score may differ by 1e-16.
        if self.balance(m, len(best.skip_layers)) < self.balance(before, len(self.current)) - BALANCE_TOLERANCE:
            self._stopped = True
            return False
        self.current = best.skip_layers
        self.path.append(self.current)
        log.info("greedy: least harmful deletion kept, skipping %s", list(self.current))
        return True

    def feasibility_thresholds(self) -> Thresholds | None:
        return None  # GM-Skip decides on the metric alone: the TSS thresholds cannot cut its measurements

    def select(self) -> Selection:
        if self.dense is not None and self._step:
            self._decide()  # the last step, when the search ended on it
        shared = super().select()  # notes, and which configurations pass the TSS rule (for reports)
        selected = Candidate(self.current)
        notes = [n for n in shared.notes if n != NOTE_DENSE_SELECTED or selected == self.dense_candidate]
        if selected == self.dense_candidate and NOTE_DENSE_SELECTED not in notes:
            notes.append(NOTE_DENSE_SELECTED)
        if self.dense is not None and not self._constraints()[1]:
            notes.append("greedy: no metric to guide the deletions, accept length used instead")
        return dataclasses.replace(shared, selected=selected, alternatives=(), notes=tuple(notes),
                                   info={"path": [list(p) for p in self.path], "sparsity_weight": self.sparsity_weight,
                                         "max_deletions": self.max_deletions})
