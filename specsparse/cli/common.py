"""What several subcommands share: the one-line error, the --forward-path option, and the checks of
--model and --threads that run before a model loads."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specsparse.jobs.checks import looks_like_path


def fail(message: str) -> int:
    """One line on stderr, exit code 2: how every command reports bad input."""
    print(f"specsparse: error: {message}", file=sys.stderr)
    return 2


def set_threads(threads: int | None) -> int | None:
    """Set torch's intra-op thread count (None: leave torch's own); `fail`'s exit code for a bad count."""
    if threads is None:
        return None
    if threads < 1:
        return fail(f"--threads {threads}: give a positive thread count")
    import torch  # noqa: PLC0415

    torch.set_num_threads(threads)
    return None


def add_forward_path_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--forward-path", default="auto", choices=("auto", "eager", "fast"),
                        help="fast: linear maps on weights prepacked for oneDNN (float32 on CPU); eager: PyTorch's "
                             "own; auto (default): fast where it runs, else eager (specsparse/decoding/forward_path.py)")


def forward_path_problem(forward_path: str, device: str, dtype: str) -> str | None:
    """The one-line error for a --forward-path that cannot run with this device and dtype (else None),
    before any model loads."""
    from specsparse.decoding.forward_path import ForwardPathError, resolve_forward_path  # noqa: PLC0415 - torch

    try:
        resolve_forward_path(forward_path, device, dtype)
    except ForwardPathError as err:
        return f"--forward-path {forward_path}: {err}"
    return None


def missing_model(source: str) -> str | None:
    """The one-line error for a model source that names a local path that is not there (else None)."""
    if looks_like_path(source):
        if not Path(source).expanduser().exists():
            return f"--model {source}: no such file or folder (give an embedded name, a .gguf, a model folder or a Hub id)"
    return None
