"""From a composed configuration (a plain dict) to a validated `JobPlan`: the one place job settings
are checked.

`run.py` composes the configuration with Hydra and hands it over as plain data
(`OmegaConf.to_container(cfg, resolve=True)`); this module never imports Hydra.

    plan = build_plan(config, output_dir="/abs/outputs/runs/...", cwd="/abs/launch/dir")

`build_plan` validates everything it can without loading a model (unknown options, skip sets and
protected layers against the model's layer count, domains and data files, impossible resources) and
raises `ConfigError` with a one-line message. Group options name their code with `_target_`
(public dotpaths, resolved by `specsparse.util.locate`); there is no second registry.
"""

from __future__ import annotations

import inspect
import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specsparse.data import DOMAINS, SOURCES, load_examples
from specsparse.data.corpus import KEYWORDS as CORPUS_KEYWORDS
from specsparse.data.corpus import builtin_sets
from specsparse.decoding.drafter import Drafter
from specsparse.decoding.models import DTYPES
from specsparse.decoding.skipping import validate_skip_layers
from specsparse.drafters.eagle import EagleDrafter, own_vocabulary
from specsparse.jobs.reproduce import data_fingerprint
from specsparse.jobs.vocab_comparison import VocabComparisonSpec
from specsparse.measuring.evaluation import DomainSpec, EvaluationSpec, MeasureSpec
from specsparse.measuring.measure import MODES
from specsparse.measuring.profile import ProfileError, load_profile
from specsparse.search.base import LayerSkipSearch, SearchStrategy
from specsparse.search.joint_vocab import JointVocabSearch
from specsparse.search.tpe_vocab import TPEVocabSearch
from specsparse.types import Component, GenerationConfig
from specsparse.util import first_line, is_int, is_number, locate

GROUPS = ("model", "drafter", "domain", "search", "runner", "logger")


class ConfigError(ValueError):
    """A configuration value that cannot work; the message is one line naming the key."""


