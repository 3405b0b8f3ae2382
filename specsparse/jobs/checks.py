"""The value checks every part of a job's configuration goes through (`specsparse.jobs.config`):
`ConfigError`, strict kinds, flags and seeds, paths, and the options a class accepts by name.

They run on the composed configuration as plain data, before anything loads, and each failure is a
`ConfigError` whose one-line message names the key.
"""

from __future__ import annotations

import inspect
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from specsparse.util import is_int, is_number


class ConfigError(ValueError):
    """A configuration value that cannot work; the message is one line naming the key."""


_KIND_NAMES = {int: "an int", float: "a finite number", bool: "a bool", str: "a string"}
_ANNOTATED_KINDS = {"int": int, "float": float, "bool": bool, "str": str}


def _is_a(value: Any, kind: type) -> bool:
    """`value` is of `kind`, strictly: a bool is not an int, an int is a float."""
    if kind is bool or kind is str:
        return isinstance(value, kind)
    if kind is int:
        return is_int(value)
    return is_number(value) and math.isfinite(value)


def seed_option(config: Mapping[str, Any], key: str, name: str | None = None) -> int:
    """A seed-like integer (default 0): every generator it feeds takes 0 .. 2**63 - 1."""
    value = config.get(key, 0)
    if not is_int(value) or not 0 <= value < 2**63:
        raise ConfigError(f"{name or key}={value!r} must be an integer in 0..2**63-1")
    return value


def flag_option(config: Mapping[str, Any], key: str) -> bool:
    """A true/false setting (default true)."""
    value = config.get(key, True)
    if not isinstance(value, bool):
        raise ConfigError(f"{key}={value!r} must be true or false")
    return value


def absolute(path: str | os.PathLike, cwd: Path) -> Path:
    """`path` made absolute against `cwd` (the launch directory)."""
    # abspath, not resolve: keep the user's spelling of symlinked folders in records
    return Path(os.path.abspath(Path(path).expanduser() if Path(path).expanduser().is_absolute() else cwd / path))


def looks_like_path(source: str) -> bool:
    """A model or checkpoint source written as a path rather than a name or Hub id."""
    return source.endswith(".gguf") or source.startswith(("/", "./", "../", "~"))


def parameters(obj: Any) -> dict[str, inspect.Parameter] | None:
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


def unknown_options(obj: Any, options: Mapping[str, Any], skip: Sequence[str] = ()) -> list[str]:
    """Options `obj` (a function, or a class's constructor) cannot accept by name."""
    named = parameters(obj)
    return [] if named is None else sorted(set(options) - set(named) - set(skip))


def accepted_options(obj: Any, skip: Sequence[str]) -> str:
    """The option names `obj` accepts, for an error message."""
    return ", ".join(n for n in parameters(obj) or {} if n not in skip) or "none"


def check_option_types(obj: Any, options: Mapping[str, Any], where: str) -> None:
    """Each option whose parameter is annotated with plain kinds (`int`, `float | None`, `bool`, ...)
    holds one of them, strictly (a bool is not an int, a float is finite): the one check every
    component's options go through, before anything loads. Other annotations are left to the class."""
    for name, param in (parameters(obj) or {}).items():
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
