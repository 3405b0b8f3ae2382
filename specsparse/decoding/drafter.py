"""The one interface every drafter implements.

Lifecycle for one request (the engine drives it):

    drafter.begin(prompt_ids)            # once, with the full prompt
    loop:
        p = drafter.propose(k)           # up to k tokens continuing prompt + committed tokens
        ... target verifies ...
        drafter.observe(committed, verified_ids, verified_logits)

Feature drafters (EAGLE: `feature_layers` set) also read the target's hidden states:
`observe_features(features)` gives them the (sparse) target's features of the next context positions,
those of prompt[:-1] after the prefill and those of the step's kept inputs (the last committed token
and the accepted drafts) before each `observe`.

`reset()` clears any state kept across requests (e.g. Token Recycling's adjacency matrix), so a
measurement that calls it first is a pure function of its inputs.

Replay (`specsparse.measuring.replay`) scores a drafter against the target's known greedy continuation with no
target forward: it needs drafters whose proposals depend on the committed context only
(`replayable`). `replay_drafters` may precompute them for a batch (LM drafters do).

A job validates a drafter's options before anything loads: `check_options` sees the option values
alone, `check_job` sees them with the job around them (`PlannedJob`: its domain, model and search), and
`knows_training_replies` / `trains_at_k` say what the job's vocabulary options may ask of it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from specsparse.decoding.models import LoadedModel


@dataclass(frozen=True)
class Proposal:
    """Draft tokens, and (for sampling) the drafter's distribution at each drafted position.

    tokens: list of n token ids (n may be 0: the engine then runs plain decoding for one step).
    probs: [n, vocab] float tensor of the draft distributions q_i the tokens were drawn from,
        or None for deterministic drafters (treated as one-hot at each token).
    parents: None for a chain (token i follows token i - 1). For a tree draft, parents[i] is the
        index of the token that tokens[i] follows, -1 for the last committed token; parents come
        first (parents[i] < i). A chain is at most k tokens long; a tree at most k deep.
    """

    tokens: list[int]
    probs: torch.Tensor | None = None
    parents: tuple[int, ...] | None = None

    @classmethod
    def tree(cls, tokens: list[int], parents: Sequence[int]) -> Proposal:
        """A tree draft, or a chain when every token follows the one before it."""
        if list(parents) == list(range(-1, len(tokens) - 1)):
            return cls(tokens)
        return cls(tokens, parents=tuple(parents))

    def depths(self) -> list[int]:
        """Depth of every token: 1 for a child of the last committed token."""
        if self.parents is None:
            return list(range(1, len(self.tokens) + 1))
        depths: list[int] = []
        for parent in self.parents:
            depths.append(1 if parent < 0 else depths[parent] + 1)
        return depths

    def within(self, depth: int) -> Proposal:
        """The tokens at most `depth` deep (a tree's kept tokens stay in order, parents renumbered)."""
        if self.parents is None:
            return Proposal(self.tokens[:depth], None if self.probs is None else self.probs[:depth])
        kept = [i for i, d in enumerate(self.depths()) if d <= depth]
        index = {old: new for new, old in enumerate(kept)}
        return Proposal([self.tokens[i] for i in kept], None if self.probs is None else self.probs[kept],
                        tuple(index.get(self.parents[i], -1) for i in kept))


def tree_from_branches(branches: Sequence[Sequence[int]]) -> Proposal:
    """The trie of several drafted continuations: shared prefixes become one path. One branch gives
    a chain (parents None)."""
    branches = [list(b) for b in branches if b]
    if len(branches) <= 1:
        return Proposal(branches[0] if branches else [])
    tokens: list[int] = []
    parents: list[int] = []
    children: dict[tuple[int, int], int] = {}  # (parent index, token) -> index
    for branch in branches:
        parent = -1
        for token in branch:
            if (parent, token) not in children:
                children[(parent, token)] = len(tokens)
                tokens.append(token)
                parents.append(parent)
            parent = children[(parent, token)]
    return Proposal.tree(tokens, parents)


@dataclass(frozen=True)
class PlannedJob:
    """The job a drafter's options are validated in (`Drafter.check_job`), as the validation pass knows
    it before anything loads.

    domain / domain_limit: the domain's name and `domain.limit` (None: all its examples).
    model_source / num_layers / vocab_size: the target as the config names it; depth and vocabulary
        size where the config or a local checkpoint tells them, else None.
    search: the search strategy's name; trims_vocabulary: it picks a trimmed draft vocabulary.
    vocab_corpus: the entries of the job's `vocab_corpus`.
    train_at_k: `vocab_comparison.train_at_k` is asked (a head trained at the searched vocabulary).
    measured_ids: the ids of the examples the job measures (its calibration and test splits), loaded
        on first use from `examples`; None where they are not known before the job runs (a Hub set).
    """

    domain: str
    model_source: str
    search: str
    domain_limit: int | None = None
    num_layers: int | None = None
    vocab_size: int | None = None
    trims_vocabulary: bool = False
    vocab_corpus: tuple[str, ...] = ()
    train_at_k: bool = False
    examples: Callable[[], Iterable[str]] | None = field(default=None, repr=False, compare=False)

    @cached_property
    def measured_ids(self) -> frozenset[str] | None:
        return None if self.examples is None else frozenset(self.examples())


class Drafter:
    """Base class; subclasses override what they need."""

    name: str = "drafter"
    # Proposals are a deterministic function of the committed context. Not so for drafters that learn
    # from the target's logits at every verified input, rejected drafts included (replay cannot know
    # those), or that sample: they are measured by lockstep batched verification instead.
    replayable: bool = True
    # Proposals may be trees (`Proposal.parents`): greedy verification only, and the engine measures
    # them when the drafter is not replayable (lockstep batches take chains).
    drafts_trees: bool = False
    # Drafts through an LM head that a trimmed vocabulary (`vocab_ids`, search=tpe_vocab) can cut.
    trims_vocabulary: bool = False
    # `from_target` keywords the job provides (`Evaluator.drafter_factory`): "exclude_ids", the example
    # ids of the job's domain's calibration and test splits, which nothing the drafter learns before
    # it is measured (a corpus, a warm table, training data) may come from; "verification_costs", a
    # callable giving the cost profile's verification cost by input count over a one-token forward.
    job_context: tuple[str, ...] = ()
    # Target hidden states the drafter reads (`ModelSession` feature_layers; `FINAL_HIDDEN` is the
    # final-norm output), or None.
    feature_layers: tuple[int, ...] | None = None

    @classmethod
    def from_target(cls, target: LoadedModel, vocab_ids: list[int] | None = None, **options) -> Drafter:
        """Build the drafter for `target` (what configs instantiate). Drafters without an LM head
        cannot take a trimmed vocabulary."""
        if vocab_ids is not None:
            raise ValueError(
                f"drafter {cls.name!r} has no LM head, so it cannot use a trimmed vocabulary: "
                "use drafter=self_skip, drafter=draft_model or drafter=eagle for vocabulary trimming"
            )
        return cls(**options)

    @classmethod
    def check_options(cls, **options: Any) -> None:
        """ValueError for option values this drafter would refuse, found without a model (config
        validation calls it before anything loads). A drafter built from its options alone builds
        one; drafters that need the target override this."""
        if cls.from_target.__func__ is Drafter.from_target.__func__:
            cls(**options)

    @classmethod
    def check_job(cls, options: Mapping[str, Any], job: PlannedJob) -> None:
        """ValueError (one line, the whole message) for options this drafter refuses in `job`, found
        without a model: checks that need the job's domain, model or search (a checkpoint trained on
        the prompts the job measures, a head the search cannot trim). Called after `check_options`,
        with the options as the job resolved them (paths absolute)."""

    @classmethod
    def knows_training_replies(cls, options: Mapping[str, Any]) -> bool:
        """Whether the drafter these options make knows the replies it was trained on (its
        `training_responses`): what `vocab_corpus` entry drafter_responses reads."""
        return False

    @classmethod
    def trains_at_k(cls, options: Mapping[str, Any]) -> bool:
        """Whether these options hold a training recipe that `vocab_comparison.train_at_k` can rerun
        at the searched vocabulary."""
        return False

    def head_shape(self) -> tuple[int, int, float]:
        """For drafters with an LM head: (full vocabulary, hidden size, matmul FLOPs per drafted
        token outside the head), which the vocabulary search's latency model prices."""
        raise ValueError(f"drafter {self.name!r} has no LM head: vocabulary search needs self_skip, draft_model or eagle")

    @property
    def cost_key(self) -> str:
        """What the cost profile stores this drafter's measured step time under (drafters whose
        options change their step cost name them here)."""
        return self.name

    def head_calls(self, k: int) -> int | None:
        """How many single-token LM-head products a `propose(k)` computes, for a drafter whose step
        is its body plus those (the cost profile then times the body once and prices the head per
        row, so every trimmed vocabulary is priced alike); None: its whole step is timed."""
        return None

    def reset(self) -> None:
        """Forget state carried across requests."""

    def replay_drafters(
        self, prompts: Sequence[Sequence[int]], continuations: Sequence[Sequence[int]], batch_size: int,
        skip_layers: Sequence[int] = (),
    ) -> list[Drafter]:
        """One drafter per prompt for replaying it over the target's greedy `continuations` (generated
        under the target's `skip_layers`).

        Context-only drafters restart on `begin`, so this one instance serves every prompt in turn.
        """
        return [self] * len(prompts)

    def begin(self, prompt_ids: list[int]) -> None:
        """Start a request whose context is `prompt_ids` (chat template already applied)."""
        raise NotImplementedError

    def propose(self, k: int) -> Proposal:
        """Propose up to k tokens that continue the current context."""
        raise NotImplementedError

    def observe(self, committed: list[int], verified_ids: list[int], verified_logits: torch.Tensor) -> None:
        """Feedback after one verification step.

        committed: tokens appended to the context this step (accepted drafts, then the bonus token).
        verified_ids: the target's inputs this step: [last context token, *draft tokens] (length n+1).
        verified_logits: [n+1, vocab] target logits at those positions (row i predicts the token after
            verified_ids[i]); Token Recycling learns successor lists from them.
        """
        raise NotImplementedError

    def observe_features(self, features: torch.Tensor) -> None:
        """The target's features [m, features] of the next m context positions (feature drafters)."""

    def recorded_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """The options, built from, that rebuild this drafter as it is (what a config map records for
        serving). A drafter whose options hold a recipe (EAGLE's `train`) records what it made."""
        return dict(options)

    def close(self) -> None:
        """Release per-request resources (caches)."""
