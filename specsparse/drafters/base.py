"""The job's side of a drafter: `ConfiguredDrafter`, the base of every drafter in this package, adds
to the engine's `Drafter` protocol (specsparse/decoding/drafter.py) what the code around the engine
asks of a drafter a job configures:

- building: `from_target` makes it for a loaded target from its config options, with the job's
  `job_context`; `trims_vocabulary` says whether it takes a trimmed draft vocabulary.
- checking, before anything loads (`specsparse.jobs.config`): `check_options` sees the option values
  alone, `drafts_trees_with` says whether they draft trees, `check_job` sees them with the job around
  them (`PlannedJob`: its domain, model and search), and `knows_training_replies` / `trains_at_k` say
  what the job's vocabulary options may ask of it.
- pricing (`specsparse.measuring.pricing`, the vocabulary search's latency model): `head_shape`,
  `cost_key`, `head_calls`.
- recording (config maps, for serving): `recorded_options`.

The engine never needs any of these: it takes any `Drafter`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from specsparse.decoding.drafter import Drafter

if TYPE_CHECKING:
    from specsparse.decoding.models import LoadedModel


@dataclass(frozen=True)
class PlannedJob:
    """The job a drafter's options are validated in (`ConfiguredDrafter.check_job`), as the validation
    pass knows it before anything loads.

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


class ConfiguredDrafter(Drafter):
    """A drafter a job builds from its config options, checks, prices and records; subclasses
    override what they need."""

    # Drafts through an LM head that a trimmed vocabulary (`vocab_ids`, search=tpe_vocab) can cut.
    trims_vocabulary: bool = False
    # `from_target` keywords the job provides (`Evaluator.drafter_factory`): "exclude_ids", the example
    # ids of the job's domain's calibration and test splits, which nothing the drafter learns before
    # it is measured (a corpus, a warm table, training data) may come from; "verification_costs", a
    # callable giving the cost profile's verification cost by input count over a one-token forward.
    job_context: tuple[str, ...] = ()

    # -- building ----------------------------------------------------------------------------------
    @classmethod
    def from_target(cls, target: LoadedModel, vocab_ids: list[int] | None = None, **options) -> ConfiguredDrafter:
        """Build the drafter for `target` (what configs instantiate). Drafters without an LM head
        cannot take a trimmed vocabulary."""
        if vocab_ids is not None:
            raise ValueError(
                f"drafter {cls.name!r} has no LM head, so it cannot use a trimmed vocabulary: "
                "use drafter=self_skip, drafter=draft_model or drafter=eagle for vocabulary trimming"
            )
        return cls(**options)

    # -- checking, before anything loads -----------------------------------------------------------
    @classmethod
    def check_options(cls, **options: Any) -> None:
        """ValueError for option values this drafter would refuse, found without a model (config
        validation calls it before anything loads). A drafter built from its options alone builds
        one; drafters that need the target override this."""
        if cls.from_target.__func__ is ConfiguredDrafter.from_target.__func__:
            cls(**options)

    @classmethod
    def drafts_trees_with(cls, options: Mapping[str, Any]) -> bool:
        """Whether the drafter these options make drafts trees (`Drafter.drafts_trees`), which verify
        greedily only: known from the options, before anything loads."""
        return False

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

    # -- pricing -----------------------------------------------------------------------------------
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

    # -- recording ---------------------------------------------------------------------------------
    def recorded_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """The options, built from, that rebuild this drafter as it is (what a config map records for
        serving). A drafter whose options hold a recipe (EAGLE's `train`) records what it made."""
        return dict(options)
