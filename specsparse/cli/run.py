"""One job from a composed Hydra config (`run_from_config`), what `python run.py` in a checkout and
`specsparse run` (the packaged conf, for an installed specsparse) both run:

    python run.py -m domain=qa,mmlu search=bfs          # a checkout: conf/ beside run.py
    specsparse run -m domain=qa,mmlu search=bfs         # an installed package: its own copy of conf/

Each job writes into its Hydra output dir (outputs/runs/... or outputs/multirun/.../<n>_<domain>_<search>):
.hydra/config.yaml, reproduce.json, config_map.{yaml,json}, measurements.csv, summary.json, speedup.png,
pareto.png and, with logger=wandb, wandb/offline-run-*. Every measurement also goes to the shared results
store (paths.store, default outputs/store.sqlite), so a rerun after an interruption resumes where it stopped.
A bad configuration value stops the job before any model loads, with one line on stderr and exit code 2.
Under a sweeper that reads it (hydra/sweeper=optuna), a job returns its `objective` (conf/config.yaml),
measured on the calibration split; NaN when it failed.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import signal
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from omegaconf import DictConfig

log = logging.getLogger("run")

CHOICE_GROUPS = ("model", "drafter", "domain", "search", "runner", "logger", "experiment")


def run_from_config(cfg: DictConfig) -> float | tuple[float, ...] | None:
    """The job (or one job of a sweep) `cfg` describes, inside Hydra's app (its runtime config is read)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.utils import get_original_cwd
    from omegaconf import OmegaConf

    from specsparse.decoding.models import ModelLoadError
    from specsparse.jobs.config import ConfigError, build_plan
    from specsparse.jobs.job import JobTerminated, run_plan
    from specsparse.jobs.objectives import objective_value
    from specsparse.jobs.outputs import results_table
    from specsparse.measuring.profile import ProfileError
    from specsparse.study.runners import RunnerError
    from specsparse.study.store import StoreError

    hydra_cfg = HydraConfig.get()
    multirun = hydra_cfg.mode.name == "MULTIRUN"
    choices = {g: str(v) for g, v in hydra_cfg.runtime.choices.items() if g in CHOICE_GROUPS and v is not None}
    log.info(_preset_line(choices.get("experiment"), hydra_cfg.overrides.task))  # console and the job's run.log
    output_dir = Path(hydra_cfg.runtime.output_dir)
    signal.signal(signal.SIGTERM, _terminate)
    failed = _failed(cfg.get("objective"))  # what a failed job returns to a sweeper
    # Hydra's basic sweeper (and a single run) drops what a job returns: no objective to measure for it
    objective_read = multirun and not str(hydra_cfg.sweeper.get("_target_", "")).endswith("BasicSweeper")
    try:
        config = OmegaConf.to_container(cfg, resolve=True)
        plan = build_plan(config, output_dir=output_dir, cwd=get_original_cwd(),
                          overrides=list(hydra_cfg.overrides.task), choices=choices, objective_read=objective_read)
    except ConfigError as err:
        if not multirun:
            shutil.rmtree(output_dir, ignore_errors=True)  # nothing ran: leave no empty run folder behind
        return _fail(f"error: {err}", multirun, output_dir, failed, hydra_cfg.overrides.task)
    log.info(_logger_line(plan.logger, choices.get("logger")))
    try:
        job = run_plan(plan)
    except RunnerError as err:  # a lost worker, resources that are gone: measurements so far are stored
        return _fail(f"error: runner: {err}", multirun, output_dir, failed)
    except (ConfigError, ModelLoadError, StoreError, ProfileError) as err:
        return _fail(f"error: {err}", multirun, output_dir, failed)
    except KeyboardInterrupt as err:
        print(f"{'terminated' if isinstance(err, JobTerminated) else 'interrupted'}: {output_dir} "
              "(finished measurements are in the store; rerun the same command to resume)", file=sys.stderr)
        sys.exit(143 if isinstance(err, JobTerminated) else 130)
    except Exception as err:  # noqa: BLE001 - a bug: one line here, the traceback in the job's run.log
        return _fail(_unexpected(err, output_dir), multirun, output_dir, failed)
    lines = [results_table(job), f"outputs: {plan.output_dir}", f"results store: {plan.store_path}",
             f"tables and plots: {_console_script('specsparse', get_original_cwd())} report {plan.output_dir.parent if multirun else plan.output_dir}"]
    log.info("\n%s", "\n".join(lines))  # the console and the job's run.log
    if not objective_read:
        return None
    value = objective_value(plan.objective, job.summary())
    if value is not None:
        log.info("objective %s: %s", plan.objective, value)
    return value


