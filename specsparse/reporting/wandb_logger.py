"""Weights & Biases view of a job (the results store stays the source of truth).

One W&B run per job, grouped by its sweep, with a unique name (`run_identity`) and tags model / drafter /
domain / search / experiment. It logs every measurement as it arrives (`on_told`, the `run_job`
callback), then the measured configurations and the Pareto front as tables, the job's own figures
(pareto.png, speedup.png: `specsparse.jobs.figures`) as images, the domain config map as an artifact (`artifact_name`: one per model,
domain and strategy), and the job's final numbers in `run.summary` (the same dict as summary.json, each interval's point
as a scalar beside its `_low` / `_high` so W&B can sort and chart it, plus model, num_layers and
wandb_group; `specsparse report --wandb` reads it back).

Modes: "offline" (default: files under <job dir>/wandb/offline-run-*, upload later with `wandb sync`),
"online" (needs an API key: `wandb login` or WANDB_API_KEY), "disabled". Logging never blocks or
fails a job: no key, an unreachable server or any W&B error gives a warning and offline mode (or,
failing that, no W&B run at all).
"""

from __future__ import annotations

import atexit
import json
import logging
import netrc
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from specsparse.extras import require, require_installed
from specsparse.jobs.vocab_comparison import COLUMNS as COMPARISON_COLUMNS
from specsparse.metrics import SCALE
from specsparse.types import Candidate, Measurement
from specsparse.util import first_line, strict_json

log = logging.getLogger(__name__)

MODES = ("offline", "online", "disabled")
ALIASES = {"dryrun": "offline", "run": "online"}  # older spellings of WANDB_MODE


TEMP_PREFIX = "specsparse-wandb-"


def import_wandb() -> Any:
    """`import wandb`, with the temporary folders it makes at import (wandb-media, wandb-artifacts)
    inside one folder per process, <system temp>/specsparse-wandb-<pid>, removed at exit. Such
    folders left by processes that are gone (killed with -9) are removed first."""
    if "wandb" in sys.modules:
        return sys.modules["wandb"]
    import psutil  # noqa: PLC0415

    base = Path(tempfile.gettempdir())
    for stale in base.glob(f"{TEMP_PREFIX}*"):
        pid = stale.name[len(TEMP_PREFIX):]
        if pid.isdigit() and not psutil.pid_exists(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)
    own = base / f"{TEMP_PREFIX}{os.getpid()}"
    own.mkdir(exist_ok=True)
    previous, tempfile.tempdir = tempfile.tempdir, str(own)
    try:
        wandb = require("wandb", extra="wandb")
    finally:
        tempfile.tempdir = previous
    atexit.register(shutil.rmtree, own, True)
    return wandb


def has_api_key() -> bool:
    """Whether W&B credentials exist here (WANDB_API_KEY, an identity token file, or a netrc entry)."""
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname or "api.wandb.ai"
    path = os.environ.get("NETRC") or os.path.expanduser("~/.netrc")
    try:
        return bool(netrc.netrc(path).authenticators(host))
    except (OSError, netrc.NetrcParseError):
        return False


def run_identity(output_dir: str | os.PathLike, group: str | None = None) -> tuple[str, str]:
    """The W&B (group, run name) of the job writing into `output_dir`.

    A sweep's job (an ancestor folder holds Hydra's multirun.yaml) goes to group `multirun-<sweep folder>`
    and is named `<sweep folder>/<job folder>`; a single run is group and name `<run folder>`. Hydra puts
    microseconds in both folder names, so names never repeat across sweeps. `group` (logger.group)
    replaces the derived group only: names stay unique.
    """
    out = Path(os.path.abspath(output_dir))
    for sweep in out.parents:
        if (sweep / "multirun.yaml").is_file():
            return group or f"multirun-{sweep.name}", f"{sweep.name}/{out.relative_to(sweep).as_posix()}"
    return group or out.name, out.name


def artifact_name(model: str | None, domain: str, strategy: str) -> str:
    """`config_map-<model>-<domain>-<strategy>`: one artifact (with versions) per model, domain and strategy,
    in the characters W&B allows in artifact names, at most 128."""
    name = f"config_map-{model or 'model'}-{domain}-{strategy}"
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:128]


