"""Greedy forward selection of skipped layers (GM-Skip style). Myopic by design: it commits to one
layer per step and never revisits, so it can miss pairs that are only jointly best."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence

from specsparse.search.base import LayerSkipSearch, Selection
from specsparse.search.pareto import selection_cost
from specsparse.types import Candidate, Measurement

log = logging.getLogger(__name__)


class GreedySearch(LayerSkipSearch):
    """Start from dense; at each step measure the current set plus each remaining layer (one batch),
    commit to the feasible one with the best score, stop when none is feasible or at max_depth.

    Score of a configuration: `weight_accept * A/A0 + (1 - weight_accept) * M/M0 - cost/cost0`
    (retained quality minus relative modeled cost, see `pareto.selection_cost`; the quality term is the single ratio in use when only one
    constraint applies). Ties: lower cost, then the lexicographically smaller skip set.
    The final pick uses the shared rule over everything measured (cheapest feasible Pareto point),
    which is the committed path's end or a cheaper configuration seen on the way.
    """

    name = "greedy"

    def __init__(
        self,
        num_layers: int,
        max_depth: int = 4,
        eps_accept: float = 0.05,
        eps_metric: float = 0.05,
        weight_accept: float = 0.5,
        protect_layers: Sequence[int] = (),
        objectives: Sequence[str] = ("accept", "metric"),
        early_reject: bool = False,
        feasibility: str = "point",
        metric_floor: float = 0.0,
        select: str = "time_per_token",
    ) -> None:
        super().__init__(num_layers, max_depth, eps_accept, eps_metric, protect_layers, objectives, early_reject,
                         feasibility, metric_floor, select)
        self.weight_accept = weight_accept
        self.current: tuple[int, ...] = ()
        self.path: list[tuple[int, ...]] = []
        self._step = -1  # -1: nothing asked, 0: dense asked, t: step t asked
        self._batch: list[Candidate] = []
        self._done = False

    def score(self, m: Measurement) -> float:
        assert self.dense is not None
        cost0 = selection_cost(self.dense) or 1.0
        return self.quality(m, self.weight_accept) - selection_cost(m) / cost0

    def ask(self) -> list[Candidate]:
        if self._done:
            return []
        if self._step == -1:
            self._step, self._batch = 0, [self.dense_candidate]
            return list(self._batch)
        if self.dense is None or not self._commit():
            self._done = True
            return []
        remaining = [layer for layer in self.free_layers if layer not in self.current]
        if len(self.current) >= self.max_depth or not remaining:
            self._done = True
            return []
        self._step += 1
        self._batch = [Candidate(self.current + (layer,)) for layer in remaining]
        return list(self._batch)

    def _commit(self) -> bool:
        """Move `current` to the best feasible configuration of the last batch; False if none."""
        if self._step == 0:
            return True
        told = [(c, self.measured[c]) for c in self._batch if c in self.measured]
        feasible = [(c, m) for c, m in told if self.feasible(m)]
        if not feasible:
            log.info("greedy step %d: no feasible extension of %s, stopping", self._step, self.current)
            return False
        best, m = min(feasible, key=lambda cm: (-self.score(cm[1]), selection_cost(cm[1]), cm[0].skip_layers))
        self.current = best.skip_layers
        self.path.append(self.current)
        log.info("greedy step %d: commit %s (score %.4f)", self._step, self.current, self.score(m))
        return True

    def select(self) -> Selection:
        sel = super().select()
        return dataclasses.replace(sel, info={"path": [list(p) for p in self.path]})
