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
from typing import Any

import torch

from specsparse.data import Domain, get_domain
from specsparse.data.corpus import builtin_responses, is_keyword, load_responses
from specsparse.decoding.drafter import Drafter
from specsparse.decoding.models import LoadedModel, load_model_cached
from specsparse.measuring.measure import Continuations, EarlyReject, measure_many
from specsparse.measuring.pricing import Pricer
from specsparse.measuring.profile import pinned_profile, profile_for
from specsparse.measuring.profile_fit import CostProfile
from specsparse.measuring.vocab import CoverageCurve, coverage_curve, head_latency_reduction, token_frequencies, top_k_ids
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
    def evaluate(self, candidate: Candidate, thresholds: tuple | None = None, progress: bool = True) -> Measurement:
        return self.evaluate_many([candidate], thresholds, progress)[0]

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
        return [self.price(c, m) for c, m in zip(candidates, measurements)]

    def drafter_factory(self, vocab_size: int | None) -> Callable[[], Drafter]:
        """Makes new drafters of this spec, with the vocabulary of `vocab_size` chosen on this split."""
        vocab_ids = None if vocab_size is None else self.vocab_ids(vocab_size)
        drafter = self.spec.drafter

        def verification_costs() -> tuple[float, ...]:  # the profile loads only when a drafter reads them
            return self.pricer.verification_costs()

        provided = {  # what a drafter may ask of the job (`Drafter.job_context`)
            "exclude_ids": lambda: self.measured_ids,
            "verification_costs": lambda: verification_costs,
        }
        context = {name: provided[name]() for name in drafter.cls.job_context}
        return lambda: drafter.build(target=self.target, vocab_ids=vocab_ids, **context)

    @functools.cached_property
    def measured_ids(self) -> tuple[str, ...]:
        """The ids of this domain's calibration and test examples, whatever this evaluator's split:
        what a job measures, so nothing a drafter learns before it is measured (a corpus, a warm
        table, a trained head: `Drafter.job_context`) comes from them."""
        return tuple(ex.id for split in ("calibration", "test") for ex in self.spec.domain.load(split))

    @functools.cached_property
    def test_ids(self) -> tuple[str, ...]:
        """The ids of this domain's test split (whatever this evaluator's split): kept out of `vocab_corpus`."""
        return tuple(ex.id for ex in self.spec.domain.load("test"))

    def price(self, candidate: Candidate, measurement: Measurement) -> Measurement:
        """`measurement` priced by this evaluator's `pricer` (never by a stored timing): runners price what
        they measure with it, and the driver what the store serves."""
        return self.pricer.price(candidate, measurement)

    @functools.cached_property
    def pricer(self) -> Pricer:
        """Prices this job's measurements with `profile` and this spec's drafter (one per evaluator)."""
        return Pricer(self.profile, self.target.num_layers, lambda vocab_size: self.drafter_factory(vocab_size)())

    @functools.cached_property
    def profile(self) -> CostProfile:
        """The pinned profile (`spec.cost_profile`) when there is one, else this machine's."""
        if self.spec.cost_profile is not None:
            return pinned_profile(self.spec.cost_profile, self.target.model)
        return profile_for(self.target.model)

    # -- vocabulary trimming -------------------------------------------------------------------
    @functools.cached_property
    def corpus_token_ids(self) -> list[list[int]]:
        """Token ids of each text of the `vocab_corpus` of assistant responses, built from the
        *calibration* split whatever this evaluator's split: the vocabulary is chosen there, and the
        test split measures exactly those ids. No text of the test split enters (`specsparse.data.corpus`)."""
        if self.spec.split != "calibration":
            return self.calibration.corpus_token_ids
        texts: list[str] = []
        for entry in self.spec.vocab_corpus:
            if entry == "dense_outputs":
                texts += [p.output_text for p in self.evaluate(Candidate(), progress=False).per_prompt]
            elif entry == "references":
                texts += [ref for ex in self.examples for ref in ex.references[:1]]
            elif entry == "drafter_responses":
                texts += load_responses(str(self.drafter_factory(None)().training_responses))
            elif is_keyword(entry):  # the built-in sets
                texts += builtin_responses(entry, exclude_ids=self.test_ids)
            else:
                texts += load_responses(entry)
        tokenizer = self.target.tokenizer
        return [tokenizer(text, add_special_tokens=False).input_ids for text in texts]

    @property
    def calibration(self) -> Evaluator:
        """The Evaluator of this spec's calibration split (this one on that split)."""
        if self.spec.split == "calibration":
            return self
        if self._calibration is None:
            self._calibration = Evaluator(self.spec.with_split("calibration"))
        return self._calibration

    @functools.cached_property
    def token_counts(self) -> dict[int, int]:
        """Token frequencies of the corpus (`corpus_token_ids`)."""
        return dict(token_frequencies(self.corpus_token_ids))

    def vocab_ids(self, k: int) -> list[int]:
        vocab_size = self.target.model.config.vocab_size
        if not 1 <= k <= vocab_size:
            raise ValueError(f"vocab_size {k} out of range 1..{vocab_size}")
        ids = top_k_ids(self.token_counts, k, vocab_size).tolist()
        # End-of-sequence tokens must stay draftable, or no draft could ever end a reply.
        return sorted(set(ids) | set(self.target.eos_token_ids))

    def vocab_objective(self) -> tuple[CoverageCurve, Callable[[int], float]]:
        """(coverage C(k), latency reduction R(k)) for TPE vocabulary search, from the drafter's FLOPs."""
        vocab_size, hidden, body_flops = self.drafter_factory(None)().head_shape()
        latency_reduction = functools.partial(head_latency_reduction, vocab_size=vocab_size, hidden_size=hidden,
                                              non_head_flops_per_token=body_flops)
        return coverage_curve(self.token_counts), latency_reduction

    # -- what a search strategy is built from ----------------------------------------------------
    def search_context(self, names: Sequence[str] = ()) -> dict[str, Any]:
        """The constructor arguments a search strategy takes from the model and data
        (`SearchStrategy.context_arguments`), as plain picklable values: the model's depth and vocabulary
        size always; C(k) and R(k) (which generate the dense replies of the corpus), and the drafter's
        share of a step by skip-set size, when `names` asks for them."""
        context: dict[str, Any] = {"num_layers": self.target.num_layers,
                                   "vocab_size": self.target.model.config.vocab_size}
        if {"coverage", "latency_reduction"} & set(names):
            context["coverage"], context["latency_reduction"] = self.vocab_objective()
        if "draft_share" in names:
            draft_tokens = self.spec.generation.num_draft_tokens
            context["draft_share"] = DraftShares(tuple(self.pricer.draft_share(range(skipped), draft_tokens)
                                                       for skipped in range(self.target.num_layers)))
        return context


@dataclass(frozen=True)
class DraftShares:
    """The drafter's modeled share of a speculative step (`Pricer.draft_share`) by the number of layers
    skipped, which is all it depends on; called with a skip set."""

    by_layers_skipped: tuple[float, ...]

    def __call__(self, skip_layers: Sequence[int]) -> float:
        return self.by_layers_skipped[len(skip_layers)]


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
