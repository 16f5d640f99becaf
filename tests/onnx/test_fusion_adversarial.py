"""Valid ONNX graphs that look like GroupNorm but are not, or only provably so with care.

Each case is a graph no exporter of this project wrote. The fusion pass must either leave the
subgraph, with the reason in the report, or fuse it into numbers equal to onnxruntime on the
unfused model; a wrong num_groups or a gamma along the wrong axis gives errors of order 1.
"""

from __future__ import annotations

import hashlib
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from trt_gn import spec
from trt_gn.onnx import fuse_file
from trt_gn.onnx.node import register_schema

F = TensorProto.FLOAT
RNG = np.random.default_rng(0)


def _const(name, arr, dtype=None):
    arr = np.asarray(arr, dtype=dtype)
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(arr, name))


def _model(nodes, inputs, outputs, opset=17, value_info=(), initializers=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers), value_info=list(value_info))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8  # onnxruntime runs each graph; some have no shapes, which the checker refuses
    return model


def _run(path, feeds):
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]).run(None, feeds)


def _full_check(model) -> bool:
    try:
        onnx.checker.check_model(model, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError):
        return False
    return True


def _fuse(model, tmp_path, feeds, *, valid: bool = False):
    """Fuse; return (report, reference outputs, fused outputs). The input file is never changed, and
    a model that passes onnx's full check (`valid`: asserted) fuses into one that does (the node's
    schema registered)."""
    src, dst = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model, str(src))
    before = hashlib.sha256(src.read_bytes()).hexdigest()
    report = fuse_file(src, dst)
    assert hashlib.sha256(src.read_bytes()).hexdigest() == before
    register_schema()
    assert _full_check(model) or not valid
    if _full_check(model):
        onnx.checker.check_model(onnx.load(str(dst)), full_check=True)
    return report, _run(src, feeds), _run(dst, feeds), onnx.load(str(dst))


def _assert_same_numbers(ref, out):
    for r, o in zip(ref, out):
        assert r.shape == o.shape
        np.testing.assert_allclose(o, r, rtol=1e-4, atol=1e-5)


def _fused_nodes(model):
    return [n for n in model.graph.node if n.op_type == spec.PLUGIN_NAME]


def _instance_norm_graph(x_info, target, channels_in_norm, gamma=None, beta=None):
    """Reshape(x, target) -> InstanceNormalization(ones, zeros) -> Reshape(Shape(x)) [-> Mul(gamma)] [-> Add(beta)]."""
    nodes = [
        _const("target", target, np.int64),
        helper.make_node("Reshape", ["x", "target"], ["xg"]),
        _const("ones", np.ones(channels_in_norm, np.float32)),
        _const("zeros", np.zeros(channels_in_norm, np.float32)),
        helper.make_node("InstanceNormalization", ["xg", "ones", "zeros"], ["n"], epsilon=1e-5),
        helper.make_node("Shape", ["x"], ["xs"]),
        helper.make_node("Reshape", ["n", "xs"], ["y0"]),
    ]
    last = "y0"
    if gamma is not None:
        nodes += [_const("gamma", gamma, np.float32), helper.make_node("Mul", [last, "gamma"], ["y1"])]
        last = "y1"
    if beta is not None:
        nodes += [_const("beta", beta, np.float32), helper.make_node("Add", [last, "beta"], ["y2"])]
        last = "y2"
    nodes.append(helper.make_node("Identity", [last], ["y"]))
    return _model(nodes, [x_info], [helper.make_tensor_value_info("y", F, None)])


X_2x8 = helper.make_tensor_value_info("x", F, [2, 8, 4, 4])


def test_reshape_to_one_by_n_times_g_is_left(tmp_path):
    # [1, N*G, -1] normalises per (image, group) too, but as one image: num_groups would be N*G = 8.
    model = _instance_norm_graph(X_2x8, [1, 8, -1], 8, gamma=RNG.standard_normal((8, 1, 1)))
    feeds = {"x": RNG.standard_normal((2, 8, 4, 4)).astype(np.float32)}
    report, ref, out, fused = _fuse(model, tmp_path, feeds)
    assert not report.fused and not _fused_nodes(fused)
    assert [left.reason for left in report.left] == ["the grouping Reshape's target [1, 8, -1] is not [N, G, -1]"]
    _assert_same_numbers(ref, out)