# -- plain specs -----------------------------------------------------------------------------------
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
) -> JobPlan:
    """Validate a composed configuration and turn it into a JobPlan, without loading any model.

    config: the composed configuration as plain data (groups model, drafter, domain, search, runner,
        logger, plus generation, seed, paths, cost, evaluate_test, progress, experiment_name).
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
    domain, data = _domain(config["domain"], cwd_path, _flag(config, "evaluate_test"))
    if generation.temperature > 0 and _drafts_trees(drafter.options):
        raise ConfigError(f"drafter {drafter.name} drafts token trees, which verify greedily only: use "
                          "generation.temperature=0, or chains (leave out the drafter's tree / branches options)")
    search, max_measurements = _search(config["search"], model, drafter)
    runner = _component(config["runner"], "runner", required="evaluate_batch")
    logger = _component(config["logger"], "logger") if config["logger"] else None  # logger=none
    evaluation = EvaluationSpec(
        model=model.source, dtype=model.dtype, device=model.device, drafter=drafter, domain=domain,
        split="calibration", generation=generation, measure=measure,
        vocab_corpus=_vocab_corpus(config.get("vocab_corpus", EvaluationSpec.vocab_corpus), cwd_path),
        cost_profile=_cost_profile(config.get("cost") or {}, model, cwd_path),
    )
    if "drafter_responses" in evaluation.vocab_corpus:
        _check_drafter_responses(drafter)
    vocab_comparison = _vocab_comparison(config.get("vocab_comparison"), search, drafter)
    paths = config.get("paths") or {}
    store = paths.get("store", "outputs/store.sqlite")
    if not isinstance(store, str) or not store:
        raise ConfigError(f"paths.store={store!r}: give the results store's file path (default outputs/store.sqlite)")
    store = _absolute(store, cwd_path)
    return JobPlan(
        evaluation=evaluation,
        search=search,
        runner=runner,
        logger=logger,
        model=model,
        store_path=store,
        output_dir=_absolute(output_dir, cwd_path),
        max_measurements=max_measurements,
        timing_prompts=_timing_prompts(config.get("timing_prompts", 24)),
        vocab_comparison=vocab_comparison,
        evaluate_test=_flag(config, "evaluate_test"),
        progress=_flag(config, "progress"),
        experiment=config.get("experiment_name"),
        seed=_integer(config, "seed"),
        choices=dict(choices or {}),
        config=dict(config),
        overrides=tuple(overrides),
        data=data,
    )


def _drafts_trees(options: Mapping[str, Any]) -> bool:
    return any(options.get(k) for k in ("tree", "tree_choices", "recycling_tree")) or (options.get("branches") or 1) > 1


def _check_drafter_responses(drafter: Component) -> None:
    """vocab_corpus=[drafter_responses] needs a drafter whose training replies are known."""
    path = drafter.options.get("path")
    if drafter.cls is EagleDrafter and (drafter.options.get("train")
                                        or (isinstance(path, str) and (Path(path) / "responses.jsonl").is_file())):
        return
    raise ConfigError(f"vocab_corpus drafter_responses: drafter {drafter.name} has no training replies: use "
                      "drafter=eagle with drafter.train (or drafter.path a head `specsparse train-drafter` wrote)")


def _vocab_comparison(value: Any, search: Component, drafter: Component) -> VocabComparisonSpec | None:
    """`vocab_comparison`: null, or the options of the vocabulary paper's comparison (search=tpe_vocab only)."""
    if value is None:
        return None
    if not issubclass(search.cls, TPEVocabSearch):
        raise ConfigError("vocab_comparison compares draft vocabularies that search=tpe_vocab picks: "
                          "use search=tpe_vocab, or vocab_comparison=null")
    if not isinstance(value, Mapping):
        raise ConfigError(f"vocab_comparison={value!r}: give its options ({', '.join(VocabComparisonSpec.option_names())}) or null")
    try:
        spec = VocabComparisonSpec.from_options(value)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"vocab_comparison: {first_line(err)}") from None
    if spec.train_at_k and not (drafter.cls is EagleDrafter and drafter.options.get("train")):
        raise ConfigError("vocab_comparison.train_at_k trains a head at the searched k with drafter.train's "
                          "recipe: use drafter=eagle with drafter.train, or vocab_comparison.train_at_k=false")
    return spec


def _vocab_corpus(value: Any, cwd: Path) -> tuple[str, ...]:
    """Keywords stay, "hf:" ids stay, files and folders become absolute paths that exist."""
    return _corpus_entries(value, cwd, "vocab_corpus", CORPUS_KEYWORDS)


def _corpus_entries(value: Any, cwd: Path, key: str, keywords: Sequence[str], allow_empty: bool = False) -> tuple[str, ...]:
    """A corpus option: `keywords`, builtin:<domain> and "hf:" ids stay, files and folders become
    absolute paths that exist."""
    if isinstance(value, str):
        value = [value]
    named = ", ".join([*keywords, "builtin:<domain>"])
    if not isinstance(value, (list, tuple)) or not (value or allow_empty) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"{key}={value!r}: give a list of {named}, files or hf:<dataset>")
    entries = []
    for entry in value:
        if entry in keywords or builtin_sets(entry) is not None or entry.startswith("hf:"):
            entries.append(entry)
            continue
        path = _absolute(entry, cwd)
        if not path.exists():
            raise ConfigError(f"{key}: {entry!r} is neither one of {named} nor an existing file or folder ({path})")
        entries.append(str(path))
    return tuple(entries)


def _cost_profile(cfg: Mapping[str, Any], model: ModelInfo, cwd: Path) -> str | None:
    """`cost.profile`: None (this machine's profile), or a profile file that exists, parses and passes
    its checks, as an absolute path. Its architecture is checked against the model when it loads."""
    unknown = sorted(set(cfg) - {"profile"})
    if unknown:
        raise ConfigError(f"cost: unknown option(s) {unknown}: use cost.profile")
    value = cfg.get("profile")
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ConfigError(f"cost.profile={value!r}: give the path of a cost profile file, or null for this machine's")
    path = _absolute(value, cwd)
    try:
        profile = load_profile(path)
    except ProfileError as err:
        raise ConfigError(f"cost.profile: {first_line(err)}") from None
    if model.num_layers is not None and profile.num_layers != model.num_layers:
        raise ConfigError(f"cost.profile={path} was measured on a {profile.num_layers}-layer model, {model.name} has "
                          f"{model.num_layers} layers: pin a profile of this model (`specsparse profile` writes one)")
    return str(path)


