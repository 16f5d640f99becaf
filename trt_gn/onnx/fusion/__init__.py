"""Fuse GroupNorm(+SiLU) subgraphs of an existing ONNX model into the trt_gn custom node.

GroupNorm appears in ONNX files in three forms, each matched here (on an onnx-ir graph):

* ``GroupNormalization`` (ai.onnx 18 and 21). Opset 18-20: scale and bias have one value per
  *group* (the form was deprecated for it); opset 21: one value per *channel*, plus ``stash_type``
  (precision of the statistics; the plugin always accumulates in float32). Per-group constants are
  repeated C/G times to become per-channel gamma/beta.
* ``Reshape(x, [N, G, -1]) -> InstanceNormalization(ones, zeros) -> Reshape(back to x's shape)
  -> Mul(gamma) -> Add(beta)``: what torch.onnx emits for opsets < 21 (TorchScript and dynamo).
* ``Reshape -> ReduceMean -> Sub -> Pow(2) | Mul -> ReduceMean -> Add(eps) -> Sqrt -> Div ->
  Reshape [-> Mul(gamma)] [-> Add(beta)]``: a hand-written GroupNorm exported op by op.

Each may be followed by SiLU, as ``Sigmoid`` + ``Mul`` or the ai.onnx ``Swish`` op (alpha = 1),
which then goes into the node as activation="silu". The matched nodes are replaced by one
``trt_gn::GroupNormAct`` node (see :mod:`trt_gn.onnx.node`); inputs of rank other than 4 go
through ``Reshape(x, [0, 0, -1, 1])`` and back. Nothing else in the model changes: other nodes,
initializers, names, value_info and metadata are kept as they were; initializers and Constant /
Shape nodes that fed only the replaced subgraph are dropped with it.

The pass is split by job: fold (constant folding for the proofs), match (the matchers), rewrite
(the replacement and the graph bookkeeping); this module is the public API.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Callable

import onnx_ir as ir

from ... import spec
from ...errors import Error
from .. import io as onnx_io
from .. import node as onnx_node
from .match import (EXPANDED_DECOMPOSITION, GROUP_NORMALIZATION, INSTANCE_NORM_DECOMPOSITION,  # noqa: F401
                    REDUCE_MEAN_DECOMPOSITION, _MATCHERS, _affine_dtype, _NoMatch, _NotGroupNorm, _opset, _silu_tail)
from .rewrite import _annotate_inferred_shapes, _Namer, _remove_annotations, _replace


@dataclasses.dataclass
class FusedGroupNorm:
    node: str  # name of the new node
    pattern: str
    channels: int
    num_groups: int
    epsilon: float
    activation: str


@dataclasses.dataclass
class LeftGroupNorm:
    node: str  # name of the node the subgraph was recognised at
    pattern: str
    reason: str


@dataclasses.dataclass
class FusionReport:
    fused: list[FusedGroupNorm] = dataclasses.field(default_factory=list)
    left: list[LeftGroupNorm] = dataclasses.field(default_factory=list)
    function: bool = True
    copied_unchanged: bool = False

    @property
    def num_silu(self) -> int:
        return sum(f.activation == "silu" for f in self.fused)

    def summary(self) -> str:
        lines = [
            f"fused {len(self.fused)} GroupNorm subgraph(s) ({self.num_silu} with SiLU) into "
            f"{spec.ONNX_DOMAIN}::{spec.PLUGIN_NAME}; left {len(self.left)}"
        ]
        by_pattern: dict[str, int] = {}
        for f in self.fused:
            by_pattern[f.pattern] = by_pattern.get(f.pattern, 0) + 1
        for pattern, count in sorted(by_pattern.items()):
            lines.append(f"  fused  {count:4d} x {pattern}")
        for left in self.left:
            lines.append(f"  left   {left.node} ({left.pattern}): {left.reason}")
        if not self.fused and not self.left:
            lines.append("  no GroupNorm-like subgraph found")
        return "\n".join(lines)


def fuse_model(model: ir.Model, *, function: bool = True, progress: Callable[[int, int], None] | None = None) -> FusionReport:
    """Fuse every GroupNorm(+SiLU) subgraph of `model`'s main graph in place; return the report.

    function=True attaches the model-local function (onnxruntime runs the result; TensorRT >= 10.7
    uses the plugin); function=False writes bare custom nodes (TensorRT < 10.7)."""
    graph = model.graph
    opset = _opset(graph, model)
    report = FusionReport(function=function)
    if function and opset < onnx_node.MIN_FUNCTION_OPSET:
        raise Error(
            f"the model has ai.onnx opset {opset}; the model-local function needs opset >= "
            f"{onnx_node.MIN_FUNCTION_OPSET}",
            "upgrade the model's opset (onnx.version_converter) or write bare nodes (--bare)")
    namer = _Namer(graph)
    annotated = _annotate_inferred_shapes(model)
    try:
        _fuse_graph(graph, opset, report, namer, progress)
    finally:
        _remove_annotations(graph, annotated)
    if report.fused:
        model.opset_imports[spec.ONNX_DOMAIN] = 1
        if function:
            attach_function(model)
    return report


def _fuse_graph(graph: ir.Graph, opset: int, report: FusionReport, namer: _Namer, progress) -> None:
    anchors = [(n, pat, fn) for n in graph for op, pat, fn in _MATCHERS if n.op_type == op and n.domain in ("", "ai.onnx")]
    for i, (node, pattern, matcher) in enumerate(anchors):
        if progress is not None:
            progress(i, len(anchors))
        if node.graph is not graph:  # removed by an earlier fusion
            continue
        try:
            match = matcher(node, opset)
            affine_dtype = _affine_dtype(match)
        except _NotGroupNorm:
            continue
        except _NoMatch as why:
            report.left.append(LeftGroupNorm(node.name or node.op_type, pattern, str(why)))
            continue
        tail = _silu_tail(match.out)
        act_nodes, final, activation = ([], match.out, "none") if tail is None else (tail[0], tail[1], "silu")
        name = _replace(graph, match, affine_dtype, activation, act_nodes, final, namer)
        report.fused.append(FusedGroupNorm(name, match.pattern, match.channels, match.num_groups, match.epsilon, activation))
    if progress is not None:
        progress(len(anchors), len(anchors))


def attach_function(model: ir.Model) -> None:
    """Add (or replace) the model-local function of the fused op, for the model's opset."""
    opset = _opset(model.graph, model)
    ml = model.opset_imports.get(onnx_node.ML_DOMAIN)
    if ml is None:
        ml = onnx_node.ML_VERSION
        model.opset_imports[onnx_node.ML_DOMAIN] = ml
    proto = onnx_node.make_function(opset, ml)
    function = ir.serde.deserialize_function(proto)
    model.functions[function.identifier()] = function