def test_reshape_to_n_times_g_by_group_size_is_left(tmp_path):
    # [N*G, C/G, -1]: InstanceNormalization over C/G "channels" per row: num_groups would be C/G.
    model = _instance_norm_graph(X_2x8, [8, 2, -1], 2, gamma=RNG.standard_normal((8, 1, 1)))
    feeds = {"x": RNG.standard_normal((2, 8, 4, 4)).astype(np.float32)}
    report, ref, out, fused = _fuse(model, tmp_path, feeds)
    assert not report.fused
    assert [left.reason for left in report.left] == ["the grouping Reshape's target [8, 2, -1] is not [N, G, -1]"]
    _assert_same_numbers(ref, out)


def test_num_groups_comes_from_the_reshape(tmp_path):
    # The proven form, [0, G, -1]: fused with num_groups = G and equal numbers.
    model = _instance_norm_graph(X_2x8, [0, 4, -1], 4)
    feeds = {"x": RNG.standard_normal((2, 8, 4, 4)).astype(np.float32)}
    report, ref, out, _ = _fuse(model, tmp_path, feeds)
    assert len(report.fused) == 1 and report.fused[0].num_groups == 4
    _assert_same_numbers(ref, out)


def _normalise_groups():
    """The ReduceMean form's statistics: nrm = (xg - E[xg]) / sqrt(Var[xg] + eps) over axis 2."""
    return [
        _const("axes", [2], np.int64),
        helper.make_node("ReduceMean", ["xg", "axes"], ["mean"]),
        helper.make_node("Sub", ["xg", "mean"], ["d"]),
        helper.make_node("Mul", ["d", "d"], ["d2"]),
        helper.make_node("ReduceMean", ["d2", "axes"], ["var"]),
        _const("eps", np.float32(1e-5)),
        helper.make_node("Add", ["var", "eps"], ["ve"]),
        helper.make_node("Sqrt", ["ve"], ["std"]),
        helper.make_node("Div", ["d", "std"], ["nrm"]),
    ]


