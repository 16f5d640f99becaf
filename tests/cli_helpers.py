"""Helpers of the command-line tests (test_cli, test_bad_inputs, test_pipeline and the lab's tools):
run `python3 -m trt_gn.cli` as a user does, cold or forked from one warm interpreter, snapshot a
folder to prove nothing was touched, and build the one-GroupNorm+SiLU model the cases use."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

import trt_gn

# The subprocess imports the same trt_gn as this test run (installed or source tree).
PACKAGE_ROOT = str(Path(trt_gn.__file__).resolve().parent.parent)


def cli_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
    env.setdefault("COLUMNS", "120")
    return env


def run_cli(args: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trt_gn.cli", *args], cwd=cwd, env=cli_env(),
                          capture_output=True, text=True, timeout=timeout)


# Forked children of one interpreter that has paid the imports; each runs the module as -m does.
_WARM_RUNNER = r"""
import json, os, runpy, sys
import trt_gn.cli  # noqa: F401  (the expensive imports, once)

cases = json.load(sys.stdin)
jobs = int(os.environ.get("TRT_GN_TEST_JOBS", "2"))
running, codes = {}, {}
for name, case in list(cases.items()) + [(None, None)] * jobs:
    while running and (len(running) >= jobs or name is None):
        pid, status = os.waitpid(-1, 0)
        codes[running.pop(pid)] = os.waitstatus_to_exitcode(status)
    if name is None:
        continue
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.chdir(case["cwd"])
            for fd, path in ((1, case["stdout"]), (2, case["stderr"])):
                os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
            sys.argv = ["trt-gn", *case["args"]]
            try:
                runpy.run_module("trt_gn.cli", run_name="__main__", alter_sys=True)
                code = 0
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
                if isinstance(e.code, str):
                    print(e.code, file=sys.stderr)
            except BaseException:
                import traceback
                traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    running[pid] = name
print(json.dumps(codes))
"""


def run_warm(cases: dict[str, tuple[list[str], Path]], logs: Path, jobs: int | None = None
             ) -> dict[str, subprocess.CompletedProcess]:
    """Run each (args, cwd) through the warm runner, `jobs` at a time (default: TRT_GN_TEST_JOBS or
    2); stdout/stderr are kept in `logs`."""
    spec_ = {name: dict(args=args, cwd=str(cwd), stdout=str(logs / f"{name}.out"), stderr=str(logs / f"{name}.err"))
             for name, (args, cwd) in cases.items()}
    env = cli_env()
    if jobs is not None:
        env["TRT_GN_TEST_JOBS"] = str(jobs)
    # Started in `logs`: `-c` puts the working directory first on sys.path, and a repository root
    # there would shadow the trt_gn under test (the installed one, with -P) with the source tree.
    proc = subprocess.run([sys.executable, "-c", _WARM_RUNNER], input=json.dumps(spec_), env=env, cwd=logs,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    codes = json.loads(proc.stdout.strip().splitlines()[-1])
    return {name: subprocess.CompletedProcess(["trt-gn", *cases[name][0]], codes[name],
                                              Path(s["stdout"]).read_text(), Path(s["stderr"]).read_text())
            for name, s in spec_.items()}


SNAPSHOT_HASH_LIMIT = 1 << 30


def snapshot(folder: Path) -> dict[str, str]:
    """Every file and folder under `folder` (hidden ones too) -> content hash ('dir' for folders; the
    kind and device number for FIFOs, devices and sockets, which are never opened: a FIFO blocks)."""
    out = {}
    for p in sorted(folder.rglob("*")):
        rel = str(p.relative_to(folder))
        st = p.lstat()
        if stat.S_ISDIR(st.st_mode):
            out[rel] = "dir"
        elif stat.S_ISREG(st.st_mode) and st.st_size > SNAPSHOT_HASH_LIMIT:
            out[rel] = f"large file of {st.st_size} bytes"  # bigger than any test input: by size, unread
        elif stat.S_ISREG(st.st_mode):
            with open(p, "rb") as f:
                out[rel] = hashlib.file_digest(f, "sha256").hexdigest()
        else:
            out[rel] = f"special {stat.S_IFMT(st.st_mode):o} {st.st_rdev}"
    return out


def group_norm_silu_model(path: Path) -> None:
    """A one-GroupNorm+SiLU ONNX model (opset 21 GroupNormalization, per-channel scale), built by hand."""
    c, g = 8, 4
    rng = np.random.default_rng(0)
    scale = helper.make_tensor("scale", TensorProto.FLOAT, [c], rng.standard_normal(c).astype(np.float32))
    bias = helper.make_tensor("bias", TensorProto.FLOAT, [c], rng.standard_normal(c).astype(np.float32))
    nodes = [
        helper.make_node("GroupNormalization", ["x", "scale", "bias"], ["gn"], num_groups=g, epsilon=1e-5),
        helper.make_node("Sigmoid", ["gn"], ["sig"]),
        helper.make_node("Mul", ["gn", "sig"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "gn_silu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", c, "height", "width"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", c, "height", "width"])],
        initializer=[scale, bias])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    # The IR version opset 21 came with, not the installed onnx's newest: an onnxruntime older than
    # that onnx refuses a model of an IR version it does not know.
    model.ir_version = 10
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
