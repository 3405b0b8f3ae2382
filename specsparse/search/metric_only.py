"""Metric-only search, a Table 2 baseline: maximise the task metric, ignoring accept length.

On a domain without references (no metric) it falls back to acceptance and says so in the notes.
"""

from __future__ import annotations

from specsparse.search.base import Selection
from specsparse.search.bfs import BFSSearch
from specsparse.search.rule import TSSRule


class MetricOnlySearch(BFSSearch):
    """The BFS of TSS with the task metric as its only objective (the pool and the level-to-level rule
    use M alone; accept length is measured but never constrains), and the measured configuration with
    the highest metric selected. Same depth limit as every search."""

    name = "metric_only"

    def __init__(self, num_layers: int, rule: TSSRule = TSSRule(), weight_accept: float = 0.5) -> None:
        super().__init__(num_layers, rule, weight_accept, objectives=("metric",))

    def select(self) -> Selection:
        dense = self.dense
        objective = "metric" if dense is not None and dense.metric is not None else "accept"
        return self.maximising(super().select(), objective)
