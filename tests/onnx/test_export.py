"""Export with the custom node: node format, counts, numerics vs torch (tiny diffusers models)."""

from __future__ import annotations

import onnx
import pytest
import torch

from trt_gn import spec
from trt_gn.onnx import export, recipes
from trt_gn.onnx.io import OutputPathError

from onnx_helpers import group_norm_counts, rel_err, run_ort, swapped


@pytest.fixture(scope="session")
def exported(tiny_models, export_dir):
    out = {}
    for name, model in tiny_models.items():
        args, names, shapes = recipes.example_inputs(name)
        expected = group_norm_counts(model, args)
        with torch.no_grad():
            ref = model(*args)
        m, report = swapped(model)
        path = export_dir / f"{name}.swapped.onnx"
        count = export.export_model(m, args, path, dynamic_shapes=shapes, input_names=names)
        out[name] = dict(path=path, count=count, report=report, expected=expected, args=args, names=names, ref=ref)
    return out


@pytest.mark.parametrize("name", ["tiny-vae-decoder", "tiny-unet"])
def test_swap_then_export_counts(exported, name):
    e = exported[name]
    n_gn, n_silu = e["expected"]
    assert e["count"] == n_gn
    assert len(e["report"].replaced) == n_gn and not e["report"].left
    assert e["report"].num_silu == n_silu
    model = onnx.load(str(e["path"]))
    nodes = [n for n in model.graph.node if n.op_type == spec.PLUGIN_NAME]
    assert len(nodes) == n_gn
    silu = [n for n in nodes if onnx.helper.get_node_attr_value(n, spec.FIELD_ACTIVATION) == b"silu"]
    assert len(silu) == n_silu
    # no standard normalisation left behind
    assert not [n for n in model.graph.node if n.op_type in ("GroupNormalization", "InstanceNormalization")]


def test_node_matches_plugin_contract(exported):
    model = onnx.load(str(exported["tiny-vae-decoder"]["path"]))
    node = next(n for n in model.graph.node if n.op_type == spec.PLUGIN_NAME)
    assert node.domain == spec.ONNX_DOMAIN
    assert list(node.input)[1:] and len(node.input) == 3 and len(node.output) == 1
    attrs = {a.name: a for a in node.attribute}
    A = onnx.AttributeProto
    assert attrs[spec.FIELD_NUM_GROUPS].type == A.INT and attrs[spec.FIELD_NUM_GROUPS].i == 32
    assert attrs[spec.FIELD_EPSILON].type == A.FLOAT and attrs[spec.FIELD_EPSILON].f == pytest.approx(1e-6)
    assert attrs[spec.FIELD_ACTIVATION].type == A.STRING and attrs[spec.FIELD_ACTIVATION].s.decode() in spec.ACTIVATIONS
    # TensorRT's parser looks the creator up by these two attributes (not by the domain before 10.10)
    assert attrs["plugin_namespace"].s.decode() == spec.PLUGIN_NAMESPACE
    assert attrs["plugin_version"].s.decode() == spec.PLUGIN_VERSION
    assert {(f.domain, f.name) for f in model.functions} == {(spec.ONNX_DOMAIN, spec.PLUGIN_NAME)}
    assert {o.domain: o.version for o in model.opset_import}[spec.ONNX_DOMAIN] == 1
    onnx.checker.check_model(model)


def test_dynamic_batch_height_width(exported):
    model = onnx.load(str(exported["tiny-vae-decoder"]["path"]))
    dims = model.graph.input[0].type.tensor_type.shape.dim
    assert [bool(d.dim_param) for d in dims] == [True, False, True, True]


@pytest.mark.parametrize("name", ["tiny-vae-decoder", "tiny-unet"])
def test_exported_matches_torch(exported, name):
    e = exported[name]
    feeds = {n: a.numpy() for n, a in zip(e["names"], e["args"])}
    (out,) = run_ort(e["path"], feeds)
    assert rel_err(out, e["ref"].numpy()) < 1e-4


def test_exported_other_shape(exported, tiny_models):
    e = exported["tiny-vae-decoder"]
    x = torch.randn(3, 4, 24, 20, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ref = tiny_models["tiny-vae-decoder"](x)
    (out,) = run_ort(e["path"], {"latent": x.numpy()})
    assert rel_err(out, ref.numpy()) < 1e-4


def test_bare_export_has_no_function(tiny_models, tmp_path):
    m, _ = swapped(tiny_models["tiny-vae-decoder"])
    args, names, shapes = recipes.example_inputs("tiny-vae-decoder")
    path = tmp_path / "bare.onnx"
    assert export.export_model(m, args, path, dynamic_shapes=shapes, input_names=names, function=False) == 14
    assert not onnx.load(str(path)).functions


def test_export_unwritable_output_fails_first(tiny_models, tmp_path):
    with pytest.raises(OutputPathError, match="does not exist"):
        export.export_model(tiny_models["tiny-vae-decoder"], (), tmp_path / "missing" / "m.onnx")
