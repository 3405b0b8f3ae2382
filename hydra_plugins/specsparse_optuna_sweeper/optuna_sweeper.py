"""A Hydra sweeper that asks an Optuna sampler for each job's overrides and tells it what the job returned.

    python run.py -m hydra/sweeper=optuna hydra.sweeper.n_trials=8 'tss.tau=interval(0.01,0.2)' \
        'tss.max_depth=int(interval(1,3))' 'drafter=choice(samd,pld)'
    python run.py -m hydra/sweeper=optuna hydra/sweeper/sampler=random hydra.sweeper.sampler.seed=3 ...

Its options are hydra-optuna-sweeper's, names and config classes alike (that package pins optuna<3), so
that moving to it is one line: `sampler` (`hydra/sweeper/sampler=tpe|random|cmaes|nsgaii|grid`, each a
`_target_` with its options), `direction`, `storage`, `study_name`, `n_trials`, `n_jobs`,
`max_failure_rate`, `params` and `custom_search_space`.

The search space comes from `hydra.sweeper.params` ({key: sweep}) and the sweep overrides of the command
line (which win): `interval(a,b)` (a float; `tag(log,interval(a,b))` on a log scale), `int(interval(a,b))`
(an integer, both ends included), `choice(...)`, `range(start,stop[,step])` (stop excluded, as Hydra's
basic sweeper has it). Every other override reaches every job unchanged. `custom_search_space` names a
function `(config, trial)` that suggests more parameters with Optuna's define-by-run API.

Trials run in batches of `n_jobs` through the configured `hydra/launcher`. A job returns its objective:
a number, or one per direction when `direction` is a list (multi-objective). A job that raises or
returns anything else, NaN included, is a FAIL trial (logged, its reason kept as the trial's user
attribute "failed"); once the failed share of a batch passes `max_failure_rate` (0: any failure) the
sweep stops with one line. Optuna's samplers leave FAIL trials out of their model, so a sweep that
allows failures may be offered the same failing settings again and again: `failed_trial_state=PRUNED`
(an option of this sweeper only) tells them as pruned, which TPE ranks below every finished trial. With `storage` and `study_name`, rerunning the same command
continues the study: trials left RUNNING by a killed sweep are closed as FAIL, and trial numbers and job
folders go on from where they stopped. At the end the sweep folder holds optimization_results.yaml:
every trial (its values, or why it failed), and the best one (or the Pareto front).

Optuna is imported only when a sweep starts: Hydra imports this module on every start to find its
plugins (and before it is in sys.modules, so the dataclasses below cannot take `from __future__ import
annotations`).
"""

import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, Override, RangeSweep, Transformer
from hydra.core.plugins import Plugins
from hydra.plugins.sweeper import Sweeper
from omegaconf import MISSING, OmegaConf

log = logging.getLogger(__name__)
DIRECTIONS = ("maximize", "minimize")
# What a sweep measures, not a setting to tune: TPE would pick the domain (or preset) that runs fastest.
NOT_TUNED = ("domain", "experiment")


@dataclass
class SamplerConfig:
    _target_: str = MISSING
    seed: Any = None


@dataclass
class TPESamplerConfig(SamplerConfig):
    """optuna.samplers.TPESampler (https://optuna.readthedocs.io/en/stable/reference/samplers/index.html)."""
    _target_: str = "optuna.samplers.TPESampler"
    consider_prior: Any = None
    prior_weight: Any = None
    consider_magic_clip: Any = None
    consider_endpoints: Any = None
    n_startup_trials: int = 10
    n_ei_candidates: int = 24
    multivariate: Any = None
    warn_independent_sampling: Any = None
    constant_liar: bool = False  # with n_jobs > 1: running trials count as their worst value


@dataclass
class RandomSamplerConfig(SamplerConfig):
    _target_: str = "optuna.samplers.RandomSampler"


@dataclass
class CmaEsSamplerConfig(SamplerConfig):
    """optuna.samplers.CmaEsSampler (needs the cmaes package)."""
    _target_: str = "optuna.samplers.CmaEsSampler"
    x0: Any = None
    sigma0: Any = None
    n_startup_trials: int = 1
    warn_independent_sampling: bool = True
    consider_pruned_trials: bool = False
    restart_strategy: Any = None
    inc_popsize: int = -1
    use_separable_cma: bool = False


