"""Constant folding for the matchers' proofs: the value behind a shape op, a Constant or an
initializer, folded through the pure ops exports put in front of shape targets and axes."""

from __future__ import annotations


import numpy as np
import onnx_ir as ir



def _const(value: ir.Value | None, depth: int = 0) -> np.ndarray | None:
    """The value of `value` if it is a constant, or computable from constants and static shapes by a
    few shape ops (what an export with do_constant_folding=False leaves in the graph); else None.
    A graph input is never a constant, even with an initializer (keep_initializers_as_inputs): its
    initializer is only a default that the user may override at run time. Nothing is changed."""
    if value is None or depth > 16 or value.is_graph_input():
        return None
    tensor = ir.convenience.get_const_tensor(value)
    if tensor is not None:
        try:
            return np.asarray(tensor.numpy())
        except Exception:
            return None
    node = value.producer()
    if node is None or node.domain not in ("", "ai.onnx") or len(node.outputs) != 1:
        return None
    try:
        return _fold(node, depth + 1)
    except Exception:  # anything unexpected (bad axes, odd dtypes): not provably constant
        return None


def _fold(node: ir.Node, depth: int) -> np.ndarray | None:
    op = node.op_type
    if op == "Shape":
        shape = node.inputs[0].shape
        if shape is None or not all(isinstance(d, int) for d in shape):
            return None
        dims = np.array(list(shape), dtype=np.int64)
        start, end = _attr(node, "start", 0), _attr(node, "end", None)
        return dims[start:end]
    inputs = [_const(i, depth) if i is not None else None for i in node.inputs]
    if op not in ("Unsqueeze", "Squeeze", "Slice") and any(a is None for a in inputs):
        return None
    if op == "Identity":
        return inputs[0]
    if op == "Cast":
        return inputs[0].astype(ir.DataType(_attr(node, "to")).numpy())
    if op in ("Unsqueeze", "Squeeze"):
        data = inputs[0]
        axes = _attr(node, "axes", None)
        if axes is None and len(inputs) > 1:
            axes = None if inputs[1] is None else inputs[1].reshape(-1).tolist()
        if data is None or (axes is None and op == "Unsqueeze"):
            return None
        if op == "Squeeze":
            return np.squeeze(data, axis=None if axes is None else tuple(int(a) for a in axes))
        out = data
        rank = data.ndim + len(axes)
        for a in sorted(int(a) % rank for a in axes):
            out = np.expand_dims(out, a)
        return out
    if op == "Reshape":
        data, target = inputs[0], [int(d) for d in inputs[1].reshape(-1)]
        target = [data.shape[i] if d == 0 and not _attr(node, "allowzero", 0) else d for i, d in enumerate(target)]
        return data.reshape(target)
    if op == "Concat":
        return np.concatenate(inputs, axis=int(_attr(node, "axis", 0)))
    if op == "Gather":
        return np.take(inputs[0], inputs[1], axis=int(_attr(node, "axis", 0)))
    if op == "Slice":
        data = inputs[0]
        if data is None or any(a is None for a in inputs[1:]):
            return None
        starts, ends = inputs[1].reshape(-1), inputs[2].reshape(-1)
        axes = inputs[3].reshape(-1) if len(inputs) > 3 and inputs[3] is not None else np.arange(len(starts))
        steps = inputs[4].reshape(-1) if len(inputs) > 4 and inputs[4] is not None else np.ones(len(starts), np.int64)
        index = [slice(None)] * data.ndim
        for st, en, ax, sp in zip(starts, ends, axes, steps):
            index[int(ax)] = slice(int(st), int(en), int(sp))
        return data[tuple(index)]
    if op in ("Mul", "Add", "Sub", "Div") and all(a.dtype.kind == "i" for a in inputs):
        a, b = inputs
        return {"Mul": a * b, "Add": a + b, "Sub": a - b, "Div": a // b if (b != 0).all() else None}[op]
    return None


def _attr(node: ir.Node, name: str, default=None):
    attr = node.attributes.get(name)
    return default if attr is None else attr.value
