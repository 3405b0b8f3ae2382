"""The package's layout: packages import only those below them, no two modules import each other, and
no module outgrows a reading."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "specsparse"

# Lowest first: a package may import itself and those before it, never one after it.
PACKAGE_ORDER = (
    "specsparse",  # the package's own __init__ (version)
    "conf",  # the packaged Hydra configuration: YAML only
    "util",
    "types",
    "extras",
    "metrics",
    "data",
    "old_formats",  # readers of files earlier versions wrote (reads data's packaged domains)
    "decoding",
    "drafters",
    "measuring",
    "search",
    "study",
    "config_map",
    "serving",
    "jobs",
    "reporting",
    "cli",
)
MAX_LINES = 450


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in ROOT.rglob("*.py")}


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The specsparse modules `name` imports anywhere in its body (deferred imports included)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            names = [origin, *(f"{origin}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found.update(n for n in names if n in modules and n != name)
    return found


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


GRAPH = {name: _imports(name, path, _modules()) for name, path in _modules().items()}


def test_every_package_has_a_place_in_the_order():
    assert {_package(m) for m in GRAPH} <= set(PACKAGE_ORDER)


def test_no_import_runs_upward():
    rank = {package: i for i, package in enumerate(PACKAGE_ORDER)}
    upward = sorted(f"{a} -> {b}" for a, targets in GRAPH.items() for b in targets
                    if rank[_package(b)] > rank[_package(a)])
    assert upward == []


def test_no_two_modules_import_each_other():
    circles = sorted(f"{a} <-> {b}" for a, targets in GRAPH.items() for b in targets
                     if a < b and a in GRAPH.get(b, ()) and not b.startswith(a + "."))
    assert circles == []


@pytest.mark.parametrize("path", sorted(ROOT.rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_module_fits_a_reading(path):
    assert len(path.read_text().splitlines()) <= MAX_LINES


def test_tests_follow_the_rooms():
    """tests/<package>/ holds the tests of one package; the whole-project checks stay at the top."""
    tests = Path(__file__).resolve().parent
    folders = {p.name for p in tests.iterdir() if p.is_dir() and p.name not in ("golden", "__pycache__")}
    assert folders <= set(PACKAGE_ORDER)


def test_jobs_reach_the_evaluator_only_through_the_study():
    """A job measures through its `Study` (`specsparse.study`): no module of jobs/ names the Evaluator."""
    named = sorted(f"{name}: {alias.name}" for name, path in _modules().items() if _package(name) == "jobs"
                   for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.ImportFrom)
                   for alias in node.names if alias.name in ("Evaluator", "Evaluators"))
    assert named == []
