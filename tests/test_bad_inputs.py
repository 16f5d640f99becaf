"""Bad input, table-driven, as a new user would give it: every subcommand and the Python API.

Each case runs in a folder of its own and asserts: the exit code of the one exit-code map
(trt_gn.errors), the exact first line of the message (`trt-gn <cmd>: error: ...`, or the
exception's message for the Python API), at most one hint line after it, no traceback, every
input file byte-for-byte unchanged (sha256) and no output at all, partial or temporary.
The CLI cases run through cli_helpers' runner (forked from one warm interpreter, as `python3 -m
trt_gn.cli` runs); interrupts are sent to real processes as Ctrl-C would.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

import trt_gn
from trt_gn import errors, fileio
from trt_gn.onnx import export as onnx_export, recipes, validate
from trt_gn.onnx import io as onnx_io
from trt_gn.onnx.fusion import fuse_file

from cli_helpers import cli_env, group_norm_silu_model, run_warm, snapshot

try:
    import tensorrt  # noqa: F401
    HAVE_TENSORRT = True
except ImportError:
    HAVE_TENSORRT = False

MAX_OPSET = onnx.defs.onnx_opset_version()
PACKAGE = Path(trt_gn.__file__).resolve().parent
PLUGIN_LOOKED_IN = f"{PACKAGE / 'lib' / 'libtrt_gn_plugin.so'}, {PACKAGE.parent / 'build' / 'plugin' / 'libtrt_gn_plugin.so'}"
PLUGIN_MISSING = (f"the TensorRT plugin library libtrt_gn_plugin.so was not found (looked in: {PLUGIN_LOOKED_IN})")


# --- inputs ------------------------------------------------------------------------------------


def _model(d: Path) -> None:
    group_norm_silu_model(d / "model.onnx")


def _ext_model(d: Path, name: str = "ext.onnx", location: str | None = None) -> Path:
    """model.onnx's graph with its weights in an external data file (default <name>.data)."""
    group_norm_silu_model(d / "tmp.onnx")
    model = onnx.load(str(d / "tmp.onnx"))
    (d / "tmp.onnx").unlink()
    for t in model.graph.initializer:  # external data is written from raw_data only
        t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t), t.name))
    # an unused 4 KiB weight: tensors under 256 bytes stay inline in fused outputs
    model.graph.initializer.append(numpy_helper.from_array(np.arange(1024, dtype=np.float32), "pad"))
    onnx.save(model, str(d / name), save_as_external_data=True, location=location or f"{name}.data",
              size_threshold=0)
    return d / name


def _truncated_data(d: Path) -> None:
    _ext_model(d)
    data = d / "ext.onnx.data"
    data.write_bytes(data.read_bytes()[:20])


def _missing_data(d: Path) -> None:
    _ext_model(d)
    (d / "ext.onnx.data").unlink()


def _text_files(d: Path) -> None:
    (d / "notes.onnx").write_text("not an onnx model\n")
    (d / "empty.onnx").write_bytes(b"")
    (d / "empty.plan").write_bytes(b"")
    (d / "engine.plan").write_bytes(b"\0" * 64)
    (d / "weights.txt").write_text("not a state dict\n")
    (d / "weights.bin").write_text("a text file, not a torch file\n")
    (d / "weights.safetensors").write_text("a text file, not safetensors\n")
    (d / "blocker").write_text("a file where a folder should be\n")
    (d / "empty_folder").mkdir()


def _everything(d: Path) -> None:
    _model(d)
    _text_files(d)


