"""Frozen dataclasses that cross module boundaries."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

from specsparse.util import locate

MAX_NEW_TOKENS = 1 << 20  # far beyond any model's context: larger values are typos, and overflow tensors
MAX_DRAFT_TOKENS = 64  # k: a verification chunk of k + 1 tokens; past this a step costs more than a draft can win


@dataclass(frozen=True)
class GenerationConfig:
    """How one request is decoded.

    `num_draft_tokens` is k, the longest chain a drafter may propose per step.
    `draft_length`: "fixed" drafts k tokens every step (the papers); "adaptive" (a deviation, slower than fixed
    drafting on Spec-Bench here: BENCHMARKS.md)
    drafts n <= k chosen per step from the request's own acceptance so far and the modeled cost of
    verifying more tokens, `verify_cost_per_token` of a one-token forward per extra token
    (`engine.AdaptiveDraftLength`). Output is the same either way; accept lengths are not.
    `temperature == 0` is greedy (lossless) verification; > 0 uses speculative rejection sampling, drawn
    from a generator seeded with `seed` (a negative seed is taken modulo 2**64, as torch does: -1 is
    2**64 - 1, a seed like any other).
    Its defaults are every entry point's (run.py's conf/config.yaml restates them), and its checks are
    the one check of these values, wherever they come from (config, command line, API request).
    """

    max_new_tokens: int = 128
    num_draft_tokens: int = 5
    temperature: float = 0.0
    seed: int = 0
    stop_on_eos: bool = True
    draft_length: str = "fixed"
    verify_cost_per_token: float = 0.09

    def __post_init__(self) -> None:
        if not 1 <= self.max_new_tokens <= MAX_NEW_TOKENS:
            raise ValueError(f"max_new_tokens must be in 1..{MAX_NEW_TOKENS}, got {self.max_new_tokens}")
        if not 0 <= self.num_draft_tokens <= MAX_DRAFT_TOKENS:
            raise ValueError(f"num_draft_tokens must be in 0..{MAX_DRAFT_TOKENS} (a step verifies k + 1 tokens in one "
                             f"forward; the papers draft 5-8), got {self.num_draft_tokens}")
        if not -(1 << 63) <= self.seed < 1 << 64:  # what torch.Generator.manual_seed takes
            raise ValueError(f"seed must be an integer in -2**63..2**64-1, got {self.seed}")
        if not 0 <= self.temperature < float("inf"):  # also refuses nan
            raise ValueError(f"temperature must be a finite number >= 0, got {self.temperature}")
        if self.draft_length not in ("fixed", "adaptive"):
            raise ValueError(f"draft_length must be 'fixed' or 'adaptive', got {self.draft_length!r}")
        if not 0 < self.verify_cost_per_token < float("inf"):
            raise ValueError(f"verify_cost_per_token must be > 0, got {self.verify_cost_per_token}")


@dataclass(frozen=True)
class GenerationResult:
    """Statistics of one request. Accept length follows Spec-Bench: tokens committed per target
    forward, bonus token included (plain decoding gives 1.00)."""

    new_token_ids: tuple[int, ...]
    accept_lengths: tuple[int, ...]
    verified_lengths: tuple[int, ...] = ()  # target inputs per step (1 + drafted tokens)
    draft_time_s: float = 0.0
    verify_time_s: float = 0.0
    wall_time_s: float = 0.0
    prefill_time_s: float = 0.0
    prefill_tokens: int = 0  # prompt tokens prefilled before the first verification (the prompt less its last token)

    @property
    def new_tokens(self) -> int:
        return len(self.new_token_ids)

    @property
    def target_forwards(self) -> int:
        """Target verification forwards (the prefill is not counted)."""
        return len(self.accept_lengths)

    @property
    def mean_accept_length(self) -> float:
        return sum(self.accept_lengths) / max(len(self.accept_lengths), 1)

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.wall_time_s if self.wall_time_s > 0 else 0.0


@dataclass(frozen=True)
class PromptResult:
    """One prompt's outcome inside a Measurement."""

    example_id: str
    output_text: str
    accept_lengths: tuple[int, ...]
    new_tokens: int
    wall_time_s: float
    verify_time_s: float
    metric: float | None = None


