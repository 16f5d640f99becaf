"""The rewrite: a proven match becomes one trt_gn::GroupNormAct node (reshaped around for ranks
other than 4), the subgraph and what fed only it are dropped, and shape inference's annotations
are added for the matchers and removed again."""

from __future__ import annotations


import numpy as np
import onnx_ir as ir

from ... import spec
from .. import node as onnx_node
from .match import _Match, _value_dtype


class _Namer:
    def __init__(self, graph: ir.Graph):
        self.taken = {v.name for v in _all_values(graph) if v.name} | {n.name for n in graph.all_nodes() if n.name}

    def __call__(self, base: str) -> str:
        name, i = base, 0
        while name in self.taken:
            i += 1
            name = f"{base}_{i}"
        self.taken.add(name)
        return name


def _all_values(graph: ir.Graph):
    yield from graph.inputs
    yield from graph.initializers.values()
    for node in graph.all_nodes():
        yield from node.outputs


def _initializer(graph: ir.Graph, namer: _Namer, base: str, arr: np.ndarray) -> ir.Value:
    value = ir.Value(name=namer(base), shape=ir.Shape(arr.shape), type=ir.TensorType(ir.DataType.from_numpy(arr.dtype)),
                     const_value=ir.tensor(arr, name=None))
    value.const_value.name = value.name
    graph.register_initializer(value)
    return value


def _replace(graph: ir.Graph, match: _Match, affine_dtype: ir.DataType, activation: str, act_nodes: list[ir.Node],
             final: ir.Value, namer: _Namer) -> str:
    np_dtype = affine_dtype.numpy()
    base = match.anchor.name or "group_norm"
    new_nodes: list[ir.Node] = []

    def affine(param, fill, suffix):
        if isinstance(param, ir.Value):
            if _value_dtype(param) == affine_dtype:
                return param
            cast = ir.Node("", "Cast", [param], attributes=[ir.AttrInt64("to", affine_dtype.value)],
                           name=namer(f"{base}_{suffix}_cast"))
            cast.outputs[0].name = namer(f"{base}_{suffix}_{affine_dtype.name.lower()}")
            new_nodes.append(cast)
            return cast.outputs[0]
        arr = np.full((match.channels,), fill) if param is None else np.asarray(param)
        return _initializer(graph, namer, f"{base}_{suffix}", arr.astype(np_dtype).reshape(match.channels))

    gamma = affine(match.gamma, 1, "gamma")
    beta = affine(match.beta, 0, "beta")
    x = match.x
    if match.rank != 4:
        to4 = _initializer(graph, namer, f"{base}_to4d", np.array([0, 0, -1, 1], dtype=np.int64))
        reshape = ir.Node("", "Reshape", [x, to4], name=namer(f"{base}_to4d"))
        reshape.outputs[0].name = namer(f"{base}_x4d")
        new_nodes.append(reshape)
        x = reshape.outputs[0]
    attrs = onnx_node.node_attributes(match.num_groups, match.epsilon, activation)
    fused = ir.Node(spec.ONNX_DOMAIN, spec.PLUGIN_NAME, [x, gamma, beta],
                    attributes=[ir.convenience.convert_attribute(k, v) for k, v in attrs.items()],
                    name=namer(f"{base}_{spec.PLUGIN_NAME}"))
    new_nodes.append(fused)
    out = fused.outputs[0]
    if match.rank != 4:
        out.name = namer(f"{base}_y4d")
        shape = ir.Node("", "Shape", [match.x], name=namer(f"{base}_shape"))
        shape.outputs[0].name = namer(f"{base}_xshape")
        back = ir.Node("", "Reshape", [out, shape.outputs[0]], name=namer(f"{base}_from4d"))
        new_nodes += [shape, back]
        out = back.outputs[0]
    old_nodes = match.nodes + act_nodes
    producers = [inp.producer() for n in old_nodes for inp in n.inputs if inp is not None and inp.producer() is not None]
    old_inits = [inp for n in old_nodes for inp in n.inputs if inp is not None and inp.is_initializer()]
    last = final.producer()
    ir.convenience.replace_nodes_and_values(graph, last, old_nodes, new_nodes, [final], [out])
    _drop_dead(graph, producers, old_inits)
    return fused.name


