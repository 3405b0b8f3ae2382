"""From a composed configuration (a plain dict) to validated specs, and one job run from them.

`run.py` composes the configuration with Hydra and hands it over as plain data
(`OmegaConf.to_container(cfg, resolve=True)`); this module never imports Hydra.

    plan = build_plan(config, output_dir="/abs/outputs/runs/...", cwd="/abs/launch/dir")
    job = run_plan(plan)          # search, test evaluation, outputs, reproduce.json, logging
    table = results_table(job, plan)   # what run.py prints at the end

`build_plan` validates everything it can without loading a model (unknown options, skip sets and
protected layers against the model's layer count, domains and data files, impossible resources) and
raises `ConfigError` with a one-line message. Group options name their code with `_target_`
(public dotpaths, resolved by `specsparse.evaluation.locate`); there is no second registry.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import os
import platform
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from specsparse import __version__
from specsparse.data import DOMAINS, SOURCES
from specsparse.drafters.base import Drafter
from specsparse.drafters.lm import LMDrafter
from specsparse.evaluation import DomainSpec, DrafterSpec, EvaluationSpec, MeasureSpec, locate
from specsparse.measure import MODES
from specsparse.models import DTYPES
from specsparse.pipeline import JobResult, SearchSpec, run_job
from specsparse.search.base import LayerSkipSearch, SearchStrategy
from specsparse.search.tpe_vocab import TPEVocabSearch
from specsparse.skipping import validate_skip_layers
from specsparse.store import ResultsStore, atomic_write_text
from specsparse.types import Candidate, GenerationConfig

log = logging.getLogger(__name__)

GROUPS = ("model", "drafter", "domain", "search", "runner", "logger")
# Keys of a search config that belong to the driver, not to the strategy's constructor.
DRIVER_KEYS = ("max_measurements",)
PACKAGES = (
    "specsparse", "torch", "transformers", "tokenizers", "numpy", "hydra-core", "omegaconf", "ray", "wandb",
    "optuna", "datasets", "evaluate", "sacrebleu", "gguf", "pandas",
)


class ConfigError(ValueError):
    """A configuration value that cannot work; the message is one line naming the key."""


# -- plain specs -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Component:
    """A class by public dotpath (the config's `_target_`) and its constructor options."""

    target: str
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.target.rsplit(".", 1)[-1]

    def build(self, **context: Any) -> Any:
        """An instance; `context` values (e.g. the job's output_dir) go to constructors that take them."""
        cls = locate(self.target)
        params = inspect.signature(cls.__init__).parameters
        extra = {k: v for k, v in context.items() if k in params and k not in self.options}
        return cls(**self.options, **extra)


@dataclass(frozen=True)
class ModelInfo:
    """What the config says about the target before it is loaded."""

    name: str
    source: str
    dtype: str
    device: str
    num_layers: int | None = None
    vocab_size: int | None = None


@dataclass(frozen=True)
class JobPlan:
    """Everything one job needs, validated, as plain data."""

    evaluation: EvaluationSpec
    search: SearchSpec
    runner: Component
    logger: Component | None
    model: ModelInfo
    store_path: Path
    output_dir: Path
    evaluate_test: bool = True
    progress: bool = True
    experiment: str | None = None
    seed: int = 0
    choices: dict[str, str] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict, compare=False)
    overrides: tuple[str, ...] = ()
    data: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def search_name(self) -> str:
        return self.choices.get("search") or getattr(locate(self.search.target), "name", self.search.name)

    @property
    def drafter_name(self) -> str:
        return self.choices.get("drafter") or self.evaluation.drafter.name


