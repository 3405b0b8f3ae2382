"""The vocabulary paper as one job: a head trained on its corpus, TPE's k, a head trained at k, and
every head timed side by side against plain decoding on the test split (lossless, in and out of
domain), the stability of k, and the side-by-side timing statistics it rests on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specsparse.measuring.timing import time_runners
from specsparse.measuring.vocab import coverage_curve, token_frequencies
from specsparse.measuring.vocabulary import DraftVocabulary
from specsparse.reporting.report import build_report, find_jobs
from specsparse.search.tpe_vocab import TPEVocabSearch
from specsparse.study.vocab_comparison import VocabComparisonSpec, k_stability
from specsparse.types import GenerationResult

ROOT = Path(__file__).resolve().parents[2]


@given(steps=st.lists(st.lists(st.integers(1, 5), min_size=1, max_size=6), min_size=2, max_size=5),
       draft_ms=st.floats(0.1, 5.0))
@settings(max_examples=30, deadline=None)
def test_side_by_side_statistics_pool_every_step(steps, draft_ms):
    """Accept length = tokens committed / verification steps over all prompts; draft ms per step and
    latency from the engine's own timings; replies compared with the first configuration's."""
    def runner(shift: int):
        def run(example: int) -> GenerationResult:
            accepted = tuple(steps[example])
            return GenerationResult(new_token_ids=tuple(range(shift, shift + sum(accepted))), accept_lengths=accepted,
                                    draft_time_s=draft_ms / 1000 * len(accepted), wall_time_s=0.01 * (example + 1))
        return run

    timing = time_runners(list(range(len(steps))), [("a", runner(0)), ("b", runner(0)), ("c", runner(1))],
                          progress=False)
    pooled = sum(map(sum, steps)) / sum(map(len, steps))
    assert timing.accept_lengths == pytest.approx((pooled,) * 3)
    assert timing.draft_ms_per_step == pytest.approx((draft_ms,) * 3)
    assert timing.same_as_first == (len(steps), len(steps), 0)
    point, low, high = timing.latency_s[0]
    assert point == pytest.approx(0.01 * (len(steps) + 1) / 2) and low <= point <= high


def test_k_is_stable_on_a_corpus_whose_halves_are_alike():
    """Every text the same: each half of the corpus has the corpus's frequencies, so TPE (given
    trials enough to try every k) picks the same k and the same ids on every half."""
    texts = [[1, 1, 1, 2, 2, 3, 4, 5, 6, 7, 8, 9]] * 20
    counts = dict(token_frequencies(texts))
    latency = lambda k: 1 - k / 12  # noqa: E731
    strategy = TPEVocabSearch(12, coverage_curve(counts), latency, alpha=0.7, min_coverage=0.5, n_trials=120)
    vocabulary = DraftVocabulary(tuple(map(tuple, texts)), vocab_size=strategy.vocab_size)
    stability = k_stability(vocabulary, strategy, VocabComparisonSpec(subsamples=4))
    chosen = strategy.optimise().chosen.k
    assert stability["k"] == [chosen] * 4 and stability["jaccard_min"] == 1.0 and stability["k_relative_spread"] == 0


def test_a_corpus_of_different_halves_moves_k():
    """Half the texts use 3 tokens, half 12: subsets that draw more of the wide half need a larger k
    for the same coverage, so k spreads."""
    texts = [[0, 1, 2] * 4] * 10 + [list(range(12))] * 10
    counts = dict(token_frequencies(texts))
    latency = lambda k: 1 - k / 12  # noqa: E731
    strategy = TPEVocabSearch(12, coverage_curve(counts), latency, alpha=0.3, min_coverage=0.9, n_trials=120)
    vocabulary = DraftVocabulary(tuple(map(tuple, texts)), vocab_size=strategy.vocab_size)
    stability = k_stability(vocabulary, strategy, VocabComparisonSpec(subsamples=8, subsample_fraction=0.2))
    assert stability["k_max"] > stability["k_min"] and stability["jaccard_min"] < 1


def test_k_grows_with_the_corpus_where_rare_tokens_decide_coverage():
    """Every text holds the same 3 common tokens and 3 of its own: a larger share of the corpus has more
    distinct tokens, so the k that reaches the same coverage grows with it (the paper's ablation)."""
    texts = [[0, 1, 2] * 2 + [3 + 3 * i, 4 + 3 * i, 5 + 3 * i] for i in range(40)]
    counts = dict(token_frequencies(texts))
    latency = lambda k: 1 - k / 123  # noqa: E731
    strategy = TPEVocabSearch(123, coverage_curve(counts), latency, alpha=0.3, min_coverage=0.95, n_trials=150)
    vocabulary = DraftVocabulary(tuple(map(tuple, texts)), vocab_size=strategy.vocab_size)
    options = VocabComparisonSpec(subsamples=3)
    by_size = [k_stability(vocabulary, strategy, replace(options, subsample_fraction=f)) for f in (0.25, 0.5, 1.0)]
    means = [size["k_mean"] for size in by_size]
    assert means[0] < means[1] < means[2] and [size["texts"] for size in by_size] == [10, 20, 40]
    with pytest.raises(ValueError, match="corpus_fractions"):
        VocabComparisonSpec.from_options({"corpus_fractions": [0, 0.5]})


def run_job(tmp_path: Path, domain: str, heads: Path) -> dict:
    job = tmp_path / f"job_{domain}"
    subprocess.run(
        [sys.executable, str(ROOT / "run.py"), "model=tiny", "logger=none", f"domain={domain}", "search=tpe_vocab",
         "drafter=eagle", f"drafter.path={heads}",
         "drafter.train={prompts: builtin, domains: [qa], prompts_per_set: 10, max_new_tokens: 8, epochs: 1}",
         "vocab_corpus=[drafter_responses]", "vocab_comparison={subsamples: 3, corpus_fractions: [0.5, 1.0]}", "domain.limit=8",
         "generation.max_new_tokens=8", "search.n_trials=8", "timing_prompts=3", "progress=false",
         f"paths.outputs={tmp_path}", f"hydra.run.dir={job}"],
        cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "1", "SPECSPARSE_CACHE": str(tmp_path / "cache")},
        check=True, capture_output=True, timeout=300,
    )
    return json.loads((job / "summary.json").read_text())


