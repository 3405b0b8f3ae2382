"""Measure batches of candidates as Ray Tune trials on workers that keep the model loaded.

    runner = RayRunner(num_workers=4, gpus_per_trial=1)          # local Ray on 127.0.0.1
    runner = RayRunner(num_workers=8, address="10.0.0.5:6379")    # join an existing cluster
    measurements = runner.evaluate_batch(evaluator, candidates)   # in candidate order

The search driver stays in the calling process and hands over one batch at a time (a BFS level, a
batch of random or TPE proposals). Each batch becomes one `tune.Tuner` run over
`param_space={"candidate": tune.grid_search([...]), ...}` (a plain-dict config).

Why a pool of long-lived actors under the trials: Tune stops its trial actors at the end of every
`Tuner.fit()` (`reuse_actors=True` reuses them only within one fit), so a model held by a trial
process would be imported and loaded again for every batch (BENCHMARKS.md has the measured costs).
The models therefore live in `num_workers` Ray actors created once per runner, which reserve the
CPUs/GPUs (`cpus_per_trial`, `gpus_per_trial` each); a trial takes a free actor from a queue, has it
measure its candidate and reports the measurement. Each actor keeps one `Evaluator` per spec, and the
model through `specsparse.decoding.models.load_model_cached`, for as long as the runner lives (the
actor and the trial are in `ray_worker`).

Resources are checked before anything is scheduled: a trial asking for GPUs the cluster does not
have would stay PENDING forever, so that raises `RayResourceError` instead.

Pricing: a measurement is priced where it is measured, by the worker's cost profile (its hardware,
not the driver's), and the search driver keeps that price (`specsparse.study.driver.run_search`
re-prices only what the results store serves, with the `price` it is given: `RayRunner.price` prices
those on a worker too, so the driver's own profile prices nothing). With `cost.profile=PATH` every
worker and the driver price with that one file (its text travels with each batch, for workers on
machines without it). `profile_records` lists the profiles the workers priced with (reproduce.json).
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specsparse.extras import require_installed
from specsparse.study.driver import candidate_meta
from specsparse.study.runners.ray_worker import (
    EvaluationWorker,
    candidate_from_dict,
    run_trial,
    spec_to_dict,
)
from specsparse.study.store import measurement_from_dict, measurement_to_dict
from specsparse.types import Candidate, Measurement
from specsparse.util import is_int, is_number

if TYPE_CHECKING:
    from specsparse.measuring.evaluation import Evaluator
    from specsparse.study.driver import OnMeasured

log = logging.getLogger(__name__)

TRIAL_CPUS = 0.01  # a trial only dispatches to a worker actor and waits; the actor holds the resources


# -- local Rays of drivers that died without shutting them down (kill -9) ----------------------------
SESSIONS = Path(tempfile.gettempdir()) / "specsparse-ray"  # <driver pid>.json: the local Ray it started


def _record_session(session_dir: str) -> Path:
    SESSIONS.mkdir(parents=True, exist_ok=True)
    record = SESSIONS / f"{os.getpid()}.json"
    record.write_text(json.dumps({"session": Path(session_dir).name}))
    return record


def stop_orphaned_local_rays() -> int:
    """Stop the processes of local Rays whose specsparse driver is gone (killed with -9: nothing ran
    `ray.shutdown`), found by their session name on the command line. Returns how many were stopped.
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
            leftovers = [p for p in psutil.process_iter(["cmdline"]) if any(session in a for a in p.info["cmdline"] or ())]
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


class RayResourceError(ValueError):
    """The requested resources do not exist in the Ray cluster (one-line message)."""


