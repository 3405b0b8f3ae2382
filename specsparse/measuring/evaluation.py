"""An evaluation is a pure function of (model, drafter, domain split, candidate, generation settings).

`EvaluationSpec` holds all of it as plain data (picklable; `specsparse.study.keys` hashes it into a
store key); `Evaluator` turns it into objects once (the model is loaded once per process, `load_model_cached`), measures
candidates on one split and prices them with its `Pricer` (`specsparse.measuring.pricing`, the one
place a measurement meets the cost profile). Whoever measures holds its Evaluators: a job's `specsparse.study.Study`, a Ray
worker; both runners measure through `specsparse.study.runners.local.measure_in_passes`.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace

import torch

from specsparse.data import Domain, get_domain
from specsparse.decoding.models import LoadedModel, load_model_cached
from specsparse.drafters.base import ConfiguredDrafter
from specsparse.measuring.measure import Continuations, EarlyReject, measure_many
from specsparse.measuring.pricing import Pricer
from specsparse.measuring.profile import pinned_profile, profile_for
from specsparse.measuring.vocabulary import DraftVocabulary
from specsparse.types import Candidate, Component, GenerationConfig, Measurement
from specsparse.util import content_hash

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MeasureSpec:
    """How a configuration is measured (see `specsparse.measuring.measure`). The batch size does not change
    results, so it is left out of store keys."""

    mode: str = "replay"
    batch_size: int | None = None  # None: as many rows as fit (`auto_batch_size`)


@dataclass(frozen=True)
class EvaluationSpec:
    model: str = "smollm2-135m"
    dtype: str = "float32"
    device: str = "cpu"
    forward_path: str = "auto"  # `specsparse.decoding.forward_path`; jobs give the one that runs (eager or fast)
    drafter: Component = Component("specsparse.drafters.samd.SuffixAutomatonDrafter")
    domain: Domain = get_domain("translation")
    split: str = "calibration"
    generation: GenerationConfig = GenerationConfig()
    measure: MeasureSpec = MeasureSpec()
    # Token frequencies of a trimmed draft vocabulary (`specsparse.data.corpus`; files as absolute paths).
    vocab_corpus: tuple[str, ...] = ("dense_outputs", "builtin")
    # A pinned cost profile file (`cost.profile`; None: this machine's). It prices the counts, which it
    # cannot change, so store keys leave it out and a store hit is priced again with it.
    cost_profile: str | None = None

    def with_split(self, split: str) -> EvaluationSpec:
        return replace(self, split=split)


class Evaluator:
    """Measures candidates for one EvaluationSpec. `calibration`: the Evaluator of the spec's
    calibration split, whose vocabulary a trimmed head keeps on every split (made when needed)."""

    def __init__(self, spec: EvaluationSpec, calibration: Evaluator | None = None):
        if calibration is not None and calibration.spec != spec.with_split("calibration"):
            raise ValueError("calibration: the Evaluator of this spec's calibration split")
        self.spec = spec
        self._calibration = calibration
        self.target = load_model_cached(spec.model, spec.dtype, spec.device, spec.forward_path)
        self.domain = spec.domain
        self.examples = spec.domain.load(spec.split)
        if not self.examples:
            raise ValueError(f"domain {spec.domain.name!r} has no {spec.split} examples: add examples or change the split")
        self.continuations: Continuations = {}  # greedy generations, shared by every candidate's replay
        self.batch_size = spec.measure.batch_size or auto_batch_size(self.target, spec.generation)
        # Build a drafter once before anything is keyed: a checkpoint its recipe trains on first use
        # (drafter=eagle with train) must exist when its files are hashed into the keys (`study.keys`).
        built = self.drafter_factory(None)()
        # The drafter as serving rebuilds what this measures (the config map records it).
        self.recorded_drafter = Component(spec.drafter.class_path, built.recorded_options(spec.drafter.options))

    # -- measuring -----------------------------------------------------------------------------
    def evaluate_many(
        self, candidates: Sequence[Candidate], thresholds: tuple | None = None, progress: bool = True
    ) -> list[Measurement]:
        """Measure `candidates` on this split (together, in replay mode), priced by the cost profile.
        Early rejection (`thresholds`) applies to engine-mode measurements only."""
        early = None if thresholds is None or self.spec.measure.mode != "engine" else EarlyReject(*thresholds)
        measurements = measure_many(
            self.target, self.domain, self.examples,
            [(c.skip_layers, self.drafter_factory(c.vocab_size)) for c in candidates],
            self.spec.generation, mode=self.spec.measure.mode, batch_size=self.batch_size,
            continuations=self.continuations, early_reject=early, progress=progress,
            description=f"{self.domain.name} {candidates[0].label}" if len(candidates) == 1 else "",
        )
        return [self.pricer.price(c, m) for c, m in zip(candidates, measurements)]

    def drafter_factory(self, vocab_size: int | None) -> Callable[[], ConfiguredDrafter]:
        """Makes new drafters of this spec, with the vocabulary of `vocab_size` chosen on this split."""
        vocab_ids = None if vocab_size is None else self.vocabulary.ids(vocab_size)
        drafter = self.spec.drafter

        def verification_costs() -> tuple[float, ...]:  # the profile loads only when a drafter reads them
            return self.pricer.verification_costs()

        provided = {  # what a drafter may ask of the job (`ConfiguredDrafter.job_context`)
            "exclude_ids": lambda: self.measured_ids,
            "verification_costs": lambda: verification_costs,
        }
        context = {name: provided[name]() for name in drafter.cls.job_context}
        return lambda: drafter.build(target=self.target, vocab_ids=vocab_ids, **context)

    @functools.cached_property
    def measured_ids(self) -> tuple[str, ...]:
        """The ids of this domain's calibration and test examples, whatever this evaluator's split:
        what a job measures, so nothing a drafter learns before it is measured (a corpus, a warm
        table, a trained head: `ConfiguredDrafter.job_context`) comes from them."""
        return tuple(ex.id for split in ("calibration", "test") for ex in self.spec.domain.load(split))

    @functools.cached_property
    def pricer(self) -> Pricer:
        """Prices this job's measurements (never by a stored timing) with the pinned cost profile
        (`spec.cost_profile`) when there is one, else this machine's, and this spec's drafter: runners
        price what they measure with it, and the Study what the store serves."""
        profile = (profile_for(self.target.model) if self.spec.cost_profile is None
                   else pinned_profile(self.spec.cost_profile, self.target.model))
        return Pricer(profile, self.target.num_layers, lambda vocab_size: self.drafter_factory(vocab_size)())

    @property
    def calibration(self) -> Evaluator:
        """The Evaluator of this spec's calibration split (this one on that split)."""
        if self.spec.split == "calibration":
            return self
        if self._calibration is None:
            self._calibration = Evaluator(self.spec.with_split("calibration"))
        return self._calibration

    @functools.cached_property
    def vocabulary(self) -> DraftVocabulary:
        """The job's trimmed draft vocabulary, chosen on the calibration split whatever this split
        (`specsparse.measuring.vocabulary`)."""
        if self.spec.split != "calibration":
            return self.calibration.vocabulary
        return DraftVocabulary.of(self)