@dataclass(frozen=True)
class Measurement:
    """Everything one configuration (skip set, vocab size) scored on one prompt set.

    accept_length: mean over all verification steps of all prompts.
    metric: the domain's task metric in [0, 1], or None when the domain has no references (job
        outputs show it on 0-100).
    modeled_cost: modeled time per generated token (s/token): draft plus verification time from the
        cost profile (`specsparse.measuring.profile`), priced from the step counts below. 0 until priced.
    modeled_tokens_per_s: 1 / modeled_cost (0 until priced). Measured speedups come only from
        side-by-side timing (`specsparse.measuring.timing`).
    flops_fraction: analytic share of the dense target's layer FLOPs still active.
    target_forwards / verified_tokens: verification steps, and the target inputs they verified;
    chunk_counts[i]: the steps that verified i + 1 tokens; prefills / prefill_tokens: the prompts (turns)
    prefilled before them, and their tokens, which the cost profile prices too.
    wall_time_s, draft_time_s: what computing this measurement took; a batched pass measures several
        configurations at once and gives each the pass's time, so these are never written out or
        used to decide anything.
    """

    accept_length: float
    metric: float | None
    modeled_cost: float
    flops_fraction: float
    modeled_tokens_per_s: float
    new_tokens: int
    target_forwards: int
    wall_time_s: float
    draft_time_s: float = 0.0
    early_stopped: bool = False  # measurement aborted once it was certain to be infeasible
    per_prompt: tuple[PromptResult, ...] = field(default=(), compare=False)
    verified_tokens: int = 0
    chunk_counts: tuple[int, ...] = ()
    prefills: int = 0  # requests prefilled (one per prompt turn) and the prompt tokens they prefilled
    prefill_tokens: int = 0
    modeled_verify_cost: float = 0.0  # modeled seconds per verification step (the paper's selection cost)


@dataclass(frozen=True)
class Candidate:
    """A configuration a search proposes: layers the target skips and the drafter's vocabulary size."""

    skip_layers: tuple[int, ...] = ()
    vocab_size: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "skip_layers", tuple(sorted(set(int(i) for i in self.skip_layers))))

    @property
    def label(self) -> str:
        skip = "dense" if not self.skip_layers else "skip[" + ",".join(map(str, self.skip_layers)) + "]"
        return skip if self.vocab_size is None else f"{skip}|vocab={self.vocab_size}"


@dataclass(frozen=True)
class Component:
    """A configurable part of a job or of serving (drafter, search strategy, runner, logger): a class by
    public dotpath (`class_path`, the config's `_target_`) and its options. `build` is the one way to
    make one, for jobs and serving alike."""

    class_path: str
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def cls(self) -> Any:
        return locate(self.class_path)

    @property
    def name(self) -> str:
        """The class's short name (`name` attribute, e.g. "bfs"), else the class name."""
        return getattr(self.cls, "name", None) or self.class_path.rsplit(".", 1)[-1]

    def build(self, **context: Any) -> Any:
        """An instance from the options and `context`, the objects the caller holds besides the config.
        Drafters derive constructor arguments from theirs, so their class method receives it:
        `from_target` a drafter's (`target`, `vocab_ids` and its `job_context`). Other classes (search
        strategies, runners, loggers) are constructed, with the `context` values their constructor names
        and the options leave unset (a strategy's `SearchContext`, a runner's `output_dir`)."""
        cls = self.cls
        if hasattr(cls, "from_target"):
            return cls.from_target(**context, **self.options)
        params = inspect.signature(cls).parameters
        return cls(**self.options, **{k: v for k, v in context.items() if k in params and k not in self.options})
