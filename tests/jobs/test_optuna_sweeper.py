"""What a job returns to a Hydra sweeper (`objective`), and hydra/sweeper=optuna
(hydra_plugins/specsparse_optuna_sweeper): its search space from Hydra's sweep syntax, a seeded sweep that
finds a synthetic objective's known optimum past failed jobs, and a real two-trial sweep of run.py whose
trials are the jobs' summary values."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from hydra_plugins.specsparse_optuna_sweeper.optuna_sweeper import OptunaSweeper, search_space
from specsparse.jobs.config import ConfigError, JobPlan, build_plan
from specsparse.jobs.objectives import objective_value

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = JobPlan.objective
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "HYDRA_FULL_ERROR": "0"}


def plan_for(overrides: list[str], tmp_path: Path):
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        config = OmegaConf.to_container(compose("config", overrides=overrides), resolve=True)
    return build_plan(config, output_dir=tmp_path / "job", cwd=tmp_path)


# -- the objective ---------------------------------------------------------------------------------
def test_the_objective_is_checked_with_the_plan(tmp_path):
    plan = plan_for(["model=tiny"], tmp_path)
    assert plan.objective == "measured_speedup_calibration_vs_plain" and plan.objective_timing is None  # nothing reads it
    plan = plan_for(["model=tiny", "objective=[metric_ratio_calibration,job_wall_time_s]"], tmp_path)
    assert plan.objective == ("metric_ratio_calibration", "job_wall_time_s")
    assert plan_for(["model=tiny", "objective=null"], tmp_path).objective is None
    for bad in ("objective=speed", "objective=[]", "objective=[job_wall_time_s,speed]", "objective=3"):
        with pytest.raises(ConfigError) as info:
            plan_for(["model=tiny", bad], tmp_path)
        assert str(info.value).startswith("objective=") and "measured_speedup_calibration_vs_plain" in str(info.value)


@pytest.mark.parametrize("key", ["measured_speedup_test_vs_plain", "modeled_speedup_test", "measured_speedup_test"])
def test_an_objective_on_the_test_split_is_refused(tmp_path, key):
    """A sweep choosing by a test-split figure would tune on the held-out prompts."""
    with pytest.raises(ConfigError, match=f"objective={key!r} reads the test split.*_calibration"):
        plan_for(["model=tiny", f"objective={key}"], tmp_path)
    with pytest.raises(ConfigError, match="reads the test split"):
        plan_for(["model=tiny", f"objective=[job_wall_time_s,{key}]"], tmp_path)


def test_a_read_objective_times_the_calibration_split_only_when_measured(tmp_path):
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        config = OmegaConf.to_container(compose("config", overrides=["model=tiny"]), resolve=True)
    assert build_plan(config, output_dir=tmp_path, cwd=tmp_path, objective_read=True).objective_timing == (None, 1)
    ratio = {**config, "objective": "metric_ratio_calibration"}  # read from the search's own measurements
    assert build_plan(ratio, output_dir=tmp_path, cwd=tmp_path, objective_read=True).objective_timing is None


def test_the_objective_value_of_a_summary():
    summary = {"measured_speedup_test_vs_plain": [1.2, 1.1, 1.3], "measured_speedup_dense_vs_plain": [1.05, 1.0, 1.1],
               "job_wall_time_s": 12.5, "measured_speedup_test": None, "held_out": {"verdict": "held"}}
    assert objective_value("measured_speedup_test_vs_plain", summary) == 1.2  # the point estimate
    assert objective_value(["job_wall_time_s", "measured_speedup_test_vs_plain"], summary) == (12.5, 1.2)
    assert objective_value(None, summary) is None
    assert math.isnan(objective_value("measured_speedup_test", summary))  # not measured: NaN, a failed trial
    dense = {**summary, "measured_speedup_test_vs_plain": None, "held_out": {"verdict": "dense kept"}}
    assert objective_value("measured_speedup_test_vs_plain", dense) == 1.05  # the pick is dense
    assert objective_value("measured_speedup_test", dense) == 1.0


# -- the sweeper -----------------------------------------------------------------------------------
def test_the_search_space_follows_hydras_sweep_syntax():
    space, fixed = search_space(["a=interval(0,1)", "b=int(interval(1,3))", "c=tag(log,interval(0.001,1))",
                                 "d=choice(x,y,3)", "e=range(1,5)", "f=range(2,10,3)", "g=5", "+h=[1,2]",
                                 "i=choice(p,q)", "i=7"])
    assert space == {"a": FloatDistribution(0.0, 1.0), "b": IntDistribution(1, 3),
                     "c": FloatDistribution(0.001, 1.0, log=True), "d": CategoricalDistribution(["x", "y", 3]),
                     "e": IntDistribution(1, 4), "f": IntDistribution(2, 8, step=3)}  # range: stop excluded
    assert fixed == ("g=5", "+h=[1,2]", "i=7")  # the last override of a key wins
    with pytest.raises(ValueError, match="interval"):
        search_space(["a=glob(*)"])
    with pytest.raises(ValueError, match="direction"):
        OptunaSweeper(direction="up").check()


APP = '''
import math
import pathlib
import time

import hydra
from hydra.core.hydra_config import HydraConfig


@hydra.main(version_base="1.3", config_path=".", config_name="config")
def main(cfg):
    if HydraConfig.get().job.num == 1 and pathlib.Path(cfg.block).exists():
        time.sleep(600)  # killed here (the resume test)
    if cfg.y == "c":
        raise RuntimeError("this job fails")
    if cfg.x == 0:
        return math.nan
    value = -((cfg.x - 3) ** 2) - (cfg.y == "a")  # best: x=3, y=b, value 0
    return (value, -cfg.x) if cfg.two else value


main()
'''


def write_app(tmp_path: Path) -> None:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "app.py").write_text(APP)
    (tmp_path / "config.yaml").write_text(f"x: 1\ny: a\ntwo: false\nz: 0\nblock: {tmp_path / 'block'}\n")
    (tmp_path / "space.py").write_text("def extend(config, trial):\n    trial.suggest_int('z', 1, 2)\n")


def sweep_app(tmp_path: Path, *overrides: str) -> dict:
    write_app(tmp_path)
    done = run_app(tmp_path, *overrides)
    assert done.returncode == 0, done.stderr[-3000:]
    return yaml.safe_load((tmp_path / "sweep" / "optimization_results.yaml").read_text())


def run_app(tmp_path: Path, *overrides: str, sweep: str = "sweep") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "app.py", "-m", "hydra/sweeper=specsparse_optuna", "hydra.sweeper.sampler.seed=0",
                           f"hydra.sweep.dir={tmp_path / sweep}", "x=int(interval(0,6))", *overrides],
                          cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=300)


def test_a_seeded_sweep_finds_the_known_optimum_past_failed_jobs(tmp_path):
    """Jobs at x=0 return NaN. Told as FAIL (Optuna's samplers leave those out), TPE keeps offering x=0;
    told as PRUNED, it ranks them last and finds the optimum and stays near it."""
    stuck = sweep_app(tmp_path / "fail", "y=choice(a,b)", "hydra.sweeper.n_trials=20",
                      "hydra.sweeper.max_failure_rate=1", "hydra.sweeper.sampler.n_startup_trials=6")
    assert sum(t["state"] == "FAIL" for t in stuck["trials"][-10:]) >= 8
    results = sweep_app(tmp_path, "y=choice(a,b)", "hydra.sweeper.n_trials=30", "hydra.sweeper.n_jobs=2",
                        "hydra.sweeper.max_failure_rate=1", "hydra.sweeper.sampler.n_startup_trials=6",
                        "hydra.sweeper.failed_trial_state=PRUNED")
    assert results["best_params"] == {"x": 3, "y": "b"} and results["best_value"] == 0
    trials = results["trials"]
    assert len(trials) == 30 and all(0 <= t["params"]["x"] <= 6 for t in trials)
    failed = [t for t in trials if t["params"]["x"] == 0]
    assert all(t["state"] == "PRUNED" and "not 1 finite number" in t["failed"] and t["values"] is None for t in failed)
    assert all(t["state"] == "COMPLETE" and len(t["values"]) == 1 for t in trials if t not in failed)
    assert sum(t["params"] == {"x": 3, "y": "b"} for t in trials[-10:]) >= 3  # TPE stays near the optimum


def test_a_multi_objective_sweep_keeps_the_pareto_front(tmp_path):
    results = sweep_app(tmp_path, "y=choice(a,b)", "two=true", "hydra.sweeper.direction=[maximize,maximize]",
                        "hydra.sweeper.n_trials=6")
    front = results["pareto_front"]
    assert front and all(len(t["values"]) == 2 for t in front)


def test_the_sampler_is_chosen_and_seeded_as_hydra_optuna_sweeper_spells_it(tmp_path):
    """hydra/sweeper/sampler=random|grid|tpe with hydra.sweeper.sampler.seed: the same seed gives the same
    trials; the grid sampler walks the sweep's own choices."""
    write_app(tmp_path)

    def params(*overrides, sweep):
        done = run_app(tmp_path, "hydra.sweeper.n_trials=4", *overrides, sweep=sweep)
        assert done.returncode == 0, done.stderr[-3000:]
        return [t["params"] for t in yaml.safe_load((tmp_path / sweep / "optimization_results.yaml").read_text())["trials"]]

    first = params("hydra/sweeper/sampler=random", sweep="a")
    assert params("hydra/sweeper/sampler=random", sweep="b") == first
    assert params("hydra/sweeper/sampler=random", "hydra.sweeper.sampler.seed=7", sweep="c") != first
    grid = params("hydra/sweeper/sampler=grid", "x=choice(1,2,4,5)", sweep="d")
    assert sorted(p["x"] for p in grid) == [1, 2, 4, 5]
    tpe = params("hydra.sweeper.sampler.n_startup_trials=2", "hydra.sweeper.sampler.constant_liar=true",
                 "hydra.sweeper.custom_search_space=space.extend", sweep="e")
    assert len(tpe) == 4 and all(p["z"] in (1, 2) for p in tpe)  # define-by-run parameters reach the jobs


def test_a_failed_job_is_a_fail_trial_and_the_sweep_stops_past_max_failure_rate(tmp_path):
    write_app(tmp_path)
    done = run_app(tmp_path, "y=c", "hydra.sweeper.n_trials=4")  # every job raises
    assert "1 of 1 trial(s) of a batch failed, more than max_failure_rate=0.0: the sweep stops" in done.stderr
    [trial] = yaml.safe_load((tmp_path / "sweep" / "optimization_results.yaml").read_text())["trials"]
    assert trial["state"] == "FAIL" and "this job fails" in trial["failed"]
    done = run_app(tmp_path, "y=c", "hydra.sweeper.n_trials=4", "hydra.sweeper.max_failure_rate=1", sweep="all")
    trials = yaml.safe_load((tmp_path / "all" / "optimization_results.yaml").read_text())["trials"]
    assert done.returncode == 0 and [t["state"] for t in trials] == ["FAIL"] * 4


@pytest.mark.parametrize(("options", "needle"), [
    (["hydra.sweeper.n_trials=0"], "n_trials=0"), (["hydra.sweeper.direction=up"], "direction=up"),
    (["hydra.sweeper.max_failure_rate=2"], "max_failure_rate=2"), (["x=interval(5,1)"], "interval"),
    (["hydra/sweeper/sampler=grid", "x=interval(0.5,2.5)"], "grid sampler"),
    (["hydra.sweeper.failed_trial_state=LOST"], "failed_trial_state"),
])
def test_a_bad_sweeper_option_is_one_line_and_exit_2(tmp_path, options, needle):
    write_app(tmp_path)
    done = run_app(tmp_path, *options)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: hydra.sweeper: "), done.stderr
    assert needle in lines[0] and not (tmp_path / "sweep").exists()


def test_a_killed_sweep_continues_where_it_stopped(tmp_path):
    """Kill a sweep with a storage during its second trial; the same command again closes that trial as
    failed, and its trial numbers and job folders go on from there."""
    write_app(tmp_path)
    (tmp_path / "block").touch()
    command = [sys.executable, "app.py", "-m", "hydra/sweeper=specsparse_optuna", "hydra.sweeper.sampler.seed=0",
               f"hydra.sweep.dir={tmp_path / 'sweep'}", "x=int(interval(1,6))", "hydra.sweeper.n_trials=3",
               f"hydra.sweeper.storage=sqlite:///{tmp_path / 'study.db'}", "hydra.sweeper.study_name=resumed"]
    process = subprocess.Popen(command, cwd=tmp_path, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while not (tmp_path / "sweep" / "1").exists() and time.time() < deadline:
        time.sleep(0.2)
    time.sleep(1)
    process.kill()
    process.wait()
    (tmp_path / "block").unlink()
    done = subprocess.run(command, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "trial 1 was left running by an interrupted sweep: closed as failed" in done.stdout + done.stderr
    trials = yaml.safe_load((tmp_path / "sweep" / "optimization_results.yaml").read_text())["trials"]
    assert [t["number"] for t in trials] == [0, 1, 2, 3, 4] and trials[1]["state"] == "FAIL"
    assert all((tmp_path / "sweep" / str(n)).is_dir() for n in range(5))


def test_run_py_sweeps_with_optuna(tmp_path):
    """Two real jobs on the tiny model: each trial's value is its job's objective in summary.json, the
    best is the larger, and the jobs log the logger logger=auto chose (wandb here: the tests install it)."""
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, str(ROOT / "run.py"), "-m", "hydra/sweeper=optuna", "hydra.sweeper.n_trials=2",
         "model=tiny", "domain=qa", "domain.limit=10", "generation.max_new_tokens=8", "timing_prompts=3",
         "progress=false", "tss.max_depth=choice(1,2)", f"paths.outputs={out}", f"hydra.sweep.dir={out / 'sweep'}"],
        cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = yaml.safe_load((out / "sweep" / "optimization_results.yaml").read_text())
    values = []
    for trial in results["trials"]:
        [job] = (out / "sweep").glob(f"{trial['number']}_qa_bfs")
        summary = json.loads((job / "summary.json").read_text())
        value = summary["measured_speedup_calibration_vs_plain"][0]  # the objective: timed on calibration prompts
        assert trial["failed"] is None and trial["values"] == [value] == [objective_value(DEFAULT, summary)]
        timing = summary["measured_timing_calibration"]
        assert timing["prompts"] == 2 and timing["labels"][:2] == ["plain", "dense"]  # domain.limit=10: 2 calibration
        assert summary["measured_timing_test"]["prompts"] == 3  # the held-out check, for the trial's pick only
        assert "logger: wandb (offline)" in (job / "run.log").read_text()
        values.append(trial["values"][0])
    assert len(values) == 2 and results["best_value"] == max(values) > 0


def test_a_failed_job_is_a_failed_trial_and_the_sweep_exits_2(tmp_path):
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, str(ROOT / "run.py"), "-m", "hydra/sweeper=optuna", "hydra.sweeper.n_trials=1", "model=tiny",
         "domain.name=choice(poetry)", f"paths.outputs={out}", f"hydra.sweep.dir={out / 'sweep'}"],
        cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 2 and "error: domain.name" in done.stderr, done.stderr[-3000:]
    results = yaml.safe_load((out / "sweep" / "optimization_results.yaml").read_text())
    [trial] = results["trials"]
    assert trial["values"] is None and "nan" in trial["failed"] and "best_value" not in results


def test_the_sweeper_never_tunes_the_domain_or_the_preset(caplog):
    """A preset's grid over domains (tss_main's hydra.sweeper.params) is left out with a warning; a sweep
    over domain or experiment on the command line is refused: TPE would pick the fastest domain."""
    sweeper = OptunaSweeper(params={"domain": "qa,math", "tss.tau": "interval(0.01,0.2)"})
    with caplog.at_level("WARNING"):
        space, fixed = sweeper.tuned_space(["domain=qa", "tss.max_depth=range(1,3)"])
    assert sorted(space) == ["tss.max_depth", "tss.tau"] and fixed == ("domain=qa",)
    assert "hydra.sweeper.params.domain=qa,math left out" in caplog.text
    for swept in ("domain=choice(qa,math)", "experiment=tss_main,quickstart"):
        with pytest.raises(ValueError, match=r"^(domain|experiment) is swept: Optuna tunes settings"):
            sweeper.tuned_space([swept])


def test_a_sweep_over_domains_is_one_line_and_exit_2(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "run.py"), "-m", "hydra/sweeper=optuna", "model=tiny", "logger=none",
                           "domain=choice(qa,math)", f"paths.outputs={tmp_path}", f"hydra.sweep.dir={tmp_path / 'sweep'}"],
                          cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=120)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: hydra.sweeper: domain is swept"), done.stderr