def _strip_added_value_info(model: ir.Model, original: set[str]) -> None:
    """onnx-ir writes value_info for every typed value; keep exactly the entries the input had."""
    graph = model.graph
    keep = {v.name for v in graph.inputs} | {v.name for v in graph.outputs}
    values = [v for node in graph for v in node.outputs] + list(graph.initializers.values())
    for value in values:
        if value.name not in original and value.name not in keep:
            value.type = None
            value.shape = None


def fuse_file(
    input_path: str | os.PathLike,
    output_path: str | os.PathLike,
    *,
    function: bool = True,
    progress: Callable[[str, int, int], None] | None = None,
) -> FusionReport:
    """Fuse the ONNX file `input_path` into `output_path` (never touching the input).

    The output path is checked before anything is loaded; the output is written atomically
    (with external data ``<output>.data`` when the input had external data or is over ~1.8 GB).
    A model with nothing to fuse is written as an unchanged copy (report.copied_unchanged)."""
    onnx_io.check_output_path(output_path, input_path)  # as given: "out/" names a folder
    input_path, output_path = Path(input_path), Path(output_path)
    inputs = onnx_io.model_files(input_path)
    if progress:
        progress("load", 0, 1)
    model = onnx_io.load_model(input_path)
    original_value_info = _value_info_names(input_path)
    if progress:
        progress("load", 1, 1)
    report = fuse_model(model, function=function, progress=(lambda i, n: progress("fuse", i, n)) if progress else None)
    if not report.fused and not onnx_io.has_external_data(model):
        onnx_io.copy_file(input_path, output_path, keep=inputs)
        report.copied_unchanged = True
        return report
    _strip_added_value_info(model, original_value_info)
    if progress:
        progress("save", 0, 1)
    onnx_io.save_model(model, output_path, keep=inputs)
    if progress:
        progress("save", 1, 1)
    report.copied_unchanged = not report.fused
    return report


def _value_info_names(path: Path) -> set[str]:
    import onnx

    proto = onnx.load(str(path), load_external_data=False)
    return {vi.name for vi in proto.graph.value_info}