# -- building and validating -----------------------------------------------------------------------
def build_plan(
    config: Mapping[str, Any],
    output_dir: str | os.PathLike,
    cwd: str | os.PathLike | None = None,
    overrides: Sequence[str] = (),
    choices: Mapping[str, str] | None = None,
) -> JobPlan:
    """Validate a composed configuration and turn it into a JobPlan, without loading any model.

    config: the composed configuration as plain data (groups model, drafter, domain, search, runner,
        logger, plus generation, seed, paths, evaluate_test, progress, experiment_name).
    output_dir: the job's directory (Hydra's output dir); made absolute.
    cwd: where relative paths in the config (data files, model files, the store) resolve from.
    choices: the group option chosen for each group (Hydra's runtime choices), used as short names.
    """
    cwd_path = Path(os.path.abspath(cwd or os.getcwd()))
    missing = [g for g in GROUPS if g not in config]
    if missing:
        raise ConfigError(f"configuration lacks group(s) {missing}: compose it from conf/config.yaml")
    model = _model_info(config["model"], cwd_path)
    generation = _generation(config.get("generation") or {})
    measure = _measure(config.get("measure") or {})
    drafter = _drafter(config["drafter"], model, cwd_path)
    domain, data = _domain(config["domain"], cwd_path, bool(config.get("evaluate_test", True)))
    search = _search(config["search"], model, drafter)
    runner = _runner(config["runner"])
    logger = _logger(config["logger"])
    evaluation = EvaluationSpec(
        model=model.source, dtype=model.dtype, device=model.device, drafter=drafter, domain=domain,
        split="calibration", generation=generation, measure=measure,
    )
    paths = config.get("paths") or {}
    store = _absolute(paths.get("store") or "outputs/store.sqlite", cwd_path)
    return JobPlan(
        evaluation=evaluation,
        search=search,
        runner=runner,
        logger=logger,
        model=model,
        store_path=store,
        output_dir=_absolute(output_dir, cwd_path),
        evaluate_test=bool(config.get("evaluate_test", True)),
        progress=bool(config.get("progress", True)),
        experiment=config.get("experiment_name"),
        seed=int(config.get("seed", 0)),
        choices=dict(choices or {}),
        config=dict(config),
        overrides=tuple(overrides),
        data=data,
    )


def _absolute(path: str | os.PathLike, cwd: Path) -> Path:
    # abspath, not resolve: keep the user's spelling of symlinked folders in records
    return Path(os.path.abspath(Path(path).expanduser() if Path(path).expanduser().is_absolute() else cwd / path))


def _looks_like_path(source: str) -> bool:
    return source.endswith(".gguf") or source.startswith(("/", "./", "../", "~"))


def _model_info(cfg: Mapping[str, Any], cwd: Path) -> ModelInfo:
    source = cfg.get("source")
    if not isinstance(source, str) or not source:
        raise ConfigError("model.source must name a model (an embedded name, a .gguf file, a Hub id or a directory)")
    if _looks_like_path(source) or (cwd / source).is_dir():
        path = _absolute(source, cwd)
        if not path.exists():
            raise ConfigError(f"model.source: {path} does not exist")
        source = str(path)
    dtype = str(cfg.get("dtype", "float32"))
    if dtype not in (*DTYPES, "auto"):
        raise ConfigError(f"model.dtype={dtype!r}: use one of {', '.join([*DTYPES, 'auto'])}")
    device = str(cfg.get("device", "cpu"))
    _check_device(device)
    num_layers = cfg.get("num_layers")
    if num_layers is None and Path(source).is_dir():  # a local checkpoint says how deep it is
        config_file = Path(source) / "config.json"
        if config_file.is_file():
            num_layers = json.loads(config_file.read_text()).get("num_hidden_layers")
    if num_layers is not None and (not isinstance(num_layers, int) or num_layers < 1):
        raise ConfigError(f"model.num_layers must be a positive integer or null, got {num_layers!r}")
    vocab_size = cfg.get("vocab_size")
    if vocab_size is not None and (not isinstance(vocab_size, int) or vocab_size < 1):
        raise ConfigError(f"model.vocab_size must be a positive integer or null, got {vocab_size!r}")
    return ModelInfo(str(cfg.get("name") or source), source, dtype, device, num_layers, vocab_size)


def _check_device(device: str) -> None:
    kind = device.split(":", 1)[0]
    if kind not in ("cpu", "cuda", "mps"):
        raise ConfigError(f"model.device={device!r}: use cpu, cuda, cuda:N or mps")
    if kind == "cuda":
        import torch  # noqa: PLC0415

        count = torch.cuda.device_count()
        index = int(device.split(":", 1)[1]) if ":" in device else 0
        if index >= count:
            raise ConfigError(
                f"model.device={device!r} but this machine has {count} CUDA device(s): "
                "use model.device=cpu or a CPU preset (model=smollm2_135m)"
            )
    if kind == "mps":
        import torch  # noqa: PLC0415

        if not torch.backends.mps.is_available():
            raise ConfigError("model.device='mps' but MPS is not available on this machine: use model.device=cpu")