def test_reduce_mean_form_reshape_dim0_not_n_is_left(tmp_path):
    # The statistics over Reshape(x, [2N, 4, -1]) (target computed, shape only from value_info):
    # per-channel statistics, not 4 groups. Old: num_groups = 4 read from value_info dim 1.
    nodes = [
        helper.make_node("Shape", ["x"], ["xs"]),
        _const("i0", [0], np.int64), _const("i1", [1], np.int64), _const("two", [2], np.int64),
        helper.make_node("Slice", ["xs", "i0", "i1"], ["n"]),
        helper.make_node("Mul", ["n", "two"], ["n2"]),
        _const("rest", [4, -1], np.int64),
        helper.make_node("Concat", ["n2", "rest"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["xg"]),
        *_normalise_groups(),
        helper.make_node("Reshape", ["nrm", "xs"], ["y"]),
    ]
    x = helper.make_tensor_value_info("x", F, ["N", 8, 4, 4])
    info = [helper.make_tensor_value_info("xg", F, ["M", 4, 16])]
    model = _model(nodes, [x], [helper.make_tensor_value_info("y", F, ["N", 8, 4, 4])], opset=18, value_info=info)
    feeds = {"x": RNG.standard_normal((2, 8, 4, 4)).astype(np.float32)}
    report, ref, out, _ = _fuse(model, tmp_path, feeds)
    assert not report.fused
    assert [left.reason for left in report.left] == ["cannot prove that the grouping Reshape's target is [N, G, -1]"]
    _assert_same_numbers(ref, out)


@pytest.mark.parametrize("gamma_shape", [(4,), (1, 1, 1, 4)])
def test_mul_along_width_with_rank_unknown_is_not_gamma(tmp_path, gamma_shape):
    # x has no shape at all (rank unknown): a Mul by [W] or [1, 1, 1, W] with W == C is along the
    # width for a 4-D x, so it is no per-channel gamma; C is then unknown and the GroupNorm is left.
    x = helper.make_tensor_value_info("x", F, None)
    model = _instance_norm_graph(x, [0, 2, -1], 2, gamma=RNG.standard_normal(gamma_shape))
    feeds = {"x": RNG.standard_normal((2, 4, 3, 4)).astype(np.float32)}
    report, ref, out, _ = _fuse(model, tmp_path, feeds)
    assert not report.fused
    assert [left.reason for left in report.left] == ["the channel count C is not static"]
    _assert_same_numbers(ref, out)


@pytest.mark.parametrize("gamma_shape", [(4,), (1, 1, 1, 4)])
def test_mul_along_width_with_rank_known_stays_a_mul(tmp_path, gamma_shape):
    # Rank 4 and C known: the GroupNorm is fused without that Mul, which stays after it.
    x = helper.make_tensor_value_info("x", F, ["N", 4, "H", 4])
    model = _instance_norm_graph(x, [0, 2, -1], 2, gamma=RNG.standard_normal(gamma_shape))
    feeds = {"x": RNG.standard_normal((2, 4, 3, 4)).astype(np.float32)}
    report, ref, out, fused = _fuse(model, tmp_path, feeds)
    assert [(f.num_groups, f.channels) for f in report.fused] == [(2, 4)]
    assert "Mul" in [n.op_type for n in fused.graph.node]
    _assert_same_numbers(ref, out)


def _expanded_group_normalization(opset: int, scale_as_input: bool, x_type=F, param_type=F):
    """ONNX's own function body of GroupNormalization, inlined (what onnx's *_expanded node tests hold),
    for x of `x_type` and scale/bias of `param_type` (the body casts them to x's type)."""
    from onnx.backend.test.case.node import function_expand_helper
    from onnx.defs import get_schema

    c, g = 6, 3
    node = helper.make_node("GroupNormalization", ["x", "scale", "bias"], ["y"], num_groups=g, epsilon=1e-5)
    schema = get_schema("GroupNormalization", opset)
    if schema.has_context_dependent_function:
        types = [helper.make_tensor_type_proto(t, None).SerializeToString() for t in (x_type, param_type, param_type)]
        body = schema.get_context_dependent_function_with_opset_version(opset, node.SerializeToString(), types)
    else:
        body = schema.get_function_with_opset_version(opset)
    function = onnx.FunctionProto()
    function.ParseFromString(body)
    nodes = list(function_expand_helper(node, function, "GN_"))
    n_params = g if opset < 21 else c
    x_np, param_np = helper.tensor_dtype_to_np_dtype(x_type), helper.tensor_dtype_to_np_dtype(param_type)
    scale = RNG.standard_normal(n_params).astype(param_np)
    bias = RNG.standard_normal(n_params).astype(param_np)
    inputs = [helper.make_tensor_value_info("x", x_type, [2, c, 5, 4])]
    initializers = []
    feeds = {"x": RNG.standard_normal((2, c, 5, 4)).astype(x_np)}
    if scale_as_input:
        inputs += [helper.make_tensor_value_info("scale", param_type, [n_params]),
                   helper.make_tensor_value_info("bias", param_type, [n_params])]
        feeds.update(scale=scale, bias=bias)
    else:
        initializers = [numpy_helper.from_array(scale, "scale"), numpy_helper.from_array(bias, "bias")]
    model = _model(nodes, inputs, [helper.make_tensor_value_info("y", x_type, [2, c, 5, 4])], opset=opset,
                   initializers=initializers)
    return model, feeds


@pytest.mark.parametrize("opset,scale_as_input", [(18, False), (21, False), (21, True)])
def test_expanded_group_normalization_is_fused(tmp_path, opset, scale_as_input):
    model, feeds = _expanded_group_normalization(opset, scale_as_input)
    report, ref, out, fused = _fuse(model, tmp_path, feeds)
    assert [(f.pattern, f.num_groups, f.channels) for f in report.fused] == [
        ("ReduceMean/Mul/ReduceMean/Sub(E[x^2]-E[x]^2)/Add/Sqrt/Div", 3, 6)], report.summary()
    assert [n.op_type for n in fused.graph.node if n.domain in ("", "ai.onnx")] == []
    _assert_same_numbers(ref, out)


def test_expanded_opset18_with_per_group_inputs_is_left(tmp_path):
    # Per-group scale/bias that are graph inputs cannot become per-channel gamma/beta.
    model, feeds = _expanded_group_normalization(18, scale_as_input=True)
    report, ref, out, _ = _fuse(model, tmp_path, feeds)
    assert not report.fused
    assert [left.reason for left in report.left] == [
        "per-group scale/bias that are not constants cannot be expanded to per-channel"]
    _assert_same_numbers(ref, out)


class _TwoGroupNorms(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.gn = torch.nn.GroupNorm(4, 8)
        self.gn3 = torch.nn.GroupNorm(2, 8)
        for p in self.parameters():
            torch.nn.init.normal_(p)

    def forward(self, x):
        return self.gn3(torch.nn.functional.silu(self.gn(x)).flatten(2))


@pytest.mark.parametrize("folding", [True, False])
def test_torchscript_export_with_and_without_constant_folding(tmp_path, folding):
    # do_constant_folding=False leaves Unsqueeze(weight) and Identity nodes where the constants
    # were: C is static only after folding them; the 3-D GroupNorm's input has no value_info.
    torch.manual_seed(0)
    model = _TwoGroupNorms().eval()
    x = torch.randn(2, 8, 4, 4)
    src = tmp_path / "ts.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), str(src), dynamo=False, opset_version=17, do_constant_folding=folding,
                          input_names=["x"], dynamic_axes={"x": {0: "b", 2: "h", 3: "w"}})
    feeds = {"x": np.random.default_rng(1).standard_normal((3, 8, 5, 6)).astype(np.float32)}
    report, ref, out, fused = _fuse(onnx.load(str(src)), tmp_path, feeds)
    assert [(f.num_groups, f.channels, f.activation) for f in report.fused] == [(4, 8, "silu"), (2, 8, "none")], \
        report.summary()
    assert not report.left
    assert not [n for n in fused.graph.node if n.op_type in ("InstanceNormalization", "Unsqueeze", "Sigmoid")]
    _assert_same_numbers(ref, out)
    with torch.no_grad():
        np.testing.assert_allclose(out[0], model(torch.from_numpy(feeds["x"])).numpy(), rtol=1e-4, atol=1e-4)


def test_inferred_shapes_do_not_stay_in_the_model(tmp_path):
    # The pass infers shapes to prove what it fuses; the model it returns carries only the shapes
    # it had (a TorchScript export: none but the graph's inputs and outputs).
    import onnx_ir as ir

    from trt_gn.onnx import fuse_model

    torch.manual_seed(0)
    src = tmp_path / "ts.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(_TwoGroupNorms().eval(), (torch.randn(2, 8, 4, 4),), str(src), dynamo=False,
                          opset_version=17, input_names=["x"], dynamic_axes={"x": {0: "b", 2: "h", 3: "w"}})
    model = ir.load(src)

    def shaped() -> set[str]:  # intermediate values with a shape
        return {v.name for n in model.graph for v in n.outputs if v.shape is not None and not v.is_graph_output()}

    assert shaped() == set()
    report = fuse_model(model)
    assert len(report.fused) == 2
    assert shaped() == set()


