"""A real multi-node Ray cluster on this machine, and a user's sweep submitted to it, checked end to end.

    python scripts/cluster_check.py                          # tiny model, kill a worker node mid-search
    python scripts/cluster_check.py --model smollm2_135m --kill none --json cluster_check.json

What it does, printing every command it runs (README, "Running on a Ray cluster", shows the same ones):
1. a head node without GPUs (`ray start --head --num-gpus 0`), and `--gpu-nodes` nodes joined to it
   (`ray start --address=...`), each advertising one logical GPU and running from a Python environment
   where specsparse is not installed (the project's dependencies only); models stay on the CPU;
2. `specsparse submit ... -- python run.py -m domain=qa,mmlu search=bfs runner=ray ...`, and, with
   `--kill raylet` (the default) or `--kill worker`, a kill -9 of the node (its raylet) or of the worker
   actor measuring, once the search has stored its first measurements;
3. the same sweep with runner=local in this process's environment, for comparison;
4. checks, each printed and returned: the job succeeded; every job's measurements.csv and samples.jsonl
   equal the local run's byte for byte, and its summary.json but for timed fields; Ray's job record shows
   the code in the job's runtime_env (working_dir, py_modules); the job's processes loaded no model; each
   worker held its logical GPU in Ray's accounting and the job's entrypoint none; a kill was survived.
5. with `--lost-for-good`, a second job whose only GPU node is killed for good: it must end "failed" with
   the reason, within runner.worker_timeout_s, never hang.

The cluster is stopped at the end (only its own processes: they are found by its temp folder).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def processes_mentioning(text: str) -> list[int]:
    """Pids of the processes (this one aside) whose command line, or a file they hold open, contains
    `text` (Ray's agents rename themselves, `ray::DashboardAgent`, but keep their session's logs open)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if text in cmdline or any(text in os.readlink(fd) for fd in (proc / "fd").iterdir()):
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def show(command: list[str]) -> None:
    print("$ " + " ".join(command), flush=True)


def node_environment(folder: Path) -> Path:
    """A Python environment with the project's dependencies but not specsparse: a venv of the base
    interpreter that sees this environment's site-packages through a .pth file (which adds the folder
    only: the editable install's own .pth files there are not processed). Returns its python."""
    python = folder / "bin" / "python"
    if not python.exists():
        subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", str(folder)],
                       check=True)
        import site  # noqa: PLC0415

        site_packages = next(Path(p) for p in site.getsitepackages() if p.endswith("site-packages"))
        target = next((folder / "lib").glob("python3*/site-packages"))
        (target / "project_dependencies.pth").write_text(f"{site_packages}\n")
    check = subprocess.run([str(python), "-c", "import specsparse"], capture_output=True, text=True, cwd=folder)
    if check.returncode == 0:
        raise RuntimeError(f"{python} can import specsparse: the check needs a node without it")
    return python