def _two_models(d: Path) -> None:
    """model.onnx and other.onnx, a model with another input name: no model and its fused copy."""
    _everything(d)
    graph = helper.make_graph([helper.make_node("Relu", ["a"], ["y"])], "other",
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 8, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 4, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    onnx.save(model, str(d / "other.onnx"))


def _wrong_keys(d: Path) -> None:
    torch.save({"encoder.weight": torch.zeros(2)}, d / "wrong.bin")


def _empty_repository(d: Path) -> None:
    (d / "repo").mkdir()


def _old_opset(d: Path) -> None:
    """A Reshape+InstanceNormalization GroupNorm in an opset-13 model: too old for the local function."""
    nodes = [
        helper.make_node("Constant", [], ["t"], value=numpy_helper.from_array(np.array([0, 2, -1], np.int64), "t")),
        helper.make_node("Reshape", ["x", "t"], ["g"]),
        helper.make_node("Constant", [], ["one"], value=numpy_helper.from_array(np.ones(2, np.float32), "one")),
        helper.make_node("Constant", [], ["zero"], value=numpy_helper.from_array(np.zeros(2, np.float32), "zero")),
        helper.make_node("InstanceNormalization", ["g", "one", "zero"], ["n"]),
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Reshape", ["n", "s"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "old", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 2, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 2, 2])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(d / "old.onnx"))


def _data_of_other_output(d: Path) -> None:
    # a.onnx keeps its weights in b.onnx.data: writing b.onnx (with data) would take that name.
    _ext_model(d, "a.onnx", location="b.onnx.data")


def _non_empty_cwd(d: Path) -> None:
    (d / "keep.txt").write_text("the user's file\n")


def _special_files(d: Path) -> None:
    """model.onnx, FIFOs o.fifo and in.fifo, an empty folder, and (as root) copies of /dev/null and
    /dev/full made with mknod: outputs a rename would replace, inputs a read would block on."""
    _model(d)
    (d / "empty_folder").mkdir()
    os.mkfifo(d / "o.fifo")
    os.mkfifo(d / "in.fifo")
    if os.geteuid() == 0:
        for name, minor in (("null.dev", 3), ("full.dev", 7)):
            os.mknod(d / name, 0o666 | stat.S_IFCHR, os.makedev(1, minor))


def _value_written_twice(d: Path) -> None:
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu"), helper.make_node("Neg", ["x"], ["y"], name="neg")]
    graph = helper.make_graph(nodes, "twice", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(d / "twice.onnx"))


def _data_outside_folder(d: Path) -> None:
    """sub/ext.onnx whose external data location is ../outside.data (a file that exists)."""
    (d / "sub").mkdir()
    _ext_model(d / "sub")
    model = onnx.load(str(d / "sub" / "ext.onnx"), load_external_data=False)
    for tensor in model.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = "../outside.data"
    onnx.save(model, str(d / "sub" / "ext.onnx"))
    (d / "sub" / "ext.onnx.data").rename(d / "outside.data")


def _data_linked_from_outside(d: Path) -> None:
    """model/ext.onnx whose data file is a symbolic link to blobs/weights (a download cache's layout)."""
    (d / "blobs").mkdir()
    (d / "model").mkdir()
    _ext_model(d / "model")
    (d / "model" / "ext.onnx.data").rename(d / "blobs" / "weights")
    (d / "model" / "ext.onnx.data").symlink_to(Path("..") / "blobs" / "weights")


def _data_with_two_links(d: Path) -> None:
    """ext.onnx whose data file has a second hard link, backup.data."""
    _ext_model(d)
    os.link(d / "ext.onnx.data", d / "backup.data")


HUGE = 2**40  # values a corrupt tensor declares (4 TiB of float32): never to be read or allocated


def _huge_inline_tensor(d: Path) -> None:
    """model.onnx's graph whose 'scale' declares 2^40 values and holds 4 bytes."""
    _model(d)
    model = onnx.load(str(d / "model.onnx"))
    scale = next(t for t in model.graph.initializer if t.name == "scale")
    scale.CopyFrom(numpy_helper.from_array(np.ones(1, np.float32), "scale"))
    scale.dims[:] = [HUGE]
    onnx.save(model, str(d / "huge.onnx"))
    (d / "model.onnx").unlink()


def _huge_external_tensor(d: Path) -> None:
    """ext.onnx whose external 'scale' declares 2^40 values, its length entry 32 bytes."""
    _ext_model(d)
    model = onnx.load(str(d / "ext.onnx"), load_external_data=False)
    next(t for t in model.graph.initializer if t.name == "scale").dims[:] = [HUGE]
    onnx.save(model, str(d / "ext.onnx"))


NAME_MAX = os.pathconf("/tmp", "PC_NAME_MAX")


def _plan_fifo(d: Path) -> None:
    _model(d)
    os.mkfifo(d / "o.plan")


def _long_name(size: int, suffix: str = ".onnx") -> str:
    return "n" * (size - len(suffix)) + suffix


# --- the table ---------------------------------------------------------------------------------


@dataclass
class Case:
    args: list[str]
    setup: Callable[[Path], None]
    exit_code: int
    # exact; {d} stands for the case's folder (resolved), {parser} for the words of the ONNX parser
    # (protobuf's, which differ between its releases): the project's own words around it are exact.
    first_line: str
    needs: str = ""  # "no-tensorrt", "no-gpu", "root" (mknod): the case only holds there
    timeout: float = 300


BAD = errors.EXIT_BAD_INPUT
SPECIAL_OUTPUT = "not a regular file, and would be replaced by one"
MISSING = errors.EXIT_MISSING
MISSING_DIMS = ("input 'x' (?x8x?x?) has a dynamic dimension 0: give --batch MIN:OPT:MAX or --shape x:MIN,OPT,MAX")
PROFILE = ["--batch", "1:1:2", "--height", "4:4:8", "--width", "4:4:8"]

CLI_CASES = {
    # fuse
    "fuse-missing-input": Case(["fuse", "missing.onnx", "out.onnx"], _everything, BAD,
                               "trt-gn fuse: error: missing.onnx: no such file"),
    "fuse-empty-input": Case(["fuse", "empty.onnx", "out.onnx"], _everything, BAD,
                             "trt-gn fuse: error: empty.onnx: empty file, not an ONNX model"),
    "fuse-text-input": Case(["fuse", "notes.onnx", "out.onnx"], _everything, BAD,
                            "trt-gn fuse: error: notes.onnx: not a readable ONNX model (truncated or another format): "
                            "{parser}"),
    "fuse-output-is-input": Case(["fuse", "model.onnx", "model.onnx"], _everything, BAD,
                                 "trt-gn fuse: error: model.onnx: is the input file; the input is never modified, "
                                 "choose another output"),
    "fuse-output-is-input-data": Case(["fuse", "ext.onnx", "ext.onnx.data"], _ext_model, BAD,
                                      "trt-gn fuse: error: ext.onnx.data: is the external data file of the input "
                                      "ext.onnx; the input is never modified, choose another output"),
    "fuse-output-data-is-input-data": Case(["fuse", "a.onnx", "b.onnx"], _data_of_other_output, BAD,
                                           "trt-gn fuse: error: b.onnx: its external data file b.onnx.data would "
                                           "overwrite the input's data"),
    "fuse-output-folder-missing": Case(["fuse", "model.onnx", "nowhere/out.onnx"], _everything, BAD,
                                       "trt-gn fuse: error: nowhere/out.onnx: folder nowhere does not exist"),
    "fuse-output-under-a-file": Case(["fuse", "model.onnx", "blocker/out.onnx"], _everything, BAD,
                                     "trt-gn fuse: error: blocker/out.onnx: folder blocker does not exist"),
    "fuse-output-is-folder": Case(["fuse", "model.onnx", "empty_folder"], _everything, BAD,
                                  "trt-gn fuse: error: empty_folder: is a directory; give a file name such as "
                                  "empty_folder/model.onnx"),
    "fuse-output-in-proc": Case(["fuse", "model.onnx", "/proc/x.onnx"], _everything, BAD,
                                "trt-gn fuse: error: /proc/x.onnx: folder /proc is not writable "
                                "(No such file or directory)"),
    "fuse-truncated-data": Case(["fuse", "ext.onnx", "out.onnx"], _truncated_data, BAD,
                                "trt-gn fuse: error: ext.onnx: external data file ext.onnx.data is truncated: "
                                "tensor 'scale' needs bytes 0..32, the file has 20"),
    "fuse-missing-data": Case(["fuse", "ext.onnx", "out.onnx"], _missing_data, BAD,
                              "trt-gn fuse: error: ext.onnx: external data file ext.onnx.data of tensor 'scale' "
                              "does not exist"),
    "fuse-opset-too-old": Case(["fuse", "old.onnx", "out.onnx"], _old_opset, BAD,
                               "trt-gn fuse: error: the model has ai.onnx opset 13; the model-local function needs "
                               "opset >= 15"),
    "fuse-output-is-fifo": Case(["fuse", "model.onnx", "o.fifo"], _special_files, BAD,
                                f"trt-gn fuse: error: o.fifo: is a FIFO, {SPECIAL_OUTPUT}"),
    "fuse-output-is-dev-null-copy": Case(["fuse", "model.onnx", "null.dev"], _special_files, BAD,
                                         f"trt-gn fuse: error: null.dev: is a character device, {SPECIAL_OUTPUT}",
                                         needs="root"),
    "fuse-output-is-dev-full-copy": Case(["fuse", "model.onnx", "full.dev"], _special_files, BAD,
                                         f"trt-gn fuse: error: full.dev: is a character device, {SPECIAL_OUTPUT}",
                                         needs="root"),
    "fuse-output-ends-in-separator": Case(["fuse", "model.onnx", "newdir/"], _special_files, BAD,
                                          "trt-gn fuse: error: newdir/: names a folder, not a file; give a file name "
                                          "such as newdir/model.onnx"),
    "fuse-output-folder-with-separator": Case(["fuse", "model.onnx", "empty_folder/"], _special_files, BAD,
                                              "trt-gn fuse: error: empty_folder/: names a folder, not a file; give a "
                                              "file name such as empty_folder/model.onnx"),
    "fuse-output-name-over-the-limit": Case(["fuse", "model.onnx", _long_name(NAME_MAX + 1)], _special_files, BAD,
                                            f"trt-gn fuse: error: {_long_name(NAME_MAX + 1)}: its name is "
                                            f"{NAME_MAX + 1} bytes, over the file system's limit of {NAME_MAX}"),
    "fuse-input-is-folder": Case(["fuse", "empty_folder", "out.onnx"], _special_files, BAD,
                                 "trt-gn fuse: error: empty_folder: is a folder, not an ONNX model file"),
    "fuse-input-is-fifo": Case(["fuse", "in.fifo", "out.onnx"], _special_files, BAD,
                               "trt-gn fuse: error: in.fifo: is a FIFO, not a regular file"),
    "fuse-value-written-twice": Case(["fuse", "twice.onnx", "out.onnx"], _value_written_twice, BAD,
                                     "trt-gn fuse: error: twice.onnx: invalid ONNX model (truncated or corrupt?): "
                                     "value 'y' is written twice: by node 'relu' and by node 'neg'"),
    "fuse-data-outside-model-folder": Case(["fuse", "sub/ext.onnx", "out.onnx"], _data_outside_folder, BAD,
                                           "trt-gn fuse: error: sub/ext.onnx: external data location "
                                           "'../outside.data' of tensor 'scale' is outside the model's folder sub"),
    "fuse-data-linked-from-outside": Case(["fuse", "model/ext.onnx", "out.onnx"], _data_linked_from_outside, BAD,
                                          "trt-gn fuse: error: model/ext.onnx: external data file model/ext.onnx.data "
                                          "is a link to {d}/blobs/weights, outside the model's folder model; onnx_ir "
                                          "reads no data from there (copy the file in)"),
    "fuse-data-with-two-hard-links": Case(["fuse", "ext.onnx", "out.onnx"], _data_with_two_links, BAD,
                                          "trt-gn fuse: error: ext.onnx: external data file ext.onnx.data has 2 hard "
                                          "links; onnx_ir reads only files with one (copy it)"),
    "fuse-tensor-larger-than-its-bytes": Case(["fuse", "huge.onnx", "out.onnx"], _huge_inline_tensor, BAD,
                                              f"trt-gn fuse: error: huge.onnx: tensor 'scale' declares {HUGE} FLOAT "
                                              f"values ({4 * HUGE} bytes) but holds 4 bytes"),
    "fuse-external-tensor-larger-than-its-data": Case(["fuse", "ext.onnx", "out.onnx"], _huge_external_tensor, BAD,
                                                      f"trt-gn fuse: error: ext.onnx: tensor 'scale' declares {HUGE} "
                                                      f"values ({4 * HUGE} bytes) but its external data length is 32 "
                                                      "bytes"),
    "fuse-unknown-flag": Case(["fuse", "model.onnx", "out.onnx", "--frobnicate"], _everything, BAD,
                              "trt-gn fuse: error: unrecognized arguments: --frobnicate"),
    # validate
    "validate-missing-fused": Case(["validate", "model.onnx", "missing.onnx"], _everything, BAD,
                                   "trt-gn validate: error: missing.onnx: no such file"),
    "validate-text-original": Case(["validate", "notes.onnx", "model.onnx"], _everything, BAD,
                                   "trt-gn validate: error: notes.onnx: not a readable ONNX model (truncated or "
                                   "another format): {parser}"),
    "validate-different-models": Case(["validate", "model.onnx", "other.onnx"], _two_models, BAD,
                                      "trt-gn validate: error: model.onnx and other.onnx have different inputs (x vs a): "
                                      "they are not a model and its fused copy"),
    "validate-unknown-dim": Case(["validate", "model.onnx", "model.onnx", "--dims", "batch=1,s81=64"], _everything,
                                 BAD, "trt-gn validate: error: --dims s81: model.onnx has no input dimension named 's81'"),
    "validate-dims-syntax": Case(["validate", "model.onnx", "model.onnx", "--dims", "batch"], _everything, BAD,
                                 "trt-gn validate: error: argument --dims: bad --dims entry 'batch'; expected "
                                 "name=positive-integer"),
    "validate-negative-seed": Case(["validate", "model.onnx", "model.onnx", "--seed", "-1"], _everything, BAD,
                                   "trt-gn validate: error: argument --seed: must be >= 0, got -1"),
    # export
    "export-output-in-proc": Case(["export", "tiny-unet", "/proc/e.onnx"], _everything, BAD,
                                  "trt-gn export: error: /proc/e.onnx: folder /proc is not writable "
                                  "(No such file or directory)"),
    "export-output-is-folder": Case(["export", "tiny-unet", "empty_folder"], _everything, BAD,
                                    "trt-gn export: error: empty_folder: is a directory; give a file name such as "
                                    "empty_folder/model.onnx"),
    "export-opset-999": Case(["export", "tiny-unet", "e.onnx", "--opset", "999"], _everything, BAD,
                             f"trt-gn export: error: --opset 999: torch.onnx (dynamo) exports opsets 17..{MAX_OPSET}"),
    "export-negative-seed": Case(["export", "tiny-unet", "e.onnx", "--seed", "-3"], _everything, BAD,
                                 "trt-gn export: error: argument --seed: must be >= 0, got -3"),
    "export-weights-missing": Case(["export", "tiny-unet", "e.onnx", "--weights", "nope.safetensors"], _everything,
                                   BAD, "trt-gn export: error: --weights nope.safetensors: no such file or folder"),
    "export-weights-suffix": Case(["export", "tiny-unet", "e.onnx", "--weights", "weights.txt"], _everything, BAD,
                                  "trt-gn export: error: --weights weights.txt: a weights file must end in "
                                  ".safetensors, .bin, .pt, .pth"),
    "export-weights-empty-folder": Case(["export", "tiny-unet", "e.onnx", "--weights", "empty_folder"], _everything,
                                        BAD, "trt-gn export: error: --weights empty_folder: folder has no config.json, "
                                        "so it is no diffusers model folder"),
    "export-weights-text-bin": Case(["export", "tiny-vae-decoder", "e.onnx", "--weights", "weights.bin"],
                                    _everything, BAD, "trt-gn export: error: weights.bin: not a torch.save file "
                                    "(neither a zip archive nor a pickle)"),
    "export-weights-not-safetensors": Case(["export", "tiny-vae-decoder", "e.onnx", "--weights",
                                            "weights.safetensors"], _everything, BAD,
                                           "trt-gn export: error: weights.safetensors: not a readable safetensors "
                                           "state dict (Error while deserializing header: header too large)"),
    "export-weights-wrong-keys": Case(["export", "tiny-vae-decoder", "e.onnx", "--weights", "wrong.bin"], _wrong_keys,
                                      BAD, "trt-gn export: error: wrong.bin: not a state dict of the tiny-vae-decoder "
                                      "configuration: 124 missing keys (e.g. 'decoder.conv_in.bias', "
                                      "'decoder.conv_in.weight'), 1 unexpected keys (e.g. 'encoder.weight')"),
    # build
    "build-missing-input": Case(["build", "missing.onnx", "-o", "out.plan"], _everything, BAD,
                                "trt-gn build: error: ONNX model missing.onnx does not exist"),
    "build-empty-input": Case(["build", "empty.onnx", "-o", "out.plan"] + PROFILE, _everything, BAD,
                              "trt-gn build: error: empty.onnx is empty, not an ONNX model"),
    "build-text-input": Case(["build", "notes.onnx", "-o", "out.plan"] + PROFILE, _everything, BAD,
                             "trt-gn build: error: notes.onnx is not a readable ONNX model ({parser})"),
    "build-dynamic-without-ranges": Case(["build", "model.onnx", "-o", "out.plan"], _everything, BAD,
                                         f"trt-gn build: error: {MISSING_DIMS}"),
    "build-plan-suffix": Case(["build", "model.onnx", "-o", "out.txt"], _everything, BAD,
                              "trt-gn build: error: engine file out.txt must end in .plan or .engine"),
    "build-plan-in-proc": Case(["build", "model.onnx", "-o", "/proc/out.plan"] + PROFILE, _everything, BAD,
                               "trt-gn build: error: engine /proc/out.plan: folder /proc is not writable (No such file or "
                               "directory)"),
    "build-plan-is-fifo": Case(["build", "model.onnx", "-o", "o.plan"] + PROFILE, _plan_fifo, BAD,
                               f"trt-gn build: error: engine o.plan: is a FIFO, {SPECIAL_OUTPUT}"),
    "build-plugin-flag-missing": Case(["build", "model.onnx", "-o", "out.plan", "--plugin", "nope.so"] + PROFILE,
                                      _everything, BAD,
                                      "trt-gn build: error: plugin library nope.so (--plugin) does not exist"),
    "build-no-plugin": Case(["build", "model.onnx", "-o", "out.plan"] + PROFILE, _everything, MISSING,
                            f"trt-gn build: error: {PLUGIN_MISSING}", needs="no-plugin"),
    "build-bad-workspace": Case(["build", "model.onnx", "--workspace", "4XB"], _everything, BAD,
                                "trt-gn build: error: argument --workspace: '4XB' is not a size like 4GiB, 512MiB or "
                                "a number of bytes"),
    # triton
    "triton-empty-plan": Case(["triton", "empty.plan", "--repository", "repo"], _everything, BAD,
                              "trt-gn triton: error: engine empty.plan is empty"),
    "triton-max-batch-over-int32": Case(["triton", "engine.plan", "--repository", "repo", "--max-batch-size",
                                         "4294967296"], _everything, BAD,
                                        "trt-gn triton: error: --max-batch-size must be in 0..2147483647 (Triton's "
                                        "int32), got 4294967296"),
    "triton-repository-is-a-file": Case(["triton", "model.onnx", "--backend", "python", "--repository", "blocker"],
                                        _everything, BAD,
                                        "trt-gn triton: error: model repository blocker: exists and is not a folder"),
    "triton-repository-parent-missing": Case(["triton", "model.onnx", "--backend", "python", "--repository",
                                              "nowhere/repo"], _everything, BAD,
                                             "trt-gn triton: error: model repository nowhere/repo: its parent nowhere "
                                             "does not exist or is not a folder"),
    "triton-onnx-not-onnx": Case(["triton", "engine.plan", "--repository", "repo", "--onnx", "notes.onnx",
                                  "--io-from", "onnx"], _everything, BAD,
                                 "trt-gn triton: error: notes.onnx is not a readable ONNX model ({parser})"),
    "triton-io-from-engine-without-tensorrt": Case(["triton", "engine.plan", "--repository", "repo", "--io-from",
                                                    "engine"], _everything, MISSING,
                                                   "trt-gn triton: error: TensorRT is not installed (import tensorrt "
                                                   "failed: No module named 'tensorrt')", needs="no-tensorrt"),
    "triton-no-plugin": Case(["triton", "engine.plan", "--repository", "repo", "--io-from", "onnx", "--onnx",
                              "model.onnx", "--max-batch-size", "2"], _everything, MISSING,
                             f"trt-gn triton: error: {PLUGIN_MISSING}", needs="no-plugin"),
    # serve
    "serve-missing-repository": Case(["serve", "models"], _everything, BAD,
                                     "trt-gn serve: error: model repository models does not exist"),
    "serve-same-ports": Case(["serve", "repo", "--http-port", "8000", "--grpc-port", "8000"], _empty_repository, BAD,
                             "trt-gn serve: error: the HTTP, gRPC and metrics ports must differ, got 8000, 8000, 8002"),
    # pipeline
    "pipeline-opset-0": Case(["pipeline", "--opset", "0", "--out", "o"], _everything, BAD,
                             f"trt-gn pipeline: error: --opset 0: torch.onnx (dynamo) exports opsets 17..{MAX_OPSET}"),
    "pipeline-negative-seed": Case(["pipeline", "--seed", "-1"], _everything, BAD,
                                   "trt-gn pipeline: error: argument --seed: must be >= 0, got -1"),
    "pipeline-out-is-cwd": Case(["pipeline", "--out", ".", "--overwrite"], _non_empty_cwd, BAD,
                                "trt-gn pipeline: error: output folder . holds the current folder; it cannot be "
                                "replaced"),
    "pipeline-weights-empty-folder": Case(["pipeline", "--weights", "empty_folder", "--out", "o"], _everything, BAD,
                                          "trt-gn pipeline: error: --weights empty_folder: folder has no config.json, "
                                          "so it is no diffusers model folder"),
    "pipeline-out-is-a-file": Case(["pipeline", "--out", "blocker"], _everything, BAD,
                                   "trt-gn pipeline: error: output folder blocker: exists and is not a folder"),
    # bench
    "bench-replays": Case(["bench", "--replays", "1", "--out", "b"], _everything, BAD,
                          "trt-gn bench: error: --replays must be >= 30, got 1"),
    "bench-out-is-a-file": Case(["bench", "--out", "blocker"], _everything, BAD,
                                "trt-gn bench: error: --out blocker: exists and is not a folder"),
    "bench-out-in-proc": Case(["bench", "--out", "/proc/bench-out"], _everything, BAD,
                              "trt-gn bench: error: --out /proc/bench-out: /proc is not writable "
                              "(No such file or directory)"),
    "bench-no-gpu": Case(["bench", "--out", "b"], _everything, MISSING,
                         "trt-gn bench: error: no CUDA device: the benchmark needs a GPU (torch.cuda.is_available() "
                         "is False)", needs="no-gpu"),
    # fuzz
    "fuzz-bad-case": Case(["fuzz", "--case", "1,2,3"], _everything, BAD,
                          "trt-gn fuzz: error: --case: a case has 13 to 15 comma-separated fields (N,C,H,W,G,dtype,"
                          "layout,affine,act,eps,scale,offset,seed[,special[,pre-add]]), got 3"),
    "fuzz-plans-only-alone": Case(["fuzz", "--plans-only"], _everything, BAD,
                                  "trt-gn fuzz: error: --plans-only needs --plans CSV"),
    "fuzz-plans-is-a-folder": Case(["fuzz", "--plans", "repo"], _empty_repository, BAD,
                                   "trt-gn fuzz: error: --plans repo: is a directory; give a file name such as "
                                   "repo/plans.csv"),
    "fuzz-no-gpu": Case(["fuzz", "--cases", "3", "--plans", "p.csv"], _everything, MISSING,
                        "trt-gn fuzz: error: no CUDA device (torch.cuda.is_available() is False)", needs="no-gpu"),
}


def _no_plugin() -> bool:
    """No TensorRT plugin library for trt_gn to find (the no-plugin cases' premise)."""
    from trt_gn import abi

    try:
        abi.find_plugin_library()
    except FileNotFoundError:
        return True
    return False


def _applies(case: Case) -> bool:
    needs = {"": lambda: True, "no-tensorrt": lambda: not HAVE_TENSORRT, "no-plugin": _no_plugin,
             "no-gpu": lambda: not torch.cuda.is_available(), "root": lambda: os.geteuid() == 0}
    return needs[case.needs]()


@dataclass
class Outcome:
    proc: subprocess.CompletedProcess
    before: dict[str, str]
    after: dict[str, str]
    folder: Path


@pytest.fixture(scope="module")
def cli_outcomes(tmp_path_factory) -> dict[str, Outcome]:
    root = tmp_path_factory.mktemp("bad")
    logs = root.parent / f"{root.name}-logs"
    logs.mkdir()
    befores, cases = {}, {}
    for name, case in CLI_CASES.items():
        if not _applies(case):
            continue
        (root / name).mkdir()
        case.setup(root / name)
        befores[name] = snapshot(root / name)
        cases[name] = (case.args, root / name)
    procs = run_warm(cases, logs)
    return {n: Outcome(procs[n], befores[n], snapshot(root / n), root / n) for n in cases}


def _check_message(stderr: str, first_line: str) -> None:
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert lines, stderr
    if "{parser}" in first_line:
        before, after = first_line.split("{parser}")
        assert lines[0].startswith(before) and lines[0].endswith(after), stderr
        assert lines[0][len(before):len(lines[0]) - len(after)].strip(), stderr  # the parser said something
    else:
        assert lines[0] == first_line, stderr
    assert len(lines) == 1 or (len(lines) == 2 and lines[1].startswith("  hint: ")), stderr


def test_the_table_covers_every_subcommand():
    from trt_gn.cli import SUBCOMMAND_MODULES

    assert {case.args[0] for case in CLI_CASES.values()} == set(SUBCOMMAND_MODULES)
    assert len(CLI_CASES) + len(API_CASES) >= 40


@pytest.mark.parametrize("name", list(CLI_CASES))
def test_cli_bad_input(cli_outcomes, name):
    case = CLI_CASES[name]
    if not _applies(case):
        pytest.skip(f"holds only with {case.needs}")
    o = cli_outcomes[name]
    assert o.proc.returncode == case.exit_code, o.proc.stderr
    _check_message(o.proc.stderr, case.first_line.replace("{d}", str(o.folder.resolve())))
    assert o.after == o.before  # inputs unchanged (sha256), no output, no staging or temp files


# --- the Python API ----------------------------------------------------------------------------


def _api_fuse_into_input_data(d):
    fuse_file(d / "ext.onnx", d / "ext.onnx.data")


def _api_save_over_input_data(d):
    onnx_io.check_output_path(d / "b.onnx", d / "a.onnx")


def _api_weights_wrong_keys(d):
    recipes.build("tiny-vae-decoder", weights=d / "wrong.bin")


def _api_export_opset(d):
    onnx_export.export_model(torch.nn.Identity(), (torch.zeros(1),), d / "e.onnx", opset=999)


def _api_dims(d):
    validate.validate_onnxruntime(d / "model.onnx", d / "model.onnx", shape_cases=[{"height": 8, "s73": 2}])


def _api_build_empty(d):
    from trt_gn.engine import BuildOptions, check_build_arguments

    check_build_arguments(d / "empty.onnx", d / "out.plan", BuildOptions())


def _api_triton_empty_plan(d):
    from trt_gn.triton import write_model_repository

    write_model_repository(d / "repo", "m", d / "empty.plan")


def _api_triton_max_batch(d):
    from trt_gn.triton import RepositoryOptions, write_model_repository

    write_model_repository(d / "repo", "m", d / "engine.plan", RepositoryOptions(max_batch_size=2**31))


def _api_pipeline_opset(d):
    from trt_gn.pipeline import PipelineOptions, check_options

    check_options(PipelineOptions(opset=0, out=d / "o"))


def _api_pipeline_seed(d):
    from trt_gn.pipeline import PipelineOptions, check_options

    check_options(PipelineOptions(seed=-1, out=d / "o"))


def _api_load_truncated(d):
    onnx_io.load_model(d / "ext.onnx")


def _api_recipe_unknown(d):
    recipes.build("sd99-unet")


@dataclass
class ApiCase:
    call: Callable[[Path], None]
    setup: Callable[[Path], None]
    error: type
    exit_code: int
    message: str  # exact, with {d} for the case's folder
    extra: dict = field(default_factory=dict)


API_CASES = {
    "fuse_file-output-is-input-data": ApiCase(_api_fuse_into_input_data, _ext_model, onnx_io.OutputPathError, BAD,
                                              "{d}/ext.onnx.data: is the external data file of the input {d}/ext.onnx; "
                                              "the input is never modified, choose another output"),
    "check_output_path-data-overlap": ApiCase(_api_save_over_input_data, _data_of_other_output,
                                              onnx_io.OutputPathError, BAD,
                                              "{d}/b.onnx: its external data file b.onnx.data would overwrite the "
                                              "input's data"),
    "recipes.build-wrong-keys": ApiCase(_api_weights_wrong_keys, _wrong_keys, recipes.WeightsError, BAD,
                                        "{d}/wrong.bin: not a state dict of the tiny-vae-decoder configuration: 124 "
                                        "missing keys (e.g. 'decoder.conv_in.bias', 'decoder.conv_in.weight'), 1 "
                                        "unexpected keys (e.g. 'encoder.weight')"),
    "recipes.build-unknown": ApiCase(_api_recipe_unknown, _everything, errors.Error, BAD,
                                     "unknown model recipe 'sd99-unet'"),
    "export_model-opset": ApiCase(_api_export_opset, _everything, errors.Error, BAD,
                                  f"--opset 999: torch.onnx (dynamo) exports opsets 17..{MAX_OPSET}"),
    "validate-unknown-dim": ApiCase(_api_dims, _everything, errors.Error, BAD,
                                    "--dims s73: {d}/model.onnx has no input dimension named 's73'"),
    "check_build_arguments-empty": ApiCase(_api_build_empty, _everything, errors.Error, BAD,
                                           "{d}/empty.onnx is empty, not an ONNX model"),
    "write_model_repository-empty-plan": ApiCase(_api_triton_empty_plan, _everything, errors.Error, BAD,
                                                 "engine {d}/empty.plan is empty"),
    "write_model_repository-max-batch": ApiCase(_api_triton_max_batch, _everything, errors.Error, BAD,
                                                "--max-batch-size must be in 0..2147483647 (Triton's int32), got "
                                                "2147483648"),
    "check_options-opset": ApiCase(_api_pipeline_opset, _everything, errors.Error, BAD,
                                   f"--opset 0: torch.onnx (dynamo) exports opsets 17..{MAX_OPSET}"),
    "check_options-seed": ApiCase(_api_pipeline_seed, _everything, errors.Error, BAD, "--seed must be >= 0, got -1"),
    "load_model-truncated-data": ApiCase(_api_load_truncated, _truncated_data, onnx_io.OnnxInputError, BAD,
                                         "{d}/ext.onnx: external data file {d}/ext.onnx.data is truncated: tensor "
                                         "'scale' needs bytes 0..32, the file has 20"),
}


@pytest.mark.parametrize("name", list(API_CASES))
def test_api_bad_input(tmp_path, name):
    case = API_CASES[name]
    case.setup(tmp_path)
    before = snapshot(tmp_path)
    with pytest.raises(case.error) as raised:
        case.call(tmp_path)
    assert isinstance(raised.value, errors.Error)
    assert raised.value.message == case.message.format(d=tmp_path)
    assert "\n" not in raised.value.message
    assert raised.value.exit_code == case.exit_code
    assert snapshot(tmp_path) == before


# --- interrupts ----------------------------------------------------------------------------------


def _interrupt(args: list[str], cwd: Path, after: float | str) -> subprocess.CompletedProcess:
    """Run `python3 -m trt_gn.cli ARGS` and send it SIGINT (Ctrl-C) after `after` seconds, or, for
    after="writing", as soon as its staging folder appears (the output is being written)."""
    proc = subprocess.Popen([sys.executable, "-m", "trt_gn.cli", *args], cwd=cwd, env=cli_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if after == "writing":
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            if any(p.name.endswith(".partial") for p in cwd.iterdir()):
                break
            time.sleep(0.005)
    else:
        time.sleep(after)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def _big_model(d: Path) -> None:
    """Many GroupNorm+SiLU in a row: loading, fusing and saving take seconds."""
    c, g, n = 64, 8, 400
    rng = np.random.default_rng(0)
    nodes, inits, last = [], [], "x"
    for i in range(n):
        inits += [numpy_helper.from_array(rng.standard_normal((c, 512)).astype(np.float32), f"pad{i}"),
                  numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), f"s{i}"),
                  numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), f"b{i}")]
        nodes += [helper.make_node("GroupNormalization", [last, f"s{i}", f"b{i}"], [f"g{i}"], num_groups=g),
                  helper.make_node("Sigmoid", [f"g{i}"], [f"sg{i}"]), helper.make_node("Mul", [f"g{i}", f"sg{i}"], [f"y{i}"])]
        last = f"y{i}"
    nodes.append(helper.make_node("Identity", [last], ["y"]))
    shape = ["N", c, "H", "W"]
    graph = helper.make_graph(nodes, "big", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], initializer=inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), str(d / "big.onnx"))