# --- values that change at run time, element types, reshape semantics, no-op Casts ----------------


def _overrides(model, feeds):
    """`feeds` plus new values for every graph input that also has an initializer (what a user feeds
    at run time in place of the default that keep_initializers_as_inputs=True exports write)."""
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    rng = np.random.default_rng(7)
    new = dict(feeds)
    for inp in model.graph.input:
        if inp.name in inits and inp.name not in new:
            default = inits[inp.name]
            new[inp.name] = (rng.standard_normal(default.shape) * 2 + 1).astype(default.dtype)
    assert len(new) > len(feeds)
    return new


def _group_normalization_graph(opset: int, *, x_type=F, c=8, g=4, as_inputs=False, chain=1):
    """`chain` GroupNormalization nodes in a row, scale/bias initializers (also graph inputs with
    as_inputs, as keep_initializers_as_inputs=True exports write them)."""
    np_type = helper.tensor_dtype_to_np_dtype(x_type)
    n_params = g if opset < 21 else c
    nodes, inits, last = [], [], "x"
    for i in range(chain):
        inits += [numpy_helper.from_array(RNG.standard_normal(n_params).astype(np_type), f"scale{i}"),
                  numpy_helper.from_array(RNG.standard_normal(n_params).astype(np_type), f"bias{i}")]
        nodes.append(helper.make_node("GroupNormalization", [last, f"scale{i}", f"bias{i}"], [f"y{i}"], num_groups=g,
                                      epsilon=1e-5, name=f"gn{i}"))
        last = f"y{i}"
    shape = ["N", c, "H", "W"]
    inputs = [helper.make_tensor_value_info("x", x_type, shape)]
    if as_inputs:
        inputs += [helper.make_tensor_value_info(t.name, x_type, [n_params]) for t in inits]
    model = _model(nodes, inputs, [helper.make_tensor_value_info(last, x_type, shape)], opset=opset, initializers=inits)
    model.ir_version = 10
    feeds = {"x": RNG.standard_normal((2, c, 5, 3)).astype(np_type)}
    return model, feeds


