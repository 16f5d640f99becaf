"""Export a PyTorch model that uses torch.ops.trt_gn.group_norm_act (e.g. after
trt_gn.swap.swap_group_norms) to ONNX, each op becoming one trt_gn::GroupNormAct node.

torch 2.13's recommended exporter is torch.onnx.export(..., dynamo=True) (the default): it
captures the model with torch.export and translates every FX node with onnxscript functions;
``custom_translation_table`` maps our op onto a function that emits the custom node. Dynamic
batch/height/width are torch.export ``dynamic_shapes`` (torch.export.Dim).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from .. import spec
from ..errors import EXIT_FAILED, Error
from . import fusion
from . import io as onnx_io
from . import node as onnx_node

DEFAULT_OPSET = 18  # torch.onnx's default for dynamo=True in torch 2.13
MIN_OPSET = 17  # torch.onnx (dynamo) translates at opset 18 and converts from there


def max_opset() -> int:
    """The newest ai.onnx opset the installed onnx knows."""
    import onnx

    return onnx.defs.onnx_opset_version()


def check_opset(opset: int) -> int:
    """Raise Error (naming --opset) unless torch.onnx can write `opset` here."""
    if not isinstance(opset, int) or not MIN_OPSET <= opset <= max_opset():
        raise Error(f"--opset {opset}: torch.onnx (dynamo) exports opsets {MIN_OPSET}..{max_opset()}",
                    f"pass an opset in {MIN_OPSET}..{max_opset()} (default {DEFAULT_OPSET})")
    return opset


def _check_written_opset(ir_model, opset: int) -> None:
    # torch.onnx falls back to opset 18 when its version converter fails (it logs and goes on):
    # a file of another opset than asked for is an error, not a success.
    written = ir_model.opset_imports.get("", ir_model.opset_imports.get("ai.onnx"))
    if written != opset:
        raise Error(f"torch.onnx exported opset {written}, not the requested --opset {opset} "
                    "(its version converter failed)", f"use --opset {DEFAULT_OPSET}", exit_code=EXIT_FAILED)


def _translate(x, weight, bias, num_groups: int, eps: float, activation: str):
    import onnxscript
    from onnxscript import opset18 as op

    custom = onnxscript.values.Opset(spec.ONNX_DOMAIN, 1)
    if weight is None or bias is None:
        channels = op.Shape(x, start=1, end=2)
        if weight is None:
            weight = op.CastLike(op.ConstantOfShape(channels, value=_one()), x)
        if bias is None:
            bias = op.CastLike(op.ConstantOfShape(channels), x)
    return getattr(custom, spec.PLUGIN_NAME)(x, weight, bias, **onnx_node.node_attributes(num_groups, eps, activation))


def _one():
    import onnx

    return onnx.helper.make_tensor("one", onnx.TensorProto.FLOAT, [1], [1.0])


def translation_table() -> dict:
    """custom_translation_table entry for torch.onnx.export(dynamo=True)."""
    import trt_gn.ops  # noqa: F401  (registers the op)

    onnx_node.register_schema()
    op = getattr(getattr(torch.ops, spec.TORCH_NAMESPACE), spec.TORCH_OP_NAME)
    return {op.default: _translate}


def image_dynamic_shapes(*names: str) -> dict:
    """dynamic_shapes for NCHW image inputs: batch, height and width dynamic."""
    batch, height, width = torch.export.Dim("batch"), torch.export.Dim("height"), torch.export.Dim("width")
    return {name: {0: batch, 2: height, 3: width} for name in names}


def export_model(
    model: torch.nn.Module,
    args: tuple,
    output: str | os.PathLike,
    *,
    kwargs: dict[str, Any] | None = None,
    dynamic_shapes: Any = None,
    input_names: list[str] | None = None,
    output_names: list[str] | None = None,
    opset: int = DEFAULT_OPSET,
    function: bool = True,
    external_data: bool | None = None,
) -> int:
    """Export `model` to `output` (written atomically); return the number of fused nodes.

    function=True attaches the model-local function (onnxruntime can run the file; TensorRT >= 10.7
    uses the plugin); function=False writes bare custom nodes (TensorRT < 10.7)."""
    output = onnx_io.check_output_path(output)
    check_opset(opset)
    program = torch.onnx.export(
        model,
        args,
        kwargs=kwargs,
        dynamo=True,
        custom_translation_table=translation_table(),
        dynamic_shapes=dynamic_shapes,
        input_names=input_names,
        output_names=output_names,
        opset_version=opset,
        optimize=True,
        verbose=False,
    )
    ir_model = program.model
    _check_written_opset(ir_model, opset)
    count = sum(1 for n in ir_model.graph.all_nodes() if n.domain == spec.ONNX_DOMAIN and n.op_type == spec.PLUGIN_NAME)
    if count:
        ir_model.opset_imports[spec.ONNX_DOMAIN] = 1
        if function:
            fusion.attach_function(ir_model)
    onnx_io.save_model(ir_model, output, external_data=external_data)
    return count


def export_plain(model: torch.nn.Module, args: tuple, output: str | os.PathLike, *, dynamic_shapes: Any = None,
                 input_names: list[str] | None = None, output_names: list[str] | None = None,
                 opset: int = DEFAULT_OPSET) -> Path:
    """Export `model` as torch.onnx emits it (no custom node), written atomically."""
    output = onnx_io.check_output_path(output)
    check_opset(opset)
    program = torch.onnx.export(model, args, dynamo=True, opset_version=opset, dynamic_shapes=dynamic_shapes,
                                input_names=input_names, output_names=output_names, verbose=False)
    _check_written_opset(program.model, opset)
    return onnx_io.save_model(program.model, output)


__all__ = ["DEFAULT_OPSET", "MIN_OPSET", "check_opset", "export_model", "export_plain", "image_dynamic_shapes", "translation_table"]