@pytest.mark.parametrize("command,setup,after", [
    (["fuse", "big.onnx", "out.onnx"], _big_model, "writing"),
    (["export", "tiny-unet", "e.onnx"], lambda d: None, 8.0),
], ids=["fuse", "export"])
def test_interrupt(tmp_path, command, setup, after):
    setup(tmp_path)
    before = snapshot(tmp_path)
    proc = _interrupt(command, tmp_path, after)
    if proc.returncode == 0:
        pytest.skip(f"finished before the interrupt ({after}): {proc.stdout.strip()}")
    assert proc.returncode == errors.EXIT_INTERRUPTED, proc.stderr
    _check_message(proc.stderr, f"trt-gn {command[0]}: error: interrupted; nothing was written")
    assert snapshot(tmp_path) == before


# --- writes that cannot half-happen ------------------------------------------------------------


def _weights(path: Path) -> list[np.ndarray]:
    return [numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer]


def test_model_and_data_appear_together(tmp_path, monkeypatch):
    """The previous output (model + data) stays whole when publishing the new model file fails."""
    src = _ext_model(tmp_path)
    out = tmp_path / "out" / "fused.onnx"
    out.parent.mkdir()
    fuse_file(src, out)
    first = _weights(out)
    files = snapshot(out.parent)
    # A new model (other weights) to write over it, with its publish failing at the model file.
    model = onnx.load(str(src))
    for t in model.graph.initializer:
        t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t) + 1, t.name))
    onnx.save(model, str(tmp_path / "other.onnx"), save_as_external_data=True, location="other.onnx.data",
              size_threshold=0)
    real_replace = os.replace

    def failing_replace(src_path, dst_path, *args, **kwargs):
        if Path(dst_path) == out:
            raise OSError(28, "No space left on device", str(dst_path))
        return real_replace(src_path, dst_path, *args, **kwargs)

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError):
        fuse_file(tmp_path / "other.onnx", out)
    monkeypatch.setattr(os, "replace", real_replace)
    assert snapshot(out.parent) == files  # the old model and its data, nothing else
    for a, b in zip(_weights(out), first):
        np.testing.assert_array_equal(a, b)
    # and a replacement that succeeds removes the old data file it no longer uses
    fuse_file(tmp_path / "other.onnx", out)
    second = _weights(out)
    assert all(np.array_equal(a, b + 1) for a, b in zip(second, first))
    referenced = onnx_io.model_files(out)
    assert {p.name for p in out.parent.iterdir()} == {p.name for p in referenced}