class Evaluators:
    """Evaluators by spec, each made once and kept by whoever measures (a job's Study, a Ray worker),
    so the model loads once and every greedy generation serves every later candidate; one of a
    split other than calibration shares the calibration split's Evaluator (its vocabulary)."""

    def __init__(self) -> None:
        self._made: dict[str, Evaluator] = {}

    def __call__(self, spec: EvaluationSpec) -> Evaluator:
        key = content_hash(asdict(spec))
        if key not in self._made:
            calibration = None if spec.split == "calibration" else self(spec.with_split("calibration"))
            self._made[key] = Evaluator(spec, calibration)
        return self._made[key]


def auto_batch_size(target: LoadedModel, generation: GenerationConfig, longest_prompt: int = 1024) -> int:
    """Rows per batched pass: 64, or fewer when a row's KV cache and logits would not fit in a quarter
    of the free accelerator (or host) memory. On CPU too, throughput grows with the batch up to 64 rows
    (BENCHMARKS.md, "Batched greedy generation"). `measure.batch_size` overrides it; results do not
    depend on it."""
    config = target.model.config
    kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    capacity = longest_prompt + generation.max_new_tokens + generation.num_draft_tokens + 1
    element = target.model.dtype.itemsize
    per_row = 2 * target.num_layers * kv_heads * head_dim * capacity * element
    per_row += (generation.num_draft_tokens + 1) * config.vocab_size * 4 * 3  # logits and their copies
    device = target.model.device
    if device.type == "cuda":
        free = torch.cuda.mem_get_info(device)[0]
    else:
        free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return max(1, min(64, int(free // 4 // per_row)))
