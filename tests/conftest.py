"""Shared fixtures. The tests import the installed trt_gn (pytest puts tests/, not the repository
root, on sys.path), so `pip install .` must have run; the header says which trt_gn and which
kernels library a run used."""

from __future__ import annotations

import os
import shutil

import pytest
import torch

import trt_gn
from trt_gn import abi, ops
from trt_gn.errors import first_line


def _library_status() -> tuple[str | None, str]:
    try:
        return abi.library_path(), ""
    except (FileNotFoundError, OSError, ImportError) as e:
        return None, str(e)


def pytest_report_header(config):
    path, why = _library_status()
    lines = [f"trt_gn: {os.path.dirname(trt_gn.__file__)}", f"torch {torch.__version__}, cuda available: {torch.cuda.is_available()}"]
    lines.append(f"kernels library: {path}" if path else f"kernels library: not loaded ({why.splitlines()[0]})")
    lines.append(f"op on CUDA tensors: {_op_implementation()}")
    return lines


def _op_implementation() -> str:
    """Which implementation runs torch.ops.trt_gn.group_norm_act on CUDA tensors (chosen here, so a C++
    op not yet built for this torch is compiled before the tests, saying so)."""
    try:
        return str(ops.implementation())
    except Exception as e:  # noqa: BLE001 - the header reports any failure; the tests that need it fail
        return f"none ({type(e).__name__}: {first_line(e)})"


def library_required() -> bool:
    """On CI with nvcc the pip build must have produced the library: a missing one fails, not skips."""
    return os.environ.get("CI", "").lower() in ("1", "true", "yes") and shutil.which("nvcc") is not None


@pytest.fixture(scope="session")
def kernels_lib():
    """The loaded kernels library (ctypes.CDLL); skips with the reason when it is not built."""
    path, why = _library_status()
    if path is None:
        if library_required():
            pytest.fail(f"CI with nvcc must build the kernels library, but: {why}")
        pytest.skip(f"kernels library not built: {why.splitlines()[0]}")
    return abi.load()
