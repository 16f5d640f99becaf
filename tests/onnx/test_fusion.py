"""Fusion of existing ONNX files: every exporter path, numerics, round trip, bad input."""

from __future__ import annotations

import hashlib
import os
import stat

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

from trt_gn import spec
from trt_gn.onnx import fuse_file, recipes, validate
from trt_gn.onnx.io import OnnxInputError, OutputPathError
from trt_gn.onnx.node import register_schema

from onnx_helpers import group_norm_counts, plain_export, rel_err, run_ort

PATHS = [("dynamo", 18), ("dynamo", 21), ("torchscript", 17)]


def _digest(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


@pytest.fixture(scope="session")
def plain_vae(tiny_models, export_dir):
    model = tiny_models["tiny-vae-decoder"]
    out = {}
    for kind, opset in PATHS:
        path = export_dir / f"vae.{kind}{opset}.onnx"
        args, names = plain_export(model, "tiny-vae-decoder", path, opset=opset, dynamo=kind == "dynamo")
        out[(kind, opset)] = path
    args, _, _ = recipes.example_inputs("tiny-vae-decoder")
    return out, group_norm_counts(model, args), args


@pytest.mark.parametrize("kind,opset", PATHS)
def test_fuse_each_exporter_path(plain_vae, tiny_models, tmp_path, kind, opset):
    paths, (n_gn, n_silu), args = plain_vae
    src = paths[(kind, opset)]
    before = _digest(src)
    dst = tmp_path / "fused.onnx"
    report = fuse_file(src, dst)
    assert _digest(src) == before
    assert len(report.fused) == n_gn, report.summary()
    assert report.num_silu == n_silu and not report.left
    model = onnx.load(str(dst))
    register_schema()
    onnx.checker.check_model(model, full_check=True)
    assert sum(n.op_type == spec.PLUGIN_NAME for n in model.graph.node) == n_gn
    assert not [n for n in model.graph.node if n.op_type in ("GroupNormalization", "InstanceNormalization", "Sigmoid")]
    # fused vs unfused in onnxruntime, and vs torch
    result = validate.validate_onnxruntime(src, dst, shape_cases=[{"*": 2}], providers=["CPUExecutionProvider"])
    assert result.passed, result.summary()
    assert max(c.max_rel for c in result.comparisons) < 1e-4 or all(c.max_abs < 1e-5 for c in result.comparisons)
    name = onnx.load(str(src)).graph.input[0].name
    (out,) = run_ort(dst, {name: args[0].numpy()})
    with torch.no_grad():
        assert rel_err(out, tiny_models["tiny-vae-decoder"](*args).numpy()) < 1e-4


def test_fuse_tiny_unet(tiny_models, export_dir, tmp_path):
    model = tiny_models["tiny-unet"]
    src = export_dir / "unet.dynamo18.onnx"
    args, names = plain_export(model, "tiny-unet", src, opset=18)
    n_gn, n_silu = group_norm_counts(model, args)
    report = fuse_file(src, tmp_path / "u.onnx")
    assert len(report.fused) == n_gn and report.num_silu == n_silu and not report.left
    feeds = {n: a.numpy() for n, a in zip(names, args)}
    (ref,) = run_ort(src, feeds)
    (out,) = run_ort(tmp_path / "u.onnx", feeds)
    assert rel_err(out, ref) < 1e-4


def test_rest_of_model_unchanged(plain_vae, tmp_path):
    src = plain_vae[0][("dynamo", 21)]
    fuse_file(src, tmp_path / "f.onnx")
    a, b = onnx.load(str(src)), onnx.load(str(tmp_path / "f.onnx"))
    original = {n.SerializeToString() for n in a.graph.node}
    names = {n.name for n in a.graph.node}
    kept = [n for n in b.graph.node if n.name in names]
    assert kept and all(n.SerializeToString() in original for n in kept)
    # new: the fused nodes, plus the Reshape/Shape adapters of the 3-D (attention) GroupNorm
    new = [n.op_type for n in b.graph.node if n.name not in names]
    assert new.count(spec.PLUGIN_NAME) == 14 and set(new) == {spec.PLUGIN_NAME, "Reshape", "Shape"}
    inits = {t.name: t.SerializeToString() for t in a.graph.initializer}
    assert all(inits[t.name] == t.SerializeToString() for t in b.graph.initializer if t.name in inits)
    assert all(t.name.endswith(("_to4d", "_gamma", "_beta")) for t in b.graph.initializer if t.name not in inits)
    assert {v.name for v in b.graph.value_info} <= {v.name for v in a.graph.value_info}
    assert [i.SerializeToString() for i in a.graph.input] == [i.SerializeToString() for i in b.graph.input]


def test_round_trip_nothing_left(plain_vae, tmp_path):
    src = plain_vae[0][("dynamo", 18)]
    fuse_file(src, tmp_path / "once.onnx")
    report = fuse_file(tmp_path / "once.onnx", tmp_path / "twice.onnx")
    assert not report.fused and not report.left and report.copied_unchanged
    assert _digest(tmp_path / "once.onnx") == _digest(tmp_path / "twice.onnx")


def test_bare_nodes(plain_vae, tmp_path):
    report = fuse_file(plain_vae[0][("dynamo", 21)], tmp_path / "bare.onnx", function=False)
    assert report.fused and not onnx.load(str(tmp_path / "bare.onnx")).functions


def _gn_model(c: int, g: int, opset: int, *, silu: bool, scale=None, bias=None) -> onnx.ModelProto:
    n_scale = g if opset < 21 else c
    rng = np.random.default_rng(0)
    scale = rng.standard_normal(n_scale).astype(np.float32) if scale is None else scale
    bias = rng.standard_normal(n_scale).astype(np.float32) if bias is None else bias
    nodes = [helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=g, epsilon=1e-5, name="gn")]
    out = "y"
    if silu:
        nodes += [helper.make_node("Sigmoid", ["y"], ["sig"]), helper.make_node("Mul", ["y", "sig"], ["z"])]
        out = "z"
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", c, "h", "w"])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, ["n", c, "h", "w"])],
        initializer=[onnx.numpy_helper.from_array(scale, "s"), onnx.numpy_helper.from_array(bias, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10  # onnxruntime 1.31 reads IR <= 13
    return model


@pytest.mark.parametrize("opset", [18, 21])
def test_group_normalization_opsets(tmp_path, opset):
    """Opset 18-20 scale/bias are per group, opset 21 per channel: both must fuse exactly."""
    src = tmp_path / "gn.onnx"
    onnx.save(_gn_model(8, 4, opset, silu=True), src)
    report = fuse_file(src, tmp_path / "f.onnx")
    assert [f.activation for f in report.fused] == ["silu"]
    x = np.random.default_rng(1).standard_normal((2, 8, 5, 3)).astype(np.float32)
    # the reference: the ONNX spec's formula in numpy, per-group (18) or per-channel (21) affine
    m = onnx.load(str(src))
    s = onnx.numpy_helper.to_array(m.graph.initializer[0])
    b = onnx.numpy_helper.to_array(m.graph.initializer[1])
    if opset < 21:
        s, b = np.repeat(s, 2), np.repeat(b, 2)
    xg = x.reshape(2, 4, -1).astype(np.float64)
    y = ((xg - xg.mean(-1, keepdims=True)) / np.sqrt(xg.var(-1, keepdims=True) + 1e-5)).reshape(x.shape)
    y = y * s.reshape(1, 8, 1, 1) + b.reshape(1, 8, 1, 1)
    y = y / (1 + np.exp(-y))
    (out,) = run_ort(tmp_path / "f.onnx", {"x": x})
    assert rel_err(out, y) < 1e-5


def test_reduce_mean_decomposition(tmp_path):
    class Manual(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(8))
            self.b = torch.nn.Parameter(torch.randn(8))

        def forward(self, x):
            n, c, h, w = x.shape
            xg = x.reshape(n, 4, -1)
            d = xg - xg.mean(-1, keepdim=True)
            y = (d / torch.sqrt(d.pow(2).mean(-1, keepdim=True) + 1e-5)).reshape(n, c, h, w)
            y = y * self.w.reshape(1, -1, 1, 1) + self.b.reshape(1, -1, 1, 1)
            return torch.nn.functional.silu(y)

    torch.manual_seed(0)
    model = Manual().eval()
    x = torch.randn(2, 8, 6, 5)
    src = tmp_path / "manual.onnx"
    dims = {0: torch.export.Dim.DYNAMIC, 2: torch.export.Dim.DYNAMIC, 3: torch.export.Dim.DYNAMIC}
    torch.onnx.export(model, (x,), dynamo=True, opset_version=18, dynamic_shapes=(dims,), verbose=False).save(str(src))
    report = fuse_file(src, tmp_path / "f.onnx")
    assert [(f.pattern, f.activation) for f in report.fused] == [("ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div", "silu")]
    with torch.no_grad():
        ref = model(x).numpy()
    (out,) = run_ort(tmp_path / "f.onnx", {onnx.load(str(src)).graph.input[0].name: x.numpy()})
    assert rel_err(out, ref) < 1e-5


def test_no_group_norm_unchanged_copy(tmp_path):
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    src = tmp_path / "relu.onnx"
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 10
    onnx.save(model, src)
    report = fuse_file(src, tmp_path / "out.onnx")
    assert report.copied_unchanged and not report.fused
    assert "no GroupNorm-like subgraph found" in report.summary()
    assert _digest(src) == _digest(tmp_path / "out.onnx")


def test_channels_not_divisible_left_with_reason(tmp_path):
    src = tmp_path / "bad_groups.onnx"
    onnx.save(_gn_model(10, 4, 21, silu=False), src)
    report = fuse_file(src, tmp_path / "out.onnx")
    assert not report.fused
    assert [(l.node, l.reason) for l in report.left] == [("gn", "C=10 is not divisible by num_groups=4")]
    assert _digest(src) == _digest(tmp_path / "out.onnx")


@pytest.mark.parametrize("content", [b"", b"not an onnx file at all", "truncated"])
def test_bad_input_file(plain_vae, tmp_path, content):
    src = tmp_path / "bad.onnx"
    if content == "truncated":
        data = open(plain_vae[0][("dynamo", 21)], "rb").read()
        content = data[: len(data) // 2]
    src.write_bytes(content)
    before = _digest(src)
    with pytest.raises(OnnxInputError, match=r"bad\.onnx: (empty file|not a readable ONNX model|invalid ONNX model)"):
        fuse_file(src, tmp_path / "out.onnx")
    assert _digest(src) == before
    assert not (tmp_path / "out.onnx").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["bad.onnx"]


def test_unwritable_output_fails_before_work(tmp_path):
    src = tmp_path / "not-even-onnx.onnx"
    src.write_bytes(b"junk")  # would fail to load: the output error must come first
    with pytest.raises(OutputPathError, match="does not exist"):
        fuse_file(src, tmp_path / "missing" / "out.onnx")
    with pytest.raises(OutputPathError, match="is the input file"):
        fuse_file(src, src)
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        if os.access(ro, os.W_OK):
            pytest.skip("running as a user that can write read-only folders (root)")
        with pytest.raises(OutputPathError, match="not writable"):
            fuse_file(src, ro / "out.onnx")
    finally:
        ro.chmod(stat.S_IRWXU)


def test_external_data(tmp_path):
    src_dir = tmp_path / "in"
    src_dir.mkdir()
    # 128 channels: scale and bias of 512 bytes each go to external data (under 256 bytes stay inline)
    model = _gn_model(128, 32, 21, silu=True, scale=np.ones(128, np.float32), bias=np.zeros(128, np.float32))
    onnx.save(model, src_dir / "m.onnx", save_as_external_data=True, location="m.weights", size_threshold=0)
    before = _digest(src_dir / "m.weights")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    report = fuse_file(src_dir / "m.onnx", out_dir / "f.onnx")
    assert len(report.fused) == 1
    assert _digest(src_dir / "m.weights") == before
    assert (out_dir / "f.onnx.data").is_file()
    x = np.random.default_rng(0).standard_normal((1, 128, 4, 4)).astype(np.float32)
    (a,) = run_ort(src_dir / "m.onnx", {"x": x})
    (b,) = run_ort(out_dir / "f.onnx", {"x": x})
    assert rel_err(b, a) < 1e-5


def test_cli_fuse_and_validate(plain_vae, tmp_path, capsys):
    from trt_gn.cli import main

    src = plain_vae[0][("dynamo", 21)]
    assert main(["fuse", str(src), str(tmp_path / "f.onnx"), "--quiet"]) == 0
    assert "fused 14 GroupNorm subgraph(s) (13 with SiLU)" in capsys.readouterr().out
    assert main(["validate", str(src), str(tmp_path / "f.onnx"), "--dims", "*=2"]) == 0
    out = capsys.readouterr().out
    assert "PASSED" in out and "SKIP" in out
    assert main(["fuse", str(tmp_path / "nope.onnx"), str(tmp_path / "g.onnx")]) == 2
    err = capsys.readouterr().err
    assert err.splitlines()[0] == f"trt-gn fuse: error: {tmp_path / 'nope.onnx'}: no such file" and "  hint:" in err