def _exclude_ids(value: Any) -> tuple[str, ...]:
    """A list of example ids (one id alone is a list of one, not of its characters)."""
    ids = [value] if isinstance(value, str) else list(value or ())
    if not all(isinstance(i, str) and i for i in ids):
        raise ConfigError(f"domain.exclude_ids={value!r} must be a list of example ids, e.g. [qa-00000]")
    return tuple(ids)


def _timing_prompts(value: Any) -> int | None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise ConfigError(f"timing_prompts={value!r}: give a positive number of test prompts, or null for all")
    return value


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
        if path.is_dir() and not (path / "config.json").is_file():
            raise ConfigError(f"model.source: {path} holds no config.json; give a Hugging Face model folder "
                              "(config.json, weights, tokenizer) or a .gguf file")
        if not path.is_dir() and path.suffix != ".gguf":
            raise ConfigError(f"model.source: {path} is a file but not a .gguf; give a .gguf or a model folder")
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
    if not re.fullmatch(r"cpu|mps|cuda(:\d+)?", device):
        raise ConfigError(f"model.device={device!r}: use cpu, cuda, cuda:N (N = 0, 1, ...) or mps")
    kind = device.split(":", 1)[0]
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


_GENERATION_TYPES = {"max_new_tokens": int, "num_draft_tokens": int, "temperature": float, "seed": int,
                     "stop_on_eos": bool, "draft_length": str, "verify_cost_per_token": float}


def _generation(cfg: Mapping[str, Any]) -> GenerationConfig:
    unknown = sorted(set(cfg) - set(_GENERATION_TYPES))
    if unknown:
        raise ConfigError(f"generation: unknown option(s) {unknown}: use {', '.join(_GENERATION_TYPES)}")
    for key, kind in _GENERATION_TYPES.items():
        value = cfg.get(key)
        if key in cfg and not _is_a(value, kind):
            raise ConfigError(f"generation.{key}={value!r} must be {_KIND_NAMES[kind]}")
    try:
        return GenerationConfig(**cfg)
    except ValueError as err:
        raise ConfigError(f"generation: {err}") from None


_KIND_NAMES = {int: "an int", float: "a finite number", bool: "a bool", str: "a string"}


def _is_a(value: Any, kind: type) -> bool:
    """`value` is of `kind`, strictly: a bool is not an int, an int is a float."""
    if kind is bool or kind is str:
        return isinstance(value, kind)
    if kind is int:
        return is_int(value)
    return is_number(value) and math.isfinite(value)


def _integer(config: Mapping[str, Any], key: str, name: str | None = None) -> int:
    """A seed-like integer: every generator it feeds takes 0 .. 2**63 - 1."""
    value = config.get(key, 0)
    if not is_int(value) or not 0 <= value < 2**63:
        raise ConfigError(f"{name or key}={value!r} must be an integer in 0..2**63-1")
    return value


def _flag(config: Mapping[str, Any], key: str) -> bool:
    value = config.get(key, True)
    if not isinstance(value, bool):
        raise ConfigError(f"{key}={value!r} must be true or false")
    return value


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


def _parameters(obj: Any) -> dict[str, inspect.Parameter] | None:
    """Parameters a function (or a class's constructor) takes by name, following `**kwargs` into
    the base classes' constructors that receive them; None when it takes any name."""
    functions = [c.__init__ for c in obj.__mro__ if "__init__" in vars(c)] if inspect.isclass(obj) else [obj]
    named: dict[str, inspect.Parameter] = {}
    for fn in functions:
        params = inspect.signature(fn).parameters
        named.update({n: p for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
                      and n not in ("self", "cls") and n not in named})
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            return named
    return None


