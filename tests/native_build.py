"""Build and run the planner's CTest program (plugin_src/kernels/tests/plan_test.cpp) without a GPU:
host C++ only, configured with CMake (which needs nvcc on PATH to configure the native project)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_plan_test(build: Path, *options: str) -> subprocess.CompletedProcess:
    """plan_test configured in `build` with the CMake `options` (-DNAME=VALUE), built and run; skips
    where cmake or nvcc is missing, fails where the build does."""
    if shutil.which("cmake") is None or shutil.which("nvcc") is None:
        pytest.skip("cmake or nvcc is not on PATH (the native project needs the CUDA toolkit to configure)")
    configure = subprocess.run(
        ["cmake", "-S", str(ROOT / "plugin_src"), "-B", str(build), "-DTRT_GN_BUILD_PLUGIN=OFF",
         "-DCMAKE_CUDA_ARCHITECTURES=90", *options], capture_output=True, text=True)
    assert configure.returncode == 0, configure.stdout + configure.stderr
    compiled = subprocess.run(["cmake", "--build", str(build), "--target", "trt_gn_plan_test"],
                              capture_output=True, text=True)
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    return subprocess.run([str(build / "trt_gn_plan_test")], capture_output=True, text=True, timeout=120)