def test_data_name_taken_between_save_and_publish(tmp_path, monkeypatch):
    """A run whose data file name another run took after its save chose it (two runs to one output)
    moves its data to a free name and publishes a whole pair; the other run's data, now unused, goes."""
    src = _ext_model(tmp_path)
    model = onnx.load(str(src))
    for t in model.graph.initializer:
        t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t) + 1, t.name))
    onnx.save(model, str(tmp_path / "other.onnx"), save_as_external_data=True, location="other.onnx.data",
              size_threshold=0)
    out = tmp_path / "out" / "fused.onnx"
    out.parent.mkdir()
    real_publish = onnx_io._publish

    def other_run_first(*args, **kwargs):
        monkeypatch.setattr(onnx_io, "_publish", real_publish)
        fuse_file(tmp_path / "other.onnx", out)  # takes fused.onnx.data, the name this run's save chose
        return real_publish(*args, **kwargs)

    monkeypatch.setattr(onnx_io, "_publish", other_run_first)
    fuse_file(src, out)
    files = onnx_io.model_files(out)
    assert {p.name for p in out.parent.iterdir()} == {p.name for p in files}
    assert len(files) == 2 and (out.parent / "fused.onnx.data") not in files
    for a, b in zip(_weights(out), _weights(src)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o002])