def _console_script(name: str, cwd: str) -> str:
    """How the shell that started this job calls this environment's `name` command: the bare name where the
    environment is on PATH (activated), else its path (`.venv/bin/specsparse`), so the line runs as printed."""
    script = Path(sys.executable).parent / name
    if shutil.which(name) == str(script):
        return name
    try:
        return str(script.relative_to(cwd))
    except ValueError:
        return str(script)


def _logger_line(logger, choice: str | None) -> str:
    """Which logger the job got: logger=auto (the default) is W&B when its extra is installed, else none."""
    if logger is None:
        return "logger: none" + (" (pip install 'specsparse[wandb]' for W&B runs)" if choice == "auto" else "")
    mode = logger.options.get("mode")
    return f"logger: {'wandb' if choice in (None, 'auto') else choice}" + (f" ({mode})" if mode else "")


def _failed(objective) -> float | tuple[float, ...] | None:
    """A failed job's return value: NaN for each objective. An Optuna sweeper fails that trial, Nevergrad
    counts a loss that is never best, and either sweep goes on (an exception would stop both)."""
    from omegaconf import OmegaConf

    if objective is None:
        return None
    return tuple(float("nan") for _ in objective) if OmegaConf.is_list(objective) else float("nan")


def _preset_line(preset: str | None, overrides) -> str:
    """Which experiment preset shaped this job: presets change sizes silently, so say it once per job."""
    if preset is None:
        return "preset: none"
    if any(o.lstrip("+~").startswith("experiment=") for o in overrides):
        return f"preset: experiment={preset}"
    return f"preset: experiment={preset} (applied by default; `~experiment` runs the full-size settings)"


def _unexpected(err: Exception, output_dir: Path) -> str:
    """The error line of an exception nothing expected; its traceback goes to the job's run.log (the
    job's reproduce.json already says "failed")."""
    run_log = output_dir / "run.log"
    output_dir.mkdir(parents=True, exist_ok=True)
    with run_log.open("a") as file:
        traceback.print_exception(err, file=file)
    from specsparse.util import first_line

    return f"error: job {output_dir.name} failed unexpectedly ({type(err).__name__}: {first_line(err)}); traceback in {run_log}"


def _fail(message: str, multirun: bool, output_dir: Path, value, overrides=()):
    """One line on stderr. A single run exits 2; in a sweep the other jobs still run (this one returns
    `value`), its folder's reproduce.json records the error, and the sweep lists its failed jobs and
    exits 2 at the end (specsparse.cli.hydra_callbacks.SweepSummary), wherever each job ran."""
    print(message, file=sys.stderr)
    if not multirun:
        sys.exit(2)
    from specsparse.jobs.sweep import record_failure

    record_failure(output_dir, message, list(overrides))
    return value


def _terminate(signum, frame) -> None:
    from specsparse.jobs.job import JobTerminated

    raise JobTerminated()


def add_run_command(subparsers) -> None:
    p = subparsers.add_parser(  # no option of its own (prefix_chars): -m, --cfg and --help are Hydra's
        "run", prefix_chars="\0", add_help=False,
        help="run a job or sweep from the packaged conf/ (as `python run.py` in a checkout)",
        description="Compose the packaged Hydra config with OVERRIDES and run the job (`-m` for a sweep), exactly as "
                    "`python run.py OVERRIDES` does in a checkout; Hydra's own flags (--cfg job, --help, -m) work too.",
    )
    p.add_argument("overrides", nargs=argparse.REMAINDER, help="Hydra overrides and flags")
    p.set_defaults(func=_run)


def _run(args) -> int:
    import hydra  # the rest of the `specsparse` command never imports Hydra

    sys.argv = ["specsparse run", *args.overrides]  # Hydra reads its command line from sys.argv
    hydra.main(version_base="1.3", config_path="pkg://specsparse.conf", config_name="config")(run_from_config)()
    return 0
