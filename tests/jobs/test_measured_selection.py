"""tss.select=measured, the TSS paper's final pick: the (A, M) front's cheapest modeled candidates and
dense timed side by side on calibration prompts, the lowest measured time per token kept; the calibration
timing a sweeper's objective reads; and a timing's terms beside the cost model's price of the timed steps."""

from __future__ import annotations

import json

import pytest

from specsparse.data import get_domain
from specsparse.jobs.config import JobPlan
from specsparse.jobs.job import labelled, pick_by_timing, run_job
from specsparse.jobs.objectives import objective_value
from specsparse.measuring.evaluation import EvaluationSpec, Evaluator
from specsparse.measuring.timing import SideBySide, time_side_by_side
from specsparse.search.base import SearchResult
from specsparse.search.rule import TSSRule
from specsparse.study.runners.local import LocalRunner
from specsparse.study.store import ResultsStore
from specsparse.study.study import time_with_plain
from specsparse.types import Candidate, Component, GenerationConfig, Measurement

DENSE, A, B, C = Candidate(()), Candidate((1,)), Candidate((2,)), Candidate((1, 2))


def measurement(tokens_per_s: float) -> Measurement:
    return Measurement(accept_length=2.0, metric=0.5, modeled_cost=1 / tokens_per_s, flops_fraction=1.0,
                       modeled_tokens_per_s=tokens_per_s, new_tokens=10, target_forwards=5, wall_time_s=0.0)


def front_result() -> SearchResult:
    """A modeled pick A (cheapest modeled), then alternatives B and C."""
    m = {DENSE: measurement(10.0), A: measurement(14.0), B: measurement(13.0), C: measurement(12.0)}
    return SearchResult("bfs", DENSE, m[DENSE], A, m[A], ((B, m[B]), (C, m[C])), tuple(m.items()))


def timed(rates: dict[Candidate, float]) -> SideBySide:
    """A calibration timing as the job takes it: plain decoding first, then the candidates."""
    labels = ("plain", *(c.label for c in rates))
    values = [9.0, *rates.values()]
    speedups = {f"{labels[j]}/{labels[i]}": [values[j] / values[i]] * 3 for i in range(len(labels)) for j in range(i + 1, len(labels))}
    return SideBySide(labels, tuple(values), speedups, prompts=16)


@pytest.mark.parametrize("fastest", [A, B, C, DENSE])
def test_the_measured_fastest_of_the_front_is_picked(fastest):
    rates = {DENSE: 10.0, A: 11.0, B: 11.5, C: 10.5}
    rates[fastest] = 20.0
    result = pick_by_timing(front_result(), timed(rates))
    assert result.selected == fastest and result.selected_measurement == dict(front_result().history)[fastest]
    assert fastest not in [c for c, _ in result.alternatives] and DENSE not in [c for c, _ in result.alternatives]
    rows = {r["configuration"]: r for r in result.info["measured_selection"]}
    assert set(rows) == {"dense", A.label, B.label, C.label} and result.info["modeled_pick"] == A.label
    assert rows[A.label]["modeled_speedup_vs_dense"] == pytest.approx(1.4)  # modeled and measured side by side
    assert rows[fastest.label]["measured_tokens_per_s"] == 20.0
    assert any("select=measured" in n for n in result.notes)
    assert any("dense target is kept" in n for n in result.notes) == (fastest == DENSE)


def test_a_job_with_select_measured_times_its_front_on_calibration_prompts(tmp_path):
    spec = EvaluationSpec(model="tiny", drafter=Component("specsparse.drafters.pld.PromptLookupDrafter"),
                          domain=get_domain("translation", limit=15),
                          generation=GenerationConfig(max_new_tokens=12, num_draft_tokens=3))
    rule = TSSRule(max_depth=2, max_pool=3, feasibility="point", guard="task", eps_accept=0.5, eps_metric=0.9,
                   select="measured", measured_candidates=2, measured_prompts=2)
    search = Component("specsparse.search.bfs.BFSSearch", {"rule": rule})
    job = run_job(spec, search, LocalRunner(progress=False), ResultsStore(tmp_path / "store.sqlite"), tmp_path / "job",
                  timing_prompts=2, progress=False)
    result = job.search_result
    rows = result.info["measured_selection"]  # loose tolerances: the front holds a skip set to time
    assert rows[0]["configuration"] == "dense" and 2 <= len(rows) <= 3
    fastest = max(rows, key=lambda r: r["measured_tokens_per_s"])["configuration"]
    assert result.selected.label == fastest
    summary = json.loads((tmp_path / "job" / "summary.json").read_text())
    assert summary["info"]["measured_selection"] == rows
    timing = summary["measured_timing_calibration"]  # the same timing, plain decoding beside it
    assert timing["labels"][:2] == ["plain", "dense"] and timing["prompts"] == 2
    assert summary["measured_speedup_calibration_vs_plain"] == timing["speedups"][f"{fastest}/plain"] or fastest == "dense"