@dataclass
class NSGAIISamplerConfig(SamplerConfig):
    _target_: str = "optuna.samplers.NSGAIISampler"
    population_size: int = 50
    mutation_prob: Any = None
    crossover_prob: float = 0.9
    swapping_prob: float = 0.5


@dataclass
class GridSamplerConfig(SamplerConfig):
    """optuna.samplers.GridSampler; search_space null: the sweep's choice(...) and range(...) values."""
    _target_: str = "optuna.samplers.GridSampler"
    search_space: Any = None


@dataclass
class OptunaSweeperConf:
    _target_: str = "hydra_plugins.specsparse_optuna_sweeper.optuna_sweeper.OptunaSweeper"
    _recursive_: bool = False  # the sampler is made when the sweep starts, where a bad option is one line
    defaults: list = field(default_factory=lambda: [{"sampler": "tpe"}])
    sampler: SamplerConfig = MISSING
    direction: Any = "maximize"  # or a list, one per objective the job returns
    storage: Any = None  # an Optuna storage URL (sqlite:///study.db) to keep the study; null: in memory
    study_name: Any = None  # with storage: a study of this name continues where it stopped
    n_trials: int = 20
    n_jobs: int = 1  # trials per batch handed to the launcher (the sampler learns between batches)
    max_failure_rate: float = 0.0  # the failed share of a batch above which the sweep stops
    # How a failed job is told to Optuna: FAIL (as hydra-optuna-sweeper does; TPE leaves such trials out of
    # its model and may propose the same failing settings again and again) or PRUNED (specsparse's own
    # option: TPE ranks them below every finished trial and moves away; the dashboard shows them pruned).
    failed_trial_state: str = "FAIL"
    params: Any = None  # {key: sweep}, e.g. {tss.tau: "interval(0.01,0.2)"}
    custom_search_space: Any = None  # a dotpath to a function (config, trial) suggesting more parameters


SAMPLERS = {"tpe": TPESamplerConfig, "random": RandomSamplerConfig, "cmaes": CmaEsSamplerConfig,
            "nsgaii": NSGAIISamplerConfig, "grid": GridSamplerConfig}
store = ConfigStore.instance()
store.store(group="hydra/sweeper", name="specsparse_optuna", node=OptunaSweeperConf, provider="specsparse")
for _name, _config in SAMPLERS.items():
    store.store(group="hydra/sweeper/sampler", name=_name, node=_config, provider="specsparse")


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
        if value.start > value.end:
            raise ValueError(f"{override.input_line}: interval(a,b) needs a <= b")
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


def close_running_trials(study: Any) -> None:
    """Close the trials a killed sweep left RUNNING (a continued study) as FAIL, saying so."""
    from optuna.trial import TrialState  # noqa: PLC0415

    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        study.tell(trial.number, state=TrialState.FAIL)
        log.warning("trial %d was left running by an interrupted sweep: closed as failed", trial.number)


