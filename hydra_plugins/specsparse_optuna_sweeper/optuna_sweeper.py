"""A Hydra sweeper that asks Optuna's TPE sampler for each job's overrides and tells it what the job returned.

    python run.py -m hydra/sweeper=optuna hydra.sweeper.n_trials=8 'tss.tau=interval(0.01,0.2)' \
        'tss.max_depth=int(interval(1,3))' 'drafter=choice(samd,pld)'

The search space comes from `hydra.sweeper.params` ({key: sweep}) and the sweep overrides of the command
line (which win): `interval(a,b)` (a float; `tag(log,interval(a,b))` on a log scale), `int(interval(a,b))`
(an integer, both ends included), `choice(...)`, `range(start,stop[,step])` (stop excluded, as Hydra's
basic sweeper has it). Every other override reaches every job unchanged.

Trials run in batches of `n_jobs` through the configured `hydra/launcher`. A job returns its objective:
a number, or one per direction when `direction` is a list (Optuna's multi-objective TPE). A job that
raises or returns anything else, NaN included, fails its trial: logged, recorded with the reason, and
told to Optuna as pruned, which TPE ranks below every finished trial (a trial told as failed it ignores,
and would propose again and again); the sweep goes on. At the end the sweep folder holds
optimization_results.yaml: every trial (its values, or why it failed), and the best one (or the Pareto
front).

The hydra-optuna-sweeper package does the same for optuna<3; this one uses optuna's current interface
(`Study.ask`/`Study.tell`, `FloatDistribution`, `IntDistribution`). Optuna is imported only when a sweep
starts: Hydra imports this module on every start to find its plugins (and before it is in sys.modules,
so the dataclass below cannot take `from __future__ import annotations`).
"""

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, Override, RangeSweep, Transformer
from hydra.core.plugins import Plugins
from hydra.plugins.sweeper import Sweeper
from omegaconf import OmegaConf

log = logging.getLogger(__name__)
DIRECTIONS = ("maximize", "minimize")
# What a sweep measures, not a setting to tune: TPE would pick the domain (or preset) that runs fastest.
NOT_TUNED = ("domain", "experiment")


@dataclass
class OptunaSweeperConf:
    _target_: str = "hydra_plugins.specsparse_optuna_sweeper.optuna_sweeper.OptunaSweeper"
    direction: Any = "maximize"  # or a list, one per objective the job returns
    n_trials: int = 20
    n_jobs: int = 1  # trials per batch handed to the launcher (TPE learns between batches)
    seed: Any = None  # the TPE sampler's seed (null: random)
    storage: Any = None  # an Optuna storage URL (sqlite:///study.db) to keep the study; null: in memory
    study_name: Any = None  # with storage: a study of this name continues where it stopped
    params: Any = None  # {key: sweep}, e.g. {tss.tau: "interval(0.01,0.2)"}


ConfigStore.instance().store(group="hydra/sweeper", name="specsparse_optuna", node=OptunaSweeperConf,
                             provider="specsparse")


