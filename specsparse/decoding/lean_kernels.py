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
builds it, `kernels_for` says why once and returns None, and the lean step runs the same operations as
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
        self.max_head_dim, self.max_group = library.max_head_dim(), library.max_group()

    def take(self, layers: list) -> bool:
        """Whether the kernels take these layers' shapes (head size, query heads per kv head)."""
        return all(layer.head_dim <= self.max_head_dim and layer.heads // layer.kv_heads <= self.max_group
                   for layer in layers)


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
    library, why_not = compiled(SOURCE)
    if library is None:
        log.warning("the lean step's kernels %s: it runs its operations as PyTorch calls, a few milliseconds "
                    "slower per token", why_not)
    return library


def compiled(source: Path) -> tuple[ctypes.CDLL | None, str]:
    """The C++ file `source` built as a shared library for this CPU and loaded, or None and why not. Built
    once per source, compiler, flags and CPU into `$SPECSPARSE_CACHE/kernels/`."""
    compiler = find_compiler()
    if compiler is None:
        return None, "found no C++ compiler (c++, g++, clang++ or $CXX; install g++)"
    try:
        version = subprocess.run([compiler, "--version"], capture_output=True, text=True).stdout.split("\n", 1)[0]
    except OSError as err:
        return None, f"could not run the compiler {compiler} ({err.strerror})"
    errors = []
    for flags in FLAG_SETS:
        key = hashlib.sha256("\n".join([source.read_text(), compiler, version, *flags, platform.machine(),
                                        _cpu_flags()]).encode()).hexdigest()[:16]
        target = cache_dir() / "kernels" / f"{source.stem}-{key}.so"
        if target.is_file() or _build(source, compiler, flags, target, errors):
            return ctypes.CDLL(str(target)), ""
    return None, f"did not build with {compiler} ({errors[-1]})"


def find_compiler() -> str | None:
    """The C++ compiler kernels are built with: `$CXX`, else the first of COMPILERS on the PATH."""
    return os.environ.get("CXX") or next((found for name in COMPILERS if (found := shutil.which(name))), None)


def _build(source: Path, compiler: str, flags: tuple[str, ...], target: Path, errors: list[str]) -> bool:
    target.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        built = Path(scratch) / target.name
        done = subprocess.run([compiler, *flags, "-shared", "-fPIC", "-std=c++17", str(source), "-o", str(built)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            errors.append(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}")
            return False
        os.replace(built, target)  # atomic: workers building at once each land a whole file
    log.info("built %s in %.1f s (%s, kept at %s)", source.name, time.perf_counter() - start, " ".join(flags), target)
    return True


def _cpu_flags() -> str:
    """The CPU's feature flags (what -march=native compiled for), where Linux says them."""
    try:
        with open("/proc/cpuinfo") as info:
            return next((line for line in info if line.startswith(("flags", "Features"))), "")
    except OSError:
        return platform.processor()
