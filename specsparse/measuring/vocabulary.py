"""A job's trimmed draft vocabulary: one object from the corpus to the kept ids.

    vocabulary = DraftVocabulary.of(calibration)     # the calibration split's Evaluator: built once
    vocabulary.ids(k)                                # the k most frequent ids (and end-of-sequence)
    coverage, latency_reduction = vocabulary.objective()   # C(k) and R(k) for search=tpe_vocab
    vocabulary.provenance                            # the corpus's entries and domains, in / out of domain

The corpus (the job's `vocab_corpus`, `specsparse.data.corpus`) is counted on the calibration split,
whatever split measures: every split's Evaluator shares the calibration split's vocabulary, so the test
split measures exactly the ids chosen there, and no text of the test split enters the corpus. A change
to how a vocabulary is chosen, counted or described touches this file alone.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from specsparse.data.corpus import builtin_responses, corpus_domains, is_keyword, load_responses
from specsparse.measuring.vocab import CoverageCurve, coverage_curve, head_latency_reduction, token_frequencies, top_k_ids
from specsparse.types import Candidate

if TYPE_CHECKING:
    from specsparse.data import Domain, Example
    from specsparse.decoding.drafter import Drafter
    from specsparse.decoding.models import LoadedModel
    from specsparse.types import Measurement


class CalibrationSplit(Protocol):
    """What a vocabulary reads of the calibration split's Evaluator."""

    spec: Any  # its EvaluationSpec: vocab_corpus and the drafter's options
    target: LoadedModel
    domain: Domain
    examples: list[Example]
    measured_ids: tuple[str, ...]

    def drafter_factory(self, vocab_size: int | None) -> Callable[[], Drafter]: ...

    def evaluate_many(self, candidates: Sequence[Candidate], thresholds: tuple | None = None,
                      progress: bool = True) -> list[Measurement]: ...


@dataclass(frozen=True)
class DraftVocabulary:
    """The corpus's token ids and what is chosen from them (plain data: it travels from a Ray worker).

    token_ids: the ids of each corpus text. vocab_size: the target's vocabulary. always_kept: ids every
    trimmed head keeps (end of sequence: a draft must be able to end a reply). head_shape: the drafter's
    (full vocabulary, hidden size, FLOPs per drafted token outside the head), None for a drafter
    without an LM head. provenance: {"entries", "domains", "in_domain"} of the corpus."""

    token_ids: tuple[tuple[int, ...], ...]
    vocab_size: int
    always_kept: tuple[int, ...] = ()
    head_shape: tuple[int, int, float] | None = None
    provenance: dict[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def of(cls, calibration: CalibrationSplit) -> DraftVocabulary:
        """The vocabulary of `calibration`'s job (its spec's `vocab_corpus`, counted on its split)."""
        entries = calibration.spec.vocab_corpus
        drafter = calibration.drafter_factory(None)()
        texts: list[str] = []
        for entry in entries:
            if entry == "dense_outputs":
                texts += [p.output_text for p in calibration.evaluate_many([Candidate()], progress=False)[0].per_prompt]
            elif entry == "references":
                texts += [ref for ex in calibration.examples for ref in ex.references[:1]]
            elif entry == "drafter_responses":
                texts += load_responses(str(drafter.training_responses))
            elif is_keyword(entry):  # the built-in sets, without the job's test examples
                texts += builtin_responses(entry, exclude_ids=[ex.id for ex in calibration.domain.load("test")])
            else:
                texts += load_responses(entry)
        tokenizer = calibration.target.tokenizer
        return cls(
            token_ids=tuple(tuple(tokenizer(text, add_special_tokens=False).input_ids) for text in texts),
            vocab_size=calibration.target.model.config.vocab_size,
            always_kept=tuple(calibration.target.eos_token_ids),
            head_shape=drafter.head_shape() if type(drafter).trims_vocabulary else None,
            provenance=corpus_provenance(entries, calibration.domain.name, calibration.spec.drafter.options,
                                         calibration.measured_ids))

    @functools.cached_property
    def token_counts(self) -> dict[int, int]:
        """How often each id occurs in the corpus."""
        return dict(token_frequencies(self.token_ids))

    def ids(self, k: int) -> list[int]:
        """The ids a head of `k` rows keeps: the k most frequent (`top_k_ids`), and `always_kept`."""
        if not 1 <= k <= self.vocab_size:
            raise ValueError(f"vocab_size {k} out of range 1..{self.vocab_size}")
        return sorted(set(top_k_ids(self.token_counts, k, self.vocab_size).tolist()) | set(self.always_kept))

    def objective(self) -> tuple[CoverageCurve, Callable[[int], float]]:
        """(coverage C(k), latency reduction R(k)) for the vocabulary search, R from the drafter's FLOPs."""
        if self.head_shape is None:
            raise ValueError("the drafter has no LM head: vocabulary search needs self_skip, draft_model or eagle")
        vocab_size, hidden, body_flops = self.head_shape
        latency_reduction = functools.partial(head_latency_reduction, vocab_size=vocab_size, hidden_size=hidden,
                                              non_head_flops_per_token=body_flops)
        return coverage_curve(self.token_counts), latency_reduction


def corpus_provenance(entries: Sequence[str], domain: str, drafter_options: dict[str, Any],
                      measured_ids: Sequence[str]) -> dict[str, Any]:
    """The corpus's entries, the domains its texts answer, and whether the job's `domain` is among them
    (in domain) or not (out of domain); domains None where a file or dataset makes them unknown. A head
    the job trains (`drafter.train`) answers the built-in sets its recipe keeps once the prompts the job
    measures are held out."""
    drafter_domains = None
    if drafter_options.get("train"):
        from specsparse.drafters.eagle.recipe import recipe_from_options, training_domains  # noqa: PLC0415

        drafter_domains = training_domains(recipe_from_options(drafter_options["train"]).holding_out(measured_ids))
    domains = corpus_domains(entries, domain, drafter_domains)
    return {"entries": list(entries), "domains": None if domains is None else sorted(domains),
            "in_domain": None if domains is None else domain in domains}