@dataclass
class LocalCluster:
    """A head and worker nodes on this machine, each `ray start` with ports of its own."""

    temp_dir: Path  # short: Ray's socket paths must stay under 108 bytes
    env: dict[str, str]
    head_cpus: float = 1
    port: int = field(default_factory=free_port)
    dashboard_port: int = field(default_factory=free_port)
    nodes: list[dict] = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def dashboard(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    def _start(self, python: str, options: list[str], index: int) -> dict:
        """`ray start` with ports and a temp folder of the node's own: nodes on one machine must not share
        Ray's session folder (each node's runtime-env agent cleans up the packages it no longer uses)."""
        ports = {name: free_port() for name in ("node-manager", "object-manager", "metrics-export",
                                                 "dashboard-agent-listen", "dashboard-agent-grpc", "runtime-env-agent")}
        command = [python, "-m", "ray.scripts.scripts", "start", *options, "--node-ip-address=127.0.0.1",
                   f"--temp-dir={self.temp_dir}-{index}", "--disable-usage-stats",
                   *(f"--{name}-port={port}" for name, port in ports.items())]
        show(command)
        # Started outside the project, so nothing of it is on a node's path but what the job ships.
        subprocess.run(command, env=self.env, check=True, capture_output=True, timeout=180, cwd=Path(python).parent)
        return {"node_manager_port": ports["node-manager"], "python": python}

    def start_head(self) -> None:
        self._start(sys.executable, ["--head", f"--port={self.port}", f"--num-cpus={self.head_cpus:g}", "--num-gpus=0",
                                     "--include-dashboard=true", "--dashboard-host=127.0.0.1",
                                     f"--dashboard-port={self.dashboard_port}", f"--ray-client-server-port={free_port()}"], 0)

    def add_node(self, python: Path, cpus: float = 1, gpus: float = 1) -> dict:
        node = self._start(str(python), [f"--address={self.address}", f"--num-cpus={cpus:g}", f"--num-gpus={gpus:g}"],
                           len(self.nodes) + 1)
        self.nodes.append(node)
        return node

    def raylet_pid(self, node: dict) -> int:
        [pid] = [p for p in processes_mentioning(f"--node_manager_port={node['node_manager_port']}")
                 if "raylet" in Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")[0].decode()]
        return pid

    def stop(self) -> None:
        """Stop this cluster's processes (and only those), found by its temp folder."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in processes_mentioning(str(self.temp_dir)):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            time.sleep(2)


def stored_rows(store: Path) -> int:
    if not store.is_file():
        return 0
    try:
        with sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=5) as db:
            return db.execute("SELECT COUNT(*) FROM measurements").fetchone()[0]
    except sqlite3.Error:
        return 0


def sweep_command(model: str, outputs: Path, runner: str, extra: list[str]) -> list[str]:
    """The user's sweep, at small sizes (the engine measures prompt by prompt, so a search lasts long
    enough to be interrupted)."""
    sizes = ["domain.limit=20", "generation.max_new_tokens=32", "tss.max_depth=2", "timing_prompts=4", "measure.mode=engine"]
    return ["python", "run.py", "-m", "domain=qa,mmlu", "search=bfs", f"runner={runner}", f"model={model}",
            "logger=none", "progress=false", *sizes, f"paths.outputs={outputs}", f"hydra.sweep.dir={outputs / 'multirun'}",
            *extra]


def run_local_reference(model: str, outputs: Path, env: dict[str, str]) -> None:
    command = sweep_command(model, outputs, "local", [])
    show(command)
    done = subprocess.run([sys.executable, *command[1:]], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"the local reference run failed: {done.stderr[-2000:]}")


def submit(cluster: LocalCluster, command: list[str], env: dict[str, str], submission_id: str) -> subprocess.Popen:
    full = [sys.executable, "-m", "specsparse.cli", "submit", "--address", cluster.dashboard, "--working-dir", str(ROOT),
            "--submission-id", submission_id, "--no-wait", "--", *command]
    show(full)
    done = subprocess.run(full, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"submit failed: {done.stdout[-2000:]} {done.stderr[-2000:]}")


def wait_for_job(client, submission_id: str, timeout_s: float, on_poll=None) -> str:
    from ray.job_submission import JobStatus  # noqa: PLC0415

    deadline = time.time() + timeout_s
    while time.time() < deadline:
        status = client.get_job_status(submission_id)
        if status in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED):
            return str(status)
        if on_poll is not None:
            on_poll()
        time.sleep(0.25)
    raise TimeoutError(f"job {submission_id} still running after {timeout_s:.0f} s")


def actors_by_class(cluster: LocalCluster) -> dict[str, list[dict]]:
    """Ray's actor list (dead ones included), by class name."""
    from ray.util.state import list_actors  # noqa: PLC0415

    found: dict[str, list[dict]] = {}
    for actor in list_actors(address=cluster.address, detail=True, limit=10000, raise_on_missing_output=False):
        record = actor if isinstance(actor, dict) else actor.__dict__
        found.setdefault(record["class_name"], []).append(record)
    return found


def compare_with_local(remote: Path, local: Path) -> list[str]:
    """Differences between two sweeps' job folders (files timing cannot change)."""
    from specsparse.jobs.outputs import UNTIMED_FILES, untimed_summary  # noqa: PLC0415

    problems = []
    jobs = sorted(p.parent.name for p in (local / "multirun").glob("*/summary.json"))
    if sorted(p.parent.name for p in (remote / "multirun").glob("*/summary.json")) != jobs or not jobs:
        return [f"job folders differ: {jobs}"]
    for job in jobs:
        for name in UNTIMED_FILES:
            if (remote / "multirun" / job / name).read_bytes() != (local / "multirun" / job / name).read_bytes():
                problems.append(f"{job}/{name} differs from the local run's")
        if untimed_summary(remote / "multirun" / job) != untimed_summary(local / "multirun" / job):
            problems.append(f"{job}/summary.json differs from the local run's")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny", help="model group option (tiny, smollm2_135m)")
    parser.add_argument("--gpu-nodes", type=int, default=2, help="nodes with one logical GPU each (>= 2 to survive a node kill)")
    parser.add_argument("--kill", choices=("raylet", "worker", "none"), default="raylet",
                        help="kill -9 a worker node's raylet, or the measuring worker actor, mid-search")
    parser.add_argument("--lost-for-good", action="store_true",
                        help="then kill the last GPU node under a second job: it must fail with the reason")
    parser.add_argument("--work", default=None, help="folder for outputs (default: a new temporary one)")
    parser.add_argument("--json", default=None, help="also write the checks here")
    args = parser.parse_args(argv)

    import tempfile  # noqa: PLC0415

    work = Path(args.work or tempfile.mkdtemp(prefix="specsparse-cluster-"))
    work.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(32)
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token, "OMP_NUM_THREADS": "1",
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_EVALUATE_OFFLINE": "1", "WANDB_MODE": "offline",
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "RAY_DEDUP_LOGS": "0"}
    env.pop("RAY_ADDRESS", None)
    os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)  # this process queries the cluster too
    cluster = LocalCluster(Path(f"/tmp/ssray-{secrets.token_hex(3)}"), env)
    checks: dict[str, object] = {}
    try:
        node_python = node_environment(work / "node-env")
        cluster.start_head()
        for _ in range(args.gpu_nodes):
            cluster.add_node(node_python)
        from ray.job_submission import JobSubmissionClient  # noqa: PLC0415

        client = JobSubmissionClient(cluster.dashboard)
        remote = work / "cluster"
        command = sweep_command(args.model, remote, "ray", ["runner.num_workers=1", "runner.gpus_per_trial=1",
                                                            f"paths.store={remote / 'store.sqlite'}"])
        submit(cluster, command, env, "sweep")
        killed: list[str] = []

        def kill_mid_search() -> None:
            if args.kill == "none" or killed or stored_rows(remote / "store.sqlite") < 3:
                return
            [actor] = [a for a in actors_by_class(cluster).get("EvaluationWorker", []) if a["state"] == "ALIVE"][:1] or [None]
            if actor is None:
                return
            if args.kill == "worker":
                os.kill(actor["pid"], signal.SIGKILL)
                killed.append(f"worker actor pid {actor['pid']}")
            else:
                node = _node_of(cluster, actor["node_id"])
                os.kill(cluster.raylet_pid(node), signal.SIGKILL)
                cluster.nodes.remove(node)
                killed.append(f"raylet of node {actor['node_id'][:8]}")
            print(f"killed {killed[-1]} after {stored_rows(remote / 'store.sqlite')} stored measurements", flush=True)

        status = wait_for_job(client, "sweep", 1800, kill_mid_search)
        logs = client.get_job_logs("sweep")
        (work / "sweep.log").write_text(logs)
        checks["job_status"] = status
        checks["killed"] = killed
        job = client.get_job_info("sweep")
        runtime_env = job.runtime_env or {}
        checks["runtime_env_code"] = {"working_dir": runtime_env.get("working_dir"), "py_modules": runtime_env.get("py_modules")}
        actors = actors_by_class(cluster)
        checks["entrypoint_resources"] = [a.get("required_resources") for a in actors.get("JobSupervisor", [])]
        workers = actors.get("EvaluationWorker", [])
        checks["worker_gpus"] = sorted({json.dumps(a.get("required_resources", {}), sort_keys=True) for a in workers})
        checks["worker_restarts"] = sum(int(a.get("num_restarts", 0) or 0) for a in workers)
        records = [json.loads(p.read_text()) for p in sorted((remote / "multirun").glob("*/reproduce.json"))]
        checks["models_loaded_by_job_processes"] = sorted({m for r in records for m in r.get("models_loaded_by_job_process", [])})
        checks["no_model_in_job_log"] = logs.count("models loaded in the job's process: none") == len(records)

        local = work / "local"
        run_local_reference(args.model, local, env)
        checks["differences_from_local_run"] = compare_with_local(remote, local)

        if args.lost_for_good:
            checks["lost_for_good"] = lost_for_good(cluster, client, args.model, work / "lost", env)
    finally:
        import ray  # noqa: PLC0415

        ray.shutdown()
        cluster.stop()
    problems = [
        *([f"job {checks.get('job_status')}"] if checks.get("job_status") != "SUCCEEDED" else []),
        *checks.get("differences_from_local_run", ["no comparison"]),
        *([] if checks.get("runtime_env_code", {}).get("working_dir") else ["no working_dir in the job's runtime_env"]),
        *(["a job process loaded a model"] if checks.get("models_loaded_by_job_processes") else []),
        *([] if checks.get("no_model_in_job_log") else ["the job log does not say its processes loaded no model"]),
        *(["the entrypoint held a GPU"] if any((r or {}).get("GPU") for r in checks.get("entrypoint_resources", [])) else []),
        *([] if all(_holds_one_gpu(json.loads(r)) for r in checks.get("worker_gpus", ["{}"])) else ["a worker held no GPU"]),
        *(["nothing was killed"] if args.kill != "none" and not checks.get("killed") else []),
        *(["no worker was restarted"] if args.kill != "none" and not checks.get("worker_restarts") else []),
        *([] if not args.lost_for_good or checks.get("lost_for_good", {}).get("ok") else ["a node lost for good did not fail the job"]),
    ]
    checks["problems"] = problems
    print(json.dumps(checks, indent=2, default=str))
    if args.json:
        Path(args.json).write_text(json.dumps(checks, indent=2, default=str))
    return 1 if problems else 0


