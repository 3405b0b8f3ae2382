"""From a composed configuration (a plain dict) to a validated `JobPlan`: `build_plan` is the one place
job settings are checked (with the value checks of `specsparse.jobs.checks`, the model's of
`specsparse.jobs.model_checks` and the data's of `specsparse.jobs.data_checks`).

`run.py` composes the configuration with Hydra and hands it over as plain data
(`OmegaConf.to_container(cfg, resolve=True)`); this module never imports Hydra.

    plan = build_plan(config, output_dir="/abs/outputs/runs/...", cwd="/abs/launch/dir")

`build_plan` validates everything it can without loading a model (unknown options, skip sets and
protected layers against the model's layer count, domains and data files, impossible resources) and
raises `ConfigError` with a one-line message. Group options name their code with `_target_`
(public dotpaths, resolved by `specsparse.util.locate`); there is no second registry. Each class checks
what is its own: a drafter its options (`ConfiguredDrafter.check_options`, and `drafts_trees_with`
for what they draft) and its place in the job (`ConfiguredDrafter.check_job`, given a `PlannedJob`), a
search what it asks of the drafter (`trims_vocabulary`), the TSS rule its settings against the model's
depth (`TSSRule.check`).
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specsparse.data.corpus import KEYWORDS as CORPUS_KEYWORDS
from specsparse.drafters.base import ConfiguredDrafter, PlannedJob
from specsparse.extras import MissingExtraError, require_installed
from specsparse.jobs import objectives
from specsparse.jobs.checks import (
    ConfigError,
    absolute,
    accepted_options,
    check_option_types,
    flag_option,
    looks_like_path,
    seed_option,
    unknown_options,
)
from specsparse.jobs.data_checks import corpus_entries, domain_spec
from specsparse.jobs.model_checks import ModelInfo, check_layers, cost_profile, model_info
from specsparse.jobs.objectives import checked_objective, checked_objective_timing
from specsparse.measuring.evaluation import EvaluationSpec, MeasureSpec
from specsparse.measuring.measure import MODES
from specsparse.search.base import LayerSkipSearch, SearchStrategy
from specsparse.search.rule import TSSRule
from specsparse.study.vocab_comparison import VocabComparisonSpec
from specsparse.types import Component, GenerationConfig
from specsparse.util import first_line, is_int, locate, network_filesystem

MAX_BATCH_SIZE = 1024  # rows of one batched forward (the automatic size stops at 64; each row holds a KV cache)
GROUPS = ("model", "drafter", "domain", "search", "runner", "logger")


# -- plain specs -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class JobPlan:
    """Everything one job needs, validated, as plain data."""

    evaluation: EvaluationSpec
    search: Component
    runner: Component
    logger: Component | None
    model: ModelInfo
    store_path: Path
    output_dir: Path
    max_measurements: int | None = None  # the search driver's budget of new measurements
    timing_prompts: int | None = 24  # test prompts timed side by side (None: all)
    vocab_comparison: VocabComparisonSpec | None = None  # search=tpe_vocab: the vocabulary paper's comparison
    evaluate_test: bool = True
    progress: bool = True
    experiment: str | None = None
    seed: int = 0
    objective: str | tuple[str, ...] | None = objectives.DEFAULT  # what a sweeper reads (jobs.objectives.OBJECTIVES)
    # (calibration prompts or None for all, repeats): plain, dense and the pick timed on the calibration split
    # for a measured objective that a sweeper reads; None: no such timing (no sweeper reads the objective)
    objective_timing: tuple[int | None, int] | None = None
    choices: dict[str, str] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict, compare=False)
    overrides: tuple[str, ...] = ()
    data: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def search_name(self) -> str:
        return self.choices.get("search") or self.search.name

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
    objective_read: bool = False,
) -> JobPlan:
    """Validate a composed configuration and turn it into a JobPlan, without loading any model.

    config: the composed configuration as plain data (groups model, drafter, domain, search, runner,
        logger, plus generation, seed, paths, cost, evaluate_test, progress, experiment_name).
    output_dir: the job's directory (Hydra's output dir); made absolute.
    cwd: where relative paths in the config (data files, model files, the store) resolve from.
    choices: the group option chosen for each group (Hydra's runtime choices), used as short names.
    objective_read: a sweeper reads the job's `objective` (run.py: multirun under a sweeper other than
        Hydra's basic one): a measured objective then times the calibration split (`objective_timing`).
    """
    cwd_path = Path(os.path.abspath(cwd or os.getcwd()))
    missing = [g for g in GROUPS if g not in config]
    if missing:
        raise ConfigError(f"configuration lacks group(s) {missing}: compose it from conf/config.yaml")
    runner = _component(config["runner"], "runner", required="evaluate_batch")
    loads_here = getattr(runner.cls, "loads_models_here", True)  # else the workers' devices are the cluster's to check
    model = model_info(config["model"], cwd_path, device_here=loads_here)
    if not loads_here and str(model.device).startswith("cuda") and not runner.options.get("gpus_per_trial"):
        raise ConfigError(f"model.device={model.device!r} runs on the Ray workers, which hold no GPU: set "
                          "runner.gpus_per_trial=1 (or model.device=cpu)")
    generation = _generation(config.get("generation") or {})
    measure = _measure(config.get("measure") or {})
    drafter = _drafter(config["drafter"], model, cwd_path)
    domain, data = domain_spec(config["domain"], cwd_path, flag_option(config, "evaluate_test"))
    if generation.temperature > 0 and drafter.cls.drafts_trees_with(drafter.options):
        raise ConfigError(f"drafter {drafter.name} drafts token trees, which verify greedily only: use "
                          "generation.temperature=0, or chains (leave out the drafter's tree / branches options)")
    search, max_measurements = _search(config["search"], model, drafter)
    logger = _logger(config["logger"])
    evaluation = EvaluationSpec(
        model=model.source, dtype=model.dtype, device=model.device, forward_path=model.forward_path,
        drafter=drafter, domain=domain,
        split="calibration", generation=generation, measure=measure,
        vocab_corpus=_vocab_corpus(config.get("vocab_corpus", EvaluationSpec.vocab_corpus), cwd_path),
        cost_profile=cost_profile(config.get("cost") or {}, model, cwd_path),
    )
    vocab_comparison = _vocab_comparison(config.get("vocab_comparison"), search)
    _check_drafter_in_job(drafter, _planned_job(evaluation, model, search, vocab_comparison))
    paths = config.get("paths") or {}
    store = paths.get("store", "outputs/store.sqlite")
    if not isinstance(store, str) or not store:
        raise ConfigError(f"paths.store={store!r}: give the results store's file path (default outputs/store.sqlite)")
    store = absolute(store, cwd_path)
    if (filesystem := network_filesystem(store)) is not None:
        raise ConfigError(f"paths.store={store} is on a network filesystem ({filesystem}), where SQLite's locking is "
                          "unsafe: keep the results store on the local disk of the node that runs the job "
                          "(paths.store=/local/folder/store.sqlite), and only paths.outputs on the shared folder")
    objective = checked_objective(config.get("objective", JobPlan.objective))
    objective_timing = checked_objective_timing(config.get("objective_timing") or {})
    return JobPlan(
        evaluation=evaluation,
        search=search,
        runner=runner,
        logger=logger,
        model=model,
        store_path=store,
        output_dir=absolute(output_dir, cwd_path),
        max_measurements=max_measurements,
        timing_prompts=_timing_prompts(config.get("timing_prompts", 24)),
        vocab_comparison=vocab_comparison,
        evaluate_test=flag_option(config, "evaluate_test"),
        progress=flag_option(config, "progress"),
        experiment=config.get("experiment_name"),
        seed=seed_option(config, "seed"),
        objective=objective,
        objective_timing=objective_timing if objective_read and objectives.timed(objective) else None,
        choices=dict(choices or {}),
        config=dict(config),
        overrides=tuple(overrides),
        data=data,
    )


def _planned_job(evaluation: EvaluationSpec, model: ModelInfo, search: Component,
                 vocab_comparison: VocabComparisonSpec | None) -> PlannedJob:
    """The job as a drafter's `check_job` sees it; the measured ids (calibration and test) load only
    if a check asks for them, and are unknown for a Hub set (loading it may need the network)."""
    domain = evaluation.domain
    return PlannedJob(
        domain=domain.name, model_source=model.source, search=search.name, domain_limit=domain.limit,
        num_layers=model.num_layers, vocab_size=model.vocab_size, trims_vocabulary=search.cls.trims_vocabulary,
        vocab_corpus=evaluation.vocab_corpus, train_at_k=bool(vocab_comparison and vocab_comparison.train_at_k),
        examples=None if domain.source == "hf" else lambda: [ex.id for ex in domain.load("all")],
    )


def _check_drafter_in_job(drafter: Component, job: PlannedJob) -> None:
    """What the job's vocabulary options ask of the drafter, then the drafter's own `check_job`."""
    cls, options = drafter.cls, drafter.options
    if "drafter_responses" in job.vocab_corpus and not cls.knows_training_replies(options):
        raise ConfigError(f"vocab_corpus drafter_responses: drafter {drafter.name} has no training replies: use "
                          "drafter=eagle with drafter.train (or drafter.path a head `specsparse train-drafter` wrote)")
    if job.train_at_k and not cls.trains_at_k(options):
        raise ConfigError("vocab_comparison.train_at_k trains a head at the searched k with drafter.train's "
                          "recipe: use drafter=eagle with drafter.train, or vocab_comparison.train_at_k=false")
    try:
        cls.check_job(options, job)
    except ValueError as err:
        raise ConfigError(first_line(err)) from None


def _vocab_comparison(value: Any, search: Component) -> VocabComparisonSpec | None:
    """`vocab_comparison`: null, or the options of the vocabulary paper's comparison (search=tpe_vocab only)."""
    if value is None:
        return None
    if not search.cls.supports_vocab_comparison:
        raise ConfigError("vocab_comparison compares draft vocabularies that search=tpe_vocab picks: "
                          "use search=tpe_vocab, or vocab_comparison=null")
    if not isinstance(value, Mapping):
        raise ConfigError(f"vocab_comparison={value!r}: give its options ({', '.join(VocabComparisonSpec.option_names())}) or null")
    try:
        spec = VocabComparisonSpec.from_options(value)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"vocab_comparison: {first_line(err)}") from None
    return spec