def test_the_vocabulary_paper_runs_as_one_job_and_an_in_domain_job_trains_without_its_prompts(tmp_path):
    heads = tmp_path / "heads"
    math = run_job(tmp_path, "math", heads)
    comparison = math["vocab_comparison"]
    methods = [row["method"] for row in comparison["rows"]]
    assert methods == ["plain", "full", *["fixed_top_k"] * 4, "pruned_at_k", "trained_at_k"]
    assert all(row["same_as_plain"] == comparison["prompts"] == 3 for row in comparison["rows"])  # lossless
    pruned, trained = comparison["rows"][-2:]
    k = comparison["chosen_k"]
    assert math["selected_vocab_size"] == k and pruned["k"] == trained["k"] >= k  # end-of-sequence ids stay
    assert comparison["heads"]["trained_at_k"]["draft_vocab_size"] == trained["k"]
    assert comparison["heads"]["full"]["held_out_agreement"] is not None
    assert [size["fraction"] for size in comparison["k_by_corpus_size"]] == [0.5, 1.0]  # the ablation's rows
    assert 0 <= trained["coverage_generations"] <= 1 and trained["coverage_corpus"] == pytest.approx(
        next(c for kk, c, _ in math["info"]["curve"] if kk == k))
    assert pruned["measured_speedup_vs_full"][1] <= pruned["measured_speedup_vs_full"][0] <= pruned["measured_speedup_vs_full"][2]
    assert pruned["measured_speedup_vs_pruned"] is None  # only the trained head is compared with the pruned one
    assert trained["measured_speedup_vs_pruned"] == comparison["speedups"][f"{trained['label']}/{pruned['label']}"]
    assert trained["measured_speedup_vs_pruned"][1] <= trained["measured_speedup_vs_pruned"][0] <= trained["measured_speedup_vs_pruned"][2]
    assert math["vocab_corpus"]["in_domain"] is False  # the head trained on qa only
    assert (tmp_path / "job_math" / "vocab_comparison.md").is_file()
    timing = math["measured_timing_test"]  # the job's own timing is the comparison's runs, not a second timing
    by_label = {row["label"]: row["measured_tokens_per_s"] for row in comparison["rows"]}
    assert timing["tokens_per_s"][:2] == [by_label["plain"], by_label["full"]]

    trained_heads = sorted(p.parent.name for p in heads.glob("*/config.json"))
    # The config map records the trained head, not the recipe: serving loads it and never trains.
    served = json.loads((tmp_path / "job_math" / "config_map.json").read_text())["drafter"]["options"]
    assert "train" not in served and Path(served["path"]).parent == heads and Path(served["path"]).name in trained_heads
    assert len(trained_heads) == 2 and len(list((heads / "data").glob("*.json"))) == 1  # one set of replies
    # qa's own job: its heads (full and at k) train on qa examples other than the 8 it measures.
    qa = run_job(tmp_path, "qa", heads)
    assert qa["vocab_corpus"]["in_domain"] is True
    qa_heads = sorted(p.parent for p in heads.glob("*/config.json") if p.parent.name not in trained_heads)
    measured = {f"qa-{i:03d}" for i in range(1, 9)}
    for head in qa_heads:
        trained = json.loads((head / "training.json").read_text())["trained_ids"]
        assert trained == [f"qa-{i:03d}" for i in range(9, 19)] and not measured & set(trained)
    assert len(qa_heads) == 2 and len(list((heads / "data").glob("*.json"))) == 2

    written = build_report(find_jobs([tmp_path / "job_math", tmp_path / "job_qa"]), tmp_path / "report", plots=False)
    inside = pd.read_csv(written["table_vocab_in_domain"][2])
    outside = pd.read_csv(written["table_vocab_out_of_domain"][2])
    assert set(inside["domain"]) == {"qa"} and set(outside["domain"]) == {"math"} and len(outside) == 8
    assert "trained at k=" in (tmp_path / "report" / "report.md").read_text()