def test_untimed_front_members_stay_alternatives_after_the_timed_ones():
    result = pick_by_timing(front_result(), timed({DENSE: 10.0, A: 11.0, B: 12.0}))  # C was beyond the candidates
    assert result.selected == B and [c for c, _ in result.alternatives] == [A, C]


def test_a_sweepers_objective_is_timed_on_calibration_prompts_only(tmp_path, monkeypatch):
    """objective_timing times plain, dense and the pick on the calibration split: no test prompt enters the
    figure a sweep chooses by (the test split is timed afterwards, for the held-out verdict only)."""
    import specsparse.study.study as study_module

    timed_ids = []

    def spy(target, domain, examples, *args, **kwargs):
        timed_ids.append({ex.id for ex in examples})
        return time_side_by_side(target, domain, examples, *args, **kwargs)

    monkeypatch.setattr(study_module, "time_side_by_side", spy)
    spec = EvaluationSpec(model="tiny", drafter=Component("specsparse.drafters.pld.PromptLookupDrafter"),
                          domain=get_domain("qa", limit=10), generation=GenerationConfig(max_new_tokens=8, num_draft_tokens=3))
    search = Component("specsparse.search.bfs.BFSSearch", {"rule": TSSRule(max_depth=1, max_pool=2)})
    job = run_job(spec, search, LocalRunner(progress=False), ResultsStore(tmp_path / "store.sqlite"), tmp_path / "job",
                  timing_prompts=3, progress=False, objective_timing=(None, 1))
    calibration, test = ({ex.id for ex in spec.domain.load(split)} for split in ("calibration", "test"))
    objective_ids, test_ids = timed_ids
    assert objective_ids == calibration and not objective_ids & test and test_ids <= test
    summary = json.loads((tmp_path / "job" / "summary.json").read_text())
    pick = job.search_result.selected.label
    assert summary["measured_timing_calibration"]["labels"] == ["plain", *dict.fromkeys(["dense", pick])]
    point, low, high = summary["measured_speedup_calibration_vs_plain"]
    assert (summary["measured_speedup_calibration_vs_plain_low"], summary["measured_speedup_calibration_vs_plain_high"]) == (low, high)
    assert objective_value(JobPlan.objective, summary) == point
    assert (tmp_path / "job" / "speedup.png").is_file() and (tmp_path / "job" / "pareto.png").is_file()


def test_a_timing_splits_each_configurations_time_into_terms_beside_the_models_price(tmp_path):
    """Measured terms add up to the measured time per token; plain decoding verifies one token per step and
    drafts nothing, so the model prices it at one one-token forward per token plus its prompts' prefill."""
    spec = EvaluationSpec(model="tiny", drafter=Component("specsparse.drafters.pld.PromptLookupDrafter"),
                          domain=get_domain("qa", limit=10), generation=GenerationConfig(max_new_tokens=8, num_draft_tokens=3))
    evaluator = Evaluator(spec)
    timing = time_with_plain(evaluator, labelled([Candidate(), Candidate((1,))]), prompts=2, progress=False)
    assert timing.labels == ("plain", "dense", "skip[1]") and len(timing.terms) == 3
    for terms in timing.terms:
        parts = sum(terms[f"{t}_ms_per_token"] for t in ("prefill", "verify", "draft", "other"))
        assert parts == pytest.approx(terms["ms_per_token"])
        assert terms["verified_tokens"] == sum((i + 1) * n for i, n in enumerate(terms["chunk_counts"]))
        assert terms["modeled_ms_per_token"] == pytest.approx(
            sum(terms[f"modeled_{t}_ms_per_token"] for t in ("prefill", "verify", "draft")))
        assert terms["prefills"] == 2 and terms["prefill_tokens"] > 2 * 10  # two chat prompts, each past its template
    plain, profile, layers = timing.terms[0], evaluator.pricer.profile, evaluator.target.num_layers
    assert plain["steps"] == plain["tokens"] == plain["verified_tokens"] and plain["modeled_draft_ms_per_token"] == pytest.approx(0)
    prefill = profile.prefill_time(layers, plain["prefills"], plain["prefill_tokens"]) / plain["tokens"]
    assert plain["modeled_ms_per_token"] == pytest.approx(1000 * (profile.verify_time(layers, 1) + prefill))
