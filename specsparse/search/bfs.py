"""Breadth-first search over skip sets (TSS, Algorithm 1).

Level 0 measures the dense model, level 1 every single-layer skip. Layers whose single skip keeps
*either* constraint within tau (A >= (1-tau)A0 or M >= (1-tau)M0; the paper sets tau = eps = 5%) form
the candidate pool — permissive on purpose, because a layer that hurts one objective alone may still
combine well. Level k = 2..max_depth
measures every k-subset of the pool as one batch. A configuration is feasible only when *both*
constraints hold; the search stops after max_depth or after a level with no feasible configuration.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from collections.abc import Sequence

from specsparse.search.base import LayerSkipSearch, Selection, Thresholds
from specsparse.search.pareto import selection_cost
from specsparse.search.rule import TSSRule
from specsparse.types import Candidate

log = logging.getLogger(__name__)


class BFSSearch(LayerSkipSearch):
    """TSS breadth-first search, under `rule` (`TSSRule`):

    rule.tau: the pool's tolerance. Under feasibility="lower_bound" the pool is judged like
        feasibility: a constraint is within tau when the lower end of its paired 95% interval reaches
        1 - tau (the paper's point rule otherwise).
    rule.max_pool: keep at most this many pool layers. Pool layers are then ranked by retained quality
        of their single skip, `weight_accept * A/A0 + (1 - weight_accept) * M/M0` (the ratio in use when
        only one constraint applies), ties broken by lower (FLOPs) cost, then layer index: layers that
        cost least quality alone are the likeliest to stay feasible together, while the cost saved by one
        layer is nearly the same for every layer.
    rule.early_reject: expose thresholds from level 2 on; single skips are never cut early since the
        pool rule is permissive (a single skip failing one constraint still enters the pool).
    """

    name = "bfs"

    def __init__(self, num_layers: int, rule: TSSRule = TSSRule(), weight_accept: float = 0.5,
                 objectives: Sequence[str] = ("accept", "metric")) -> None:
        super().__init__(num_layers, rule, objectives)
        self.weight_accept = weight_accept
        self.level = -1  # level of the batch last proposed (0 = dense)
        self.pool: tuple[int, ...] = ()
        self.notes: list[str] = []
        self._done = False

    def ask(self) -> list[Candidate]:
        if self._done:
            return []
        batch = self._level_batch(self.level + 1)
        if not batch:
            self._done = True
            return []
        self.level += 1
        log.info("bfs level %d: %d configurations", self.level, len(batch))
        return batch

    def _level_batch(self, k: int) -> list[Candidate]:
        if k == 0:
            return [self.dense_candidate]
        if self.dense is None or k > self.rule.max_depth:
            return []
        if k == 1:
            return [Candidate((layer,)) for layer in self.free_layers]
        if not any(self.feasible(m) for c, m in self.measured.items() if len(c.skip_layers) == k - 1):
            log.info("bfs: no feasible configuration at level %d, stopping", k - 1)
            return []
        if k == 2:
            self.pool = self._build_pool()
        return [Candidate(s) for s in itertools.combinations(self.pool, k)]

    def _build_pool(self) -> tuple[int, ...]:
        singles = [
            (c.skip_layers[0], m)
            for c, m in self.measured.items()
            if len(c.skip_layers) == 1 and self.passes_any(m, self.rule.tau)
        ]
        ranked = sorted(singles, key=lambda lm: (-self.quality(lm[1], self.weight_accept), selection_cost(lm[1]), lm[0]))
        if self.rule.max_pool is not None:
            ranked = ranked[: self.rule.max_pool]
        pool = tuple(sorted(layer for layer, _ in ranked))
        log.info("bfs pool (%d of %d single skips): %s", len(pool), len(singles), pool)
        if len(pool) < len(singles):
            self.notes.append(f"pool capped at max_pool={self.rule.max_pool} of {len(singles)} layers passing the OR rule "
                              "(a deviation from the paper, which keeps them all)")
        return pool

    def feasibility_thresholds(self) -> Thresholds | None:
        return super().feasibility_thresholds() if self.level >= 2 else None

    def select(self) -> Selection:
        sel = super().select()
        return dataclasses.replace(sel, notes=sel.notes + tuple(self.notes),
                                   info={"pool": list(self.pool), "levels": max(self.level, 0)})
