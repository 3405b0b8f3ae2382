"""The cost profile: its model, its load-proof fit and checks, its storage and pinning, and that no
stored timing ever decides a selection."""

import json
import os
import sqlite3
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from specsparse.data import get_domain
from specsparse.jobs.config import ConfigError, build_plan
from specsparse.jobs.job import run_job
from specsparse.measuring.evaluation import EvaluationSpec, Evaluator
from specsparse.measuring.pricing import DraftCost, price
from specsparse.measuring.profile import (
    ATTEMPTS,
    ProfileError,
    check_profile,
    load_profile,
    measure_checked_profile,
    pinned_profile,
    profile_for,
    profile_path,
    profile_record,
)
from specsparse.measuring.profile_fit import (
    CHUNKS,
    MIN_CPU_SHARE,
    PREFILL_TOKENS,
    CostProfile,
    fit_timings,
    measure_unchecked_profile,
    model_identity,
    profile_checks,
)
from specsparse.search.rule import TSSRule
from specsparse.study.keys import describe
from specsparse.study.runners.local import LocalRunner
from specsparse.study.store import ResultsStore
from specsparse.types import Component, GenerationConfig, Measurement
from specsparse.util import file_sha256

CONF = Path(__file__).resolve().parents[2] / "conf"
PROFILE = CostProfile(identity={"test": 1}, num_layers=10, vocab_size=100, single=(0.004, 0.001),
                      verify=(0.010, 0.002, 0.001, 0.0005), head_per_row=1e-6)
TINY_SPEC = EvaluationSpec(model="tiny", drafter=Component("specsparse.drafters.pld.PromptLookupDrafter"),
                           domain=get_domain("translation", limit=15),
                           generation=GenerationConfig(max_new_tokens=16, num_draft_tokens=3))
BFS = Component("specsparse.search.bfs.BFSSearch",
                {"rule": TSSRule(max_depth=2, max_pool=3, feasibility="point", guard="task")})
FAST = settings(max_examples=30, deadline=None)


def counts(tokens, chunk_counts):
    steps = sum(chunk_counts)
    verified = sum((i + 1) * n for i, n in enumerate(chunk_counts))
    return Measurement(accept_length=tokens / steps, metric=None, modeled_cost=0.0, flops_fraction=1.0, modeled_tokens_per_s=0.0,
                       new_tokens=tokens, target_forwards=steps, wall_time_s=0.0, verified_tokens=verified,
                       chunk_counts=tuple(chunk_counts))


def with_samples(profile: CostProfile, kept=(1, 4, 7, 10)) -> CostProfile:
    """`profile` with the cells its own model predicts (a perfect fit)."""
    return replace(profile, samples=tuple((k, c, profile.verify_time(k, c)) for k in kept for c in CHUNKS))


# -- the model -------------------------------------------------------------------------------------
def test_price_follows_the_documented_model():
    m = counts(tokens=60, chunk_counts=(5, 0, 0, 0, 15))  # 5 one-token steps, 15 steps of 5 tokens
    priced = price(m, PROFILE, kept_layers=8, cost=DraftCost(per_step=0.001, per_token=0.0001))
    verify = 5 * (0.004 + 0.001 * 8) + 15 * (0.010 + 0.002 * 8 + 5 * (0.001 + 0.0005 * 8))
    draft = 20 * 0.001 + (80 - 20) * 0.0001
    assert priced.modeled_cost == pytest.approx((verify + draft) / 60)
    assert priced.modeled_tokens_per_s == pytest.approx(60 / (verify + draft))


def test_accept_length_and_depth_both_count():
    """Fewer kept layers is cheaper per step, but losing accept length can cost more per token."""
    shallow = price(counts(60, (0, 0, 0, 0, 20)), PROFILE, 9, DraftCost())
    deeper_same_accept = price(counts(60, (0, 0, 0, 0, 20)), PROFILE, 7, DraftCost())
    deeper_lower_accept = price(counts(60, (0, 0, 0, 0, 40)), PROFILE, 7, DraftCost())
    assert deeper_same_accept.modeled_cost < shallow.modeled_cost < deeper_lower_accept.modeled_cost


def test_more_tokens_never_cost_less_than_one():
    """The two regimes are fitted apart; where they cross, a chunk costs what one token costs."""
    crossing = replace(PROFILE, single=(0.010, 0.002), verify=(0.002, 0.001, 0.0, 0.0))
    assert crossing.verify_time(10, 2) == crossing.verify_time(10, 1) == pytest.approx(0.030)