_PURE_OPS = ("Constant", "Identity", "Shape", "Concat", "Unsqueeze", "Gather", "Squeeze", "Slice", "Reshape",
             "Mul", "Div", "Add", "Sub", "Cast")


def _drop_dead(graph: ir.Graph, producers: list[ir.Node], initializers: list[ir.Value]) -> None:
    """Remove the side-effect-free producers (constants, shape arithmetic, casts) and initializers
    that fed only the replaced subgraph and are now unused; nothing still used is touched."""
    pending = list(producers)
    while pending:  # a node still used now may be dead after a later removal: it is pushed again then
        node = pending.pop()
        if node.graph is not graph:
            continue
        if node.op_type not in _PURE_OPS or node.domain not in ("", "ai.onnx"):
            continue
        if any(o.uses() or o.is_graph_output() for o in node.outputs):
            continue
        inputs = [i for i in node.inputs if i is not None]
        graph.remove(node, safe=True)
        pending += [i.producer() for i in inputs if i.producer() is not None]
        initializers += [i for i in inputs if i.is_initializer()]
    for value in initializers:
        if value.name in graph.initializers and not value.uses() and not value.is_graph_output() and not value.is_graph_input():
            del graph.initializers[value.name]


_SMALL_TENSOR_BYTES = 4096  # initializers shape inference may need the values of (shape targets, axes)


def _annotate_inferred_shapes(model: ir.Model) -> list[ir.Value]:
    """Give values without a shape the one ONNX shape inference finds (TorchScript exports carry no
    value_info; the matchers need ranks, and C, to prove what they fuse). Returns the values
    annotated, so that the annotations can be taken away again; nothing else changes."""
    import onnx

    graph = model.graph
    try:
        proto = ir.serde.serialize_model(model)
        for tensor in proto.graph.initializer:
            if len(tensor.raw_data) > _SMALL_TENSOR_BYTES:
                tensor.ClearField("raw_data")  # dims are all shape inference reads of large weights
        for node in proto.graph.node:
            # ONNX infers no type for a GroupNormalization-18 (deprecated), nor for anything after it;
            # its output has its input's type and shape, which is what an Identity in its place gives.
            if node.op_type == "GroupNormalization" and node.domain in ("", "ai.onnx") and node.input:
                node.CopyFrom(onnx.helper.make_node("Identity", [node.input[0]], [node.output[0]], name=node.name))
        inferred = onnx.shape_inference.infer_shapes(proto, strict_mode=False, data_prop=True)
    except Exception:  # inference is a help, never a requirement (e.g. a model over 2 GB in memory)
        return []
    shapes = {}
    for vi in inferred.graph.value_info:
        t = vi.type.tensor_type
        if t.HasField("shape"):
            shapes[vi.name] = (t.elem_type, [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                                             for d in t.shape.dim])
    annotated = []
    for node in graph:
        for value in node.outputs:
            if value.shape is None and value.name in shapes:
                elem, dims = shapes[value.name]
                value.shape = ir.Shape(dims)
                if value.type is None and elem:
                    value.type = ir.TensorType(ir.DataType(elem))
                    annotated.append((value, True))
                else:
                    annotated.append((value, False))
    return annotated


def _remove_annotations(graph: ir.Graph, annotated) -> None:
    # By name: a replaced subgraph's output value passes its name, type and shape to the new node's.
    typed = {value.name: was_typed for value, was_typed in annotated}
    for node in graph:
        for value in node.outputs:
            if value.name in typed:
                value.shape = None
                if typed[value.name]:
                    value.type = None
