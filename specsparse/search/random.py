"""Random search, a Table 2 baseline: uniformly random skip sets at the depth of the TSS selection."""

from __future__ import annotations

import dataclasses
import logging
import math
from typing import Any

import numpy as np

from specsparse.search.base import NOTE_DENSE_SELECTED, LayerSkipSearch, Selection, Thresholds
from specsparse.search.bfs import BFSSearch
from specsparse.types import Candidate, Measurement

log = logging.getLogger(__name__)


class RandomSearch(LayerSkipSearch):
    """`draws` distinct skip sets of `depth` free layers, each uniform among the sets of that depth,
    from `numpy.random.default_rng(seed)`; the first draw is the selection (a random pick: no
    constraint decides it; a draw cut short by early rejection is passed over), the other draws are
    kept as alternatives, and the mean accept length, metric and modeled cost over all draws are in
    `info` (`mean_*_of_draws`) and the notes: the paper averages random search over several seeds.

    depth None (the paper's protocol): the depth of the TSS selection on the same calibration split,
    found by running the TSS BFS first with this search's settings (`bfs_options` as for `bfs`; in a
    sweep after a bfs job every one of its measurements comes from the results store). When TSS keeps
    the dense model, depth is 0 and the pick is dense. Either way depth is at most max_depth, the
    depth limit every search shares.
    """

    name = "random"

    def __init__(
        self, num_layers: int, depth: int | None = None, draws: int = 5, seed: int = 0,
        bfs_options: dict[str, Any] | None = None, **rule: Any,
    ) -> None:
        """`rule`: the shared layer-skip options of `LayerSkipSearch` (the TSS BFS runs under them too)."""
        super().__init__(num_layers, **rule)
        if depth is not None and not 0 <= depth <= min(self.max_depth, len(self.free_layers)):
            raise ValueError(f"depth must be in 0..{min(self.max_depth, len(self.free_layers))} (max_depth), got {depth}")
        if draws < 1:
            raise ValueError(f"draws must be >= 1, got {draws}")
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.draws = draws
        self.depth = depth
        self.tss = None if depth is not None else BFSSearch(num_layers, **rule, **(bfs_options or {}))
        self.drawn: list[Candidate] = []
        self._started = False

    def tell(self, candidate: Candidate, measurement: Measurement) -> None:
        super().tell(candidate, measurement)
        if self.tss is not None:
            self.tss.tell(candidate, measurement)

    def ask(self) -> list[Candidate]:
        if not self._started:  # dense first (the BFS's own level 0, when it runs)
            self._started = True
            return self.tss.ask() if self.tss is not None else [self.dense_candidate]
        if self.dense is None or self.drawn:
            return []
        if self.depth is None:
            batch = self.tss.ask()
            if batch:
                return batch
            self.depth = len(self.tss.select().selected.skip_layers)
            log.info("random: the TSS selection skips %d layers; drawing %d sets of that depth", self.depth, self.draws)
        self.drawn = self._draw(self.depth)
        return [c for c in self.drawn if c not in self.measured]

    def _draw(self, depth: int) -> list[Candidate]:
        if depth == 0:
            return [self.dense_candidate]
        count = min(self.draws, math.comb(len(self.free_layers), depth))
        drawn: list[Candidate] = []
        while len(drawn) < count:
            picked = self.rng.choice(len(self.free_layers), size=depth, replace=False)
            candidate = Candidate(tuple(sorted(self.free_layers[i] for i in picked)))
            if candidate not in drawn:
                drawn.append(candidate)
        return drawn

    def feasibility_thresholds(self) -> Thresholds | None:
        return None if self.tss is None or self.drawn else self.tss.feasibility_thresholds()

    def select(self) -> Selection:
        shared = super().select()  # notes, and which configurations pass the TSS rule (for reports)
        drawn = [c for c in self.drawn if c in self.measured and not self.measured[c].early_stopped]
        if not drawn or drawn[0] == self.dense_candidate:  # TSS kept dense (depth 0), or nothing drawn
            return dataclasses.replace(shared, selected=self.dense_candidate, alternatives=(),
                                       info={"depth": self.depth or 0})
        measured = [self.measured[c] for c in drawn]
        metrics = [m.metric for m in measured if m.metric is not None]
        info = {"depth": self.depth, "draws": [list(c.skip_layers) for c in drawn],
                "mean_accept_of_draws": float(np.mean([m.accept_length for m in measured])),
                "mean_metric_of_draws": float(np.mean(metrics)) if len(metrics) == len(measured) else None,
                "mean_modeled_cost_of_draws": float(np.mean([m.modeled_cost for m in measured]))}
        metric = info["mean_metric_of_draws"]
        notes = [n for n in shared.notes if n != NOTE_DENSE_SELECTED]
        notes.append(f"random: {len(drawn)} uniform skip sets of depth {self.depth}, the first is the pick; "
                     f"calibration means over the draws: A {info['mean_accept_of_draws']:.3f}, "
                     f"M {'n/a' if metric is None else format(metric, '.3f')}")
        return dataclasses.replace(shared, selected=drawn[0], alternatives=tuple(drawn[1:]), notes=tuple(notes),
                                   info=info)
