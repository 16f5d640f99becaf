"""The bandwidth probe's argument checks (it measures on a GPU only: tests/gpu/test_gpu_bench.py runs it there)."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROG = "python -m trt_gn.lab.bandwidth"


@pytest.mark.parametrize("args, message", [
    (["--sizes-mb", "0"], "argument --sizes-mb: '0': give sizes from 1 to 16384 MB"),
    (["--sizes-mb", "a,b"], "argument --sizes-mb: 'a,b' is not a comma-separated list of integers"),
    (["--replays", "5"], "--replays 5: the lab times medians of at least 30 replays"),
])
def test_bad_arguments_are_one_line_errors(args, message):
    proc = subprocess.run([sys.executable, "-m", "trt_gn.lab.bandwidth", *args], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines()[-1] == f"{PROG}: error: {message}"


def test_without_a_gpu_it_is_a_missing_dependency():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: the probe would measure")
    proc = subprocess.run([sys.executable, "-m", "trt_gn.lab.bandwidth"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3
    assert proc.stderr.strip() == f"{PROG}: error: needs a CUDA GPU; none is visible to torch"