def _generation(cfg: Mapping[str, Any]) -> GenerationConfig:
    try:
        return GenerationConfig(**cfg)
    except TypeError as err:
        raise ConfigError(f"generation: {err}") from None
    except ValueError as err:
        raise ConfigError(f"generation: {err}") from None


def _measure(cfg: Mapping[str, Any]) -> MeasureSpec:
    unknown = sorted(set(cfg) - {"mode", "batch_size"})
    if unknown:
        raise ConfigError(f"measure: unknown option(s) {unknown}: use measure.mode and measure.batch_size")
    mode = cfg.get("mode", "replay")
    if mode not in MODES:
        raise ConfigError(f"measure.mode={mode!r} is not one of {list(MODES)}: use measure.mode=replay or engine")
    batch_size = cfg.get("batch_size")
    if batch_size is not None and (not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1):
        raise ConfigError(f"measure.batch_size={batch_size!r}: give a positive integer, or null for automatic")
    return MeasureSpec(mode=mode, batch_size=batch_size)


def _split_target(cfg: Mapping[str, Any] | None, group: str) -> tuple[str, dict[str, Any]]:
    if not isinstance(cfg, Mapping) or not cfg.get("_target_"):
        raise ConfigError(f"{group} config needs a `_target_` naming its class (see conf/{group}/)")
    options = {k: v for k, v in cfg.items() if k != "_target_"}
    return str(cfg["_target_"]), options


def _locate(target: str, group: str, base: type | None = None) -> Any:
    try:
        obj = locate(target)
    except ValueError as err:
        raise ConfigError(f"{group}._target_: {err}") from None
    if base is not None and not (inspect.isclass(obj) and issubclass(obj, base)):
        raise ConfigError(f"{group}._target_={target!r} is not a {base.__name__} class")
    return obj


