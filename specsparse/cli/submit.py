"""`specsparse submit`: run a command (e.g. a Hydra sweep) as a Ray job, through `ray job submit`."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from specsparse.cli.common import fail

DEFAULT_DASHBOARD = "http://127.0.0.1:8265"
# Never uploaded with the working directory (besides what .gitignore excludes, which Ray honours).
SUBMIT_EXCLUDES = [".git", ".venv", "outputs", "multirun", "wandb", "__pycache__", "*.egg-info", ".pytest_cache"]


def add_submit_command(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "submit",
        help="run a command (e.g. a Hydra sweep) as a Ray job on a cluster",
        description="Wraps `ray job submit --address ... --working-dir . --runtime-env-json ... -- COMMAND`. "
                    "Token auth: `ray job submit` reads RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token.",
    )
    p.add_argument("--address", default=None,
                   help=f"the cluster's dashboard address (default: $RAY_API_SERVER_ADDRESS, $RAY_ADDRESS or {DEFAULT_DASHBOARD})")
    p.add_argument("--working-dir", default=".", help="folder uploaded as the job's working directory (default: .)")
    p.add_argument("--pip", action="append", default=[], metavar="REQUIREMENT",
                   help="a pip requirement installed for the job (repeatable)")
    p.add_argument("--pip-from-pyproject", action="store_true",
                   help="install the project's dependencies from pyproject.toml in the job's environment")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="an environment variable of the job")
    p.add_argument("--submission-id", default=None, help="job id (default: Ray picks one)")
    p.add_argument("--no-wait", action="store_true", help="return once submitted instead of following the logs")
    p.add_argument("--dry-run", action="store_true", help="print the `ray job submit` command and exit")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command, e.g. -- python run.py -m ...")
    p.set_defaults(func=run_submit)


def pyproject_dependencies(working_dir: Path) -> list[str]:
    """The core requirements and those of every optional feature (a job on the cluster may log to
    W&B), as pyproject.toml declares them; the `all` and `test` extras only gather the others."""
    if sys.version_info >= (3, 11):
        import tomllib  # noqa: PLC0415
    else:  # Python 3.10: the same parser, as the tomli package
        import tomli as tomllib  # noqa: PLC0415

    file = working_dir / "pyproject.toml"
    if not file.is_file():
        raise ValueError(f"{file} not found (--pip-from-pyproject)")
    project = tomllib.loads(file.read_text()).get("project", {})
    extras = project.get("optional-dependencies", {})
    return [*project.get("dependencies", []),
            *(requirement for name, requirements in extras.items() if name not in ("all", "test")
              for requirement in requirements)]


def runtime_env(working_dir: Path, pip: Sequence[str] = (), env: Sequence[str] = (), from_pyproject: bool = False) -> dict:
    """The job's runtime environment: pip requirements, environment variables and upload excludes."""
    requirements = [*(pyproject_dependencies(working_dir) if from_pyproject else []), *pip]
    env_vars = {}
    for item in env:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--env takes KEY=VALUE, got {item!r}")
        env_vars[key] = value
    # W&B stays offline on the cluster unless asked otherwise: an unreachable server would stall jobs.
    env_vars.setdefault("WANDB_MODE", os.environ.get("WANDB_MODE", "offline"))
    spec: dict = {"env_vars": env_vars, "excludes": SUBMIT_EXCLUDES}
    if requirements:
        spec["pip"] = requirements
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


def submit_command(args: argparse.Namespace) -> list[str]:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise ValueError("nothing to run: specsparse submit [options] -- python run.py -m ...")
    working_dir = Path(args.working_dir).resolve()
    if not working_dir.is_dir():
        raise ValueError(f"--working-dir {working_dir} is not a folder")
    address = args.address or os.environ.get("RAY_API_SERVER_ADDRESS") or os.environ.get("RAY_ADDRESS") or DEFAULT_DASHBOARD
    env = runtime_env(working_dir, args.pip, args.env, args.pip_from_pyproject)
    cmd = [*ray_executable(), "job", "submit", "--address", address, "--working-dir", str(working_dir),
           "--runtime-env-json", json.dumps(env)]
    if args.submission_id:
        cmd += ["--submission-id", args.submission_id]
    if args.no_wait:
        cmd.append("--no-wait")
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
