"""The vocabulary paper's comparison (PAPERS.md section 2) on a job's test split, after search=tpe_vocab.

Every row runs the real engine on the same test prompts, side by side in this process
(`time_side_by_side`, where the runner measures: `Study.call`), with the dense target verifying:

- plain: the target alone, no drafter;
- full: the drafter with its full vocabulary;
- fixed top-k: the full head drafting through the k most frequent corpus tokens at fixed shares of the
  vocabulary (FR-Spec's 8k/16k/32k/64k of Llama-3's 128k tokens: 1/16 to 1/2);
- pruned at k: the full head through TPE's k rows (pruning after training, what the paper improves on);
- trained at k: a head trained with TPE's vocabulary (`drafter.train`'s recipe with those ids as its
  `vocab_file`; trained once per recipe and vocabulary, reused by every later job): the paper's method.

Per row: k, C(k) on the corpus and on the target's own replies to the timed prompts, the FLOPs-modeled
R(k), accept length, draft ms per step, measured tokens/s and latency, speedups over full and over
plain (and the trained head's over the pruned one) with 95% paired-bootstrap intervals over prompts,
and how many replies equal plain decoding's. Besides: the stability of TPE's k over random halves of the corpus.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from specsparse.measuring.timing import time_side_by_side
from specsparse.measuring.vocab import coverage_curve, token_frequencies, top_k_ids
from specsparse.search.tpe_vocab import TPEVocabSearch
from specsparse.types import Component
from specsparse.util import atomic_write_text, content_hash

if TYPE_CHECKING:
    from specsparse.drafters.base import ConfiguredDrafter
    from specsparse.measuring.evaluation import Evaluator
    from specsparse.measuring.timing import SideBySide
    from specsparse.measuring.vocabulary import DraftVocabulary

FR_SPEC_FRACTIONS = (1 / 16, 1 / 8, 1 / 4, 1 / 2)  # FR-Spec's 8k, 16k, 32k and 64k of 128k tokens


@dataclass(frozen=True)
class VocabComparisonSpec:
    """The `vocab_comparison` config block."""

    fixed_fractions: tuple[float, ...] = FR_SPEC_FRACTIONS  # fixed top-k rows: these shares of the vocabulary
    train_at_k: bool = True  # train a head at TPE's vocabulary (drafter=eagle with drafter.train)
    subsamples: int = 10  # TPE rerun on this many random subsets of the corpus (0: no stability study)
    subsample_fraction: float = 0.5  # share of the corpus texts in each subset
    # The paper's ablation, TPE's k against the corpus's size: the same study at each of these shares of the
    # texts (1.0: the whole corpus, TPE's own spread over seeds); () leaves it out.
    corpus_fractions: tuple[float, ...] = ()

    @classmethod
    def option_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> VocabComparisonSpec:
        unknown = sorted(set(options) - set(cls.option_names()))
        if unknown:
            raise ValueError(f"unknown option(s) {unknown} (accepted: {', '.join(cls.option_names())})")
        values = dict(options)
        fractions = values.get("fixed_fractions", FR_SPEC_FRACTIONS)
        if not isinstance(fractions, Sequence) or not all(
                isinstance(f, (int, float)) and not isinstance(f, bool) and 0 < f < 1 for f in fractions):
            raise ValueError(f"fixed_fractions={fractions!r}: give shares of the vocabulary in (0, 1), e.g. [0.0625, 0.125]")
        values["fixed_fractions"] = tuple(float(f) for f in fractions)
        sizes = values.get("corpus_fractions", ())
        if not isinstance(sizes, Sequence) or not all(
                isinstance(f, (int, float)) and not isinstance(f, bool) and 0 < f <= 1 for f in sizes):
            raise ValueError(f"corpus_fractions={sizes!r}: give shares of the corpus in (0, 1], e.g. [0.25, 0.5, 1.0]")
        values["corpus_fractions"] = tuple(float(f) for f in sizes)
        spec = cls(**values)
        if not isinstance(spec.train_at_k, bool):
            raise ValueError(f"train_at_k={spec.train_at_k!r}: give true or false")
        if not isinstance(spec.subsamples, int) or isinstance(spec.subsamples, bool) or spec.subsamples < 0:
            raise ValueError(f"subsamples={spec.subsamples!r}: give a number of corpus subsets >= 0")
        fraction = spec.subsample_fraction
        if not isinstance(fraction, (int, float)) or not 0 < fraction < 1:
            raise ValueError(f"subsample_fraction={fraction!r}: give a share of the corpus in (0, 1)")
        return spec


def compare_vocabularies(
    test: Evaluator, strategy: TPEVocabSearch, options: VocabComparisonSpec, timing_prompts: int | None,
    progress: bool = True,
) -> tuple[dict[str, Any], SideBySide]:
    """The comparison on the `test` split, by its Evaluator (JSON-able: rows, the trained heads' training
    records, the stability of k), and the job's own side-by-side timing (plain, dense, selected) taken
    from the same runs. Vocabularies come from the calibration split (`test.calibration`)."""
    calibration = test.calibration
    vocabulary = calibration.vocabulary
    skip = strategy.baseline.skip_layers
    vocab_size = vocabulary.vocab_size
    chosen = strategy.optimise().chosen.k
    rows: list[tuple[str, str, int | None]] = [("plain", "plain", None), ("full", "full", None)]
    rows += [(f"fixed top-{k}", "fixed_top_k", k) for k in sorted({max(1, round(f * vocab_size))
                                                                     for f in options.fixed_fractions})]
    pruned = f"pruned at k={chosen}"  # what the search selected: the job's own "selected"
    rows.append((pruned, "pruned_at_k", chosen))
    factories: dict[str, Callable[[], ConfiguredDrafter | None]] = {
        label: (lambda: None) if method == "plain" else calibration.drafter_factory(k) for label, method, k in rows}
    heads = {"full": training_record(calibration.drafter_factory(None)())}
    if options.train_at_k:
        label = f"trained at k={chosen}"
        rows.append((label, "trained_at_k", chosen))
        factories[label], heads["trained_at_k"] = trained_at_k(calibration, vocabulary.ids(chosen))
    examples = test.examples[:timing_prompts] if timing_prompts else test.examples
    timing = time_side_by_side(test.target, test.domain, examples, [(label, () if method == "plain" else skip,
                                                                      factories[label]) for label, method, _ in rows],
                               test.spec.generation, progress=progress)
    generated = [token for reply in timing.outputs[0] for token in reply]  # the target's own replies
    table = []
    for index, (label, method, k) in enumerate(rows):
        ids = None if k is None else set(vocabulary.ids(k))
        table.append({
            "label": label, "method": method,
            "k": None if method == "plain" else vocab_size if ids is None else len(ids),
            "coverage_corpus": None if method == "plain" else 1.0 if k is None else strategy.coverage(k),
            "coverage_generations": None if method == "plain" else 1.0 if ids is None
            else sum(t in ids for t in generated) / max(len(generated), 1),
            "modeled_latency_reduction": None if method == "plain" else 0.0 if k is None else strategy.latency_reduction(k),
            "accept_length": timing.accept_lengths[index],
            "draft_ms_per_step": None if method == "plain" else timing.draft_ms_per_step[index],
            "measured_tokens_per_s": timing.tokens_per_s[index],
            "measured_latency_s": timing.latency_s[index],
            "measured_speedup_vs_full": timing.speedup(label, "full") if index > 1 else None,
            "measured_speedup_vs_plain": timing.speedup(label, "plain") if index > 0 else None,
            "measured_speedup_vs_pruned": timing.speedup(label, pruned) if method == "trained_at_k" else None,
            "same_as_plain": timing.same_as_first[index],
        })
    by_fraction = {f: k_stability(vocabulary, strategy, replace(options, subsample_fraction=f))  # each share once
                   for f in dict.fromkeys((options.subsample_fraction, *options.corpus_fractions))}
    comparison = {"rows": table, "prompts": timing.prompts, "chosen_k": chosen, "heads": heads,
                  "speedups": timing.speedups,  # every pair: "later row/earlier row" -> [point, low, high]
                  "stability": by_fraction[options.subsample_fraction],
                  "k_by_corpus_size": [by_fraction[f] for f in options.corpus_fractions] if options.subsamples else []}
    selected = strategy.select().selected
    job_timing = timing.subset({"plain": "plain", "dense": "full",
                                **({"selected": pruned} if selected != strategy.baseline else {})})
    return comparison, job_timing


def trained_at_k(calibration: Evaluator, ids: Sequence[int]) -> tuple[Callable[[], ConfiguredDrafter], dict | None]:
    """A factory of drafters from the head `drafter.train`'s recipe trains with exactly `ids` as its
    vocabulary (trained now when missing), and its training record. The ids file lives beside the
    heads, named by its content, so every job that picks the same ids shares one head."""
    drafter = calibration.spec.drafter  # the job's drafter=eagle, with its options
    options = dict(drafter.options)
    ids_file = Path(options["path"]) / "vocabularies" / f"{content_hash(sorted(ids))[:16]}.json"
    if not ids_file.is_file():
        ids_file.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(ids_file, json.dumps(sorted(int(i) for i in ids)))
    recipe = {**options, "train": {**options["train"], "vocab_file": str(ids_file)}}
    head = Component(drafter.class_path, recipe).build(target=calibration.target, exclude_ids=calibration.measured_ids)
    trained = head.recorded_options(recipe)
    return lambda: Component(drafter.class_path, trained).build(target=calibration.target), training_record(head)


def training_record(drafter: ConfiguredDrafter) -> dict | None:
    """A trained head's folder, size of vocabulary, training time, and per-epoch losses and held-out
    agreement (`training.json`); None for a drafter specsparse did not train."""
    path = getattr(drafter, "checkpoint", None)
    if path is None or not (path / "training.json").is_file():
        return None
    record = json.loads((path / "training.json").read_text())
    history = record.get("history") or []
    return {"path": str(path), "draft_vocab_size": record.get("draft_vocab_size"), "seconds": record.get("seconds"),
            "sequences": record.get("sequences"), "history": history,
            "held_out_agreement": history[-1]["held_out_agreement"] if history else None}


def k_stability(vocabulary: DraftVocabulary, strategy: TPEVocabSearch, options: VocabComparisonSpec) -> dict | None:
    """TPE's k on `subsamples` random subsets of the corpus texts: each k, their spread, and the
    Jaccard overlap of each subset's kept ids with the full corpus's."""
    if not options.subsamples:
        return None
    texts = vocabulary.token_ids
    vocab_size = strategy.vocab_size
    chosen = strategy.optimise().chosen.k
    kept = set(top_k_ids(vocabulary.token_counts, chosen, vocab_size).tolist())
    rng = np.random.default_rng(strategy.seed)
    size = max(1, round(options.subsample_fraction * len(texts)))
    ks, overlaps = [], []
    for draw in range(options.subsamples):
        counts = token_frequencies(texts[i] for i in rng.choice(len(texts), size=size, replace=False))
        search = TPEVocabSearch(vocab_size, coverage_curve(counts), strategy.latency_reduction, strategy.alpha,
                                strategy.min_coverage, strategy.n_trials, strategy.k_min, strategy.k_max,
                                strategy.seed + 1 + draw)
        k = search.optimise().chosen.k
        ids = set(top_k_ids(counts, k, vocab_size).tolist())
        ks.append(k)
        overlaps.append(len(ids & kept) / len(ids | kept))
    return {"subsamples": options.subsamples, "fraction": options.subsample_fraction, "texts": size, "k": ks,
            "k_mean": float(np.mean(ks)), "k_min": int(min(ks)), "k_max": int(max(ks)),
            "k_relative_spread": float((max(ks) - min(ks)) / chosen) if chosen else math.nan,
            "jaccard_mean": float(np.mean(overlaps)), "jaccard_min": float(min(overlaps))}
