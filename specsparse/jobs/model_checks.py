"""The model settings of a job (`model` and `cost`), checked before the model loads: what the config
says about the target (`ModelInfo`), the device it asks for, layer indices against its depth, and a
pinned cost profile against its architecture."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specsparse.decoding.forward_path import ForwardPathError, resolve_forward_path
from specsparse.decoding.models import DTYPES, EMBEDDED_MODELS, ModelLoadError, device_problem, embedded_package
from specsparse.decoding.skipping import validate_skip_layers
from specsparse.jobs.checks import ConfigError, absolute, looks_like_path
from specsparse.measuring.profile import ProfileError, load_profile
from specsparse.util import first_line


@dataclass(frozen=True)
class ModelInfo:
    """What the config says about the target before it is loaded."""

    name: str
    source: str
    dtype: str
    device: str
    forward_path: str = "eager"  # as it runs on the device: eager or fast
    num_layers: int | None = None
    vocab_size: int | None = None


def model_info(cfg: Mapping[str, Any], cwd: Path, device_here: bool = True) -> ModelInfo:
    """The `model` group: a source that exists where it is a path, a dtype and a device this machine
    has (`device_here`: the model loads in this process; with Ray workers the cluster checks it), and the
    depth where a local checkpoint tells it."""
    source = cfg.get("source")
    if not isinstance(source, str) or not source:
        raise ConfigError("model.source must name a model (an embedded name, a .gguf file, a Hub id or a directory)")
    if looks_like_path(source) or (cwd / source).is_dir():
        path = absolute(source, cwd)
        if not path.exists():
            raise ConfigError(f"model.source: {path} does not exist")
        if path.is_dir() and not (path / "config.json").is_file():
            raise ConfigError(f"model.source: {path} holds no config.json; give a Hugging Face model folder "
                              "(config.json, weights, tokenizer) or a .gguf file")
        if not path.is_dir() and path.suffix != ".gguf":
            raise ConfigError(f"model.source: {path} is a file but not a .gguf; give a .gguf or a model folder")
        source = str(path)
    elif source in EMBEDDED_MODELS:
        try:
            embedded_package(source)
        except ModelLoadError as err:
            raise ConfigError(f"model.source: {err}") from None
    dtype = str(cfg.get("dtype", "float32"))
    if dtype not in (*DTYPES, "auto"):
        raise ConfigError(f"model.dtype={dtype!r}: use one of {', '.join([*DTYPES, 'auto'])}")
    device = str(cfg.get("device", "cpu"))
    if device_here and (problem := device_problem(device)):
        raise ConfigError(f"model.device={device!r}: {problem}")
    try:
        forward_path = resolve_forward_path(cfg.get("forward_path", "auto"), device, dtype)
    except ForwardPathError as err:
        raise ConfigError(f"model.{err}") from None
    num_layers = cfg.get("num_layers")
    if num_layers is None and Path(source).is_dir():  # a local checkpoint says how deep it is
        config_file = Path(source) / "config.json"
        if config_file.is_file():
            num_layers = json.loads(config_file.read_text()).get("num_hidden_layers")
    if num_layers is not None and (not isinstance(num_layers, int) or isinstance(num_layers, bool) or num_layers < 1):
        raise ConfigError(f"model.num_layers must be a positive integer or null, got {num_layers!r}")
    vocab_size = cfg.get("vocab_size")
    if vocab_size is not None and (not isinstance(vocab_size, int) or isinstance(vocab_size, bool) or vocab_size < 1):
        raise ConfigError(f"model.vocab_size must be a positive integer or null, got {vocab_size!r}")
    return ModelInfo(str(cfg.get("name") or source), source, dtype, device, forward_path, num_layers, vocab_size)


def check_layers(value: Any, key: str, model: ModelInfo, skip_set: bool = True) -> None:
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


def cost_profile(cfg: Mapping[str, Any], model: ModelInfo, cwd: Path) -> str | None:
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
    path = absolute(value, cwd)
    try:
        profile = load_profile(path)
    except ProfileError as err:
        raise ConfigError(f"cost.profile: {first_line(err)}") from None
    if model.num_layers is not None and profile.num_layers != model.num_layers:
        raise ConfigError(f"cost.profile={path} was measured on a {profile.num_layers}-layer model, {model.name} has "
                          f"{model.num_layers} layers: pin a profile of this model (`specsparse profile` writes one)")
    return str(path)
