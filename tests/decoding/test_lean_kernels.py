"""The lean step's native kernels (specsparse/decoding/lean_kernels.py) build once per source, compiler
and CPU into the cache, and their absence (no compiler, a failing one, or switched off) leaves the lean
step on PyTorch calls with one warning, decoding unchanged. What they compute is checked against those
calls in tests/decoding/test_lean_step.py."""

import copy
import logging

import pytest
import torch
from conftest import NEEDS_COMPILER

from specsparse.decoding import lean_kernels
from specsparse.decoding.forward_path import use_forward_path
from specsparse.decoding.lean_step import lean_step_of
from specsparse.decoding.models import tiny_model
from specsparse.decoding.session import ModelSession


@pytest.fixture
def fresh_build(monkeypatch):
    """`lean_kernels` as a new process finds it (its one build per process forgotten), before and after."""
    lean_kernels._library.cache_clear()
    yield monkeypatch
    lean_kernels._library.cache_clear()


@NEEDS_COMPILER
def test_the_kernels_build_once_into_the_cache_and_bind_both_dtypes(fresh_build, caplog):
    caplog.set_level(logging.INFO, logger=lean_kernels.__name__)
    for dtype in (torch.float32, torch.bfloat16):
        kernels = lean_kernels.kernels_for(dtype)
        assert kernels is not None, caplog.text
        assert callable(kernels.attention) and kernels.max_head_dim >= 128
    built = list((lean_kernels.cache_dir() / "kernels").glob("lean_kernels-*.so"))
    assert len(built) == 1
    stamp = built[0].stat().st_mtime_ns
    lean_kernels._library.cache_clear()
    caplog.clear()
    assert lean_kernels.kernels_for(torch.float32) is not None
    assert built[0].stat().st_mtime_ns == stamp and "built lean_kernels.cpp" not in caplog.text
    assert lean_kernels.kernels_for(torch.float16) is None  # no kernels for other dtypes


@pytest.mark.parametrize("setting, says", [({"CXX": "failing-compiler"}, "did not build with"),
                                           ({"CXX": "/no/such/compiler"}, "could not run the compiler"),
                                           ({lean_kernels.DISABLE: "0"}, lean_kernels.DISABLE)],
                         ids=["failing compiler", "missing compiler", "off"])
def test_without_kernels_the_lean_step_runs_pytorch_calls(fresh_build, caplog, tmp_path, setting, says):
    caplog.set_level(logging.INFO, logger=lean_kernels.__name__)
    failing = tmp_path / "failing-compiler"  # runs, prints nothing, exits 1
    failing.write_text("#!/bin/sh\nexit 1\n")
    failing.chmod(0o755)
    for name, value in setting.items():
        fresh_build.setenv(name, str(failing) if value == "failing-compiler" else value)
    assert lean_kernels.kernels_for(torch.float32) is None
    assert says in caplog.text
    eager = tiny_model(num_layers=3, hidden_size=32, seed=0).model
    fast = copy.deepcopy(eager)
    use_forward_path(fast, "fast")
    assert lean_step_of(fast).kernels is None
    with torch.inference_mode():
        torch.testing.assert_close(ModelSession(fast, ()).forward([3, 4]), ModelSession(eager, ()).forward([3, 4]),
                                   rtol=1e-4, atol=1e-4)
