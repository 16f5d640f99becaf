"""Run code in a fresh Python process with the trt_gn this test run imported: the op's choice of
implementation is made once per process, and registering the C++ kernels is for the life of one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import trt_gn
from trt_gn import ops

TESTS = Path(__file__).resolve().parent


def child(code: str, tmp_path: Path, *, own_cache: bool = True, **env) -> subprocess.CompletedProcess:
    """Run `code` in a fresh Python, in tmp_path (so no source tree in the working folder shadows it),
    with the trt_gn this test imported and tests/ on its path (the helper modules import there),
    TRT_GN_TORCH_OP unset, its cache in tmp_path/cache unless `own_cache` is False, and `env` (a
    value of None removes the variable)."""
    environ = dict(os.environ)
    environ["PYTHONPATH"] = os.pathsep.join([str(Path(trt_gn.__file__).parents[1]), str(TESTS)])
    if own_cache:
        environ["TRT_GN_CACHE_DIR"] = str(tmp_path / "cache")
    environ.pop(ops.IMPLEMENTATION_ENV, None)
    for key, value in env.items():
        if value is None:
            environ.pop(key, None)
        else:
            environ[key] = value
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=environ, cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)


def result(proc: subprocess.CompletedProcess):
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])