# -- the fit: load cannot bias it ------------------------------------------------------------------
@FAST
@given(
    seed=st.integers(0, 2**32 - 1),
    spiked=st.floats(0.1, 0.8),
    single=st.tuples(st.floats(1e-3, 0.05), st.floats(1e-4, 5e-3)),
    verify=st.tuples(st.floats(1e-3, 0.05), st.floats(1e-4, 5e-3), st.floats(0, 2e-3), st.floats(0, 2e-4)),
)
def test_the_fit_sees_through_load_spikes(seed, spiked, single, verify):
    """Timings from a known cost model, some repeats of random cells slowed 2-10x (a busy machine;
    every cell keeps at least one undisturbed repeat): the fit gives back the clean coefficients,
    and ranks every (kept layers, chunk) configuration as the clean model does."""
    rng = np.random.default_rng(seed)
    clean = CostProfile(identity={}, num_layers=30, vocab_size=100, single=single, verify=verify, head_per_row=0.0)
    a1, b1 = single
    a, b, c, d = verify
    assume(all(a + b * k + 2 * (c + d * k) >= a1 + b1 * k for k in (1, 30)))  # as on hardware: a chunk costs more
    repeats = 7
    times = {}
    for kept in (1, 10, 20, 30):
        for chunk in CHUNKS:
            seconds = a1 + b1 * kept if chunk == 1 else a + b * kept + chunk * (c + d * kept)
            slow = np.where(rng.random(repeats) < spiked, rng.uniform(2, 10, repeats), 1.0)
            slow[rng.integers(repeats)] = 1.0
            times[kept, chunk] = list(seconds * slow)
    fitted = replace(clean, **fit_timings(times))
    assert fitted.single == pytest.approx(single, rel=1e-6, abs=1e-12)
    assert fitted.verify == pytest.approx(verify, rel=1e-6, abs=1e-12)
    cells = [(k, ch) for k in range(1, 31) for ch in range(1, max(CHUNKS) + 1)]
    ranked = sorted(cells, key=lambda cell: clean.verify_time(*cell))
    costs = [fitted.verify_time(*cell) for cell in ranked]
    assert all(later >= earlier * (1 - 1e-9) for earlier, later in zip(costs, costs[1:]))
    assert fitted.verify_time(20, 6) / fitted.verify_time(30, 6) == pytest.approx(
        clean.verify_time(20, 6) / clean.verify_time(30, 6))
    assert all(check.passed for check in profile_checks(fitted)), profile_checks(fitted)


@FAST
@given(seed=st.integers(0, 2**16), prefill=st.tuples(st.floats(1e-4, 0.02), st.floats(0, 2e-3), st.floats(1e-6, 1e-3),
                                                      st.floats(0, 1e-4)))
def test_the_prefill_fit_gives_back_a_known_prompt_cost(seed, prefill):
    """Prefill timings from a known p(L, P) = e + f*L + P*(g + h*L), some repeats slowed by load: the fit
    gives back the coefficients, and prices prompts of any length and count by them."""
    rng = np.random.default_rng(seed)
    e, f, g, h = prefill
    verify = {(k, c): [PROFILE.verify_time(k, c)] for k in (1, 10) for c in CHUNKS}
    timed = {}
    for kept in (1, 4, 7, 10):
        for tokens in PREFILL_TOKENS:
            slow = np.where(rng.random(7) < 0.5, rng.uniform(2, 10, 7), 1.0)
            slow[rng.integers(7)] = 1.0
            timed[kept, tokens] = list((e + f * kept + tokens * (g + h * kept)) * slow)
    fitted = replace(PROFILE, **fit_timings(verify, timed))
    assert fitted.prefill == pytest.approx(prefill, rel=1e-6, abs=1e-12)
    assert fitted.prefill_time(7, 3, 900) == pytest.approx(3 * (e + 7 * f) + 900 * (g + 7 * h))
    assert all(check.passed for check in profile_checks(fitted)), profile_checks(fitted)