def _unknown_options(fn: Any, options: Mapping[str, Any], skip: Sequence[str] = ()) -> list[str]:
    """Options `fn` cannot accept by name (none when it takes **kwargs)."""
    params = inspect.signature(fn).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return []
    accepted = {n for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return sorted(set(options) - accepted - set(skip))


def _accepted(fn: Any, skip: Sequence[str]) -> str:
    names = [n for n, p in inspect.signature(fn).parameters.items()
             if n not in ("self", "cls", *skip) and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    return ", ".join(names) or "none"


def _check_layers(value: Any, key: str, model: ModelInfo, skip_set: bool = True) -> None:
    """Layer indices in range for the model (and, for a skip set, leaving at least one layer)."""
    if not isinstance(value, (list, tuple)) or not all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        raise ConfigError(f"{key} must be a list of layer indices, got {value!r}")
    if model.num_layers is None:
        return
    bad = [i for i in value if not 0 <= i < model.num_layers]
    if bad:
        raise ConfigError(
            f"{key}={list(value)}: layer indices {bad} out of range, {model.name} has layers 0..{model.num_layers - 1}"
        )
    if skip_set:
        try:
            validate_skip_layers(list(value), model.num_layers)
        except ValueError as err:
            raise ConfigError(f"{key}={list(value)}: {err}") from None


def _drafter(cfg: Mapping[str, Any], model: ModelInfo, cwd: Path) -> DrafterSpec:
    target, options = _split_target(cfg, "drafter")
    cls = _locate(target, "drafter", Drafter)
    # from_target(target, vocab_ids, **options) either names its options or forwards them to __init__.
    params = inspect.signature(cls.from_target).parameters.values()
    where = cls.__init__ if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params) else cls.from_target
    unknown = _unknown_options(where, options, skip=("target", "vocab_ids"))
    if unknown:
        raise ConfigError(
            f"drafter {cls.__name__} has no option(s) {unknown} (accepted: {_accepted(where, ('target', 'vocab_ids'))})"
        )
    if "skip_layers" in options:  # a drafter's skip set indexes the target's layers
        _check_layers(options["skip_layers"], "drafter.skip_layers", model)
    source = options.get("source")
    if isinstance(source, str) and (_looks_like_path(source) or (cwd / source).is_dir()):
        path = _absolute(source, cwd)
        if not path.exists():
            raise ConfigError(f"drafter.source: {path} does not exist")
        options = {**options, "source": str(path)}
    return DrafterSpec(target=target, options=options)


def _domain(cfg: Mapping[str, Any], cwd: Path, need_test: bool) -> tuple[DomainSpec, dict[str, Any]]:
    name = cfg.get("name")
    if name not in DOMAINS:
        raise ConfigError(f"domain.name={name!r} is unknown: use one of {', '.join(DOMAINS)}")
    source = cfg.get("source", "builtin")
    if source not in SOURCES:
        raise ConfigError(f"domain.source={source!r} is unknown: use one of {', '.join(SOURCES)}")
    path = cfg.get("path")
    if path is not None and source != "hf":
        path = str(_absolute(path, cwd))
        if not Path(path).exists():
            raise ConfigError(f"domain.path: {path} does not exist (domain.source={source})")
    limit = cfg.get("limit")
    if limit is not None and (not isinstance(limit, int) or limit < 2):
        raise ConfigError(f"domain.limit must be an integer >= 2 or null, got {limit!r}")
    fraction = cfg.get("calibration_fraction", 0.2)
    if not isinstance(fraction, (int, float)) or not 0 < fraction < 1:
        raise ConfigError(f"domain.calibration_fraction must be in (0, 1), got {fraction!r}")
    spec = DomainSpec(
        name=name,
        source=source,
        path=path,
        options=dict(cfg.get("options") or {}),
        limit=limit,
        calibration_fraction=float(fraction),
        split_seed=int(cfg.get("split_seed", 0)),
        exclude_ids=tuple(cfg.get("exclude_ids") or ()),
    )
    if source == "hf":  # loading may need the network; the job reports problems when it loads
        return spec, {}
    try:
        calibration, test = spec.load("calibration"), spec.load("test")
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ConfigError(f"domain {name} ({source}): {_one_line(err)}") from None
    if not calibration or (need_test and not test):
        raise ConfigError(
            f"domain {name} ({source}) gives {len(calibration)} calibration and {len(test)} test examples: "
            "raise domain.limit or change domain.calibration_fraction"
        )
    return spec, data_fingerprint(calibration, test)


def data_fingerprint(calibration: Sequence[Any], test: Sequence[Any]) -> dict[str, Any]:
    """Hashes of the example ids (and contents) of both splits: what identifies the data of a job."""
    def ids_hash(examples: Sequence[Any]) -> str:
        return hashlib.sha256("\n".join(ex.id for ex in examples).encode()).hexdigest()

    content = hashlib.sha256()
    for ex in [*calibration, *test]:
        content.update(json.dumps([ex.id, list(ex.turns), list(ex.references)], ensure_ascii=False).encode())
    return {
        "calibration_ids_sha256": ids_hash(calibration),
        "test_ids_sha256": ids_hash(test),
        "content_sha256": content.hexdigest(),
        "n_calibration": len(calibration),
        "n_test": len(test),
    }


def _search(cfg: Mapping[str, Any], model: ModelInfo, drafter: DrafterSpec) -> SearchSpec:
    target, options = _split_target(cfg, "search")
    cls = _locate(target, "search", SearchStrategy)
    budget = options.pop("max_measurements", None)
    if budget is not None and (not isinstance(budget, int) or budget < 1):
        raise ConfigError(f"search.max_measurements must be a positive integer or null, got {budget!r}")
    if issubclass(cls, TPEVocabSearch):
        drafter_cls = locate(drafter.target)
        if not issubclass(drafter_cls, LMDrafter):
            raise ConfigError(
                f"search {cls.name} trims the drafter's LM head, and drafter {drafter_cls.name} has none: "
                "use drafter=self_skip or drafter=draft_model"
            )
        if "skip_layers" in options:
            _check_layers(options["skip_layers"], "search.skip_layers", model)
        provided = {"vocab_size": model.vocab_size or 2**31 - 1, "coverage": lambda k: 1.0,
                    "latency_reduction": lambda k: 0.0}
    elif issubclass(cls, LayerSkipSearch):
        if "protect_layers" in options:
            _check_layers(options["protect_layers"], "search.protect_layers", model, skip_set=False)
        provided = {"num_layers": model.num_layers or 1024}
    else:
        provided = {}
    unknown = _unknown_options(cls.__init__, options, skip=tuple(provided))
    if unknown:
        raise ConfigError(f"search {cls.__name__} has no option(s) {unknown} (accepted: {_accepted(cls.__init__, tuple(provided))})")
    if provided:  # constructing the strategy checks the values (depths, tolerances, layer ranges)
        try:
            cls(**provided, **options)
        except (TypeError, ValueError) as err:
            raise ConfigError(f"search {cls.__name__}: {_one_line(err)}") from None
    return SearchSpec(target=target, options=options, budget=budget)


def _runner(cfg: Mapping[str, Any]) -> Component:
    target, options = _split_target(cfg, "runner")
    cls = _locate(target, "runner")
    if not hasattr(cls, "evaluate_batch"):
        raise ConfigError(f"runner._target_={target!r} has no evaluate_batch: it is not a runner")
    unknown = _unknown_options(cls.__init__, options)
    if unknown:
        raise ConfigError(f"runner {cls.__name__} has no option(s) {unknown} (accepted: {_accepted(cls.__init__, ())})")
    check = getattr(cls, "check_options", None)
    if check is not None:  # e.g. RayRunner: GPUs that do not exist, before anything starts
        try:
            check(**options)
        except ValueError as err:
            raise ConfigError(f"runner: {_one_line(err)}") from None
    return Component(target, options)


def _logger(cfg: Mapping[str, Any] | None) -> Component | None:
    if not cfg:  # logger=none
        return None
    target, options = _split_target(cfg, "logger")
    cls = _locate(target, "logger")
    unknown = _unknown_options(cls.__init__, options)
    if unknown:
        raise ConfigError(f"logger {cls.__name__} has no option(s) {unknown} (accepted: {_accepted(cls.__init__, ())})")
    check = getattr(cls, "check_options", None)
    if check is not None:
        try:
            check(**options)
        except ValueError as err:
            raise ConfigError(f"logger: {_one_line(err)}") from None
    return Component(target, options)


def _one_line(err: BaseException) -> str:
    text = str(err).strip()
    if isinstance(err, KeyError) and err.args:
        text = str(err.args[0])
    return (text.splitlines()[0] if text else type(err).__name__)


# -- measuring with the store written as results arrive -------------------------------------------
# -- running one job -------------------------------------------------------------------------------
def run_plan(plan: JobPlan) -> JobResult:
    """Run the job: search, held-out test evaluation, outputs, reproduce.json, logging.

    Writes into plan.output_dir: reproduce.json (at the start, completed at the end), config_map.{yaml,json},
    measurements.csv, summary.json (see `specsparse.pipeline.run_job`), and the logger's files.
    """
    out = plan.output_dir
    out.mkdir(parents=True, exist_ok=True)
    start = time.time()
    record = reproduce_record(plan)
    _write_json(out / "reproduce.json", {**record, "status": "running"})
    store = ResultsStore(plan.store_path)
    runner = logger = None
    status = "failed"
    try:
        try:
            runner = plan.runner.build(output_dir=out)
        except ValueError as err:  # e.g. GPUs the cluster does not have: before any model loads
            raise ConfigError(f"runner {plan.runner.name}: {_one_line(err)}") from None
        if plan.logger is not None:
            logger = plan.logger.build()
            logger.start(
                name=out.name,
                output_dir=out,
                config=plan.config,
                tags=[f"model:{plan.model.name}", f"drafter:{plan.drafter_name}",
                      f"domain:{plan.evaluation.domain.name}", f"search:{plan.search_name}"],
                group=plan.experiment,
            )
        job = run_job(
            plan.evaluation, plan.search, runner, store, out, evaluate_test=plan.evaluate_test,
            on_measurement=logger.on_measurement if logger is not None else None, progress=plan.progress,
        )
        identity = job.description
        record.update(
            model_identity=identity["model_identity"], code_version=identity["code_version"],
            num_layers=job.num_layers,
        )
        if plan.model.num_layers not in (None, job.num_layers):
            log.warning("model.num_layers=%s in the config, but %s has %d layers: fix conf/model/%s.yaml",
                        plan.model.num_layers, plan.model.source, job.num_layers, plan.model.name)
        if logger is not None:
            logger.finish(job, model=plan.model.name, num_layers=job.num_layers)
        status = "finished"
        return job
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    finally:
        if logger is not None:
            logger.close(ok=status == "finished")
        if runner is not None and hasattr(runner, "close"):
            runner.close()
        store.close()
        record.update(status=status, finished=_now(), wall_time_s=round(time.time() - start, 3))
        _write_json(out / "reproduce.json", record)


def reproduce_record(plan: JobPlan) -> dict[str, Any]:
    """What reproduces the job: command, composed config, seeds, versions, git commit, data and model."""
    overrides = list(plan.overrides)
    return {
        "command": " ".join(["python", "run.py", *overrides]),
        "argv": list(sys.argv),
        "overrides": overrides,
        "experiment": plan.experiment,
        "choices": plan.choices,
        "model": asdict(plan.model),
        "drafter": plan.drafter_name,
        "domain": plan.evaluation.domain.name,
        "search": plan.search_name,
        "seeds": {
            "seed": plan.seed,
            "generation": plan.evaluation.generation.seed,
            "split": plan.evaluation.domain.split_seed,
            "search": plan.search.options.get("seed"),
        },
        "data": plan.data,
        "evaluation_spec": asdict(plan.evaluation),
        "search_spec": asdict(plan.search),
        "store": str(plan.store_path),
        "output_dir": str(plan.output_dir),
        "versions": package_versions(),
        "git": git_state(Path(__file__).resolve().parents[1]),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "host": socket.gethostname(),
        "started": _now(),
        "config": plan.config,
    }


def package_versions(packages: Sequence[str] = PACKAGES) -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in packages:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    versions["specsparse"] = versions.get("specsparse") or __version__
    return versions


def git_state(directory: Path) -> dict[str, Any] | None:
    """{"commit", "dirty"} of the checkout holding `directory`, or None outside a git checkout."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(directory), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return None
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": bool(status) if status is not None else None}


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _write_json(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, default=str))


# -- the table printed at the end ------------------------------------------------------------------
def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def results_table(job: JobResult, plan: JobPlan | None = None) -> str:
    """A small text table of the job: dense vs selected on calibration and test."""
    s = job.summary()
    skip = s["selected_skip_layers"]
    label = Candidate(tuple(skip), s["selected_vocab_size"]).label
    lines = [
        f"domain {s['domain']}, search {s['strategy']}: selected {label}"
        + (f" ({len(skip)} layers skipped)" if skip else ""),
        f"{'split':<12}{'config':<10}{'accept':>8}{'metric':>9}{'modeled tok/s':>15}{'ms/tok':>8}",
    ]
    for split in ("calibration", "test"):
        for which in ("dense", "selected"):
            m = s[split][which]
            if m is None:
                continue
            cost = None if m.get("cost") is None else 1000 * m["cost"]
            lines.append(
                f"{split:<12}{which:<10}{_fmt(m['accept_length']):>8}{_fmt(m['metric']):>9}"
                f"{_fmt(m['tokens_per_s'], 1):>15}{_fmt(cost, 2):>8}"
            )
    c = s["search_cost"]
    timing, modeled = s.get("timing_test"), s.get("speedup_test_modeled")
    if timing is not None:
        low, high = timing["interval"]
        lines.append(
            f"speedup on test, measured side by side ({timing['prompts']} prompts, engine): {timing['speedup']:.2f}x "
            f"[95% CI {low:.2f}-{high:.2f}] ({timing['tokens_per_s'][0]:.1f} -> {timing['tokens_per_s'][1]:.1f} tok/s); "
            f"modeled {_fmt(modeled, 2)}x"
        )
    elif modeled is not None:
        lines.append(f"speedup on test: modeled {modeled:.2f}x (not timed: the selection is the dense model)")
    lines.append(
        f"{c['configurations_measured']} configurations measured, "
        f"{c['cache_hits']} from the store, search {c['wall_time_s']:.1f} s"
    )
    for note in s["notes"]:
        lines.append(f"note: {note}")
    return "\n".join(lines)