def _unknown_options(obj: Any, options: Mapping[str, Any], skip: Sequence[str] = ()) -> list[str]:
    """Options `obj` (a function, or a class's constructor) cannot accept by name."""
    named = _parameters(obj)
    return [] if named is None else sorted(set(options) - set(named) - set(skip))


def _accepted(obj: Any, skip: Sequence[str]) -> str:
    return ", ".join(n for n in _parameters(obj) or {} if n not in skip) or "none"


_ANNOTATED_KINDS = {"int": int, "float": float, "bool": bool, "str": str}


def _check_option_types(obj: Any, options: Mapping[str, Any], where: str) -> None:
    """Each option whose parameter is annotated with plain kinds (`int`, `float | None`, `bool`, ...)
    holds one of them, strictly (a bool is not an int, a float is finite): the one check every
    component's options go through, before anything loads. Other annotations are left to the class."""
    for name, param in (_parameters(obj) or {}).items():
        if name not in options or not isinstance(param.annotation, str):
            continue
        kinds = [k.strip() for k in param.annotation.split("|")]
        if not set(kinds) <= {*_ANNOTATED_KINDS, "None"}:
            continue
        value = options[name]
        if value is None and "None" in kinds or any(_is_a(value, _ANNOTATED_KINDS[k]) for k in kinds if k != "None"):
            continue
        wanted = " or ".join(_KIND_NAMES[_ANNOTATED_KINDS[k]] if k != "None" else "null" for k in kinds)
        raise ConfigError(f"{where}.{name}={value!r} must be {wanted}")


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


def _drafter(cfg: Mapping[str, Any], model: ModelInfo, cwd: Path) -> Component:
    target, options = _split_target(cfg, "drafter")
    cls = _locate(target, "drafter", Drafter)
    # from_target(target, vocab_ids, **options) either names its options or forwards them to __init__.
    params = inspect.signature(cls.from_target).parameters.values()
    where = cls.__init__ if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params) else cls.from_target
    context = ("target", "vocab_ids", *cls.job_context)  # given by the job, not by options
    unknown = _unknown_options(where, options, skip=context)
    if unknown:
        raise ConfigError(f"drafter {cls.__name__} has no option(s) {unknown} (accepted: {_accepted(where, context)})")
    _check_option_types(where, options, "drafter")
    try:
        cls.check_options(**options)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"drafter {cls.name}: {first_line(err)}") from None
    if "skip_layers" in options:  # a drafter's skip set indexes the target's layers
        _check_layers(options["skip_layers"], "drafter.skip_layers", model)
    if "path" in options and not options["path"]:
        raise ConfigError(f"drafter {cls.name} needs drafter.path=<checkpoint directory or Hub id>")
    if "corpus" in options:  # a drafter's own text corpus (samd's static automaton)
        options = {**options, "corpus": _corpus_entries(options["corpus"], cwd, "drafter.corpus", ("builtin",),
                                                        allow_empty=True)}
    for option in ("source", "path"):  # a draft model or checkpoint: a local path resolves against cwd
        source = options.get(option)
        if isinstance(source, str) and (_looks_like_path(source) or (cwd / source).is_dir()):
            path = _absolute(source, cwd)
            trained_here = option == "path" and options.get("train")  # a folder of heads trained on demand
            if not path.exists() and not trained_here:
                raise ConfigError(f"drafter.{option}: {path} does not exist")
            if path.is_dir() and not trained_here and not (path / "config.json").is_file():
                raise ConfigError(f"drafter.{option}: {path} holds no checkpoint (config.json): give a checkpoint "
                                  "folder (`specsparse train-drafter` makes one)")
            options = {**options, option: str(path)}
    return Component(target, options)


