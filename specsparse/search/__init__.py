"""Search strategies: each proposes candidates and selects from their measurements (the loop that
measures them is `specsparse.study.driver`).

Names match across layers: `conf/search/<name>.yaml` <-> `specsparse/search/<name>.py` <-> class.
"""

from specsparse.search.accept_only import AcceptOnlySearch
from specsparse.search.base import LayerSkipSearch, SearchResult, SearchStrategy, Selection
from specsparse.search.bfs import BFSSearch
from specsparse.search.greedy import GreedySearch
from specsparse.search.joint_vocab import JointVocabSearch
from specsparse.search.metric_only import MetricOnlySearch
from specsparse.search.pareto import is_feasible, pareto_front
from specsparse.search.random import RandomSearch
from specsparse.search.rule import TSSRule
from specsparse.search.tpe_vocab import TPEVocabSearch


def _strategy_classes(base: type = SearchStrategy) -> list[type]:
    return [c for sub in base.__subclasses__() for c in (sub, *_strategy_classes(sub))]


# The strategies of this package, by name: what conf/search/ names (a job may also name its own class by
# dotpath). Derived from the classes, so a new strategy is listed once it is imported here.
STRATEGY_NAMES = tuple(sorted({c.name for c in _strategy_classes() if c.__module__.startswith(__name__ + ".")
                               and "name" in vars(c)}))

__all__ = [
    "STRATEGY_NAMES",
    "AcceptOnlySearch",
    "BFSSearch",
    "GreedySearch",
    "JointVocabSearch",
    "LayerSkipSearch",
    "MetricOnlySearch",
    "RandomSearch",
    "SearchResult",
    "SearchStrategy",
    "Selection",
    "TPEVocabSearch",
    "TSSRule",
    "is_feasible",
    "pareto_front",
]
