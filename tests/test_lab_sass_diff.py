"""The SASS comparison's checks of its input and of the tools it needs (the comparison itself needs
cuobjdump, which CI lacks)."""

from __future__ import annotations

import os
import subprocess
import sys

PROG = "python -m trt_gn.lab.sass_diff"


def run(*args, env=None):
    return subprocess.run([sys.executable, "-m", "trt_gn.lab.sass_diff", *map(str, args)], capture_output=True,
                          text=True, timeout=120, env=env)


def test_a_folder_without_objects_is_bad_input(tmp_path):
    (tmp_path / "old").mkdir()
    proc = run(tmp_path / "old", tmp_path / "new")
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"{PROG}: error: {tmp_path / 'old'} is not a folder of .cu.o objects"


def test_without_cuobjdump_it_is_a_missing_tool(tmp_path):
    for side in ("old", "new"):
        (tmp_path / side).mkdir()
        (tmp_path / side / "k.cu.o").write_bytes(b"")
    env = dict(os.environ, PATH=str(tmp_path / "empty"))
    proc = run(tmp_path / "old", tmp_path / "new", env=env)
    assert proc.returncode == 3
    assert proc.stderr.strip() == (f"{PROG}: error: needs cuobjdump and c++filt on PATH (the CUDA toolkit's "
                                   "cuobjdump; binutils' c++filt)")