def _domain(cfg: Mapping[str, Any], cwd: Path, need_test: bool) -> tuple[DomainSpec, dict[str, Any]]:
    name = cfg.get("name")
    if not isinstance(name, str) or name not in DOMAINS:
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
        split_seed=_integer(cfg, "split_seed", "domain.split_seed"),
        exclude_ids=_exclude_ids(cfg.get("exclude_ids")),
    )
    if source == "hf":  # loading may need the network; the job reports problems when it loads
        return spec, {}
    try:
        calibration, test = spec.load("calibration"), spec.load("test")
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ConfigError(f"domain {name} ({source}): {first_line(err)}") from None
    if not calibration or (need_test and not test):
        raise ConfigError(
            f"domain {name} ({source}) gives {len(calibration)} calibration and {len(test)} test examples: "
            "raise domain.limit or change domain.calibration_fraction"
        )
    if spec.exclude_ids:
        known = {ex.id for ex in load_examples(name, source, path, limit=limit, **spec.options)}
        unknown = sorted(set(spec.exclude_ids) - known)
        if unknown:
            raise ConfigError(f"domain.exclude_ids names {len(unknown)} id(s) the {source} set does not have, "
                              f"e.g. {unknown[0]!r}: check the ids (or domain.limit)")
    return spec, data_fingerprint(calibration, test)


def _search(cfg: Mapping[str, Any], model: ModelInfo, drafter: Component) -> tuple[Component, int | None]:
    """The search strategy and the driver's budget (`max_measurements`). Option names are checked
    against the constructor; a layer-skip search whose model depth is known is also constructed, which
    checks its values (depths, tolerances, layer ranges). A vocabulary search needs the calibration
    data to exist, so its values are checked when the job builds it."""
    target, options = _split_target(cfg, "search")
    cls = _locate(target, "search", SearchStrategy)
    budget = options.pop("max_measurements", None)
    if budget is not None and (not is_int(budget) or budget < 1):
        raise ConfigError(f"search.max_measurements must be a positive integer or null, got {budget!r}")
    trims = issubclass(cls, (TPEVocabSearch, JointVocabSearch))
    if trims and not drafter.cls.trims_vocabulary:
        raise ConfigError(
            f"search {cls.name} trims the drafter's LM head, and drafter {drafter.name} has none: "
            "use drafter=self_skip, drafter=draft_model or drafter=eagle"
        )
    train = drafter.options.get("train") or {}
    if trims and drafter.cls is EagleDrafter and (
            reason := own_vocabulary(str(drafter.options.get("path") or ""))
            or ("heads drafter.train trims (vocab_size / vocab_file)" if train.get("vocab_size") or train.get("vocab_file")
                else None)):
        raise ConfigError(f"search {cls.name} picks rows of a full-vocabulary EAGLE head's LM head, and "
                          f"drafter.path={reason}: give such a head (specsparse train-drafter without "
                          "--vocab-size), or train one at the searched k with --vocab-file")
    for key in ("skip_layers", "protect_layers"):
        if key in options:
            _check_layers(options[key], f"search.{key}", model, skip_set=key == "skip_layers")
    context = cls.context_arguments
    unknown = _unknown_options(cls, options, skip=context)
    if unknown:
        raise ConfigError(f"search {cls.__name__} has no option(s) {unknown} (accepted: {_accepted(cls, context)})")
    _check_option_types(cls, options, "search")
    if issubclass(cls, LayerSkipSearch) and model.num_layers is not None:
        try:
            cls(num_layers=model.num_layers, **options)
        except (TypeError, ValueError) as err:
            raise ConfigError(f"search {cls.__name__}: {first_line(err)}") from None
    return Component(target, options), budget


def _component(cfg: Mapping[str, Any], group: str, required: str | None = None) -> Component:
    """A runner or logger: its class, option names, and the class's own `check_options` when it has
    one (e.g. RayRunner: GPUs that do not exist, before anything starts)."""
    target, options = _split_target(cfg, group)
    cls = _locate(target, group)
    if required is not None and not hasattr(cls, required):
        raise ConfigError(f"{group}._target_={target!r} has no {required}: it is not a {group}")
    unknown = _unknown_options(cls, options)
    if unknown:
        raise ConfigError(f"{group} {cls.__name__} has no option(s) {unknown} (accepted: {_accepted(cls, ())})")
    _check_option_types(cls, options, group)
    check = getattr(cls, "check_options", None)
    if check is not None:
        try:
            check(**options)
        except ValueError as err:
            raise ConfigError(f"{group}: {first_line(err)}") from None
    return Component(target, options)