def _torchscript_keep_initializers(tmp_path):
    """A TorchScript export (Reshape + InstanceNormalization form) with keep_initializers_as_inputs=True."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.GroupNorm(4, 8), torch.nn.SiLU()).eval()
    for p in model.parameters():
        torch.nn.init.normal_(p)
    src = tmp_path / "ts-inputs.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.randn(2, 8, 4, 4),), str(src), dynamo=False, opset_version=17,
                          input_names=["x"], keep_initializers_as_inputs=True)
    return onnx.load(str(src)), {"x": RNG.standard_normal((2, 8, 4, 4)).astype(np.float32)}


@pytest.mark.parametrize("form", ["group-normalization-21", "group-normalization-18", "instance-norm-torchscript",
                                  "expanded-21"])
def test_initializers_that_are_graph_inputs_stay_inputs(tmp_path, form):
    # An initializer that is also a graph input is a default the user may override at run time: the
    # fused model must give onnxruntime's numbers of the original for the values fed, not the defaults.
    if form == "group-normalization-21":
        model, feeds = _group_normalization_graph(21, as_inputs=True)
    elif form == "group-normalization-18":
        model, feeds = _group_normalization_graph(18, as_inputs=True)
    elif form == "instance-norm-torchscript":
        model, feeds = _torchscript_keep_initializers(tmp_path)
    else:
        model, feeds = _expanded_group_normalization(21, scale_as_input=False)
        model.graph.input.extend([helper.make_tensor_value_info(n, F, [6]) for n in ("scale", "bias")])
    fed = _overrides(model, feeds)
    report, ref, out, fused = _fuse(model, tmp_path, fed, valid=form != "group-normalization-18")
    _assert_same_numbers(ref, out)
    assert [i.name for i in fused.graph.input] == [i.name for i in model.graph.input]
    if form == "group-normalization-18":  # per-group inputs cannot become per-channel gamma/beta: left
        assert not report.fused and len(report.left) == 1, report.summary()
        return
    assert len(report.fused) == 1, report.summary()
    (node,) = _fused_nodes(fused)
    if form == "instance-norm-torchscript":  # the weights' Mul/Add stay after a node without affine
        assert [n.op_type for n in fused.graph.node][-5:] == [spec.PLUGIN_NAME, "Mul", "Add", "Sigmoid", "Mul"]
    else:  # per-channel inputs: still the inputs, now of the fused node
        assert list(node.input[1:]) in (["scale0", "bias0"], ["scale", "bias"])


@pytest.mark.parametrize("form", ["group-normalization-21", "expanded-21"])
def test_float64_is_left(tmp_path, form):
    # The node takes float, float16 and bfloat16 only: a float64 GroupNorm is left, with the reason.
    if form == "expanded-21":
        model, feeds = _expanded_group_normalization(21, scale_as_input=False, x_type=TensorProto.DOUBLE,
                                                     param_type=TensorProto.DOUBLE)
        model.ir_version = 10
    else:
        model, feeds = _group_normalization_graph(21, x_type=TensorProto.DOUBLE)
    report, ref, out, fused = _fuse(model, tmp_path, feeds, valid=True)
    assert not report.fused and not _fused_nodes(fused)
    assert [left.reason for left in report.left] == [
        "the input's element type is DOUBLE; the node takes FLOAT, FLOAT16 or BFLOAT16"]
    np.testing.assert_array_equal(out[0], ref[0])


def test_float16_body_with_float32_parameters_keeps_their_casts(tmp_path):
    # An fp16 GroupNormalization-21 body whose fp32 scale/bias graph inputs are cast to fp16 inside:
    # gamma/beta of the fused node are those fp16 values (the node's schema: x's type or float32).
    model, feeds = _expanded_group_normalization(21, scale_as_input=True, x_type=TensorProto.FLOAT16,
                                                 param_type=F)
    model.ir_version = 10
    report, ref, out, fused = _fuse(model, tmp_path, feeds, valid=True)
    assert len(report.fused) == 1, report.summary()
    (node,) = _fused_nodes(fused)
    types = {v.name: v.type.tensor_type.elem_type
             for v in onnx.shape_inference.infer_shapes(fused).graph.value_info}
    assert [types[name] for name in node.input[1:]] == [TensorProto.FLOAT16] * 2
    # error analysis: the original rounds to fp16 three times (normalised, scaled, biased), the fused
    # node once; each rounding is at most 2^-11 relative to the value rounded.
    x, s, b = (feeds[k].astype(np.float64) for k in ("x", "scale", "bias"))
    xg = x.reshape(2, 3, -1)
    n = ((xg - xg.mean(-1, keepdims=True)) / np.sqrt(xg.var(-1, keepdims=True) + 1e-5)).reshape(x.shape)
    sn = n * s.astype(np.float16).reshape(1, -1, 1, 1)
    y = sn + b.astype(np.float16).reshape(1, -1, 1, 1)
    bound = 2.0**-11 * (np.abs(sn) + 2 * np.abs(y) + np.abs(n) * np.abs(s).max()) + 1e-6
    err = np.abs(out[0].astype(np.float64) - ref[0].astype(np.float64))
    assert np.all(err <= bound), float((err / bound).max())


def test_float16_with_affine_in_float32_keeps_float32_parameters(tmp_path):
    # The same body computing the affine in float32 (fp32 scale/bias used as they are) and casting
    # the result to fp16: gamma/beta of the fused node stay float32, which the node takes.
    model, feeds = _expanded_group_normalization(21, scale_as_input=True, x_type=TensorProto.FLOAT16,
                                                 param_type=F)
    model.ir_version = 10
    casts = [n for n in model.graph.node if n.op_type == "Cast" and n.attribute[0].i == TensorProto.FLOAT16]
    renamed = {n.output[0]: n.input[0] for n in casts}  # ScaleT -> scale, BiasT -> bias, NormalizedT -> ..NC
    for n in casts:
        model.graph.node.remove(n)
    for n in model.graph.node:
        n.input[:] = [renamed.get(i, i) for i in n.input]
    model.graph.node[-1].output[0] = "y32"
    model.graph.node.append(helper.make_node("Cast", ["y32"], ["y"], to=TensorProto.FLOAT16))
    report, ref, out, fused = _fuse(model, tmp_path, feeds, valid=True)
    assert len(report.fused) == 1, report.summary()
    (node,) = _fused_nodes(fused)
    assert list(node.input[1:]) == ["scale", "bias"]  # the float32 graph inputs themselves
    # one fp16 rounding of the float32 result in both models
    np.testing.assert_allclose(out[0].astype(np.float32), ref[0].astype(np.float32), rtol=2.0**-10, atol=1e-6)


def _allowzero_graph():
    model = _instance_norm_graph(X_2x8, [0, 4, -1], 4)
    reshape = next(n for n in model.graph.node if n.op_type == "Reshape")
    reshape.attribute.append(helper.make_attribute("allowzero", 1))
    return model


def test_allowzero_reshape_is_not_made_runnable(tmp_path):
    # Under allowzero=1 the 0 of [0, G, -1] is a zero-size dimension: onnxruntime refuses the model,
    # and so it must refuse the fusion's output.
    model = _allowzero_graph()
    feeds = {"x": RNG.standard_normal((2, 8, 4, 4)).astype(np.float32)}
    src, dst = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model, str(src))
    with pytest.raises(Exception):
        _run(src, feeds)
    report = fuse_file(src, dst)
    assert not report.fused
    assert [left.reason for left in report.left] == [
        "the Reshape target [0, 4, -1] has allowzero=1: its 0 is a zero-size dimension, not the input's"]
    with pytest.raises(Exception):
        _run(dst, feeds)


def _reduce_mean_graph(cast_at: str, target_as_input: bool = False):
    """The ReduceMean form of a GroupNorm with a no-op Cast(to=FLOAT) after the Reshape back: before
    the per-channel Mul/Add, or as the graph's output (no affine), or none. target_as_input: the grouping
    Reshape's target [0, 4, -1] is an initializer that is also a graph input."""
    c, g = 8, 4
    nodes = [
        helper.make_node("Reshape", ["x", "target"], ["xg"]),
        *_normalise_groups(),
        helper.make_node("Shape", ["x"], ["xs"]),
        helper.make_node("Reshape", ["nrm", "xs"], ["back"]),
        helper.make_node("Cast", ["back"], ["cast" if cast_at == "before-affine" else "y"], to=F)
        if cast_at != "none" else helper.make_node("Identity", ["back"], ["y"]),
    ]
    if cast_at == "before-affine":
        nodes += [_const("gamma", RNG.standard_normal((c, 1, 1)), np.float32),
                  helper.make_node("Mul", ["cast", "gamma"], ["scaled"]),
                  _const("beta", RNG.standard_normal((c, 1, 1)), np.float32),
                  helper.make_node("Add", ["scaled", "beta"], ["y"])]
    shape = ["N", c, "H", "W"]
    inputs = [helper.make_tensor_value_info("x", F, shape)]
    target = numpy_helper.from_array(np.array([0, g, -1], np.int64), "target")
    if target_as_input:
        inputs.append(helper.make_tensor_value_info("target", TensorProto.INT64, [3]))
    model = _model(nodes, inputs, [helper.make_tensor_value_info("y", F, shape)], opset=18, initializers=[target])
    model.ir_version = 10
    return model


