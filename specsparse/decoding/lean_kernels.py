"""The lean decode step's native kernels: the operations between a decoder layer's matrix products
(RMSNorm with the residual add, rotary embedding with the KV-cache write and attention, SiLU-gate), one
call each, from `lean_kernels.cpp`.

Why: on a CPU, a one-token forward of a small model spends, beside reading its weights, several
milliseconds on the ~20 small tensor operations per layer that PyTorch dispatches one by one (an RMSNorm
alone is 5 of them). These kernels do each group in one pass over a few kilobytes; the matrix products
stay oneDNN's (`forward_path.py`). BENCHMARKS.md, "Native kernels between the products", has the numbers.

Built on first use with the machine's C++ compiler (`$CXX`, else c++, g++ or clang++; about a second)
for this CPU (-march=native), and kept under `$SPECSPARSE_CACHE/kernels/`, named by a hash of the
source, the flags, the compiler and the CPU, so a shared cache serves mixed nodes. Where no compiler
builds it, `load()` says why once and returns None, and the lean step runs the same operations as
PyTorch calls (`lean_step.py`), slower by those milliseconds. `SPECSPARSE_NATIVE_KERNELS=0` asks for
that fallback (to compare the two).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import torch

from specsparse.decoding.models import cache_dir

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("lean_kernels.cpp")
FLAG_SETS = (("-O3", "-march=native", "-fopenmp", "-fno-math-errno"), ("-O3", "-fopenmp-simd", "-fno-math-errno"))
COMPILERS = ("c++", "g++", "clang++")
DISABLE = "SPECSPARSE_NATIVE_KERNELS"

_P, _INT, _LONG, _FLOAT = ctypes.c_void_p, ctypes.c_int, ctypes.c_long, ctypes.c_float
SIGNATURES = {
    "add_rms_norm": (_P, _P, _P, _FLOAT, _P, _INT, _INT),
    "attention": (_P, _INT, _INT, _INT, _INT, _P, _P, _P, _P, _FLOAT, _P, _P, _LONG, _LONG, _P, _P, _LONG, _FLOAT, _P),
    "silu_mul": (_P, _INT, _INT, _P),
}
DTYPES = {torch.float32: "float32", torch.bfloat16: "bfloat16"}


class LeanKernels:
    """The compiled kernels for one dtype: `add_rms_norm`, `attention`, `silu_mul` (ctypes functions over
    data pointers; the signatures are lean_kernels.cpp's)."""

    def __init__(self, library: ctypes.CDLL, dtype: torch.dtype):
        for name, argtypes in SIGNATURES.items():
            function = getattr(library, f"{name}_{DTYPES[dtype]}")
            function.argtypes, function.restype = argtypes, None
            setattr(self, name, function)
        self.max_head_dim = library.max_head_dim()


def kernels_for(dtype: torch.dtype) -> LeanKernels | None:
    """The kernels for `dtype` (float32 or bfloat16), or None where they do not build here (or are
    switched off)."""
    library = _library()
    return None if library is None or dtype not in DTYPES else LeanKernels(library, dtype)


@functools.cache
def _library() -> ctypes.CDLL | None:
    if os.environ.get(DISABLE, "1") == "0":
        log.info("%s=0: the lean step runs its operations as PyTorch calls", DISABLE)
        return None
    compiler = os.environ.get("CXX") or next((found for name in COMPILERS if (found := shutil.which(name))), None)
    if compiler is None:
        log.warning("no C++ compiler (c++, g++, clang++ or $CXX) to build the lean step's kernels: it runs "
                    "its operations as PyTorch calls, a few milliseconds slower per token; install g++ for them")
        return None
    errors = []
    for flags in FLAG_SETS:
        path = _built(compiler, flags, errors)
        if path is not None:
            return ctypes.CDLL(str(path))
    log.warning("the lean step's kernels did not build with %s (%s): it runs its operations as PyTorch calls",
                compiler, errors[-1])
    return None


def _built(compiler: str, flags: tuple[str, ...], errors: list[str]) -> Path | None:
    """The shared library for these flags, compiled into the cache unless it is there already."""
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True).stdout.split("\n", 1)[0]
    key = hashlib.sha256("\n".join([SOURCE.read_text(), compiler, version, *flags, platform.machine(),
                                    _cpu_flags()]).encode()).hexdigest()[:16]
    target = cache_dir() / "kernels" / f"lean_kernels-{key}.so"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        built = Path(scratch) / target.name
        done = subprocess.run([compiler, *flags, "-shared", "-fPIC", "-std=c++17", str(SOURCE), "-o", str(built)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            errors.append(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}")
            return None
        os.replace(built, target)  # atomic: workers building at once each land a whole file
    log.info("built the lean step's kernels in %.1f s (%s, kept at %s)", time.perf_counter() - start,
             " ".join(flags), target)
    return target


def _cpu_flags() -> str:
    """The CPU's feature flags (what -march=native compiled for), where Linux says them."""
    try:
        with open("/proc/cpuinfo") as info:
            return next((line for line in info if line.startswith(("flags", "Features"))), "")
    except OSError:
        return platform.processor()