def _vocab_corpus(value: Any, cwd: Path) -> tuple[str, ...]:
    """Keywords stay, "hf:" ids stay, files and folders become absolute paths that exist."""
    return corpus_entries(value, cwd, "vocab_corpus", CORPUS_KEYWORDS)


def _timing_prompts(value: Any) -> int | None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise ConfigError(f"timing_prompts={value!r}: give a positive number of test prompts, or null for all")
    return value


def _generation(cfg: Mapping[str, Any]) -> GenerationConfig:
    """The `generation` group: GenerationConfig's options, of its kinds, through its own checks."""
    unknown = unknown_options(GenerationConfig, cfg)
    if unknown:
        raise ConfigError(f"generation: unknown option(s) {unknown}: use {accepted_options(GenerationConfig, ())}")
    check_option_types(GenerationConfig, cfg, "generation")
    if cfg.get("num_draft_tokens") == 0:  # what plain decoding inside the library uses; a job speculates
        raise ConfigError("generation.num_draft_tokens=0 drafts nothing, so there is no speculation to search: "
                          "give 1 or more (the papers draft 5-8); plain decoding is timed beside every job anyway")
    try:
        return GenerationConfig(**cfg)
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
    if batch_size is not None and (not isinstance(batch_size, int) or isinstance(batch_size, bool)
                                   or not 1 <= batch_size <= MAX_BATCH_SIZE):
        raise ConfigError(f"measure.batch_size={batch_size!r}: give an integer in 1..{MAX_BATCH_SIZE} (rows per batched "
                          "forward), or null for automatic")
    return MeasureSpec(mode=mode, batch_size=batch_size)


