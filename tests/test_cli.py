"""The `trt-gn` command line as a user runs it: `python3 -m trt_gn.cli ...` in a subprocess.

Every subcommand's --help, and bad arguments (missing file, wrong extension, unwritable output,
unknown model name): exit code, exactly one error line (plus an optional hint) on stderr, no
traceback, and the working folder byte-for-byte as it was (no partial output, no temp files).
All cases run once, in a module fixture. A cold `python3 -m trt_gn.cli` pays for torch's import
(3-5 s on the 2-core CI machine), so a few cases run cold and the others run in processes forked
from one warm interpreter that has imported trt_gn.cli, each executing `runpy.run_module("trt_gn.cli",
run_name="__main__")` -- what `python3 -m trt_gn.cli` executes -- with its own argv, working folder,
stdout, stderr and exit code. TRT_GN_TEST_CLI_COLD=1 runs every case cold.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import trt_gn
from trt_gn.cli import SUBCOMMAND_MODULES

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
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


# --- the cases -------------------------------------------------------------------------------


@dataclass
class Case:
    args: list[str]
    setup: Callable[[Path], None] = lambda d: None
    error: str | None = None  # a fragment the one error line must contain (None: success expected)
    exit_code: int | None = None  # None: any non-zero for errors
    stdout: str | None = None  # a fragment stdout must contain (success cases)
    creates: list[str] = field(default_factory=list)  # files a success case must write


def _model(d: Path) -> None:
    group_norm_silu_model(d / "model.onnx")


def _model_and_blocker(d: Path) -> None:
    _model(d)
    (d / "blocker").write_text("a file where the output's folder should be\n")


def _text_files(d: Path) -> None:
    (d / "model.txt").write_text("not an onnx model\n")
    (d / "notes.onnx").write_text("not an onnx model either\n")
    (d / "engine.bin").write_bytes(b"\0" * 16)
    (d / "weights.txt").write_text("not a state dict\n")


def _blocker(d: Path) -> None:
    (d / "blocker").write_text("a file where the output's folder should be\n")


HELP_CASES = {"": Case(["--help"], stdout="example")}
HELP_CASES.update({name: Case([name, "--help"], stdout="examples:") for name in SUBCOMMAND_MODULES})

ERROR_CASES = {
    # missing file
    "fuse-missing-input": Case(["fuse", "missing.onnx", "out.onnx"], error="missing.onnx: no such file", exit_code=2),
    "build-missing-input": Case(["build", "missing.onnx", "-o", "out.plan"], error="missing.onnx does not exist",
                                exit_code=2),
    "pipeline-missing-weights": Case(["pipeline", "--weights", "missing.safetensors"],
                                     error="missing.safetensors: no such file or folder", exit_code=2),
    # wrong extension / wrong kind of file
    "build-wrong-extension": Case(["build", "model.txt", "-o", "out.plan"], _text_files,
                                  error="model.txt does not end in .onnx", exit_code=2),
    "triton-wrong-extension": Case(["triton", "engine.bin", "--repository", "repo"], _text_files,
                                   error="must end in .plan or .engine", exit_code=2),
    "fuse-not-onnx": Case(["fuse", "notes.onnx", "out.onnx"], _text_files, error="notes.onnx: not", exit_code=2),
    "pipeline-wrong-weights-extension": Case(["pipeline", "--weights", "weights.txt"], _text_files,
                                             error="must end in .safetensors", exit_code=2),
    # unwritable output (a path under a regular file: unwritable even for root)
    "fuse-unwritable-output": Case(["fuse", "model.onnx", "blocker/out.onnx"], _model_and_blocker,
                                   error="blocker does not exist", exit_code=2),
    "export-unwritable-output": Case(["export", "tiny-vae-decoder", "blocker/out.onnx"], _blocker,
                                     error="blocker does not exist", exit_code=2),
    "pipeline-unwritable-output": Case(["pipeline", "--out", "blocker/out"], _blocker,
                                       error="blocker does not exist or is not a folder", exit_code=2),
    # unknown model name
    "export-unknown-model": Case(["export", "sd99-unet", "out.onnx"], error="invalid choice: 'sd99-unet'", exit_code=2),
    "pipeline-unknown-model": Case(["pipeline", "--model", "sd99-unet"], error="invalid choice: 'sd99-unet'",
                                   exit_code=2),
}

SUCCESS_CASES = {
    "fuse-ok": Case(["fuse", "model.onnx", "fused.onnx", "--quiet"], _model, stdout="fused 1 GroupNorm subgraph(s) (1 with SiLU)",
                    creates=["fused.onnx"]),
}

ALL_CASES = {**{f"help-{k or 'trt-gn'}": v for k, v in HELP_CASES.items()}, **ERROR_CASES, **SUCCESS_CASES}


@dataclass
class Outcome:
    proc: subprocess.CompletedProcess
    before: dict[str, str]
    after: dict[str, str]
    folder: Path


# Cases that run as a cold `python3 -m trt_gn.cli`, exactly as typed by a user.
COLD_CASES = ("help-trt-gn", "help-pipeline", "pipeline-unknown-model", "fuse-missing-input")


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, Outcome]:
    root = tmp_path_factory.mktemp("cli")
    logs = root.parent / f"{root.name}-logs"
    logs.mkdir()
    befores = {}
    for name, case in ALL_CASES.items():
        (root / name).mkdir()
        case.setup(root / name)
        befores[name] = snapshot(root / name)
    all_cold = os.environ.get("TRT_GN_TEST_CLI_COLD", "") not in ("", "0")
    cold = [n for n in ALL_CASES if all_cold or n in COLD_CASES]
    warm = {n: (ALL_CASES[n].args, root / n) for n in ALL_CASES if n not in cold}
    with ThreadPoolExecutor(max_workers=2) as pool:
        cold_futures = {n: pool.submit(run_cli, ALL_CASES[n].args, root / n) for n in cold}
        procs = run_warm(warm, logs) if warm else {}
        procs.update({n: f.result() for n, f in cold_futures.items()})
    return {n: Outcome(procs[n], befores[n], snapshot(root / n), root / n) for n in ALL_CASES}


# --- tests -----------------------------------------------------------------------------------


def test_every_subcommand_has_a_help_case():
    assert set(HELP_CASES) == {"", *SUBCOMMAND_MODULES}
    assert "pipeline" in SUBCOMMAND_MODULES


@pytest.mark.parametrize("name", list(HELP_CASES))
def test_help(outcomes, name):
    o = outcomes[f"help-{name or 'trt-gn'}"]
    assert o.proc.returncode == 0, o.proc.stderr
    assert o.proc.stdout.startswith("usage: trt-gn")
    text = o.proc.stdout
    if name:
        # an "examples:" section whose lines run this very subcommand
        examples = text[text.index("examples:"):]
        assert f"trt-gn {name}" in examples, examples
    else:
        for sub in SUBCOMMAND_MODULES:
            assert re.search(rf"^\s+{sub}\s", text, re.M), f"{sub} missing from trt-gn --help"
        assert "example: trt-gn pipeline" in text
    assert "(default: None)" not in text  # an option without a default says what leaving it out does
    assert o.proc.stderr == ""
    assert o.after == o.before


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


@pytest.mark.parametrize("name", list(ERROR_CASES))
def test_bad_arguments(outcomes, name):
    case, o = ERROR_CASES[name], outcomes[name]
    proc = o.proc
    assert proc.returncode != 0, proc.stdout
    if case.exit_code is not None:
        assert proc.returncode == case.exit_code, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = _error_lines(proc.stderr)
    errors = [line for line in lines if "error:" in line]
    assert len(errors) == 1, proc.stderr
    # one error line, optionally followed by one hint line; nothing else
    assert lines[0] == errors[0], proc.stderr
    assert len(lines) == 1 or (len(lines) == 2 and lines[1].strip().startswith("hint:")), proc.stderr
    if case.error is not None:
        assert case.error in errors[0], errors[0]
    # no partial output, no temp or staging files: the folder is exactly as it was
    assert o.after == o.before


@pytest.mark.parametrize("name", list(SUCCESS_CASES))
def test_success(outcomes, name):
    case, o = SUCCESS_CASES[name], outcomes[name]
    assert o.proc.returncode == 0, o.proc.stderr
    assert case.stdout in o.proc.stdout
    created = set(o.after) - set(o.before)
    assert created == set(case.creates)
    for rel, digest in o.before.items():  # inputs untouched
        assert o.after[rel] == digest
    fused = onnx.load(str(o.folder / "fused.onnx"))
    assert [n.op_type for n in fused.graph.node] == [trt_gn.spec.PLUGIN_NAME]
