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

import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import onnx
import pytest

import trt_gn
from trt_gn.cli import SUBCOMMAND_MODULES

from cli_helpers import group_norm_silu_model, run_cli, run_warm, snapshot


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