def _probe(address: str, timeout_s: float = 5.0) -> None:
    """Fail at once, in one line, when nothing listens at a cluster address (Ray itself retries the
    GCS for minutes)."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"runner.address={address!r}: give HOST:PORT (or ray://HOST:PORT, or auto)")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as err:
        raise RayResourceError(f"no Ray cluster answers at {address} ({err.strerror or err}): start one with "
                               "`ray start --head` or fix runner.address") from None


def _collector(sink: OnMeasured) -> Any:
    """A Tune callback handing each trial's measurement to `sink` in this process.

    Tune pickles its run config (callbacks included) into the experiment folder; the sink (which may
    hold the results store) is process-local state and is left out of the pickle.
    """
    from ray import tune  # noqa: PLC0415

    class Collect(tune.Callback):
        def __init__(self, sink: OnMeasured | None):
            self.sink = sink

        def __getstate__(self) -> dict:
            return {"sink": None}

        def on_trial_result(self, iteration, trials, trial, result, **info):
            if self.sink is not None:
                measurement = measurement_from_dict(json.loads(result["measurement_json"]))
                self.sink(candidate_from_dict(trial.config["candidate"]), measurement)

    return Collect(sink)


# -- the runner ------------------------------------------------------------------------------------
class RayRunner:
    """Runner protocol over Ray Tune; see the module docstring.

    num_workers: worker actors (each with the model loaded) = trials running at once.
    gpus_per_trial, cpus_per_trial: resources each worker reserves (fractions allowed).
    address: an existing cluster ("HOST:PORT", "auto", "ray://..."); None starts a local Ray bound to
        127.0.0.1, or joins $RAY_ADDRESS when set (as under `ray job submit`).
    output_dir: where Tune writes its trial records (<output_dir>/ray_tune); a temporary folder if None.
    ready_timeout_s: how long the workers may take to be scheduled before the runner gives up.
    """

    def __init__(
        self,
        num_workers: int = 2,
        gpus_per_trial: float = 0,
        cpus_per_trial: float = 1,
        address: str | None = None,
        output_dir: str | os.PathLike | None = None,
        ready_timeout_s: float = 120.0,
    ):
        self.check_options(num_workers, gpus_per_trial, cpus_per_trial, address)
        self.num_workers = num_workers
        self.gpus_per_trial = gpus_per_trial
        self.cpus_per_trial = cpus_per_trial
        self.address = address
        self.ready_timeout_s = ready_timeout_s
        base = Path(output_dir) if output_dir is not None else Path(tempfile.mkdtemp(prefix="specsparse-tune-"))
        self._own_storage = None if output_dir is not None else base  # removed again by close()
        self.storage_path = (base / "ray_tune").resolve()
        self._started_ray = False
        self._session_record: Path | None = None  # this driver's local Ray, for `stop_orphaned_local_rays`
        # Tune's default console output (a box and result links per Tuner.fit) would repeat for every
        # batch; the old reporter at verbose=0 prints nothing.
        os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
        self._workers: list[Any] = []
        self._free: Any = None
        self._batches = 0
        try:
            self._connect()
            self.num_workers = self._fit_workers()
        except BaseException:
            self.close()
            raise

    # -- checks ----------------------------------------------------------------------------------
    @staticmethod
    def check_options(
        num_workers: int = 2, gpus_per_trial: float = 0, cpus_per_trial: float = 1, address: str | None = None, **_: Any
    ) -> None:
        """Validate the options without starting Ray (RayResourceError or ValueError, one line)."""
        if not is_int(num_workers) or num_workers < 1:
            raise ValueError(f"num_workers must be an integer >= 1, got {num_workers!r}")
        if not is_number(gpus_per_trial) or not is_number(cpus_per_trial):
            raise ValueError(f"gpus_per_trial and cpus_per_trial must be numbers, got {gpus_per_trial!r}, {cpus_per_trial!r}")
        if gpus_per_trial < 0 or cpus_per_trial <= 0:
            raise ValueError(f"need gpus_per_trial >= 0 and cpus_per_trial > 0, got {gpus_per_trial}, {cpus_per_trial}")
        require_installed("ray", extra="ray")
        ray = sys.modules.get("ray")  # a process already connected to Ray keeps using that connection
        if address not in (None, "auto", "local") and not (ray is not None and ray.is_initialized()):
            _probe(address)
        if gpus_per_trial > 0 and address is None and not os.environ.get("RAY_ADDRESS"):
            import torch  # noqa: PLC0415

            available = torch.cuda.device_count()
            if available < gpus_per_trial:
                raise RayResourceError(
                    f"gpus_per_trial={gpus_per_trial} but this machine has {available} GPU(s): "
                    "use runner.gpus_per_trial=0 or join a GPU cluster with runner.address=HOST:PORT"
                )

    def _connect(self) -> None:
        import ray  # noqa: PLC0415

        if ray.is_initialized():
            return
        stop_orphaned_local_rays()
        address = self.address or os.environ.get("RAY_ADDRESS")
        if address:
            log.info("joining the Ray cluster at %s", address)
            ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
        else:
            import torch  # noqa: PLC0415

            cpus = math.ceil(self.num_workers * (self.cpus_per_trial + TRIAL_CPUS)) + 1
            log.info("starting a local Ray (127.0.0.1, %d CPUs)", cpus)
            ray.init(
                address="local",  # never attach to another Ray running on this machine by accident
                num_cpus=cpus,
                num_gpus=torch.cuda.device_count(),
                include_dashboard=False,
                _node_ip_address="127.0.0.1",
                log_to_driver=False,
                logging_level=logging.WARNING,
            )
            self._session_record = _record_session(ray._private.worker._global_node.get_session_dir_path())
        self._started_ray = not address

    def _fit_workers(self) -> int:
        """How many workers the cluster can hold; RayResourceError when not even one fits."""
        import ray  # noqa: PLC0415

        total = ray.cluster_resources()
        gpus, cpus = total.get("GPU", 0.0), total.get("CPU", 0.0)
        if self.gpus_per_trial > gpus:
            raise RayResourceError(
                f"gpus_per_trial={self.gpus_per_trial} but the Ray cluster has {gpus:g} GPU(s): "
                "use runner.gpus_per_trial=0 or a cluster with GPUs (runner.address=...)"
            )
        per_worker_cpu = self.cpus_per_trial + TRIAL_CPUS
        fit = int((cpus + 1e-9) // per_worker_cpu)
        if self.gpus_per_trial > 0:
            fit = min(fit, int((gpus + 1e-9) // self.gpus_per_trial))
        if fit < 1:
            raise RayResourceError(
                f"cpus_per_trial={self.cpus_per_trial} but the Ray cluster has {cpus:g} CPU(s): lower runner.cpus_per_trial"
            )
        if fit < self.num_workers:
            log.warning("the Ray cluster fits %d of the %d workers asked for (CPU %g, GPU %g): using %d",
                        fit, self.num_workers, cpus, gpus, fit)
        return min(fit, self.num_workers)

    # -- workers ---------------------------------------------------------------------------------
    def _ensure_workers(self) -> None:
        if self._workers:
            return
        import ray  # noqa: PLC0415
        from ray.util.queue import Queue  # noqa: PLC0415

        actor = ray.remote(EvaluationWorker)
        self._workers = [
            actor.options(num_cpus=self.cpus_per_trial, num_gpus=self.gpus_per_trial).remote(
                threads=max(1, int(self.cpus_per_trial))
            )
            for _ in range(self.num_workers)
        ]
        try:
            pids = ray.get([w.ready.remote() for w in self._workers], timeout=self.ready_timeout_s)
        except ray.exceptions.GetTimeoutError:
            raise RayResourceError(
                f"{self.num_workers} worker(s) with {self.cpus_per_trial} CPU / {self.gpus_per_trial} GPU each could "
                f"not be scheduled within {self.ready_timeout_s:g} s (cluster: {ray.cluster_resources()})"
            ) from None
        self._free = Queue(actor_options={"num_cpus": 0})
        for index in range(len(self._workers)):
            self._free.put(index)
        log.info("Ray workers ready (pids %s)", pids)

    # -- Runner protocol -------------------------------------------------------------------------
    def evaluate_batch(
        self,
        evaluator: Evaluator,
        candidates: Sequence[Candidate],
        thresholds: tuple | None = None,
        on_measured: OnMeasured | None = None,
    ) -> list[Measurement]:
        """Measure `candidates` for `evaluator`'s spec as one Tune run; returns measurements in
        candidate order. The workers measure with Evaluators of their own, built from the spec.

        on_measured(candidate, measurement) is called in this process as each trial reports (the job
        stores measurements the moment they exist, so an interrupted batch keeps its finished part).
        """
        spec = evaluator.spec
        unique = list(dict.fromkeys(candidates))
        if not unique:
            return []
        from ray import tune  # noqa: PLC0415

        self._ensure_workers()
        self._batches += 1
        results: dict[Candidate, Measurement] = {}

        def collect(candidate: Candidate, measurement: Measurement) -> None:
            if candidate not in results:
                results[candidate] = measurement
                if on_measured is not None:
                    on_measured(candidate, measurement)

        pool = {"workers": self._workers, "free": self._free}
        trainable = tune.with_resources(tune.with_parameters(run_trial, pool=pool), {"cpu": TRIAL_CPUS})
        tuner = tune.Tuner(
            trainable,
            param_space={
                "candidate": tune.grid_search([candidate_meta(c) for c in unique]),
                "spec": spec_to_dict(spec),
                "thresholds": None if thresholds is None else list(thresholds),
                "cost_profile_text": Path(spec.cost_profile).read_text() if spec.cost_profile else None,
            },
            tune_config=tune.TuneConfig(max_concurrent_trials=self.num_workers, reuse_actors=True,
                                        trial_dirname_creator=lambda trial: f"trial_{trial.trial_id}"),
            run_config=tune.RunConfig(
                name=f"{spec.split}-batch-{self._batches:03d}",
                storage_path=str(self.storage_path),
                verbose=0,
                callbacks=[_collector(collect)],
            ),
        )
        start = time.perf_counter()
        grid = tuner.fit()
        errors = [r.error for r in grid if r.error is not None]
        if errors:
            first = str(errors[0]).strip().splitlines()
            raise RuntimeError(f"{len(errors)} of {len(unique)} Ray trial(s) failed: {first[-1] if first else errors[0]!r}")
        missing = [c.label for c in unique if c not in results]
        if missing:
            raise RuntimeError(f"Ray trials finished without reporting {missing}")
        log.info("ray batch %d: %d configurations on %d workers in %.1f s",
                 self._batches, len(unique), self.num_workers, time.perf_counter() - start)
        return [results[c] for c in candidates]

    def price(self, evaluator: Evaluator, candidate: Candidate, measurement: Measurement) -> Measurement:
        """`measurement` (e.g. served by the results store) priced by a worker's cost profile, as the
        workers price what they measure."""
        import ray  # noqa: PLC0415

        self._ensure_workers()
        spec = evaluator.spec
        text = Path(spec.cost_profile).read_text() if spec.cost_profile else None
        out = self._workers[0].price.remote(spec_to_dict(spec), candidate_meta(candidate),
                                            measurement_to_dict(measurement), text)
        return measurement_from_dict(ray.get(out))

    def profile_records(self) -> list[dict[str, Any]]:
        """Records (`specsparse.measuring.profile.profile_record`) of the cost profiles the workers
        priced with, one per distinct profile (none before the first batch)."""
        import ray  # noqa: PLC0415

        records = ray.get([w.profile_records.remote() for w in self._workers]) if self._workers else []
        return list({json.dumps(r, sort_keys=True): r for rs in records for r in rs}.values())

    def close(self) -> None:
        """Stop the workers, and the local Ray if this runner started it; remove the temporary Tune
        folder it made (none when it was given an output_dir)."""
        import ray  # noqa: PLC0415

        if self._own_storage is not None:
            shutil.rmtree(self._own_storage, ignore_errors=True)
            self._own_storage = None
        if not ray.is_initialized():
            return
        for actor in [*self._workers, self._free.actor if self._free is not None else None]:
            if actor is not None:
                try:
                    ray.kill(actor)
                except Exception:  # noqa: BLE001 - already gone
                    pass
        self._workers, self._free = [], None
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