@FAST
@given(noise=st.lists(st.floats(-0.5, 0.5), min_size=20, max_size=20))
def test_no_coefficient_of_a_fit_is_negative(noise):
    """Cells that fall with kept layers (what load did to a real profile) fit to coefficients >= 0."""
    times = {(k, c): [0.02 * (1 + n) * (1 + 0.01 * c)] for (k, c), n in
             zip([(k, c) for k in (1, 10, 20, 30) for c in CHUNKS], noise)}
    fitted = replace(PROFILE, num_layers=30, **fit_timings(times))
    assert min(fitted.single + fitted.verify) >= 0
    assert all(fitted.verify_time(k + 1, c) >= fitted.verify_time(k, c) for k in range(1, 30) for c in range(1, 9))


# -- checks ----------------------------------------------------------------------------------------
def test_a_good_profile_passes_every_check():
    assert [c.name for c in profile_checks(with_samples(PROFILE)) if not c.passed] == []
    assert check_profile(with_samples(PROFILE)) == with_samples(PROFILE)


@FAST
@given(index=st.integers(0, 5), value=st.floats(-1.0, -1e-6))
def test_a_negative_coefficient_is_refused(index, value):
    coefficients = [*PROFILE.single, *PROFILE.verify]
    coefficients[index] = value
    bad = with_samples(replace(PROFILE, single=tuple(coefficients[:2]), verify=tuple(coefficients[2:])))
    with pytest.raises(ProfileError, match="coefficients >= 0") as err:
        check_profile(bad)
    message = str(err.value)
    assert "\n" not in message and "specsparse profile --force" in message and "cost.profile=PATH" in message


def test_a_non_monotone_profile_is_refused():
    """20 kept layers priced dearer than 30 (what load did to a real profile), and a longer chunk
    priced cheaper than a shorter one: each check names the fall."""
    by_kept = with_samples(replace(PROFILE, num_layers=30, verify=(0.05, -0.001, 0.001, 0.0)), kept=(1, 10, 20, 30))
    failed = {c.name: c.detail for c in profile_checks(by_kept) if not c.passed}
    assert "falls from 1 to 2 kept layers at chunk 2" in failed["rises with kept layers"]
    by_chunk = with_samples(replace(PROFILE, verify=(0.05, 0.002, -0.002, 0.0)))
    failed = {c.name: c.detail for c in profile_checks(by_chunk) if not c.passed}
    assert "falls from 2 to 3 tokens at kept layers 1" in failed["rises with chunk length"]
    assert "coefficients >= 0" in failed


def test_a_fit_that_misses_its_cells_is_refused():
    off = replace(PROFILE, samples=tuple((k, c, 3 * PROFILE.verify_time(k, c)) for k in (1, 10) for c in CHUNKS))
    with pytest.raises(ProfileError, match="fits its cells"):
        check_profile(off)
    with pytest.raises(ProfileError, match="no timed cells"):
        check_profile(PROFILE)


def test_a_measurement_that_keeps_failing_is_refused_in_one_line(tiny, monkeypatch):
    calls = []
    bad = with_samples(replace(PROFILE, verify=(0.05, -0.001, 0.001, 0.0)))
    monkeypatch.setattr("specsparse.measuring.profile.measure_unchecked_profile", lambda *a, **k: calls.append(1) or bad)
    with pytest.raises(ProfileError, match=f"failed its checks {ATTEMPTS} times") as err:
        measure_checked_profile(tiny.model)
    assert len(calls) == ATTEMPTS and "\n" not in str(err.value) and "specsparse profile --force" in str(err.value)


