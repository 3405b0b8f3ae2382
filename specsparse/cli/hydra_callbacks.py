"""The Hydra callbacks conf/config.yaml loads (`hydra.callbacks`), at the command's edge: they stop the
command with one line and exit code 2.

OutputFolderCheck: a run or sweep folder that cannot be made (`paths.outputs` naming a file or a folder
under one, on a read-only or virtual filesystem, or without permission), before Hydra makes it.
SweepSummary: at the end of a sweep, one table of every job (`specsparse.jobs.sweep`); exit 2 if any failed.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback

from specsparse.jobs.sweep import write_sweep_summary
from specsparse.util import folder_problem

log = logging.getLogger(__name__)


class OutputFolderCheck(Callback):
    def on_run_start(self, config: Any, **kwargs: Any) -> None:  # the run folder's name needs Hydra's runtime, unset yet
        _check_output_folder(str(config.paths.outputs))

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        _check_output_folder(str(config.hydra.sweep.dir))


def _check_output_folder(folder: str) -> None:
    if (problem := folder_problem(folder)) is not None:
        print(f"error: paths.outputs: {problem}, so the folder {folder} cannot be made: point paths.outputs at a "
              "folder you can write (created if missing)", file=sys.stderr)
        sys.exit(2)


class SweepSummary(Callback):
    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        sweep = Path(str(config.hydra.sweep.dir))
        rows, markdown = write_sweep_summary(sweep)
        # Hydra's console handler shows it; its file handler still points at the last job's run.log.
        log.info("sweep: %d job(s)\n%swritten: %s, %s", len(rows), markdown, sweep / "sweep_summary.md",
                 sweep / "sweep_summary.csv")
        failed = [f"{r['job']}: {r['error']}" for r in rows if r["verdict"] == "failed"]
        if failed:
            log.error("%d job(s) of the sweep failed: %s", len(failed), " | ".join(failed))
            sys.exit(2)