def _split_target(cfg: Mapping[str, Any] | None, group: str) -> tuple[str, dict[str, Any]]:
    """(class dotpath, options) of a group's config."""
    if not isinstance(cfg, Mapping) or not cfg.get("_target_"):
        raise ConfigError(f"{group} config needs a `_target_` naming its class (see conf/{group}/)")
    options = {k: v for k, v in cfg.items() if k != "_target_"}
    return str(cfg["_target_"]), options


def _locate(class_path: str, group: str, base: type | None = None) -> Any:
    try:
        obj = locate(class_path)
    except ValueError as err:
        raise ConfigError(f"{group}._target_: {err}") from None
    if base is not None and not (inspect.isclass(obj) and issubclass(obj, base)):
        raise ConfigError(f"{group}._target_={class_path!r} is not a {base.__name__} class")
    return obj


def _drafter(cfg: Mapping[str, Any], model: ModelInfo, cwd: Path) -> Component:
    class_path, options = _split_target(cfg, "drafter")
    cls = _locate(class_path, "drafter", ConfiguredDrafter)
    # from_target(target, vocab_ids, **options) either names its options or forwards them to __init__.
    params = inspect.signature(cls.from_target).parameters.values()
    where = cls.__init__ if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params) else cls.from_target
    context = ("target", "vocab_ids", *cls.job_context)  # given by the job, not by options
    unknown = unknown_options(where, options, skip=context)
    if unknown:
        raise ConfigError(f"drafter {cls.__name__} has no option(s) {unknown} (accepted: {accepted_options(where, context)})")
    check_option_types(where, options, "drafter")
    try:
        cls.check_options(**options)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"drafter {cls.name}: {first_line(err)}") from None
    if "skip_layers" in options:  # a drafter's skip set indexes the target's layers
        check_layers(options["skip_layers"], "drafter.skip_layers", model)
    if "path" in options and not options["path"]:
        raise ConfigError(f"drafter {cls.name} needs drafter.path=<checkpoint directory or Hub id>")
    for option in ("corpus", "warm_corpus"):  # a drafter's own texts (samd's static automaton, a warm table)
        if option in options:
            options = {**options, option: corpus_entries(options[option], cwd, f"drafter.{option}", ("builtin",),
                                                          allow_empty=True)}
    for option in ("source", "path"):  # a draft model or checkpoint: a local path resolves against cwd
        source = options.get(option)
        if isinstance(source, str) and (looks_like_path(source) or (cwd / source).is_dir()):
            path = absolute(source, cwd)
            trained_here = option == "path" and options.get("train")  # a folder of heads trained on demand
            if not path.exists() and not trained_here:
                raise ConfigError(f"drafter.{option}: {path} does not exist")
            if path.is_dir() and not trained_here and not (path / "config.json").is_file():
                raise ConfigError(f"drafter.{option}: {path} holds no checkpoint (config.json): give a checkpoint "
                                  "folder (`specsparse train-drafter` makes one)")
            options = {**options, option: str(path)}
    return Component(class_path, options)


