"""BFS whose pool filter and feasibility rule use accept length only (ablation of TSS)."""

from __future__ import annotations

from typing import Any

from specsparse.search.bfs import BFSSearch


class AcceptOnlySearch(BFSSearch):
    """`BFSSearch(objectives=("accept",))`: the task metric is measured but never constrains."""

    name = "accept_only"

    def __init__(self, num_layers: int, **kwargs: Any) -> None:
        super().__init__(num_layers, objectives=("accept",), **kwargs)
