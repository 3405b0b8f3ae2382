"""The cost profile: its model, its storage, and that no stored timing ever decides a selection."""

import json
import sqlite3
from dataclasses import replace

import pytest

from specsparse.jobs.job import run_job
from specsparse.jobs.runners.local import LocalRunner
from specsparse.jobs.store import ResultsStore
from specsparse.measuring.evaluation import DomainSpec, EvaluationSpec
from specsparse.measuring.profile import CHUNKS, CostProfile, DraftCost, measure_profile, price, profile_for, profile_path
from specsparse.types import Component, GenerationConfig, Measurement

PROFILE = CostProfile(identity={"test": 1}, num_layers=10, vocab_size=100, single=(0.004, 0.001),
                      verify=(0.010, 0.002, 0.001, 0.0005), head_per_row=1e-6)


def counts(tokens, chunk_counts):
    steps = sum(chunk_counts)
    verified = sum((i + 1) * n for i, n in enumerate(chunk_counts))
    return Measurement(accept_length=tokens / steps, metric=None, cost=0.0, flops_fraction=1.0, tokens_per_s=0.0,
                       new_tokens=tokens, target_forwards=steps, wall_time_s=0.0, verified_tokens=verified,
                       chunk_counts=tuple(chunk_counts))


def test_price_follows_the_documented_model():
    m = counts(tokens=60, chunk_counts=(5, 0, 0, 0, 15))  # 5 one-token steps, 15 steps of 5 tokens
    priced = price(m, PROFILE, kept_layers=8, cost=DraftCost(per_step=0.001, per_token=0.0001))
    verify = 5 * (0.004 + 0.001 * 8) + 15 * (0.010 + 0.002 * 8 + 5 * (0.001 + 0.0005 * 8))
    draft = 20 * 0.001 + (80 - 20) * 0.0001
    assert priced.cost == pytest.approx((verify + draft) / 60)
    assert priced.tokens_per_s == pytest.approx(60 / (verify + draft))


def test_accept_length_and_depth_both_count():
    """Fewer kept layers is cheaper per step, but losing accept length can cost more per token."""
    shallow = price(counts(60, (0, 0, 0, 0, 20)), PROFILE, 9, DraftCost())
    deeper_same_accept = price(counts(60, (0, 0, 0, 0, 20)), PROFILE, 7, DraftCost())
    deeper_lower_accept = price(counts(60, (0, 0, 0, 0, 40)), PROFILE, 7, DraftCost())
    assert deeper_same_accept.cost < shallow.cost < deeper_lower_accept.cost


def test_profile_is_measured_once_and_reloaded(tiny, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSPARSE_CACHE", str(tmp_path))
    monkeypatch.setattr("specsparse.measuring.profile._PROFILES", {})
    first = profile_for(tiny.model)
    path = profile_path(first.identity)
    assert path.is_file() and {c for _, c, _ in first.samples} == set(CHUNKS)
    assert {k for k, _, _ in first.samples} == {1, 2, 4}  # tiny: 4 layers
    assert all(t > 0 for _, _, t in first.samples)
    monkeypatch.setattr("specsparse.measuring.profile._PROFILES", {})
    monkeypatch.setattr("specsparse.measuring.profile.measure_profile", lambda *a, **k: pytest.fail("measured twice"))
    assert profile_for(tiny.model) == first


def test_profile_fits_its_own_samples(smollm):
    """On the real model the fitted model reproduces the measured cells (timing noise allowed)."""
    profile = measure_profile(smollm.model, repeats=3)
    errors = [abs(profile.verify_time(k, c) / t - 1) for k, c, t in profile.samples]
    assert sorted(errors)[len(errors) // 2] < 0.25
    assert profile.verify_time(30, 1) > profile.verify_time(10, 1) > 0


def test_an_inflated_stored_timing_changes_no_selection(tmp_path):
    """Inflate every stored cost, tokens/s and wall time (a run timed under load): a rerun served from
    the store selects the same configuration and reports the same modeled numbers."""
    spec = EvaluationSpec(model="tiny", drafter=Component("specsparse.drafters.pld.PromptLookupDrafter"),
                          domain=DomainSpec("translation", limit=15),
                          generation=GenerationConfig(max_new_tokens=16, num_draft_tokens=3))
    search = Component("specsparse.search.bfs.BFSSearch", {"max_depth": 2, "max_pool": 3})
    store_path = tmp_path / "store.sqlite"
    first = run_job(spec, search, LocalRunner(progress=False), ResultsStore(store_path), tmp_path / "a",
                    evaluate_test=False, progress=False)
    with sqlite3.connect(store_path) as conn:
        for key, text in conn.execute("SELECT key, measurement FROM measurements").fetchall():
            data = json.loads(text)
            data.update(cost=data["cost"] * (50 if not data["flops_fraction"] < 1 else 0.01),
                        tokens_per_s=data["tokens_per_s"] * 7, wall_time_s=1e6)
            conn.execute("UPDATE measurements SET measurement = ? WHERE key = ?", (json.dumps(data), key))
    again = run_job(spec, search, LocalRunner(progress=False), ResultsStore(store_path), tmp_path / "b",
                    evaluate_test=False, progress=False)
    assert again.search_result.n_measured == 0 and again.search_result.n_cache_hits > 0
    assert again.search_result.selected == first.search_result.selected
    assert replace(again.search_result.selected_measurement, wall_time_s=0) == replace(first.search_result.selected_measurement, wall_time_s=0)
    assert again.search_result.dense.cost == first.search_result.dense.cost
