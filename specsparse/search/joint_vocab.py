"""Target-side skip sets and the drafter's vocabulary searched together (an extension beyond both papers).

The two papers search one side each: TSS picks the target's skip set with the drafter fixed, the
vocabulary paper picks k with the target fixed, and TPE's latency term R(k) is the drafter's own. Yet
they interact: a sparser target verifies faster, so the drafter's head is a larger share of a step and
trimming it pays more; a trimmed head drafts fewer accepted tokens, which moves what a skip set costs.

    sequential: S = BFS(full head); k = TPE with the paper's R(k)                 (one after the other)
    joint:      k = TPE given S, then alternate S = BFS(head at k), k = TPE given S until neither moves

"TPE given S" weighs R(k) by the modeled share of a speculative step the full head takes under S
(`draft_share`, from the cost profile): alpha C(k) + (1 - alpha) share(S) R(k), subject to C(k) >= c_min.
Each BFS runs with the drafter at k and judges skip sets against the dense target with that drafter.
Finally dense, the sequential and the joint pick are measured on the calibration split; the one with
the highest modeled tokens/s is selected, and `info` says whether the joint pick beats the sequential one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from specsparse.search.base import Selection
from specsparse.search.bfs import BFSSearch
from specsparse.search.tpe_vocab import TPEVocabSearch
from specsparse.types import Candidate, Measurement


class JointVocabSearch(BFSSearch):
    """BFS over skip sets and TPE over k, alternated (see the module docstring). The BFS options (`rule`,
    `weight_accept`) are BFSSearch's; the vocabulary options are TPEVocabSearch's.
    max_rounds: most BFS runs of the joint alternation."""

    name = "joint_vocab"
    context_arguments = ("vocab_size", "coverage", "latency_reduction", "draft_share")
    trims_vocabulary = True

    def __init__(
        self,
        num_layers: int,
        vocab_size: int | None = None,
        coverage: Callable[[int], float] | None = None,
        latency_reduction: Callable[[int], float] | None = None,
        draft_share: Callable[[Sequence[int]], float] | None = None,
        alpha: float = 0.5,
        min_coverage: float = 0.9,
        n_trials: int = 40,
        seed: int = 0,
        max_rounds: int = 3,
        **bfs_options: Any,
    ) -> None:
        super().__init__(num_layers, **bfs_options)
        if max_rounds < 1:
            raise ValueError(f"max_rounds must be >= 1, got {max_rounds}")
        if not 0 <= alpha <= 1 or n_trials < 1:
            raise ValueError(f"alpha must be in [0, 1] and n_trials >= 1, got {alpha}, {n_trials}")
        self.bfs_options = {"num_layers": num_layers, **bfs_options}
        self.vocab_size, self.coverage, self.latency_reduction = vocab_size, coverage, latency_reduction
        self.draft_share = draft_share
        self.alpha, self.min_coverage, self.n_trials, self.seed = alpha, min_coverage, n_trials, seed
        self.max_rounds = max_rounds
        self.measured: dict[Candidate, Measurement] = {}
        self.rounds: list[dict[str, Any]] = []
        self.sequential: Candidate | None = None
        self.joint: Candidate | None = None
        self._plan: Iterator[list[Candidate]] | None = None

    # -- the plan ----------------------------------------------------------------------------------
    def ask(self) -> list[Candidate]:
        if self._plan is None:
            self._plan = self._steps()
        return next(self._plan, [])

    def tell(self, candidate: Candidate, measurement: Measurement) -> None:
        self.measured[candidate] = measurement

    def _steps(self) -> Iterator[list[Candidate]]:
        skip = yield from self._bfs(None)
        self.sequential = Candidate(skip, self._tpe(None))
        k = self._tpe(skip)
        for _ in range(self.max_rounds):
            found = yield from self._bfs(k)
            next_k = self._tpe(found)
            self.rounds.append({"k": k, "skip_layers": list(found), "next_k": next_k})
            skip, converged = found, next_k == k
            if converged:
                break
            k = next_k
        self.joint = Candidate(skip, k)
        finals = [c for c in dict.fromkeys((Candidate(), self.sequential, self.joint)) if c not in self.measured]
        if finals:
            yield finals

    def _bfs(self, k: int | None) -> Iterator[list[Candidate]]:
        """One BFS with the drafter at k; returns its selected skip set."""
        search = BFSSearch(**self.bfs_options)
        while batch := search.ask():
            at_k = [Candidate(c.skip_layers, k) for c in batch]
            missing = [c for c in at_k if c not in self.measured]
            if missing:
                yield missing
            for c, inner in zip(at_k, batch):
                search.tell(inner, self.measured[c])
        return search.select().selected.skip_layers

    def _tpe(self, skip: Sequence[int] | None) -> int:
        """TPE's k: with the paper's R(k) (skip None), or R(k) weighed by the head's step share under `skip`."""
        share = 1.0 if skip is None else float(self.draft_share(skip))
        search = TPEVocabSearch(self.vocab_size, self.coverage, lambda k: share * self.latency_reduction(k),
                                self.alpha, self.min_coverage, self.n_trials, seed=self.seed)
        return search.optimise().chosen.k

    # -- conclusion ----------------------------------------------------------------------------------
    def select(self) -> Selection:
        dense = Candidate()
        finals = [c for c in (dense, self.sequential, self.joint) if c is not None and c in self.measured]
        best = max(finals, key=lambda c: (self.measured[c].modeled_tokens_per_s, c == dense), default=dense)
        rate = {name: self.measured[c].modeled_tokens_per_s for name, c in
                (("dense", dense), ("sequential", self.sequential), ("joint", self.joint)) if c in self.measured}
        notes = [] if "joint" in rate else ["the search stopped before the joint pick was measured"]
        if "sequential" in rate and "joint" in rate:
            gain = rate["joint"] / rate["sequential"] if rate["sequential"] else float("nan")
            verdict = ("the same pick" if self.joint == self.sequential else
                       "joint ahead" if gain > 1 else "sequential ahead" if gain < 1 else "a tie")
            notes.append(f"joint {self.joint.label} vs sequential {self.sequential.label}: {gain:.3f}x modeled "
                         f"tokens/s on the calibration split ({verdict})")
        info = {
            "sequential": None if self.sequential is None else [list(self.sequential.skip_layers), self.sequential.vocab_size],
            "joint": None if self.joint is None else [list(self.joint.skip_layers), self.joint.vocab_size],
            "rounds": [[r["k"], r["skip_layers"], r["next_k"]] for r in self.rounds],
            "modeled_tokens_per_s": [[name, value] for name, value in rate.items()],
            "alpha": self.alpha, "min_coverage": self.min_coverage,
        }
        feasible = tuple(c for c in finals if c != dense)
        return Selection(dense, best, feasible=feasible, notes=tuple(notes), info=info)
