"""A Hydra launcher that runs the jobs of a sweep at the same time, each as a Ray task.

    python run.py -m hydra/launcher=ray domain=qa,mmlu search=bfs runner=ray

Each job runs Hydra's `run_job` in a Ray task of its own (its folder, its run.log, its return value for a
sweeper, as with Hydra's basic launcher), pinned to the node of the process that launched the sweep:
the jobs' processes load no model with `runner=ray` (their workers hold the resources, and queue for
them as placement groups while other jobs run), and every job writes the results store on that node's
local disk. `max_parallel_jobs` caps how many run at once (null: all); `cpus_per_job` is what each job's
own process reserves (null: none with runner=ray, 1 CPU otherwise, where the job measures in its own
process). The sweep's summary and failure count come from the job folders (specsparse.jobs.sweep).

Ray: under `specsparse submit` the sweep joins its job's cluster ($RAY_ADDRESS) with the job's
runtime_env; `address=HOST:PORT` joins a cluster from a shell; otherwise a local Ray starts. Jobs' output
reaches this console (log_to_driver), prefixed by Ray with the task that printed it.

The hydra-ray-launcher package does the same with a Ray of its own pins (cloudpickle<3, boto3); this one
uses the project's Ray. Ray is imported only when a sweep launches: Hydra imports this module on every
start to find its plugins (and before it is in sys.modules, so the dataclass below cannot take
`from __future__ import annotations`).
"""

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, configure_log, filter_overrides, run_job, setup_globals
from hydra.plugins.launcher import Launcher
from omegaconf import DictConfig, OmegaConf, open_dict

log = logging.getLogger(__name__)


@dataclass
class RayLauncherConf:
    _target_: str = "hydra_plugins.specsparse_ray_launcher.ray_launcher.RayLauncher"
    address: Any = None  # a cluster (HOST:PORT); null: $RAY_ADDRESS (as under specsparse submit) or a local Ray
    max_parallel_jobs: Any = None  # jobs running at once; null: every job of the batch
    cpus_per_job: Any = None  # CPUs each job's own process reserves; null: 0 with runner=ray, else 1
    runtime_env: Any = None  # joining by address from a shell: what the jobs need besides specsparse (Ray's format)


ConfigStore.instance().store(group="hydra/launcher", name="specsparse_ray", node=RayLauncherConf,
                             provider="specsparse")


def check_options(max_parallel_jobs: Any, cpus_per_job: Any) -> None:
    """One line (ValueError) for a value that cannot work."""
    if max_parallel_jobs is not None and (not isinstance(max_parallel_jobs, int) or isinstance(max_parallel_jobs, bool)
                                          or max_parallel_jobs < 1):
        raise ValueError(f"hydra.launcher.max_parallel_jobs={max_parallel_jobs!r}: give an integer >= 1, or null for all")
    if cpus_per_job is not None and (not isinstance(cpus_per_job, (int, float)) or isinstance(cpus_per_job, bool)
                                     or cpus_per_job < 0):
        raise ValueError(f"hydra.launcher.cpus_per_job={cpus_per_job!r}: give a number of CPUs >= 0, or null")


def job_cpus(config: DictConfig, cpus_per_job: float | None) -> float:
    """What one job's own process reserves: `cpus_per_job`, else none when its runner measures on Ray
    workers (`loads_models_here` False), one CPU when it measures in its own process."""
    from specsparse.util import locate  # noqa: PLC0415

    if cpus_per_job is not None:
        return float(cpus_per_job)
    try:
        runner = locate(str(OmegaConf.select(config, "runner._target_")))
    except ValueError:  # the job reports its own bad runner
        return 1.0
    return 1.0 if getattr(runner, "loads_models_here", True) else 0.0


def _run_job(hydra_context: Any, task_function: Any, config: DictConfig, singletons: Any) -> JobReturn:
    """One job in a Ray task, as Hydra's basic launcher runs it in its own process."""
    setup_globals()
    Singleton.set_state(singletons)
    return run_job(hydra_context=hydra_context, task_function=task_function, config=config,
                   job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")


class RayLauncher(Launcher):
    def __init__(self, address: str | None = None, max_parallel_jobs: int | None = None,
                 cpus_per_job: float | None = None, runtime_env: Any = None) -> None:
        self.address = address
        self.max_parallel_jobs = max_parallel_jobs
        self.cpus_per_job = cpus_per_job
        self.runtime_env = OmegaConf.to_container(runtime_env) if OmegaConf.is_config(runtime_env) else runtime_env
        self.config: DictConfig | None = None
        self.hydra_context: Any = None
        self.task_function: Any = None

    def setup(self, *, hydra_context: Any, task_function: Any, config: DictConfig) -> None:
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        import sys  # noqa: PLC0415

        try:
            check_options(self.max_parallel_jobs, self.cpus_per_job)
        except ValueError as err:
            print(f"error: {err}", file=sys.stderr)
            sys.exit(2)
        import ray  # noqa: PLC0415
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: PLC0415

        from specsparse.study.runners.ray_cluster import RayResourceError, connect  # noqa: PLC0415

        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        try:
            connect(self.address, self.runtime_env, log_to_driver=True)
        except (RayResourceError, ValueError) as err:
            print(f"error: hydra.launcher: {err}", file=sys.stderr)
            sys.exit(2)
        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
        run = ray.remote(_run_job)
        log.info("Launching %d jobs on Ray, at most %s at once, each on this node (%s)", len(job_overrides),
                 self.max_parallel_jobs or len(job_overrides), ray.get_runtime_context().get_node_id()[:8])
        futures: list = []
        running: list = []
        try:
            for index, overrides in enumerate(job_overrides, start=initial_job_idx):
                log.info("\t#%d : %s", index, " ".join(filter_overrides(overrides)))
                config = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
                with open_dict(config):
                    config.hydra.job.id = index
                    config.hydra.job.num = index
                while self.max_parallel_jobs is not None and len(running) >= self.max_parallel_jobs:
                    _, running = ray.wait(running, num_returns=1, fetch_local=False)  # a free slot
                futures.append(run.options(num_cpus=job_cpus(config, self.cpus_per_job), scheduling_strategy=here,
                                           max_retries=0, name=f"job {index}")
                               .remote(self.hydra_context, self.task_function, config, Singleton.get_state()))
                running.append(futures[-1])
            return ray.get(futures)
        except KeyboardInterrupt:
            for future in futures:
                ray.cancel(future)
            raise
