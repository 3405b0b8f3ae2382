"""Optional dependencies, installed as pip extras (pyproject.toml): `ray` for runner=ray and
`specsparse submit`, `wandb` for logger=wandb and W&B reports.

Without its extra, a feature stops with one line that names the missing package and the install
command, instead of a traceback from deep inside a job.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType


class MissingExtraError(ImportError, ValueError):
    """An optional package is not installed. Also a ValueError: option checks (`check_options` of a
    runner or logger) raise ValueError for a setting that cannot work, which the job's validation
    turns into a one-line configuration error before anything is written."""


def _missing(package: str, extra: str, otherwise: str | None = None) -> MissingExtraError:
    fix = f"pip install 'specsparse[{extra}]'" + (f", or {otherwise}" if otherwise else "")
    return MissingExtraError(f"{package} is not installed: {fix}")


def require(module: str, extra: str) -> ModuleType:
    """Import and return `module` (a dotted name such as "ray.tune"); MissingExtraError naming
    `extra` when it, or a package it needs, is not installed."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as err:
        raise _missing((err.name or module).split(".")[0], extra) from None


def require_installed(module: str, extra: str, otherwise: str | None = None) -> None:
    """Check, without importing it, that `module` is installed (for validating a configuration
    before a job starts, without the cost of importing Ray or W&B). `otherwise`: the other fix the
    message offers (e.g. "run with logger=none")."""
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or blocked in sys.modules
        found = False
    if not found:
        raise _missing(module.split(".")[0], extra, otherwise)
