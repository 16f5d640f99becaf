"""trt_gn.engine and `trt-gn build`: what runs without TensorRT.

Covered here: shape/profile parsing and resolution against a real ONNX model, argument checks,
the missing-TensorRT message, atomic writes and "nothing written on failure", the progress
bookkeeping behind the TensorRT progress monitor. NOT covered here (no TensorRT on this machine):
parsing with TensorRT's ONNX parser, the build itself, the timing cache and version-compatible
plans; tests/gpu (run where TensorRT exists) covers those. The parse and build through a real
builder, TensorRT-RTX, are tests/test_tensorrt_rtx.py's.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from trt_gn import spec
from trt_gn.cli import main as cli_main
from trt_gn.cli.build import parse_size
from trt_gn.engine import (BuildOptions, DimRange, EngineBuildError, PhaseProgress, ShapeRange, TensorSpec,
                           check_build_arguments, parse_dim_range, parse_shape_range, read_onnx_io,
                           resolve_profile, write_atomic)

HAVE_TENSORRT = importlib.util.find_spec("tensorrt") is not None


def fused_model(path: Path, dims=("N", 8, "H", "W"), dtype=TensorProto.FLOAT16, extra_input=False) -> Path:
    """A model with one trt_gn GroupNormAct node, as `trt-gn fuse` writes it (bare custom node)."""
    c = dims[1] if isinstance(dims[1], int) else 8
    x = helper.make_tensor_value_info("x", dtype, list(dims))
    y = helper.make_tensor_value_info("y", dtype, list(dims))
    gamma = helper.make_tensor("gamma", dtype, [c], [1.0] * c)
    beta = helper.make_tensor("beta", dtype, [c], [0.0] * c)
    node = helper.make_node(spec.PLUGIN_NAME, ["x", "gamma", "beta"], ["y"], domain=spec.ONNX_DOMAIN,
                            **{spec.FIELD_NUM_GROUPS: 4, spec.FIELD_EPSILON: 1e-5, spec.FIELD_ACTIVATION: "silu"})
    inputs = [x]
    if extra_input:
        inputs.append(helper.make_tensor_value_info("t", TensorProto.INT64, ["N"]))
    graph = helper.make_graph([node], "g", inputs, [y], initializer=[gamma, beta])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid(spec.ONNX_DOMAIN, 1)])
    onnx.save(model, path)
    return path


@pytest.fixture
def model(tmp_path):
    return fused_model(tmp_path / "m.onnx")


@pytest.fixture
def plugin(tmp_path):
    # Only its existence is checked before TensorRT is imported; TensorRT would load the real one.
    lib = tmp_path / spec.PLUGIN_LIBRARY
    lib.write_bytes(b"not loaded in these tests")
    return lib


def listing(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# --- shape parsing ----------------------------------------------------------------------------

def test_parse_shape_range_min_opt_max():
    s = parse_shape_range("x:1x4x64x64,2x4x64x64,4x4x128x128")
    assert s == ShapeRange("x", (1, 4, 64, 64), (2, 4, 64, 64), (4, 4, 128, 128))


def test_parse_shape_range_fixed_and_names_with_colons():
    assert parse_shape_range("x:2x4x8x8") == ShapeRange("x", (2, 4, 8, 8), (2, 4, 8, 8), (2, 4, 8, 8))
    # ONNX names may contain ':'; the shapes follow the last one
    assert parse_shape_range("input:0:1x2,1x2,3x2").name == "input:0"


@pytest.mark.parametrize("text, message", [
    ("1x4x64x64", "is not NAME:MIN,OPT,MAX"),
    ("x:1x4,2x4", "give one shape or three (min,opt,max), got 2"),
    ("x:1x4,2x4x1,4x4", "min/opt/max have different ranks (2, 3, 2)"),
    ("x:4x4,2x4,8x4", "need min <= opt <= max in every dimension, got min 4x4, opt 2x4, max 8x4"),
    ("x:0x4,1x4,2x4", "dimensions must be >= 1"),
    ("x:1x-4", "'1x-4' is not a shape like 2x4x64x64"),
    ("x:", "'' is not a shape like 2x4x64x64"),
])
def test_parse_shape_range_errors(text, message):
    with pytest.raises(ValueError) as err:
        parse_shape_range(text)
    assert message in str(err.value)


def test_parse_dim_range():
    assert parse_dim_range("1:2:4") == DimRange(1, 2, 4)
    assert parse_dim_range("8") == DimRange(8, 8, 8)
    for bad, message in [("1:2", "is not MIN:OPT:MAX"), ("a", "is not MIN:OPT:MAX"),
                         ("4:2:8", "need 1 <= min <= opt <= max, got 4:2:8"), ("0:1:2", "need 1 <= min")]:
        with pytest.raises(ValueError, match=message):
            parse_dim_range(bad)


def test_parse_size():
    assert parse_size("4GiB") == 4 << 30
    assert parse_size("512mib") == 512 << 20
    assert parse_size("1024") == 1024
    with pytest.raises(Exception, match="is not a size like 4GiB"):
        parse_size("4GB")


# --- profile resolution against the model's inputs ---------------------------------------------

def test_read_onnx_io(model):
    inputs, outputs = read_onnx_io(model)
    assert inputs == [TensorSpec("x", "FLOAT16", (None, 8, None, None))]  # initializers are not inputs
    assert outputs == [TensorSpec("y", "FLOAT16", (None, 8, None, None))]


def test_profile_from_batch_height_width(tmp_path):
    inputs, _ = read_onnx_io(fused_model(tmp_path / "m.onnx", extra_input=True))
    profile = resolve_profile(inputs, batch=DimRange(1, 2, 4), height=DimRange(32, 64, 128),
                              width=DimRange(16, 64, 96))
    assert profile == [ShapeRange("x", (1, 8, 32, 16), (2, 8, 64, 64), (4, 8, 128, 96)),
                       ShapeRange("t", (1,), (2,), (4,))]  # rank-1 input: only the batch


def test_profile_explicit_shape_wins(model):
    inputs, _ = read_onnx_io(model)
    explicit = parse_shape_range("x:1x8x8x8,1x8x16x16,2x8x32x32")
    assert resolve_profile(inputs, [explicit], batch=DimRange(1, 1, 9)) == [explicit]


def test_profile_static_model_needs_none(tmp_path):
    inputs, _ = read_onnx_io(fused_model(tmp_path / "s.onnx", dims=(2, 8, 16, 16)))
    assert resolve_profile(inputs) == []


@pytest.mark.parametrize("kwargs, message", [
    ({}, "input 'x' (?x8x?x?) has a dynamic dimension 0: give --batch MIN:OPT:MAX or --shape x:MIN,OPT,MAX"),
    ({"batch": DimRange(1, 1, 2)}, "has a dynamic dimension 2: give --height MIN:OPT:MAX"),
    ({"shapes": [parse_shape_range("z:1x2,1x2,1x2")]}, "--shape names 'z', which is not an input of the model (inputs: x)"),
    ({"shapes": [parse_shape_range("x:1x8x8,1x8x8,1x8x8")]}, "--shape x: rank 3, but the model's input has rank 4 (?x8x?x?)"),
    ({"shapes": [parse_shape_range("x:1x4x8x8,1x4x8x8,1x4x8x8")]}, "--shape x: dimension 1 is fixed to 8 in the model"),
    ({"shapes": [parse_shape_range("x:1x8x8x8"), parse_shape_range("x:1x8x8x8")]}, "--shape given twice for input 'x'"),
])
def test_profile_errors(model, kwargs, message):
    inputs, _ = read_onnx_io(model)
    with pytest.raises(ValueError) as err:
        resolve_profile(inputs, **kwargs)
    assert message in str(err.value)


def test_dynamic_channel_dimension_needs_explicit_shape(tmp_path):
    inputs, _ = read_onnx_io(fused_model(tmp_path / "c.onnx", dims=(1, "C", 8, 8)))
    with pytest.raises(ValueError, match=r"dynamic dimension 1: give --shape x:MIN,OPT,MAX"):
        resolve_profile(inputs, batch=DimRange(1, 1, 1))


# --- argument checks (before TensorRT) ---------------------------------------------------------

def test_check_build_arguments_accepts_good_input(model, plugin, tmp_path):
    checked = check_build_arguments(model, tmp_path / "m.plan",
                                    BuildOptions(plugin_library=plugin, batch=DimRange(1, 2, 4),
                                                 height=DimRange(8, 8, 8), width=DimRange(8, 8, 8)))
    assert checked.profile == [ShapeRange("x", (1, 8, 8, 8), (2, 8, 8, 8), (4, 8, 8, 8))]
    assert checked.plugin == plugin.resolve()


@pytest.mark.parametrize("case, message", [
    ("missing", "does not exist"),
    ("extension", "does not end in .onnx"),
    ("plan_extension", "must end in .plan or .engine"),
    ("no_folder", "/missing/out.plan: folder "),
    ("not_onnx", "is not a readable ONNX model"),
    ("lean_without_vc", "--exclude-lean-runtime only applies to version-compatible plans"),
    ("no_plugin", "plugin library"),
])
def test_check_build_arguments_errors(case, message, model, plugin, tmp_path):
    onnx_path, plan = model, tmp_path / "out.plan"
    options = BuildOptions(plugin_library=plugin, batch=DimRange(1, 1, 1), height=DimRange(8, 8, 8),
                           width=DimRange(8, 8, 8))
    if case == "missing":
        onnx_path = tmp_path / "nope.onnx"
    elif case == "extension":
        onnx_path = tmp_path / "m.txt"
        onnx_path.write_bytes(model.read_bytes())
    elif case == "plan_extension":
        plan = tmp_path / "out.onnx"
    elif case == "no_folder":
        plan = tmp_path / "missing" / "out.plan"
    elif case == "not_onnx":
        onnx_path = tmp_path / "bad.onnx"
        onnx_path.write_bytes(b"\x00garbage, not a protobuf\xff" * 3)
    elif case == "lean_without_vc":
        options.exclude_lean_runtime = True
    elif case == "no_plugin":
        options.plugin_library = tmp_path / "missing.so"
    with pytest.raises(EngineBuildError) as err:
        check_build_arguments(onnx_path, plan, options)
    assert message in err.value.message


# --- the CLI ----------------------------------------------------------------------------------

def test_build_help(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli_main(["build", "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    for text in ("examples:", "--batch 1:2:4", "--version-compatible", "--timing-cache", "exit codes:"):
        assert text in out


def run_cli(argv, capsys):
    code = cli_main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_build_bad_input_exits_2_with_one_line_and_hint(tmp_path, plugin, capsys):
    before = listing(tmp_path)
    code, out, err = run_cli(["build", str(tmp_path / "missing.onnx"), "-o", str(tmp_path / "x.plan"),
                              "--plugin", str(plugin)], capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert lines[0] == f"trt-gn build: error: ONNX model {tmp_path / 'missing.onnx'} does not exist"
    assert lines[1].startswith("  hint: ")
    assert len(lines) == 2 and out == ""
    assert listing(tmp_path) == before


def test_build_dynamic_dims_without_ranges_exits_2(model, plugin, tmp_path, capsys):
    before = listing(tmp_path)
    code, _, err = run_cli(["build", str(model), "--plugin", str(plugin)], capsys)
    assert code == 2
    assert "input 'x' (?x8x?x?) has a dynamic dimension 0" in err
    assert listing(tmp_path) == before


def test_build_bad_shape_flag_is_a_usage_error(model, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli_main(["build", str(model), "--batch", "4:2:8"])
    assert exit_.value.code == 2
    assert "need 1 <= min <= opt <= max, got 4:2:8" in capsys.readouterr().err


@pytest.mark.skipif(HAVE_TENSORRT, reason="TensorRT is installed here: the missing-TensorRT path cannot run")
def test_build_without_tensorrt_says_so_and_writes_nothing(model, plugin, tmp_path, capsys):
    before = listing(tmp_path)
    code, out, err = run_cli(["build", str(model), "-o", str(tmp_path / "m.plan"), "--plugin", str(plugin),
                              "--batch", "1:2:4", "--height", "8:16:32", "--width", "8:16:32",
                              "--timing-cache", str(tmp_path / "trt.cache"), "--no-progress"], capsys)
    assert code == 3
    assert out == ""
    assert err.splitlines() == [
        "trt-gn build: error: TensorRT is not installed (import tensorrt failed: No module named 'tensorrt')",
        "  hint: install TensorRT 10 or later with its Python bindings: `pip install tensorrt-cu12` (or "
        "tensorrt-cu13 for CUDA 13) from NVIDIA's package index, or run inside an NGC container "
        "(nvcr.io/nvidia/tensorrt or nvcr.io/nvidia/tritonserver); or build for RTX GPUs with --builder "
        "tensorrt-rtx, which needs neither TensorRT nor a GPU: `pip install tensorrt-rtx-cu13-libs "
        "tensorrt-rtx-cu13-bindings`",
    ]
    assert listing(tmp_path) == before  # no plan, no timing cache, no temp files


# --- atomic writes and progress bookkeeping ---------------------------------------------------

def test_write_atomic_replaces_and_leaves_nothing_on_failure(tmp_path):
    target = tmp_path / "a.plan"
    write_atomic(target, b"first")
    assert target.read_bytes() == b"first"
    with pytest.raises(TypeError):
        write_atomic(target, object())  # not a buffer: fails while writing the temp file
    assert target.read_bytes() == b"first"
    assert sorted(os.listdir(tmp_path)) == ["a.plan"]


def test_phase_progress_tracks_nested_phases_and_cancel():
    from rich.progress import Progress

    with Progress(disable=True) as progress:
        phases = PhaseProgress(progress)
        phases.phase_start("Building engine", None, 3)
        phases.phase_start("Tactic selection", "Building engine", 10)
        assert phases.step_complete("Tactic selection", 4) is True
        task = next(t for t in progress.tasks if t.description.strip() == "Tactic selection")
        assert task.description == "  Tactic selection" and task.completed == 5 and task.total == 10
        phases.phase_finish("Tactic selection")
        assert phases.open_phases == ["Building engine"]
        phases.cancel()
        assert phases.step_complete("Building engine", 0) is False  # asks TensorRT to stop
        phases.phase_finish("Building engine")
        assert phases.open_phases == [] and progress.tasks == []
