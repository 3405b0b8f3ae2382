"""Accept-only search, a Table 2 baseline: maximise accept length, ignoring the task metric."""

from __future__ import annotations

from specsparse.search.base import Selection
from specsparse.search.bfs import BFSSearch
from specsparse.search.rule import TSSRule


class AcceptOnlySearch(BFSSearch):
    """The BFS of TSS with accept length as its only objective (the pool and the level-to-level rule
    use A alone; the metric is measured but never constrains), and the measured configuration with
    the highest accept length selected, as the paper defines it ("obtains the highest accept length").
    Same depth limit as every search."""

    name = "accept_only"

    def __init__(self, num_layers: int, rule: TSSRule = TSSRule(), weight_accept: float = 0.5) -> None:
        super().__init__(num_layers, rule, weight_accept, objectives=("accept",))

    def select(self) -> Selection:
        return self.maximising(super().select(), "accept")
