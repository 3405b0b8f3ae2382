"""Measure on Ray workers that keep the model loaded and hold the resources they asked for.

    runner = RayRunner(num_workers=4, gpus_per_trial=1)          # local Ray on 127.0.0.1
    runner = RayRunner(num_workers=8, address="10.0.0.5:6379")    # join an existing cluster
    measurements = runner.evaluate_batch(spec, candidates)        # in candidate order
    timing = runner.call(test_spec, partial(time_with_plain, ...))   # on one worker's device

The job's process loads no model: the search driver and the results store stay there, and everything
that needs the model (measurements, pricing, the search context, the side-by-side timing) runs on the
workers, `num_workers` Ray actors made once per runner. They are reserved together as a placement group
(`cpus_per_trial` CPUs and `gpus_per_trial` GPUs each), so jobs of a sweep running at once queue for
whole sets of workers instead of starving each other; a placement group waits as long as the cluster
could ever hold it, and fails at once, in one line, when it could not.

Faults: a worker killed mid-batch (its process, or its node) is restarted by Ray (`max_restarts`), on
another node when its node is gone (placement groups reschedule lost bundles), and the call it was running
is retried there (`max_task_retries=-1`: retried while the worker comes back, since a node's loss makes
calls fail quickly until Ray notices it); measurements are pure functions of their inputs, so the job
ends with the same ones. A worker that stays unreachable for `worker_timeout_s` (no node can hold it
any more), or is lost more than `max_retries` times, fails the job with one line instead of waiting forever.

Code: workers import specsparse from the job's runtime_env. Under `specsparse submit` (`ray job
submit`) the job's own runtime_env (its working_dir) already carries it; joining a cluster from a shell
(`runner.address=`), the runner ships the package itself (`py_modules`), with `runner.runtime_env`
(Ray's format: pip, env_vars, ...) for anything else the workers need.

Pricing: a measurement is priced where it is measured, by the worker's cost profile (its hardware,
not the driver's), and what the results store serves is priced on a worker too (`SplitMeasurer.price`). With
`cost.profile=PATH` every worker prices with that one file (its text travels with each call, for
workers on machines without it). `profile_records` lists the profiles the workers priced with.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from specsparse.extras import require_installed
from specsparse.study.runners.local import pass_size
from specsparse.study.runners.ray_cluster import RayResourceError, connect, probe, workers_that_fit
from specsparse.study.runners.ray_worker import EvaluationWorker
from specsparse.types import Candidate, Measurement
from specsparse.util import first_line, is_int, is_number

if TYPE_CHECKING:
    from specsparse.measuring.evaluation import EvaluationSpec, Evaluator
    from specsparse.study.driver import OnMeasured

log = logging.getLogger(__name__)
T = TypeVar("T")
Item = TypeVar("Item")

POLL_S = 10.0  # how often a waiting runner checks that the workers it waits on are still there


# -- the runner ------------------------------------------------------------------------------------
class RayRunner:
    """Runner protocol on Ray workers; see the module docstring.

    num_workers: worker actors (each with the model loaded), each measuring a share of a batch at a time.
    gpus_per_trial, cpus_per_trial: resources each worker reserves (fractions allowed).
    address: an existing cluster ("HOST:PORT", "auto", "ray://..."); None starts a local Ray bound to
        127.0.0.1, or joins $RAY_ADDRESS when set (as under `ray job submit`).
    runtime_env: what the workers need besides specsparse when joining a cluster by address (Ray's format).
    max_retries: restarts of a lost worker (the call it was running is retried on the restarted worker).
    worker_timeout_s: how long a worker may stay unreachable (lost, and not restarted) before the job fails.
    """

    loads_models_here = False  # the job's process loads no model: device checks happen on the cluster

    def __init__(
        self,
        num_workers: int = 2,
        gpus_per_trial: float = 0,
        cpus_per_trial: float = 1,
        address: str | None = None,
        runtime_env: Mapping[str, Any] | None = None,
        max_retries: int = 3,
        worker_timeout_s: float = 300.0,
    ):
        self.check_options(num_workers, gpus_per_trial, cpus_per_trial, address, runtime_env, max_retries, worker_timeout_s)
        self.num_workers = num_workers
        self.gpus_per_trial = gpus_per_trial
        self.cpus_per_trial = cpus_per_trial
        self.address = address
        self.runtime_env = dict(runtime_env or {})
        self.max_retries = max_retries
        self.worker_timeout_s = worker_timeout_s
        self._started_ray = False
        self._session_record: Path | None = None  # this driver's local Ray, for `stop_orphaned_local_rays`
        self._workers: list[Any] = []
        self._group: Any = None
        self.placements: list[dict[str, Any]] = []  # where each worker runs (`EvaluationWorker.ready`)
        self._unreachable_since: dict[int, float] = {}
        try:
            self._connect()
            self.num_workers = self._fit_workers()
        except BaseException:
            self.close()
            raise

    # -- checks ----------------------------------------------------------------------------------
    @staticmethod
    def check_options(
        num_workers: int = 2, gpus_per_trial: float = 0, cpus_per_trial: float = 1, address: str | None = None,
        runtime_env: Mapping[str, Any] | None = None, max_retries: int = 3, worker_timeout_s: float = 300.0, **_: Any,
    ) -> None:
        """Validate the options without starting Ray (RayResourceError or ValueError, one line)."""
        if not is_int(num_workers) or num_workers < 1:
            raise ValueError(f"num_workers must be an integer >= 1, got {num_workers!r}")
        if not is_number(gpus_per_trial) or not is_number(cpus_per_trial):
            raise ValueError(f"gpus_per_trial and cpus_per_trial must be numbers, got {gpus_per_trial!r}, {cpus_per_trial!r}")
        if gpus_per_trial < 0 or cpus_per_trial <= 0:
            raise ValueError(f"need gpus_per_trial >= 0 and cpus_per_trial > 0, got {gpus_per_trial}, {cpus_per_trial}")
        if not is_int(max_retries) or max_retries < 0:
            raise ValueError(f"max_retries must be an integer >= 0, got {max_retries!r}")
        if not is_number(worker_timeout_s) or worker_timeout_s <= 0:
            raise ValueError(f"worker_timeout_s must be a number of seconds > 0, got {worker_timeout_s!r}")
        if runtime_env is not None and not isinstance(runtime_env, Mapping):
            raise ValueError(f"runtime_env must be a mapping in Ray's format (pip, env_vars, ...), got {runtime_env!r}")
        require_installed("ray", extra="ray")
        ray = sys.modules.get("ray")  # a process already connected to Ray keeps using that connection
        if address not in (None, "auto", "local") and not (ray is not None and ray.is_initialized()):
            probe(address)
        if gpus_per_trial > 0 and address is None and not os.environ.get("RAY_ADDRESS"):
            import torch  # noqa: PLC0415

            available = torch.cuda.device_count()
            if available < gpus_per_trial:
                raise RayResourceError(
                    f"gpus_per_trial={gpus_per_trial} but this machine has {available} GPU(s): "
                    "use runner.gpus_per_trial=0 or join a GPU cluster with runner.address=HOST:PORT"
                )

    def _connect(self) -> None:
        started, record = connect(self.address, self.runtime_env,
                                  local_cpus=math.ceil(self.num_workers * self.cpus_per_trial) + 1)
        if started:  # this runner's local Ray: stopped again by `close`
            self._started_ray, self._session_record = True, record

    def _fit_workers(self) -> int:
        """How many workers the cluster's live nodes can hold; RayResourceError when not even one fits."""
        fit = self._workers_the_cluster_holds()
        if fit < self.num_workers:
            log.warning("the Ray cluster fits %d of the %d workers asked for: using %d", fit, self.num_workers, fit)
        return min(fit, self.num_workers)

    def _workers_the_cluster_holds(self) -> int:
        import ray  # noqa: PLC0415

        nodes = [node["Resources"] for node in ray.nodes() if node.get("Alive")]
        total = ray.cluster_resources()
        if self.gpus_per_trial > total.get("GPU", 0.0):
            raise RayResourceError(
                f"gpus_per_trial={self.gpus_per_trial} but the Ray cluster has {total.get('GPU', 0.0):g} GPU(s): "
                "use runner.gpus_per_trial=0 or a cluster with GPUs (runner.address=...)"
            )
        fit = workers_that_fit(nodes, self.cpus_per_trial, self.gpus_per_trial)
        if fit < 1:
            raise RayResourceError(
                f"no node of the Ray cluster has {self.cpus_per_trial:g} CPU(s) and {self.gpus_per_trial:g} GPU(s) "
                f"for a worker (nodes: {[dict(n) for n in nodes]}): lower runner.cpus_per_trial or runner.gpus_per_trial"
            )
        return fit

    # -- workers ---------------------------------------------------------------------------------
    def _ensure_workers(self) -> None:
        """Reserve the workers' resources as one placement group (waiting while other jobs hold them),
        then start the workers in it."""
        if self._workers:
            return
        import ray  # noqa: PLC0415
        from ray.util.placement_group import placement_group  # noqa: PLC0415
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy  # noqa: PLC0415

        bundle = {"CPU": self.cpus_per_trial, **({"GPU": self.gpus_per_trial} if self.gpus_per_trial else {})}
        self._group = placement_group([dict(bundle) for _ in range(self.num_workers)], strategy="PACK")
        waited = 0.0
        while not self._group.wait(timeout_seconds=POLL_S):
            waited += POLL_S
            if self._workers_the_cluster_holds() < self.num_workers:
                raise RayResourceError(f"the Ray cluster no longer holds {self.num_workers} worker(s) of {bundle}: "
                                       "a node was lost; rejoin it or lower runner.num_workers")
            if waited % 60 == 0:
                log.info("waiting %.0f s for %d worker(s) of %s: the cluster's resources are busy (other jobs)",
                         waited, self.num_workers, bundle)
        actor = ray.remote(EvaluationWorker)
        self._workers = [
            actor.options(num_cpus=self.cpus_per_trial, num_gpus=self.gpus_per_trial, max_concurrency=2,
                          max_restarts=self.max_retries, max_task_retries=-1,
                          scheduling_strategy=PlacementGroupSchedulingStrategy(self._group, placement_group_bundle_index=i))
            .remote(threads=max(1, int(self.cpus_per_trial)))
            for i in range(self.num_workers)
        ]
        try:
            self.placements = ray.get([w.ready.remote() for w in self._workers], timeout=self.worker_timeout_s)
        except ray.exceptions.GetTimeoutError:
            raise RayResourceError(f"{self.num_workers} worker(s) did not start within {self.worker_timeout_s:g} s "
                                   f"(cluster: {ray.cluster_resources()})") from None
        log.info("Ray workers ready: %s", ", ".join(
            f"pid {p['pid']} on node {p['node_id'][:8]}" + (f" GPU {','.join(p['gpu_ids'])}" if p["gpu_ids"] else "")
            for p in self.placements))

    def _map(self, items: Sequence[Item], submit: Callable[[Any, Item], Any]) -> Iterator[tuple[Item, Any]]:
        """(item, result) as each finishes: every item runs on a free worker (`submit(worker, item)` ->
        its future), as `ray.util.ActorPool` does, while the runner checks that busy workers are alive."""
        import ray  # noqa: PLC0415

        self._ensure_workers()
        todo, free = list(items), list(range(len(self._workers)))
        running: dict[Any, tuple[Item, int]] = {}
        while todo or running:
            while todo and free:
                worker = free.pop(0)
                item = todo.pop(0)
                running[submit(self._workers[worker], item)] = (item, worker)
            done, _ = ray.wait(list(running), num_returns=1, timeout=POLL_S)
            if not done:
                self._check_alive(sorted(w for _, w in running.values()))
                continue
            item, worker = running.pop(done[0])
            free.append(worker)
            self._unreachable_since.pop(worker, None)
            yield item, _result(done[0])

    def _check_alive(self, workers: Sequence[int]) -> None:
        """Fail, in one line, when a busy worker has not answered for `worker_timeout_s` (lost, and Ray
        could not restart it: its node is gone and no other node holds its resources)."""
        import ray  # noqa: PLC0415

        pings = {self._workers[w].ready.remote(): w for w in workers}
        answered, _ = ray.wait(list(pings), num_returns=len(pings), timeout=POLL_S)
        now = time.monotonic()
        for ping, worker in pings.items():
            if ping in answered and _answered(ping):
                self._unreachable_since.pop(worker, None)
                continue
            since = self._unreachable_since.setdefault(worker, now)
            if now - since >= self.worker_timeout_s:
                raise RayResourceError(
                    f"Ray worker {worker} has been unreachable for {now - since:.0f} s and was not restarted (its node "
                    f"was lost and no other node holds {self.cpus_per_trial:g} CPU / {self.gpus_per_trial:g} GPU; "
                    f"cluster: {ray.cluster_resources()}): rejoin a node and rerun (finished measurements are stored)")
            log.warning("Ray worker %d is not answering (%.0f s): waiting for Ray to restart it", worker, now - since)

    # -- Runner protocol -------------------------------------------------------------------------
    def evaluate_batch(
        self,
        spec: EvaluationSpec,
        candidates: Sequence[Candidate],
        thresholds: tuple | None = None,
        on_measured: OnMeasured | None = None,
    ) -> list[Measurement]:
        """Measure `candidates` of `spec` spread over the workers, each call a share of them that fills the
        worker's batched passes (as the local runner's passes are filled); measurements in candidate order,
        each handed to on_measured in this process as its call returns (so it is stored at once)."""
        import ray  # noqa: PLC0415

        unique = list(dict.fromkeys(candidates))
        if not unique:
            return []
        start = time.perf_counter()
        per_call = max(1, min(self.call(spec, pass_size), math.ceil(len(unique) / self.num_workers)))
        shares = [tuple(unique[i:i + per_call]) for i in range(0, len(unique), per_call)]
        spec_ref, text = ray.put(spec), _profile_text(spec)
        results: dict[Candidate, Measurement] = {}
        for share, measurements in self._map(
                shares, lambda worker, share: worker.evaluate.remote(spec_ref, share, thresholds, text)):
            for candidate, measurement in zip(share, measurements):
                results[candidate] = measurement
                if on_measured is not None:
                    on_measured(candidate, measurement)
        log.info("ray batch: %d configurations in %d calls on %d workers in %.1f s", len(unique), len(shares),
                 self.num_workers, time.perf_counter() - start)
        return [results[c] for c in candidates]

    def call(self, spec: EvaluationSpec, function: Callable[[Evaluator], T]) -> T:
        """`function(evaluator)` on one worker, alone on its resources (see `Runner.call`)."""
        text = _profile_text(spec)
        [(_, result)] = self._map([function], lambda worker, f: worker.call.remote(spec, f, text))
        return result

    def profile_records(self) -> list[dict[str, Any]]:
        """Records of the cost profiles the workers priced with, one per distinct profile."""
        import ray  # noqa: PLC0415

        records = ray.get([w.profile_records.remote() for w in self._workers]) if self._workers else []
        return list({json.dumps(r, sort_keys=True): r for rs in records for r in rs}.values())

    def close(self) -> None:
        """Stop the workers and release their placement group, and the local Ray if this runner started it."""
        import ray  # noqa: PLC0415

        if not ray.is_initialized():
            return
        for actor in self._workers:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self._workers = []
        if self._group is not None:
            from ray.util.placement_group import remove_placement_group  # noqa: PLC0415

            try:
                remove_placement_group(self._group)
            except Exception:  # noqa: BLE001 - already gone with its cluster
                pass
            self._group = None
        if self._started_ray:
            ray.shutdown()
            self._started_ray = False
            if self._session_record is not None:
                self._session_record.unlink(missing_ok=True)
                self._session_record = None

    def __enter__(self) -> RayRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _profile_text(spec: EvaluationSpec) -> str | None:
    """A pinned cost profile's text, which travels with each call (workers may not see the file)."""
    return Path(spec.cost_profile).read_text() if spec.cost_profile else None


def _answered(ping: Any) -> bool:
    """A finished ping that carries an answer, not an error (a worker that is down)."""
    import ray  # noqa: PLC0415

    try:
        ray.get(ping)
    except ray.exceptions.RayError:
        return False
    return True


def _result(future: Any) -> Any:
    """The future's value; an error raised on the worker is raised here as itself (a ModelLoadError stays
    one line), a worker lost for good as one line."""
    import ray  # noqa: PLC0415

    try:
        return ray.get(future)
    except ray.exceptions.RayTaskError as err:
        if isinstance(err.cause, Exception):
            raise err.cause from None
        raise
    except ray.exceptions.RayActorError as err:
        raise RayResourceError(f"a Ray worker was lost and not restarted: {first_line(err)}") from None
