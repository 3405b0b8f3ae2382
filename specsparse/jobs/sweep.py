"""A sweep (`python run.py -m ...`) runs every valid job; the ones that fail are listed at the end and
the sweep exits 2. Hydra loads `SweepFailures` from conf/config.yaml (`hydra.callbacks`); jobs of a
sweep run in one process, so `run.py` records failures in `FAILED`."""

from __future__ import annotations

import logging
import sys
from typing import Any

from hydra.experimental.callback import Callback

log = logging.getLogger(__name__)

FAILED: list[str] = []  # "<job folder>: <error line>"


class SweepFailures(Callback):
    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        if FAILED:
            log.error("%d job(s) of the sweep failed: %s", len(FAILED), " | ".join(FAILED))
            sys.exit(2)
