"""BFS whose pool filter and feasibility rule use the task metric only (ablation of TSS).

On a domain without references (no metric) it falls back to acceptance and says so in the notes.
"""

from __future__ import annotations

from typing import Any

from specsparse.search.bfs import BFSSearch


class MetricOnlySearch(BFSSearch):
    """`BFSSearch(objectives=("metric",))`: accept length is measured but never constrains."""

    name = "metric_only"

    def __init__(self, num_layers: int, **kwargs: Any) -> None:
        super().__init__(num_layers, objectives=("metric",), **kwargs)