@pytest.mark.parametrize("cast_at", ["before-affine", "graph-output"])
def test_no_op_cast_after_the_normalisation(tmp_path, cast_at):
    feeds = {"x": RNG.standard_normal((2, 8, 5, 3)).astype(np.float32)}
    report, ref, out, fused = _fuse(_reduce_mean_graph(cast_at), tmp_path, feeds, valid=True)
    assert [(f.num_groups, f.channels) for f in report.fused] == [(4, 8)], report.summary()
    assert [n.op_type for n in fused.graph.node] == [spec.PLUGIN_NAME]  # the Cast and the affine taken along
    _assert_same_numbers(ref, out)


def test_grouping_target_that_is_a_graph_input_is_left(tmp_path):
    # A target fed at run time ([0, 2, -1] for the default [0, 4, -1]) changes num_groups: the
    # GroupNorm is left (ONNX's shape inference reads the default, so it proves nothing).
    model = _reduce_mean_graph("none", target_as_input=True)
    feeds = {"x": RNG.standard_normal((2, 8, 5, 3)).astype(np.float32), "target": np.array([0, 2, -1], np.int64)}
    report, ref, out, fused = _fuse(model, tmp_path, feeds, valid=True)
    assert not report.fused
    assert [left.reason for left in report.left] == [
        "the grouping Reshape's target depends on a graph input, which can change at run time"]
    _assert_same_numbers(ref, out)


def test_chain_of_opset18_group_normalizations_fuses_both(tmp_path):
    # ONNX infers no type for a GroupNormalization-18's output, so the second's C is known only
    # through the first's input.
    model, feeds = _group_normalization_graph(18, chain=2)
    report, ref, out, fused = _fuse(model, tmp_path, feeds)
    assert [(f.node, f.num_groups, f.channels) for f in report.fused] == [
        ("gn0_GroupNormAct", 4, 8), ("gn1_GroupNormAct", 4, 8)], report.summary()
    assert not report.left
    onnx.checker.check_model(fused, full_check=True)  # GroupNormalization-18 itself is deprecated: not the input
    _assert_same_numbers(ref, out)