def test_new_files_get_the_umask_mode(tmp_path, mask):
    _model(tmp_path)
    (tmp_path / "plain.onnx").write_bytes(onnx.load(str(tmp_path / "model.onnx")).SerializeToString())
    # nothing to fuse: an identity graph is copied unchanged
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "id",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(tmp_path / "id.onnx"))
    old = os.umask(mask)
    try:
        copied = fuse_file(tmp_path / "id.onnx", tmp_path / "copy.onnx")
        fused = fuse_file(tmp_path / "model.onnx", tmp_path / "fused.onnx")
        fileio.write_bytes(tmp_path / "x.plan", b"plan")
    finally:
        os.umask(old)
    assert copied.copied_unchanged and fused.fused
    for name in ("copy.onnx", "fused.onnx", "x.plan"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o666 & ~mask, name


# --- what is reported is what happened -------------------------------------------------------------


def test_validate_default_shapes_are_realistic(tmp_path):
    _model(tmp_path)
    report = validate.validate_onnxruntime(tmp_path / "model.onnx", tmp_path / "model.onnx",
                                           providers=["CPUExecutionProvider"])
    assert [c.shape_case for c in report.comparisons] == ["(1,8,16,16)", "(2,8,32,32)"]
    named = validate.validate_onnxruntime(tmp_path / "model.onnx", tmp_path / "model.onnx",
                                          shape_cases=[{"batch": 1, "height": 64, "width": 48}],
                                          providers=["CPUExecutionProvider"])
    assert [c.shape_case for c in named.comparisons] == ["(1,8,64,48)"]


def test_export_no_swap_counts_the_group_norms(tmp_path):
    env = cli_env()
    proc = subprocess.run([sys.executable, "-m", "trt_gn.cli", "export", "tiny-vae-decoder", "e.onnx", "--no-swap"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    model = onnx.load(str(tmp_path / "e.onnx"))
    in_file = len(fuse_file(tmp_path / "e.onnx", tmp_path / "f.onnx").fused)  # what is there to fuse
    assert in_file == 14
    assert proc.stdout.strip().splitlines()[-1] == f"wrote e.onnx ({in_file} GroupNorms left for trt-gn fuse)"
    assert {o.domain: o.version for o in model.opset_import}[""] == 18


def test_export_opset_the_converter_cannot_reach_is_an_error(tmp_path):
    """torch.onnx falls back to opset 18 when its converter fails: that is an error, and no file."""
    model = recipes.build("tiny-vae-decoder")
    args, names, shapes = recipes.example_inputs("tiny-vae-decoder")
    with pytest.raises(errors.Error) as raised:
        onnx_export.export_plain(model, args, tmp_path / "e.onnx", dynamic_shapes=shapes, input_names=names,
                                 opset=MAX_OPSET)
    assert raised.value.message == (f"torch.onnx exported opset 18, not the requested --opset {MAX_OPSET} "
                                    "(its version converter failed)")
    assert raised.value.exit_code == errors.EXIT_FAILED
    assert list(tmp_path.iterdir()) == []


def test_debug_shows_the_traceback(tmp_path):
    """--debug (on every subcommand) adds the traceback before the same one-line error."""
    proc = subprocess.run([sys.executable, "-m", "trt_gn.cli", "fuse", "missing.onnx", "out.onnx", "--debug"],
                          cwd=tmp_path, env=cli_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == errors.EXIT_BAD_INPUT
    assert proc.stderr.startswith("Traceback (most recent call last):")
    lines = proc.stderr.strip().splitlines()
    assert lines[-2:] == ["trt-gn fuse: error: missing.onnx: no such file",
                          "  hint: pass an .onnx model file (with its external data files next to it)"]
    assert list(tmp_path.iterdir()) == []


# --- names up to the file system's limit, SIGTERM, concurrent runs ------------------------------


def test_output_names_up_to_the_limit(tmp_path):
    """Every output name the file system takes is written, with external data too; the temporary
    names made from it fit, and none is left."""
    _model(tmp_path)
    _ext_model(tmp_path)
    sizes = [238, 250, NAME_MAX]
    cases = {f"plain-{n}": (["fuse", "model.onnx", f"out-{n}/{_long_name(n)}", "--quiet"], tmp_path) for n in sizes}
    cases.update({f"data-{n}": (["fuse", "ext.onnx", f"data-{n}/{_long_name(n)}", "--quiet"], tmp_path) for n in sizes})
    for name in cases:
        (tmp_path / name.replace("plain-", "out-")).mkdir()
    logs = tmp_path.parent / f"{tmp_path.name}-logs"
    logs.mkdir()
    before = snapshot(tmp_path)
    procs = run_warm(cases, logs)
    for name, proc in procs.items():
        assert proc.returncode == 0, (name, proc.stderr)
        assert proc.stderr == ""
        out = tmp_path / cases[name][0][2]
        files = onnx_io.model_files(out)
        assert {p.name for p in out.parent.iterdir()} == {p.name for p in files}, name  # nothing else
        assert all(len(p.name.encode()) <= NAME_MAX for p in files)
        assert len(files) == (2 if name.startswith("data-") else 1), files
        onnx.checker.check_model(str(out))
    after = snapshot(tmp_path)
    assert {k: v for k, v in after.items() if k in before} == before  # inputs unchanged


def _ext_model_with_big_data(d: Path) -> None:
    """ext.onnx with 128 MiB more of external data: its save takes a while by itself."""
    _ext_model(d)
    model = onnx.load(str(d / "ext.onnx"))
    model.graph.initializer.append(numpy_helper.from_array(np.zeros(32 << 20, np.float32), "pad128m"))
    (d / "ext.onnx.data").unlink()
    onnx.save(model, str(d / "ext.onnx"), save_as_external_data=True, location="ext.onnx.data", size_threshold=0)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_during_the_save_removes_the_staging(tmp_path, signum):
    """SIGTERM (timeout, docker stop, Kubernetes) is handled like Ctrl-C: sent while the output is
    being staged (a big save, then held before publishing by fileio's pause for tests), the staging
    goes and the exit code is 130."""
    _ext_model_with_big_data(tmp_path)
    before = snapshot(tmp_path)
    env = cli_env()
    env["TRT_GN_TEST_PAUSE_BEFORE_PUBLISH"] = "120"  # fileio: documented for tests of interrupts
    proc = subprocess.Popen([sys.executable, "-m", "trt_gn.cli", "fuse", "ext.onnx", "out.onnx"], cwd=tmp_path,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline and not list(tmp_path.glob(".out.onnx.*.partial")):
        time.sleep(0.005)
    assert proc.poll() is None, f"finished before it was staged: {proc.communicate()}"
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == errors.EXIT_INTERRUPTED, err
    _check_message(err, "trt-gn fuse: error: interrupted; nothing was written")
    assert snapshot(tmp_path) == before  # no staging folder, no output, the input unchanged


def _interrupt_self() -> None:
    """Ctrl-C sent to this process's main thread (where Python runs signal handlers)."""
    signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)


def test_interrupt_right_after_the_staging_folder_is_made(tmp_path, monkeypatch):
    """An interrupt between making the staging folder and taking it in hand leaves nothing."""
    _model(tmp_path)
    before = snapshot(tmp_path)
    real_mkdtemp, sent = tempfile.mkdtemp, []

    def mkdtemp_then_interrupt(*args, **kwargs):
        made = real_mkdtemp(*args, **kwargs)
        if not sent:
            sent.append(made)
            _interrupt_self()
        return made

    monkeypatch.setattr(tempfile, "mkdtemp", mkdtemp_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        fuse_file(tmp_path / "model.onnx", tmp_path / "out.onnx")
    assert sent and snapshot(tmp_path) == before


def test_interrupt_during_the_staging_cleanup_still_removes_it(tmp_path, monkeypatch):
    """A signal handled inside the cleanup (it came during a long C call, whose end does not run the
    handler) does not cut the removal of the staging folder short: it is re-raised after it."""
    real_unlink, raised = os.unlink, []

    def unlink_interrupted(*args, **kwargs):
        if not raised:
            raised.append(args[0])
            raise KeyboardInterrupt
        return real_unlink(*args, **kwargs)

    with pytest.raises(KeyboardInterrupt):
        with fileio.staging_folder(tmp_path, "out.onnx") as stage:
            for name in ("out.onnx", "out.onnx.data"):
                (stage / name).write_bytes(b"x")
            monkeypatch.setattr(os, "unlink", unlink_interrupted)
            raise KeyboardInterrupt
    assert raised and list(tmp_path.iterdir()) == []


def test_interrupt_between_data_and_model_publish(tmp_path, monkeypatch):
    """An interrupt after the data file is published waits for the model file: the output is a
    whole pair, never a data file alone."""
    src = _ext_model(tmp_path)
    out = tmp_path / "out" / "fused.onnx"
    out.parent.mkdir()
    real_publish = fileio.publish_file

    def publish_then_interrupt(staged, target):
        real_publish(staged, target)
        if str(target).endswith(".data"):
            _interrupt_self()

    monkeypatch.setattr(fileio, "publish_file", publish_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        fuse_file(src, out)
    files = onnx_io.model_files(out)
    assert len(files) == 2 and {p.name for p in out.parent.iterdir()} == {p.name for p in files}
    for a, b in zip(_weights(out), _weights(src)):
        np.testing.assert_array_equal(a, b)


def test_fuse_help_lists_the_exit_code_of_sigterm():
    proc = subprocess.run([sys.executable, "-m", "trt_gn.cli", "fuse", "--help"], env=cli_env(), capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0
    assert "130 interrupted by Ctrl-C (SIGINT) or SIGTERM" in " ".join(proc.stdout.split())


def _run_ort(path: Path, feeds: dict) -> list[np.ndarray]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]).run(None, feeds)


def test_concurrent_runs_to_one_output(tmp_path):
    """4 runs at a time to one output with external data, 3 rounds: each publishes a whole model and
    data pair or fails with one line; what remains is one model and the one data file it uses."""
    _ext_model(tmp_path)
    model = onnx.load(str(tmp_path / "ext.onnx"))
    model.graph.initializer.append(numpy_helper.from_array(np.zeros(1 << 20, np.float32), "pad4m"))
    onnx.save(model, str(tmp_path / "big.onnx"), save_as_external_data=True, location="big.onnx.data",
              size_threshold=0)
    (tmp_path / "out").mkdir()
    logs = tmp_path.parent / f"{tmp_path.name}-logs"
    logs.mkdir()
    inputs = {k: v for k, v in snapshot(tmp_path).items() if not k.startswith("out")}
    x = np.random.default_rng(0).standard_normal((2, 8, 4, 4)).astype(np.float32)
    (expected,) = _run_ort(tmp_path / "big.onnx", {"x": x})
    for round_ in range(3):
        cases = {f"r{round_}-{i}": (["fuse", "big.onnx", "out/fused.onnx", "--quiet"], tmp_path) for i in range(4)}
        procs = run_warm(cases, logs, jobs=4)
        for name, proc in procs.items():
            if proc.returncode != 0:
                _check_message(proc.stderr, proc.stderr.splitlines()[0])
            else:
                assert proc.stderr == "", (name, proc.stderr)
        assert any(p.returncode == 0 for p in procs.values())
        out = tmp_path / "out" / "fused.onnx"
        files = onnx_io.model_files(out)
        assert len(files) == 2 and {p.name for p in (tmp_path / "out").iterdir()} == {p.name for p in files}, \
            sorted(p.name for p in (tmp_path / "out").iterdir())
        (got,) = _run_ort(out, {"x": x})
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    assert {k: v for k, v in snapshot(tmp_path).items() if not k.startswith("out")} == inputs