def _search(cfg: Mapping[str, Any], model: ModelInfo, drafter: Component) -> tuple[Component, int | None]:
    """The search strategy and the driver's budget (`max_measurements`). Option names are checked
    against the constructor, and a layer-skip search's `rule` (the `tss` group) becomes a `TSSRule`; a
    layer-skip search whose model depth is known is also constructed, which checks its values (layer
    ranges). A vocabulary search needs the calibration data to exist, so its values are checked when
    the job builds it."""
    class_path, options = _split_target(cfg, "search")
    cls = _locate(class_path, "search", SearchStrategy)
    budget = options.pop("max_measurements", None)
    if budget is not None and (not is_int(budget) or budget < 1):
        raise ConfigError(f"search.max_measurements must be a positive integer or null, got {budget!r}")
    if cls.trims_vocabulary and not drafter.cls.trims_vocabulary:
        raise ConfigError(
            f"search {cls.name} trims the drafter's LM head, and drafter {drafter.name} has none: "
            "use drafter=self_skip, drafter=draft_model or drafter=eagle"
        )
    if "skip_layers" in options:
        check_layers(options["skip_layers"], "search.skip_layers", model)
    context = cls.context_arguments
    unknown = unknown_options(cls, options, skip=context)
    if unknown:
        raise ConfigError(f"search {cls.__name__} has no option(s) {unknown} (accepted: {accepted_options(cls, context)})")
    check_option_types(cls, options, "search")
    if "rule" in options:
        options["rule"] = _tss_rule(options["rule"], model)
    if issubclass(cls, LayerSkipSearch) and model.num_layers is not None:
        try:
            cls(num_layers=model.num_layers, **options)
        except (TypeError, ValueError) as err:
            raise ConfigError(f"search {cls.__name__}: {first_line(err)}") from None
    return Component(class_path, options), budget