class WandbLogger:
    """W&B logging for one job at a time; see the module docstring.

    mode: "offline", "online" or "disabled" (the config default reads $WANDB_MODE, else offline).
    project, entity: where runs go. group: null (default) groups each job by its sweep or run folder
    (`run_identity`); a string puts every job in that group.
    init_timeout: seconds `wandb.init` may wait for the server before falling back to offline.
    """

    def __init__(
        self,
        mode: str = "offline",
        project: str = "specsparse",
        entity: str | None = None,
        group: str | None = None,
        init_timeout: float = 15.0,
    ):
        self.check_options(mode=mode, init_timeout=init_timeout)
        self.mode = ALIASES.get(mode, mode)
        self.project = project
        self.entity = entity
        self.group = group
        self.init_timeout = float(init_timeout)
        self.run: Any = None
        self.output_dir: Path | None = None
        self._group: str | None = None  # the group of the open run
        self._count = 0

    @staticmethod
    def check_options(mode: str = "offline", init_timeout: float = 15.0, **_: Any) -> None:
        if mode not in MODES and mode not in ALIASES:
            raise ValueError(f"logger.mode={mode!r}: use one of {', '.join(MODES)}")
        if not init_timeout or init_timeout <= 0:
            raise ValueError(f"logger.init_timeout must be > 0 seconds, got {init_timeout!r}")
        require_installed("wandb", extra="wandb", otherwise="run with logger=none")

    # -- lifecycle -------------------------------------------------------------------------------
    def start(
        self,
        output_dir: str | os.PathLike,
        config: Mapping[str, Any] | None = None,
        tags: Sequence[str] = (),
        name: str | None = None,
    ) -> None:
        """Open the job's run (files under `output_dir`/wandb), in group logger.group or else the job's
        sweep, named `name` or else uniquely after its folder (`run_identity`)."""
        self.output_dir = Path(output_dir)
        self._count = 0
        group, derived_name = run_identity(output_dir, self.group)
        name, self._group = name or derived_name, group
        mode = self.mode
        if mode == "online" and not has_api_key():
            log.warning("W&B: no API key found (run `wandb login` or set WANDB_API_KEY): logging offline instead")
            mode = "offline"
        try:
            self.run = self._init(mode, name, config, tags, group)
        except Exception as err:  # noqa: BLE001 - logging must never stop a job
            if mode != "online":
                log.warning("W&B: could not start a %s run (%s): continuing without W&B", mode, first_line(err))
                self.run = None
                return
            log.warning("W&B: could not reach the server (%s): logging offline instead", first_line(err))
            try:
                self.run = self._init("offline", name, config, tags, group)
            except Exception as err2:  # noqa: BLE001
                log.warning("W&B: offline run failed too (%s): continuing without W&B", first_line(err2))
                self.run = None

    def _init(self, mode: str, name: str, config, tags, group) -> Any:
        wandb = import_wandb()  # only jobs that log need it

        settings = wandb.Settings(init_timeout=self.init_timeout, silent=True, console="off")
        return wandb.init(
            project=self.project,
            entity=self.entity,
            group=group,
            name=name,
            job_type="search",
            tags=[t[:64] for t in tags],
            config=dict(config or {}),
            dir=str(self.output_dir),
            mode=mode,
            settings=settings,
            reinit="finish_previous",
        )

    def close(self, ok: bool = True) -> None:
        """Finish the run (exit code 1 when the job failed)."""
        if self.run is None:
            return
        try:
            self.run.finish(exit_code=0 if ok else 1)
        except Exception as err:  # noqa: BLE001
            log.warning("W&B: finishing the run failed (%s)", first_line(err))
        self.run = None

    @property
    def run_dir(self) -> Path | None:
        """The run's local folder (e.g. <job>/wandb/offline-run-...)."""
        if self.run is None:
            return None
        return Path(self.run.dir).parent

    # -- logging ---------------------------------------------------------------------------------
    def on_told(self, candidate: Candidate, measurement: Measurement, cached: bool) -> None:
        """One point per configuration the search used (measured now or served by the store)."""
        if self.run is None:
            return
        self._count += 1
        m = measurement
        data: dict[str, Any] = {
            "measurement/index": self._count,
            "measurement/accept_length": m.accept_length,
            "measurement/modeled_cost": m.modeled_cost,  # s/token (cost profile)
            "measurement/flops_fraction": m.flops_fraction,
            "measurement/modeled_tokens_per_s": m.modeled_tokens_per_s,
            "measurement/num_skipped": len(candidate.skip_layers),
            "measurement/cached": int(cached),
            "measurement/early_stopped": int(m.early_stopped),
        }
        if m.metric is not None:
            data["measurement/metric"] = SCALE * m.metric  # 0-100, as every output
        if candidate.vocab_size is not None:
            data["measurement/vocab_size"] = candidate.vocab_size
        self._safe(self.run.log, data)

    def finish(self, job: Any, model: str | None = None, num_layers: int | None = None,
               cost_profile: list[dict] | None = None) -> None:
        """Tables, the Pareto plot, the config map artifact and the summary of a finished job; the
        cost profiles that priced it (`specsparse.jobs.reproduce.cost_profiles`) join the run's config."""
        if self.run is None:
            return
        if cost_profile:
            self._safe(self.run.config.update, {"cost_profile": json.loads(strict_json(cost_profile))})
        wandb = import_wandb()

        from specsparse.jobs.figures import read_measurements  # noqa: PLC0415
        from specsparse.jobs.result import with_scalar_points  # noqa: PLC0415

        out = Path(job.output_dir)
        summary = job.summary()
        # wandb_group: what `specsparse report --wandb ... --publish` scopes the Report's panels to
        summary.update(model=model, num_layers=num_layers, wandb_group=self._group)
        frame = read_measurements(out / "measurements.csv")
        payload: dict[str, Any] = {}
        if frame is not None:
            columns = ["label", "skip_layers", "num_skipped", "vocab_size", "accept_length", "metric_name", "metric",
                       "fidelity", "modeled_cost", "modeled_tokens_per_s", "flops_fraction", "early_stopped",
                       "feasible", "pareto", "selected"]
            rows = frame[columns].astype(object).where(frame[columns].notna(), None).values.tolist()
            payload["measurements"] = wandb.Table(columns=columns, data=rows)
            front = [r for r in rows if r[columns.index("pareto")]]
            payload["pareto_front"] = wandb.Table(columns=columns, data=front)
        for key, png in (("pareto_plot", out / "pareto.png"), ("speedup_plot", out / "speedup.png")):  # the job drew them
            if png.is_file():
                payload[key] = wandb.Image(str(png))
        if job.vocab_comparison is not None:  # the draft heads timed side by side, one row each
            names = ["method", *COMPARISON_COLUMNS]
            table = [[json.dumps(row[c]) if isinstance(row[c], list) else row[c] for c in names]
                     for row in job.vocab_comparison["rows"]]
            payload["vocab_comparison"] = wandb.Table(columns=names, data=table)
        self._safe(self.run.log, payload)
        artifact_files = [out / name for name in ("config_map.yaml", "config_map.json", "draft_vocab.json")]
        artifact_files = [f for f in artifact_files if f.is_file()]
        if artifact_files:
            def log_artifact() -> None:
                artifact = wandb.Artifact(
                    artifact_name(model, summary["domain"], summary["strategy"]), type="config_map",
                    metadata={"model": model, "strategy": summary["strategy"], "skip_layers": summary["selected_skip_layers"]},
                )
                for file in artifact_files:
                    artifact.add_file(str(file))
                self.run.log_artifact(artifact)

            self._safe(log_artifact)
        self._safe(self.run.summary.update, json.loads(strict_json(with_scalar_points(summary))))

    def _safe(self, fn: Any, *args: Any) -> None:
        try:
            fn(*args)
        except Exception as err:  # noqa: BLE001 - logging must never stop a job
            log.warning("W&B: %s failed (%s)", getattr(fn, "__name__", "logging"), first_line(err))

