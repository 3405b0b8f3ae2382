"""Random search, a Table 2 baseline: uniformly random skip sets at the depth of the TSS selection."""

from __future__ import annotations

import dataclasses
import logging
import math

import numpy as np

from specsparse.search.base import NOTE_DENSE_SELECTED, LayerSkipSearch, Selection, Thresholds
from specsparse.search.bfs import BFSSearch
from specsparse.search.rule import TSSRule
from specsparse.types import Candidate, Measurement

log = logging.getLogger(__name__)


class RandomSearch(LayerSkipSearch):
    """`draws` distinct skip sets of `depth` free layers, each uniform among the sets of that depth,
    from `numpy.random.default_rng(seed)`. The paper names random search as a baseline without saying
    how many draws it takes or whether it reports their best or their mean; this class reports both,
    labelled: `info` holds every draw and the mean, minimum and maximum over the
    draws of accept length, metric and modeled cost (the job adds the same over the test split), and
    the pick is the best draw: the one the TSS rule selects among the draws (cheapest feasible), or,
    with none feasible, the one retaining the most quality (`quality`). A draw cut short by early
    rejection is never picked.

    depth None (this project's protocol; the paper does not say how deep its random sets are): the
    depth of the TSS selection on the same calibration split, found by running the TSS BFS first with
    this search's `rule` and `weight_accept` (in a sweep after a bfs job every one of its measurements
    comes from the results store). When TSS keeps the dense model, depth is 0 and the pick is dense.
    Either way depth is at most rule.max_depth, the depth limit every search shares.
    """

    name = "random"

    def __init__(
        self, num_layers: int, rule: TSSRule = TSSRule(), depth: int | None = None, draws: int = 5, seed: int = 0,
        weight_accept: float = 0.5,
    ) -> None:
        super().__init__(num_layers, rule)
        deepest = min(rule.max_depth, len(self.free_layers))
        if depth is not None and not 0 <= depth <= deepest:
            raise ValueError(f"depth must be in 0..{deepest} (max_depth), got {depth}")
        if draws < 1:
            raise ValueError(f"draws must be >= 1, got {draws}")
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.draws = draws
        self.depth = depth
        self.tss = None if depth is not None else BFSSearch(num_layers, rule, weight_accept)
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
        measured = {c: self.measured[c] for c in drawn}
        front = self.front([(c, m) for c, m in measured.items() if self.feasible(m)])
        best = front[0][0] if front else max(drawn, key=lambda c: self.quality(measured[c]))
        info = {"depth": self.depth, "draws": [list(c.skip_layers) for c in drawn],
                "best_draw": list(best.skip_layers), "best_draw_feasible": bool(front),
                **draw_statistics(list(measured.values()))}
        notes = [n for n in shared.notes if n != NOTE_DENSE_SELECTED]
        metric = info["metric_of_draws"]
        notes.append(f"random: {len(drawn)} uniform skip sets of depth {self.depth} (this project's protocol); the pick "
                     f"is the best draw ({'cheapest feasible' if front else 'none feasible: most quality retained'}); "
                     f"calibration mean [min-max] over the draws: A {_mean_range(info['accept_of_draws'], '.3f')}, "
                     f"M {'n/a' if metric is None else _mean_range(metric, '.3f')}")
        return dataclasses.replace(shared, selected=best, alternatives=tuple(c for c in drawn if c != best),
                                   notes=tuple(notes), info=info)


def draw_statistics(measurements: list[Measurement]) -> dict[str, dict[str, float] | None]:
    """Mean, minimum and maximum over the draws of accept length, metric (None unless every draw has
    one) and modeled cost."""
    def stats(values: list[float]) -> dict[str, float]:
        return {"mean": float(np.mean(values)), "min": float(min(values)), "max": float(max(values))}

    metrics = [m.metric for m in measurements if m.metric is not None]
    return {"accept_of_draws": stats([m.accept_length for m in measurements]),
            "metric_of_draws": stats(metrics) if len(metrics) == len(measurements) else None,
            "modeled_cost_of_draws": stats([m.modeled_cost for m in measurements])}


def _mean_range(values: dict[str, float], spec: str) -> str:
    return f"{values['mean']:{spec}} [{values['min']:{spec}}-{values['max']:{spec}}]"