@pytest.fixture
def busy_machine():
    """More processes spinning than this machine has cores, for as long as the test runs."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range((os.cpu_count() or 1) + 1)]
    time.sleep(0.5)  # all of them running
    yield
    for spinner in spinners:
        spinner.kill()
        spinner.wait()


def test_a_busy_machine_is_refused_before_anything_is_timed(tiny, busy_machine, monkeypatch):
    monkeypatch.setattr("specsparse.measuring.profile.measure_unchecked_profile", lambda *a, **k: pytest.fail("timed"))
    with pytest.raises(ProfileError, match="the machine is busy") as err:
        measure_checked_profile(tiny.model)
    assert "\n" not in str(err.value) and "--allow-busy" in str(err.value) and "cost.profile=PATH" in str(err.value)


def test_allow_busy_measures_and_records_it(tiny, busy_machine, monkeypatch):
    monkeypatch.setattr("specsparse.measuring.profile.measure_unchecked_profile", lambda *a, **k: with_samples(PROFILE))
    profile = measure_checked_profile(tiny.model, allow_busy=True)
    assert profile.allowed_busy and min(profile.cpu_share) < MIN_CPU_SHARE
    assert profile_record(profile)["allowed_busy"] is True


# -- storage ---------------------------------------------------------------------------------------
@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSPARSE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr("specsparse.measuring.profile._PROFILES", {})
    return tmp_path / "cache"


def test_profile_is_measured_once_and_reloaded(tiny, own_cache, monkeypatch):
    first = profile_for(tiny.model)
    path = profile_path(first.identity)
    assert path.is_file() and first.path == str(path) and {c for _, c, _ in first.samples} == set(CHUNKS)
    assert {k for k, _, _ in first.samples} == {1, 2, 4}  # tiny: 4 layers
    assert all(t > 0 for _, _, t in first.samples) and first.measured_at and len(first.load_average) == 3
    monkeypatch.setattr("specsparse.measuring.profile._PROFILES", {})
    monkeypatch.setattr("specsparse.measuring.profile.measure_unchecked_profile", lambda *a, **k: pytest.fail("measured twice"))
    assert profile_for(tiny.model) == first


@pytest.mark.parametrize("stored", ["negative coefficient", "older format", "not JSON"])
def test_a_stored_profile_failing_its_checks_is_measured_again(tiny, own_cache, monkeypatch, stored):
    identity = model_identity(tiny.model)
    bad = with_samples(replace(PROFILE, identity=identity, num_layers=4, verify=(0.01, -0.002, 0.001, 0.0)), (1, 2, 4))
    text = {"negative coefficient": bad.to_json(),
            "older format": json.dumps({k: v for k, v in json.loads(with_samples(replace(
                PROFILE, identity=identity, num_layers=4), (1, 2, 4)).to_json()).items() if k != "schema"}),
            "not JSON": "{"}[stored]
    path = profile_path(identity)
    path.parent.mkdir(parents=True)
    path.write_text(text)
    calls = []
    real = measure_unchecked_profile
    monkeypatch.setattr("specsparse.measuring.profile.measure_unchecked_profile", lambda *a, **k: calls.append(1) or real(*a, **k))
    profile = profile_for(tiny.model)
    assert calls == [1] and all(c.passed for c in profile_checks(profile))
    assert load_profile(path) == profile != bad


def test_profile_fits_its_own_samples(smollm):
    """On the real model the fitted model reproduces the measured cells (timing noise allowed)."""
    profile = measure_unchecked_profile(smollm.model, repeats=3)
    errors = [abs(profile.verify_time(k, c) / t - 1) for k, c, t in profile.samples]
    assert sorted(errors)[len(errors) // 2] < 0.25
    assert profile.verify_time(30, 1) > profile.verify_time(10, 1) > 0


# -- pinning ---------------------------------------------------------------------------------------
def composed(overrides):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return OmegaConf.to_container(compose("config", overrides=list(overrides)), resolve=True)


@pytest.mark.parametrize("case", ["missing", "not JSON", "failing its checks", "older format", "other depth", "bad value"])
def test_a_bad_pinned_profile_is_one_config_line(tmp_path, case):
    pinned = tmp_path / "profile.json"
    good = json.loads(with_samples(replace(PROFILE, num_layers=4), (1, 2, 4)).to_json())
    pinned.write_text({
        "not JSON": '{"single": [0.1,',
        "failing its checks": with_samples(replace(PROFILE, num_layers=4, single=(0.004, -0.001)), (1, 2, 4)).to_json(),
        "older format": json.dumps({k: v for k, v in good.items() if k != "schema"}),
        "other depth": with_samples(PROFILE).to_json(),
    }.get(case, json.dumps(good)))
    value = {"missing": str(tmp_path / "nowhere.json"), "bad value": "[1]"}.get(case, str(pinned))
    config = composed(["model=tiny", "logger=none", "domain.limit=10", f"cost.profile={value}"])
    with pytest.raises(ConfigError, match=r"cost\.profile") as err:
        build_plan(config, output_dir=tmp_path / "job", cwd=tmp_path)
    assert "\n" not in str(err.value)


def test_a_pinned_profile_reaches_the_evaluation_spec_but_not_its_store_keys(tmp_path):
    (tmp_path / "ok.json").write_text(with_samples(replace(PROFILE, num_layers=4), (1, 2, 4)).to_json())
    config = composed(["model=tiny", "logger=none", "domain.limit=10", "cost.profile=ok.json"])
    plan = build_plan(config, output_dir=tmp_path / "job", cwd=tmp_path)
    assert plan.evaluation.cost_profile == str(tmp_path / "ok.json")
    assert describe(Evaluator(plan.evaluation)) == describe(Evaluator(replace(plan.evaluation, cost_profile=None)))


def test_a_pinned_profile_of_another_model_is_refused_when_it_loads(tiny, models, tmp_path):
    pinned = tmp_path / "profile.json"
    pinned.write_text(with_samples(replace(PROFILE, identity=model_identity(tiny.model), num_layers=4), (1, 2, 4)).to_json())
    assert pinned_profile(pinned, tiny.model).path == str(pinned)
    with pytest.raises(ProfileError, match="another architecture") as err:
        pinned_profile(pinned, models[0])  # another architecture (hidden size 48)
    assert "\n" not in str(err.value)


# -- no stored timing decides a selection ----------------------------------------------------------
def first_job(tmp_path):
    store_path = tmp_path / "store.sqlite"
    first = run_job(TINY_SPEC, BFS, LocalRunner(progress=False), ResultsStore(store_path), tmp_path / "a",
                    evaluate_test=False, progress=False)
    return store_path, first


def test_an_inflated_stored_timing_changes_no_selection(tmp_path):
    """Inflate every stored cost, tokens/s and wall time (a run timed under load): a rerun served from
    the store selects the same configuration and reports the same modeled numbers."""
    store_path, first = first_job(tmp_path)
    with sqlite3.connect(store_path) as conn:
        for key, text in conn.execute("SELECT key, measurement FROM measurements").fetchall():
            data = json.loads(text)
            data.update(modeled_cost=data["modeled_cost"] * (50 if not data["flops_fraction"] < 1 else 0.01),
                        modeled_tokens_per_s=data["modeled_tokens_per_s"] * 7, wall_time_s=1e6)
            conn.execute("UPDATE measurements SET measurement = ? WHERE key = ?", (json.dumps(data), key))
    again = run_job(TINY_SPEC, BFS, LocalRunner(progress=False), ResultsStore(store_path), tmp_path / "b",
                    evaluate_test=False, progress=False)
    assert again.search_result.n_measured == 0 and again.search_result.n_cache_hits > 0
    assert again.search_result.selected == first.search_result.selected
    assert replace(again.search_result.selected_measurement, wall_time_s=0) == replace(first.search_result.selected_measurement, wall_time_s=0)
    assert again.search_result.dense.modeled_cost == first.search_result.dense.modeled_cost


def test_store_hits_are_priced_by_the_pinned_profile_and_recorded(tmp_path):
    """A pinned profile twice as slow as the one that priced the stored measurements: a rerun is
    served from the same store keys and every cost doubles; the record names the pinned file."""
    store_path, first = first_job(tmp_path)
    measured_with = Evaluator(TINY_SPEC).pricer.profile
    pinned = tmp_path / "slow.json"
    pinned.write_text(replace(
        measured_with, single=tuple(2 * v for v in measured_with.single), verify=tuple(2 * v for v in measured_with.verify),
        head_per_row=2 * measured_with.head_per_row, samples=tuple((k, c, 2 * t) for k, c, t in measured_with.samples),
        prefill=tuple(2 * v for v in measured_with.prefill),
        prefill_samples=tuple((k, n, 2 * t) for k, n, t in measured_with.prefill_samples),
        drafter_step_s={k: 2 * v for k, v in measured_with.drafter_step_s.items()},
    ).to_json())
    spec = replace(TINY_SPEC, cost_profile=str(pinned))
    runner = LocalRunner(progress=False)
    again = run_job(spec, BFS, runner, ResultsStore(store_path), tmp_path / "b", evaluate_test=False, progress=False)
    assert again.search_result.n_measured == 0
    for (c, m), (c0, m0) in zip(again.search_result.history, first.search_result.history):
        assert c == c0 and m.modeled_cost == pytest.approx(2 * m0.modeled_cost)
    [record] = again.cost_profiles
    assert record["path"] == str(pinned) and record["sha256"] == file_sha256(pinned) and record["checks_passed"]
    assert record == profile_record(Evaluator(spec).pricer.profile)
    assert json.loads(json.dumps(record)) == record