def _holds_one_gpu(resources: dict[str, float]) -> bool:
    """One GPU in Ray's accounting: `GPU`, or a placement group's `GPU_group_<bundle>_<group>` share."""
    gpus = [v for k, v in resources.items() if k == "GPU" or k.startswith("GPU_group_") and k.count("_") >= 3]
    return gpus == [1.0]


def _node_of(cluster: LocalCluster, node_id: str) -> dict:
    """The started node whose raylet is `node_id` (Ray's node list maps ids to node manager ports)."""
    import ray  # noqa: PLC0415

    if not ray.is_initialized():
        ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
    port = next(n["NodeManagerPort"] for n in ray.nodes() if n["NodeID"] == node_id)
    return next(n for n in cluster.nodes if n["node_manager_port"] == port)


def lost_for_good(cluster: LocalCluster, client, model: str, outputs: Path, env: dict[str, str]) -> dict:
    """A job whose only GPU node is killed mid-search, with no node left to restart its worker on."""
    start = time.time()
    command = sweep_command(model, outputs, "ray", ["runner.num_workers=1", "runner.gpus_per_trial=1",
                                                    "runner.worker_timeout_s=30"])
    command[command.index("domain=qa,mmlu")] = "domain=qa"
    submit(cluster, command, env, "lost")
    killed = []

    def kill_all() -> None:
        alive = [a for a in actors_by_class(cluster).get("EvaluationWorker", []) if a["state"] == "ALIVE"]
        if not killed and alive:
            for node in list(cluster.nodes):
                os.kill(cluster.raylet_pid(node), signal.SIGKILL)
                cluster.nodes.remove(node)
                killed.append(node["node_manager_port"])

    status = wait_for_job(client, "lost", 600, kill_all)
    records = [json.loads(p.read_text()) for p in (outputs / "multirun").glob("*/reproduce.json")]
    errors = [r.get("error", "") for r in records]
    return {"status": status, "seconds": round(time.time() - start, 1), "errors": errors, "killed": bool(killed),
            "ok": bool(killed) and any("unreachable" in e or "lost" in e for e in errors)}


if __name__ == "__main__":
    sys.exit(main())
