"""Random search over skip sets: a baseline for the structured searches."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

import numpy as np

from specsparse.search.base import LayerSkipSearch
from specsparse.types import Candidate

log = logging.getLogger(__name__)


class RandomSearch(LayerSkipSearch):
    """Dense first, then `budget` distinct random skip sets of 1..max_depth layers.

    Each sample draws its depth uniformly from the depths not yet exhausted, then a uniform set of that
    many free layers, from `numpy.random.default_rng(seed)`; repeats are redrawn. Proposals do not depend
    on measurements, so the same seed gives the same sequence. `batch_size` sets how many are proposed
    per `ask` (None: all at once, which suits a parallel runner). `budget` is capped at the number of
    distinct skip sets.
    """

    name = "random"

    def __init__(
        self,
        num_layers: int,
        max_depth: int = 4,
        budget: int = 32,
        seed: int = 0,
        eps_accept: float = 0.05,
        eps_metric: float = 0.05,
        batch_size: int | None = None,
        protect_layers: Sequence[int] = (),
        objectives: Sequence[str] = ("accept", "metric"),
        early_reject: bool = False,
        feasibility: str = "point",
        metric_floor: float = 0.0,
        select: str = "time_per_token",
    ) -> None:
        super().__init__(num_layers, max_depth, eps_accept, eps_metric, protect_layers, objectives, early_reject,
                         feasibility, metric_floor, select)
        if budget < 0:
            raise ValueError(f"budget must be >= 0, got {budget}")
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size must be >= 1 or None, got {batch_size}")
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        n = len(self.free_layers)
        self._space = {k: math.comb(n, k) for k in range(1, min(max_depth, n) + 1)}
        self.budget = min(budget, sum(self._space.values()))
        self.batch_size = batch_size
        self._seen: set[tuple[int, ...]] = set()
        self._per_depth = dict.fromkeys(self._space, 0)
        self._started = False

    def _sample(self) -> tuple[int, ...]:
        depths = [k for k, size in self._space.items() if self._per_depth[k] < size]
        k = int(self.rng.choice(depths))
        while True:
            picked = self.rng.choice(len(self.free_layers), size=k, replace=False)
            skip = tuple(sorted(self.free_layers[i] for i in picked))
            if skip not in self._seen:
                self._seen.add(skip)
                self._per_depth[k] += 1
                return skip

    def ask(self) -> list[Candidate]:
        if not self._started:
            self._started = True
            return [self.dense_candidate]
        left = self.budget - len(self._seen)
        if self.dense is None or left <= 0:
            return []
        n = left if self.batch_size is None else min(left, self.batch_size)
        return [Candidate(self._sample()) for _ in range(n)]
