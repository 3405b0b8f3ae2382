"""What a search strategy takes from the model and its data rather than from the config.

    context = study.search_context(BFSSearch.context_arguments)   # measured where the model is
    strategy = context.build(Component("specsparse.search.bfs.BFSSearch", {"rule": rule}))

Plain, frozen data (it travels from a Ray worker): a strategy is built from it, never from an Evaluator.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any

from specsparse.types import Component


@dataclass(frozen=True)
class DraftShares:
    """The drafter's modeled share of a speculative step (`Pricer.draft_share`) by the number of layers
    skipped, which is all it depends on; called with a skip set."""

    by_layers_skipped: tuple[float, ...]

    def __call__(self, skip_layers: Sequence[int]) -> float:
        return self.by_layers_skipped[len(skip_layers)]


@dataclass(frozen=True)
class SearchContext:
    """num_layers / vocab_size: the target's depth and vocabulary. The rest only where a strategy's
    `context_arguments` ask for them: coverage C(k) and latency reduction R(k) of the job's draft
    vocabulary (`DraftVocabulary.objective`), and the drafter's share of a step by skip set."""

    num_layers: int
    vocab_size: int
    coverage: Callable[[int], float] | None = None
    latency_reduction: Callable[[int], float] | None = None
    draft_share: DraftShares | None = None

    def arguments(self) -> dict[str, Any]:
        """The values it holds, by constructor argument name."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    def build(self, search: Component) -> Any:
        """The strategy `search` names, with the context its constructor takes (`Component.build`)."""
        return search.build(**self.arguments())