def search_space(overrides: list[str]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """({parameter: Optuna distribution}, the overrides that are not sweeps) of Hydra override strings."""
    space, fixed = {}, {}
    for override in OverridesParser.create().parse_overrides(overrides):
        key = override.get_key_element()
        space.pop(key, None)
        fixed.pop(key, None)
        if override.is_sweep_override():
            space[key] = distribution(override)
        else:
            fixed[key] = override.input_line
    return space, tuple(fixed.values())


def distribution(override: Override) -> Any:
    """The Optuna distribution of one sweep override."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution  # noqa: PLC0415

    value = override.value()
    if isinstance(value, IntervalSweep):
        log_scale = "log" in value.tags
        if isinstance(value.start, int) and isinstance(value.end, int):
            return IntDistribution(value.start, value.end, log=log_scale)
        return FloatDistribution(float(value.start), float(value.end), log=log_scale)
    if isinstance(value, (ChoiceSweep, RangeSweep)):
        choices = list(override.sweep_iterator(transformer=Transformer.encode))
        if isinstance(value, RangeSweep) and not value.shuffle and all(isinstance(c, int) for c in choices):
            return IntDistribution(min(choices), max(choices), step=abs(int(value.step)))
        return CategoricalDistribution(choices)
    raise ValueError(f"{override.input_line}: the Optuna sweeper takes interval(a,b), int(interval(a,b)), "
                     "choice(...) or range(...)")


class OptunaSweeper(Sweeper):
    def __init__(self, direction: Any = "maximize", n_trials: int = 20, n_jobs: int = 1, seed: Any = None,
                 storage: Any = None, study_name: Any = None, params: Any = None) -> None:
        self.directions = [direction] if isinstance(direction, str) else list(direction)
        if not self.directions or any(d not in DIRECTIONS for d in self.directions):
            raise ValueError(f"hydra.sweeper.direction={direction}: use maximize or minimize, or a list of "
                             "them (one per objective the job returns)")
        if n_trials < 1 or n_jobs < 1:
            raise ValueError(f"hydra.sweeper: n_trials={n_trials} and n_jobs={n_jobs} must be positive")
        self.n_trials, self.n_jobs, self.seed = n_trials, n_jobs, seed
        self.storage, self.study_name = storage, study_name
        self.params = dict(params or {})

    def setup(self, *, hydra_context: Any, task_function: Any, config: Any) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config)

    def tuned_space(self, arguments: list[str]) -> tuple[dict[str, Any], tuple[str, ...]]:
        """`search_space` of `params` and the command line, without what a sweep measures (NOT_TUNED): a
        preset's grid over domains in `params` is left out (a warning says so), and a sweep over one of
        them on the command line is refused (ValueError, one line)."""
        left_out = sorted(set(self.params) & set(NOT_TUNED))
        for key in left_out:
            log.warning("hydra.sweeper.params.%s=%s left out: Optuna tunes settings, not the %s a job measures "
                        "(give %s=NAME, one sweep each)", key, self.params[key], key, key)
        params = [f"{k}={v}" for k, v in self.params.items() if k not in NOT_TUNED]
        space, fixed = search_space([*params, *arguments])
        tuned = sorted(set(space) & set(NOT_TUNED))
        if tuned:
            raise ValueError(f"{tuned[0]} is swept: Optuna tunes settings, not the {tuned[0]} a job measures (it would "
                             f"pick the one that runs fastest): give {tuned[0]}=NAME and run one sweep each")
        return space, fixed

    def sweep(self, arguments: list[str]) -> None:
        import sys  # noqa: PLC0415

        import optuna  # noqa: PLC0415

        try:
            space, fixed = self.tuned_space(arguments)
        except ValueError as err:
            print(f"error: hydra.sweeper: {err}", file=sys.stderr)
            sys.exit(2)
        sampler = optuna.samplers.TPESampler(seed=self.seed)
        study = optuna.create_study(directions=self.directions, sampler=sampler, storage=self.storage,
                                    study_name=self.study_name, load_if_exists=True)
        log.info("Optuna TPE: %d trial(s), %s, over %s", self.n_trials, "/".join(self.directions), ", ".join(space))
        job_num = 0
        while job_num < self.n_trials:
            trials = [study.ask(space) for _ in range(min(self.n_jobs, self.n_trials - job_num))]
            batch = [tuple(f"{k}={v}" for k, v in t.params.items()) + fixed for t in trials]
            self.validate_batch_is_legal(batch)
            returns = self.launcher.launch(batch, initial_job_idx=job_num)
            job_num += len(batch)
            for trial, job in zip(trials, returns):
                values = self._values(job)
                if isinstance(values, str):
                    trial.set_user_attr("failed", values)
                    study.tell(trial, state=optuna.trial.TrialState.PRUNED)
                else:
                    study.tell(trial, values)
                log.info("trial %d: %s -> %s", trial.number, trial.params, values)
        self._write_results(study, Path(self.config.hydra.sweep.dir) / "optimization_results.yaml")

    def _values(self, job: Any) -> list[float] | str:
        """The job's objective values, one per direction, or why its trial failed."""
        try:
            value = job.return_value  # raises the job's exception when it failed
            values = [float(value)] if len(self.directions) == 1 else [float(v) for v in value]
        except Exception as err:  # noqa: BLE001 - any failure of one job fails its trial only
            return f"failed: {type(err).__name__}: {err}"
        if len(values) != len(self.directions) or not all(math.isfinite(v) for v in values):
            return f"failed: returned {value!r}, not {len(self.directions)} finite number(s)"
        return values

    def _write_results(self, study: Any, path: Path) -> None:
        from optuna.trial import TrialState  # noqa: PLC0415

        done = [t for t in study.trials if t.state == TrialState.COMPLETE]
        results: dict[str, Any] = {
            "name": "specsparse_optuna", "directions": self.directions,
            "trials": [{"number": t.number, "params": t.params, "values": t.values, "failed": t.user_attrs.get("failed")}
                       for t in study.trials]}
        if not done:
            log.error("Optuna: no trial finished")
        elif len(self.directions) == 1:
            results.update(best_params=study.best_trial.params, best_value=study.best_trial.value)
            log.info("Optuna: best value %s with %s", study.best_trial.value, study.best_trial.params)
        else:
            results["pareto_front"] = [{"params": t.params, "values": t.values} for t in study.best_trials]
            log.info("Optuna: %d Pareto-optimal trial(s)", len(results["pareto_front"]))
        path.parent.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(OmegaConf.create(results), path)