def _tss_rule(value: Any, model: ModelInfo) -> TSSRule:
    """A layer-skip search's `rule`: the `tss` group (`rule: ${tss}` in conf/search/), checked key by key,
    then against the model's depth where it is known (`TSSRule.check`)."""
    if not isinstance(value, Mapping):
        raise ConfigError(f"search.rule={value!r}: give the tss settings (rule: ${{tss}})")
    unknown = unknown_options(TSSRule, value)
    if unknown:
        raise ConfigError(f"tss: unknown option(s) {unknown}: use {accepted_options(TSSRule, ())}")
    check_option_types(TSSRule, value, "tss")
    if "protect_layers" in value:
        check_layers(value["protect_layers"], "tss.protect_layers", model, skip_set=False)
    try:
        rule = TSSRule(**value)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"tss: {first_line(err)}") from None
    if model.num_layers is not None:
        try:
            rule.check(model.num_layers, model.name)
        except ValueError as err:
            raise ConfigError(first_line(err)) from None
    return rule


def _component(cfg: Mapping[str, Any], group: str, required: str | None = None) -> Component:
    """A runner or logger: its class, option names, and the class's own `check_options` when it has
    one (e.g. RayRunner: GPUs that do not exist, before anything starts)."""
    class_path, options = _split_target(cfg, group)
    cls = _locate(class_path, group)
    if required is not None and not hasattr(cls, required):
        raise ConfigError(f"{group}._target_={class_path!r} has no {required}: it is not a {group}")
    unknown = unknown_options(cls, options)
    if unknown:
        raise ConfigError(f"{group} {cls.__name__} has no option(s) {unknown} (accepted: {accepted_options(cls, ())})")
    check_option_types(cls, options, group)
    check = getattr(cls, "check_options", None)
    if check is not None:
        try:
            check(**options)
        except ValueError as err:
            raise ConfigError(f"{group}: {first_line(err)}") from None
    return Component(class_path, options)


def _logger(cfg: Mapping[str, Any] | None) -> Component | None:
    """None for logger=none. logger=auto (`auto: true` on logger=wandb's options) is W&B when the wandb
    extra is installed, and no logger otherwise."""
    if not cfg:
        return None
    options = {k: v for k, v in cfg.items() if k != "auto"}
    if cfg.get("auto"):
        try:
            require_installed("wandb", extra="wandb")
        except MissingExtraError:
            return None
    return _component(options, "logger")
