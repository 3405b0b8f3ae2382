"""An evaluation is a pure function of (model, drafter, domain split, candidate, generation settings).

`EvaluationSpec` holds all of it as plain data (picklable, hashable into a store key); `Evaluator`
turns it into objects once (model loaded once per process and kept, so Ray workers do not reload)
and measures candidates. The local and the Ray runner both call `Evaluator.evaluate`.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import logging
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from specsparse import __version__
from specsparse.data import Example, get_domain, load_examples, split_examples
from specsparse.drafters.base import Drafter
from specsparse.measure import EarlyReject, measure
from specsparse.models import LoadedModel, load_model_cached
from specsparse.search.vocab import coverage_curve, head_latency_reduction, token_frequencies, top_k_ids
from specsparse.store import content_hash
from specsparse.types import Candidate, GenerationConfig, Measurement

log = logging.getLogger(__name__)

SPLITS = ("calibration", "test", "all")  # "all": every example, unsplit (baselines, reports)


@dataclass(frozen=True)
class DomainSpec:
    """Where a domain's examples come from and how they are split."""

    name: str
    source: str = "builtin"
    path: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    limit: int | None = None
    calibration_fraction: float = 0.2
    split_seed: int = 0
    exclude_ids: tuple[str, ...] = ()

    def load(self, split: str) -> list[Example]:
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}: use one of {SPLITS}")
        examples = load_examples(self.name, self.source, self.path, limit=self.limit, **self.options)
        if split == "all":
            return [ex for ex in examples if ex.id not in set(self.exclude_ids)]
        calibration, test = split_examples(examples, self.calibration_fraction, self.split_seed, self.exclude_ids)
        return calibration if split == "calibration" else test


@dataclass(frozen=True)
class DrafterSpec:
    """A drafter class by public dotpath (what Hydra's `_target_` names) and its options."""

    target: str = "specsparse.drafters.samd.SuffixAutomatonDrafter"
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return getattr(locate(self.target), "name", self.target.rsplit(".", 1)[-1])

    def build(self, target: LoadedModel, vocab_ids: list[int] | None = None) -> Drafter:
        return locate(self.target).from_target(target, vocab_ids=vocab_ids, **self.options)


@dataclass(frozen=True)
class EvaluationSpec:
    model: str = "smollm2-135m"
    dtype: str = "float32"
    device: str = "cpu"
    drafter: DrafterSpec = DrafterSpec()
    domain: DomainSpec = DomainSpec("translation")
    split: str = "calibration"
    generation: GenerationConfig = GenerationConfig()

    def with_split(self, split: str) -> EvaluationSpec:
        return replace(self, split=split)


def locate(dotpath: str) -> Any:
    """The object at a public dotpath such as `specsparse.drafters.pld.PromptLookupDrafter`."""
    module_name, _, attribute = dotpath.rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError, ValueError) as err:
        raise ValueError(f"cannot import {dotpath!r} ({err}): check the `_target_` in the config") from None


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """Hash of the sources that can change a measurement (engine, drafters, data, metrics, ...)."""
    root = Path(__file__).resolve().parent
    digest = hashlib.sha256(__version__.encode())
    parts = ["engine.py", "skipping.py", "measure.py", "generation.py", "models.py", "drafters", "data", "metrics"]
    for part in parts:
        path = root / part
        for file in sorted(path.rglob("*") if path.is_dir() else [path]):
            if file.suffix in (".py", ".jsonl"):
                digest.update(file.relative_to(root).as_posix().encode())
                digest.update(file.read_bytes())
    return digest.hexdigest()[:16]


class Evaluator:
    """Measures candidates for one EvaluationSpec."""

    def __init__(self, spec: EvaluationSpec):
        self.spec = spec
        self.target = load_model_cached(spec.model, spec.dtype, spec.device)
        self.domain = get_domain(spec.domain.name)
        self.examples = spec.domain.load(spec.split)
        if not self.examples:
            raise ValueError(f"domain {spec.domain.name!r} has no {spec.split} examples: add examples or change the split")
        self._ranking: list[int] | None = None

    # -- identity ------------------------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        """Everything that affects a measurement, as JSON-able data (the store meta and key base)."""
        spec = asdict(self.spec)
        spec["model_identity"] = self.target.identity
        spec["example_ids"] = [ex.id for ex in self.examples]
        spec["code_version"] = code_version()
        return spec

    @functools.cached_property
    def _description_hash(self) -> str:
        return content_hash(self.describe())

    def key(self, candidate: Candidate, thresholds: tuple | None = None) -> str:
        return content_hash({"spec": self._description_hash, "candidate": candidate, "early_reject": thresholds})

    # -- measuring -----------------------------------------------------------------------------
    def evaluate(self, candidate: Candidate, thresholds: tuple | None = None, progress: bool = True) -> Measurement:
        vocab_ids = None if candidate.vocab_size is None else self.vocab_ids(candidate.vocab_size)
        drafter = self.spec.drafter.build(self.target, vocab_ids)
        early = None if thresholds is None else EarlyReject(*thresholds)
        return measure(
            self.target, self.domain, self.examples, drafter, candidate.skip_layers, self.spec.generation,
            early_reject=early, progress=progress,
            description=f"{self.domain.name} {candidate.label}",
        )

    # -- vocabulary trimming -------------------------------------------------------------------
    @functools.cached_property
    def token_counts(self) -> dict[int, int]:
        """Token frequencies of the assistant side of this split: references, or, for a domain without
        references, the dense target's own outputs."""
        texts = [ref for ex in self.examples for ref in ex.references[:1]]
        if not texts:
            dense = self.evaluate(Candidate(), progress=False)
            texts = [p.output_text for p in dense.per_prompt]
        tokenizer = self.target.tokenizer
        return dict(token_frequencies(tokenizer(text, add_special_tokens=False).input_ids for text in texts))

    def vocab_ids(self, k: int) -> list[int]:
        vocab_size = self.target.model.config.vocab_size
        if not 1 <= k <= vocab_size:
            raise ValueError(f"vocab_size {k} out of range 1..{vocab_size}")
        ids = top_k_ids(self.token_counts, k, vocab_size).tolist()
        # End-of-sequence tokens must stay draftable, or no draft could ever end a reply.
        return sorted(set(ids) | set(self.target.eos_token_ids))

    def vocab_objective(self) -> tuple[Any, Any]:
        """(coverage C(k), latency reduction R(k)) for TPE vocabulary search, from the drafter's FLOPs."""
        drafter = self.spec.drafter.build(self.target, None)
        model = getattr(drafter, "model", None)
        if model is None:
            raise ValueError(f"drafter {drafter.name!r} has no LM head: vocabulary search needs self_skip or draft_model")
        skipped = set(getattr(drafter, "skip_layers", ()))
        from specsparse.skipping import decoder_layers  # noqa: PLC0415

        layer_params = sum(
            p.numel() for i, layer in enumerate(decoder_layers(model)) if i not in skipped for p in layer.parameters()
        )
        vocab_size, hidden = model.get_output_embeddings().weight.shape
        coverage = coverage_curve(self.token_counts)

        def latency_reduction(k: int) -> float:
            return head_latency_reduction(k, vocab_size, hidden, 2.0 * layer_params)

        return coverage, latency_reduction