class OptunaSweeper(Sweeper):
    def __init__(self, sampler: Any = None, direction: Any = "maximize", storage: Any = None, study_name: Any = None,
                 n_trials: int = 20, n_jobs: int = 1, max_failure_rate: float = 0.0, params: Any = None,
                 custom_search_space: Any = None, failed_trial_state: str = "FAIL") -> None:
        self.sampler = sampler if sampler is not None else OmegaConf.structured(TPESamplerConfig)
        self.direction = direction
        self.directions = [direction] if isinstance(direction, str) else list(direction or [])
        self.n_trials, self.n_jobs, self.max_failure_rate = n_trials, n_jobs, max_failure_rate
        self.storage, self.study_name = storage, study_name
        self.params = dict(params or {})
        self.custom_search_space = custom_search_space
        self.failed_trial_state = failed_trial_state

    def check(self) -> None:
        """ValueError (one line) for an option of the wrong kind or range."""
        if not self.directions or any(d not in DIRECTIONS for d in self.directions):
            raise ValueError(f"direction={self.direction}: use maximize or minimize, or a list of them (one per "
                             "objective the job returns)")
        for name in ("n_trials", "n_jobs"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name}={value!r}: give a positive integer")
        if self.failed_trial_state not in ("FAIL", "PRUNED"):
            raise ValueError(f"failed_trial_state={self.failed_trial_state!r}: use FAIL or PRUNED")
        if not isinstance(self.max_failure_rate, (int, float)) or not 0 <= self.max_failure_rate <= 1:
            raise ValueError(f"max_failure_rate={self.max_failure_rate!r}: give a number in [0, 1]")

    def make_sampler(self, space: dict[str, Any]) -> Any:
        """The configured sampler; a grid sampler without a search_space takes the sweep's own values."""
        from hydra.utils import instantiate  # noqa: PLC0415

        options = OmegaConf.to_container(self.sampler, resolve=True) if OmegaConf.is_config(self.sampler) else dict(self.sampler)
        if options.get("_target_") == GridSamplerConfig._target_ and options.get("search_space") is None:
            grid = {key: list(getattr(d, "choices", None) or range(d.low, d.high + 1, d.step)) for key, d in space.items()
                    if hasattr(d, "choices") or getattr(d, "step", None)}
            if len(grid) < len(space):
                raise ValueError("the grid sampler takes choice(...), range(...) and int(interval(...)) sweeps only "
                                 "(or give hydra.sweeper.sampler.search_space)")
            options["search_space"] = grid
        try:
            return instantiate(options)
        except Exception as err:  # noqa: BLE001 - an option the sampler does not take, a missing package
            raise ValueError(f"sampler {options.get('_target_')}: {str(err).splitlines()[0]}") from None

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
        from hydra.utils import get_method  # noqa: PLC0415

        try:
            self.check()
            space, fixed = self.tuned_space(arguments)
            sampler = self.make_sampler(space)
            extend = get_method(self.custom_search_space) if self.custom_search_space else None
        except Exception as err:  # noqa: BLE001 - a bad sweeper option: one line, exit 2, nothing launched
            print(f"error: hydra.sweeper: {str(err).splitlines()[0]}", file=sys.stderr)
            sys.exit(2)
        study = optuna.create_study(directions=self.directions, sampler=sampler, storage=self.storage,
                                    study_name=self.study_name, load_if_exists=True)
        close_running_trials(study)
        if self.n_jobs > 1 and "BasicLauncher" not in type(self.launcher).__name__:
            log.warning("n_jobs=%d: jobs that run at once on one host time each other, so their measured speedups "
                        "share its cores; compare such trials with care (or run them on separate nodes)", self.n_jobs)
        log.info("Optuna %s: %d trial(s), %s, over %s", type(sampler).__name__, self.n_trials, "/".join(self.directions),
                 ", ".join(space))
        launched, exhausted = 0, False
        while launched < self.n_trials and not exhausted:
            trials = [study.ask(space) for _ in range(min(self.n_jobs, self.n_trials - launched))]
            for trial in trials if extend is not None else ():
                extend(self.config, trial)
            batch = [tuple(f"{k}={v}" for k, v in t.params.items()) + fixed for t in trials]
            self.validate_batch_is_legal(batch)
            returns = self.launcher.launch(batch, initial_job_idx=trials[0].number)  # folders follow trial numbers
            launched += len(batch)
            failed = 0
            for trial, job in zip(trials, returns):
                values = self._values(job)
                if isinstance(values, str):
                    trial.set_user_attr("failed", values)
                    failed += 1
                try:  # the trial is stored either way
                    if isinstance(values, str):
                        study.tell(trial, state=optuna.trial.TrialState[self.failed_trial_state])
                    else:
                        study.tell(trial, values)
                except RuntimeError as err:  # a sampler with nothing left to propose (a walked grid) stops the study
                    if "stop" not in str(err):
                        raise
                    exhausted = True
                log.info("trial %d: %s -> %s", trial.number, trial.params, values)
            if failed / len(batch) > self.max_failure_rate:
                print(f"error: hydra.sweeper: {failed} of {len(batch)} trial(s) of a batch failed, more than "
                      f"max_failure_rate={self.max_failure_rate}: the sweep stops (each failed job's folder says why)",
                      file=sys.stderr)
                break
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
            "trials": [{"number": t.number, "state": t.state.name, "params": t.params, "values": t.values,
                        "failed": t.user_attrs.get("failed")} for t in study.trials]}
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
