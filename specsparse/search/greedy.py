"""GM-Skip (arXiv 2508.18227), the greedy baseline of the TSS paper's Table 2: metric-guided block
deletion in reverse order, under a score-sparsity balance objective.

Myopic by design: each deletion is decided on its own and never revisited, so it can miss sets that
are only jointly good, and it looks at the task metric alone, so acceptance may fall.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from specsparse.search.base import NOTE_DENSE_SELECTED, LayerSkipSearch, Selection, Thresholds
from specsparse.types import Candidate, Measurement

log = logging.getLogger(__name__)


BALANCE_TOLERANCE = 1e-12


class GreedySearch(LayerSkipSearch):
    """Visit the free layers from the last to the first (early blocks are deleted last, so they are
    kept when the depth limit binds); tentatively delete each from the current model and keep the
    deletion when the score-sparsity balance does not fall:

        J(S) = M(S) / M0 + sparsity_weight * |S| / num_layers,   keep l if J(S + {l}) >= J(S),

    so a deletion may cost at most sparsity_weight * M0 / num_layers of metric. Stops at max_depth
    deletions (the depth limit every search shares) or after the first layer. The score is the task
    metric; a domain without one (or with `metric_floor` dropping it) uses accept length instead, with
    a note. The pick is where the deletions end: GM-Skip knows no acceptance constraint, which is what
    Table 2 compares. One candidate per step: each decision needs the one before.
    """

    name = "greedy"

    def __init__(self, num_layers: int, sparsity_weight: float = 1.0, **rule: Any) -> None:
        """`rule`: the shared layer-skip options of `LayerSkipSearch`."""
        super().__init__(num_layers, **rule)
        if sparsity_weight < 0:
            raise ValueError(f"sparsity_weight must be >= 0, got {sparsity_weight}")
        self.sparsity_weight = sparsity_weight
        self.current: tuple[int, ...] = ()
        self.path: list[tuple[int, ...]] = []
        self._untried = list(self.free_layers)  # pop() gives the last layer first
        self._started = False
        self._pending: Candidate | None = None  # the deletion asked for and not yet decided

    def balance(self, m: Measurement, depth: int) -> float:
        """J = score / dense score + sparsity_weight * depth / num_layers."""
        assert self.dense is not None
        _, use_metric, _ = self._rule()
        if use_metric:
            score, dense = (m.metric or 0.0), self.dense.metric
        else:
            score, dense = m.accept_length, self.dense.accept_length
        retained = score / dense if dense else 1.0 + score
        return retained + self.sparsity_weight * depth / self.num_layers

    def ask(self) -> list[Candidate]:
        if not self._started:
            self._started = True
            return [self.dense_candidate]
        if self.dense is None:
            return []
        self._decide()
        if len(self.current) >= self.max_depth or not self._untried:
            return []
        self._pending = Candidate(tuple(sorted((*self.current, self._untried.pop()))))
        return [self._pending]

    def _decide(self) -> None:
        """Keep the pending deletion if its balance does not fall (not if it was cut short or never
        measured, e.g. at the end of the budget)."""
        candidate, self._pending = self._pending, None
        m = None if candidate is None else self.measured.get(candidate)
        if m is None or m.early_stopped:
            return
        before = self.measured[Candidate(self.current)]
        # "Does not fall", up to float rounding: M/M0 and depth/L of an unchanged score may differ by 1e-16.
        if self.balance(m, len(candidate.skip_layers)) >= self.balance(before, len(self.current)) - BALANCE_TOLERANCE:
            self.current = candidate.skip_layers
            self.path.append(self.current)
            log.info("greedy: deletion kept, skipping %s", list(self.current))

    def feasibility_thresholds(self) -> Thresholds | None:
        return None  # GM-Skip decides on the metric alone: the TSS thresholds cannot cut its measurements

    def select(self) -> Selection:
        if self.dense is not None:
            self._decide()  # the last answer, when the search ended on it
        shared = super().select()  # notes, and which configurations pass the TSS rule (for reports)
        selected = Candidate(self.current)
        notes = [n for n in shared.notes if n != NOTE_DENSE_SELECTED or selected == self.dense_candidate]
        if selected == self.dense_candidate and NOTE_DENSE_SELECTED not in notes:
            notes.append(NOTE_DENSE_SELECTED)
        if self.dense is not None and not self._rule()[1]:
            notes.append("greedy: no metric to guide the deletions, accept length used instead")
        return dataclasses.replace(shared, selected=selected, alternatives=(), notes=tuple(notes),
                                   info={"path": [list(p) for p in self.path], "sparsity_weight": self.sparsity_weight})
