"""The matchers: each recognises one form of GroupNorm at an anchor node and proves it (the grouping
Reshape's target, num_groups, per-channel gamma/beta at x's rank), returning a _Match or raising
_NoMatch (GroupNorm-like, with the reason it is left) or _NotGroupNorm (not reported)."""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np
import onnx_ir as ir

from .fold import _attr, _const

GROUP_NORMALIZATION = "GroupNormalization"
INSTANCE_NORM_DECOMPOSITION = "Reshape+InstanceNormalization+Reshape"
REDUCE_MEAN_DECOMPOSITION = "ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div"
EXPANDED_DECOMPOSITION = "ReduceMean/Mul/ReduceMean/Sub(E[x^2]-E[x]^2)/Add/Sqrt/Div"



class _NoMatch(Exception):
    """Raised by a matcher: the subgraph is GroupNorm-like but cannot be fused (message = reason)."""


class _NotGroupNorm(Exception):
    """Raised by a matcher: the anchor is not part of a GroupNorm at all (not reported)."""


@dataclasses.dataclass
class _Match:
    pattern: str
    anchor: ir.Node
    nodes: list[ir.Node]
    x: ir.Value
    rank: int | None
    channels: int
    num_groups: int
    epsilon: float
    dtype: ir.DataType
    gamma: ir.Value | np.ndarray | None  # None: ones
    beta: ir.Value | np.ndarray | None  # None: zeros
    out: ir.Value  # the GroupNorm's output (before any activation)


def _only_use(value: ir.Value, matched: list[ir.Node]) -> ir.Node:
    """The single node using `value`; it must not be a graph output either."""
    users = [u.node for u in value.uses()]
    if value.is_graph_output() or len(users) != 1:
        raise _NoMatch(f"intermediate value {value.name!r} is also used outside the GroupNorm subgraph")
    return users[0]


def _only_users(value: ir.Value, allowed: set) -> None:
    if value.is_graph_output() or any(u.node not in allowed for u in value.uses()):
        raise _NoMatch(f"intermediate value {value.name!r} is also used outside the GroupNorm subgraph")


def _producer(value: ir.Value | None, op_type: str) -> ir.Node | None:
    if value is None:
        return None
    node = value.producer()
    if node is not None and node.op_type == op_type and node.domain in ("", "ai.onnx"):
        return node
    return None


def _opset(graph: ir.Graph, model: ir.Model) -> int:
    return model.opset_imports.get("", model.opset_imports.get("ai.onnx", 1))


def _static_dim(value: ir.Value, axis: int) -> int | None:
    shape = value.shape
    if shape is None or axis >= len(shape):
        return None
    dim = shape[axis]
    return dim if isinstance(dim, int) else None


def _rank(value: ir.Value) -> int | None:
    return None if value.shape is None else len(value.shape)


def _dims_of(shape_value: ir.Value, x: ir.Value) -> list | None:
    """Describe a 1-D int64 shape tensor as a list of ints and ("x", i) = dim i of x, or None."""
    arr = _const(shape_value)
    if arr is not None:
        return [int(v) for v in arr.reshape(-1)]
    node = shape_value.producer()
    if node is None or node.domain not in ("", "ai.onnx"):
        return None
    source = node.inputs[0] if node.op_type == "Shape" else None
    cast = _producer(source, "Cast")
    if cast is not None and cast.inputs[0] is x:
        source = x  # Shape(Cast(x)) is Shape(x)
    if node.op_type == "Shape" and source is x:
        rank = _rank(x)
        start = _attr(node, "start", 0)
        end = _attr(node, "end", None)
        if rank is None and (start < 0 or end is None or end < 0):
            if start == 0 and end is None:
                return [("x", "all")]
            return None
        end = rank if end is None else (end + rank if end < 0 else end)
        start = start + rank if start < 0 else start
        return [("x", i) for i in range(start, min(end, rank if rank is not None else end))]
    if node.op_type == "Concat":
        out = []
        for inp in node.inputs:
            part = _dims_of(inp, x) if inp is not None else None
            if part is None:
                return None
            out.extend(part)
        return out
    if node.op_type == "Unsqueeze":
        gather = _producer(node.inputs[0], "Gather")
        if gather is not None and _producer(gather.inputs[0], "Shape") is not None:
            shape_node = gather.inputs[0].producer()
            idx = _const(gather.inputs[1])
            if shape_node.inputs[0] is x and idx is not None and idx.size == 1 and _attr(shape_node, "start", 0) == 0:
                return [("x", int(idx.reshape(-1)[0]))]
    return None


def _reshape_dims(reshape: ir.Node, x: ir.Value) -> list | None:
    """_dims_of a Reshape's target, with the meaning onnxruntime gives it: under allowzero=1 a 0 is a
    dimension of size zero, not a copy of the input's, so no target with a 0 is taken then."""
    dims = _dims_of(reshape.inputs[1], x)
    if dims is not None and _attr(reshape, "allowzero", 0) and 0 in dims:
        raise _NoMatch(f"the Reshape target {_fmt_dims(dims)} has allowzero=1: its 0 is a zero-size dimension, "
                       "not the input's")
    return dims


def _restores_shape(reshape: ir.Node, x: ir.Value, channels: int | None) -> bool:
    dims = _reshape_dims(reshape, x)
    if dims is None:
        return False
    if dims == [("x", "all")]:
        return True
    rank = _rank(x)
    if rank is None or len(dims) != rank:
        return False
    for i, d in enumerate(dims):
        if d == ("x", i):
            continue
        if isinstance(d, int) and (d == _static_dim(x, i) or (i == 1 and d == channels)):
            continue
        return False
    return True


def _per_channel(arr: np.ndarray, channels: int | None, rank: int | None) -> tuple[np.ndarray, int, int | None] | None:
    """A constant that broadcasts along axis 1 of a rank-`rank` tensor -> (flat (C,), C, rank).

    The rank must be known: a constant of shape [W] or [1, 1, 1, W] broadcasts along axis 1 only
    for one rank of the other operand (2, resp. 4 with C == W == the last axis otherwise)."""
    if rank is None:
        return None
    shape = arr.shape
    if len(shape) > rank:  # would broadcast the result to a higher rank
        return None
    nontrivial = [i for i, d in enumerate(shape) if d != 1]
    if len(nontrivial) != 1:
        if arr.size == 1 and channels is not None:  # a scalar gamma/beta: broadcast it
            return np.full((channels,), arr.reshape(-1)[0], dtype=arr.dtype), channels, rank
        return None
    c = shape[nontrivial[0]]
    trailing = len(shape) - 1 - nontrivial[0]  # dims after C: H, W, ... (right-aligned broadcast)
    if trailing != rank - 2 or (channels is not None and c != channels):
        return None
    return arr.reshape(-1), c, rank


def _is_cast_to(node: ir.Node, dtype: ir.DataType | None) -> bool:
    return node.op_type == "Cast" and node.domain in ("", "ai.onnx") and dtype is not None \
        and _attr(node, "to") == dtype.value


def _skip_noop_casts(value: ir.Value, matched: list[ir.Node], dtype: ir.DataType | None) -> ir.Value:
    """Follow no-op Casts (to `dtype`, the type `value` already has) that are `value`'s only use."""
    while not value.is_graph_output():
        users = [u.node for u in value.uses()]
        if len(users) != 1 or not _is_cast_to(users[0], dtype):
            break
        matched.append(users[0])
        value = users[0].outputs[0]
    return value


def _affine_tail(value: ir.Value, matched: list[ir.Node], channels: int | None, rank: int | None,
                 dtype: ir.DataType | None, only: tuple[str, ...] = ("Mul", "Add")):
    """Optional Mul(gamma) then Add(beta) after the normalisation (in x's type `dtype`), with
    per-channel constants; no-op Casts before, between and after them are taken along."""
    gamma = beta = None
    out = _skip_noop_casts(value, matched, dtype)
    for op_type in only:
        users = [u.node for u in out.uses()]
        if out.is_graph_output() or len(users) != 1 or users[0].op_type != op_type or users[0].domain not in ("", "ai.onnx"):
            break
        node = users[0]
        other = node.inputs[1] if node.inputs[0] is out else node.inputs[0]
        arr = _const(other)
        if arr is None:
            break
        found = _per_channel(arr, channels, rank)
        if found is None:
            break
        flat, channels, rank = found
        if op_type == "Mul":
            gamma = flat
        else:
            beta = flat
        matched.append(node)
        out = _skip_noop_casts(node.outputs[0], matched, dtype)
    return gamma, beta, out, channels, rank


# ---------------------------------------------------------------------------------------------
# matchers


def _match_group_normalization(node: ir.Node, opset: int) -> _Match:
    x, scale, bias = (list(node.inputs) + [None, None, None])[:3]
    groups = int(_attr(node, "num_groups", 0))
    eps = float(_attr(node, "epsilon", 1e-5))
    channels = _static_dim(x, 1)
    scale_arr, bias_arr = _const(scale), _const(bias)
    per_group = opset < 21
    if channels is None and not per_group and scale_arr is not None:
        channels = int(scale_arr.size)
    if channels is None:
        raise _NoMatch("the channel count C is not static")
    if groups <= 0 or channels % groups != 0:
        raise _NoMatch(f"C={channels} is not divisible by num_groups={groups}")
    dtype = x.dtype if x.dtype is not None else (scale.dtype if scale is not None else None)
    if dtype is None:
        raise _NoMatch("the input's element type is unknown")
    gamma: ir.Value | np.ndarray | None = scale
    beta: ir.Value | np.ndarray | None = bias
    if per_group:
        if scale_arr is None or bias_arr is None:
            raise _NoMatch(
                f"opset-{opset} GroupNormalization has per-group scale/bias that are not constants, "
                "so they cannot be expanded to per-channel gamma/beta"
            )
        if scale_arr.size != groups or bias_arr.size != groups:
            raise _NoMatch(f"opset-{opset} scale/bias must have num_groups={groups} values")
        gamma = np.repeat(scale_arr.reshape(-1), channels // groups)
        beta = np.repeat(bias_arr.reshape(-1), channels // groups)
    return _Match(GROUP_NORMALIZATION, node, [node], x, _rank(x), channels, groups, eps, dtype, gamma, beta, node.outputs[0])


def _reads_graph_input(value: ir.Value) -> bool:
    """True if computing `value` reads the value (not only the shape) of a graph input."""
    pending, seen = [value], set()
    while pending:
        v = pending.pop()
        if v is None or id(v) in seen:
            continue
        seen.add(id(v))
        if v.is_graph_input():
            return True
        node = v.producer()
        if node is not None and node.op_type != "Shape":
            pending.extend(node.inputs)
    return False


def _fmt_dims(dims: list) -> str:
    return "[" + ", ".join(f"dim{d[1]}" if isinstance(d, tuple) else str(d) for d in dims) + "]"


def _same_dim(a, b) -> bool:
    """Two dims provably equal: the same int, or the same named symbolic dim."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return a is not None and b is not None and not isinstance(a, int) and not isinstance(b, int) \
        and a.value is not None and a.value == b.value


def _group_reshape(reshape: ir.Node, x: ir.Value) -> int:
    """num_groups G of Reshape(x, [N, G, -1]); raise _NoMatch (with the target) for anything else.

    Proven: dim 0 copies x's (0, Shape(x)[0], or x's static N), dim 1 is a constant G > 0, dim 2 is
    -1 (or, all static, exactly the rest). num_groups is never read from elsewhere."""
    dims = _reshape_dims(reshape, x)
    if dims is None:  # not a constant or shape arithmetic we follow: the inferred output shape
        if _reads_graph_input(reshape.inputs[1]):  # inferred from the input's default, not what is fed
            raise _NoMatch("the grouping Reshape's target depends on a graph input, which can change at run time")
        out = reshape.outputs[0].shape
        xs = x.shape
        if out is None or xs is None or len(out) != 3 or not isinstance(out[1], int) or not _same_dim(out[0], xs[0]):
            raise _NoMatch("cannot prove that the grouping Reshape's target is [N, G, -1]")
        if out[1] <= 0:
            raise _NoMatch("the grouping Reshape's target is not [N, G, -1]")
        return out[1]
    n0 = _static_dim(x, 0)
    first_ok = dims[0] in (0, ("x", 0)) or (isinstance(dims[0], int) and dims[0] > 0 and dims[0] == n0)
    if len(dims) != 3 or not first_ok or not isinstance(dims[1], int) or dims[1] <= 0:
        raise _NoMatch(f"the grouping Reshape's target {_fmt_dims(dims)} is not [N, G, -1]")
    groups = dims[1]
    if dims[2] != -1:
        shape = x.shape
        static = shape is not None and all(isinstance(d, int) for d in shape)
        total = int(np.prod(list(shape))) if static else None
        if not static or not isinstance(dims[2], int) or dims[2] * groups * shape[0] != total:
            raise _NoMatch(f"the grouping Reshape's target {_fmt_dims(dims)} is not [N, G, -1]")
    return groups


def _match_instance_norm(node: ir.Node, opset: int) -> _Match:
    reshape1 = _producer(node.inputs[0], "Reshape")
    if reshape1 is None:
        raise _NotGroupNorm  # a true instance norm on its input
    x = reshape1.inputs[0]
    scale, bias = _const(node.inputs[1]), _const(node.inputs[2])
    if scale is None or bias is None or not np.all(scale == 1) or not np.all(bias == 0):
        raise _NoMatch("InstanceNormalization has a scale/bias other than ones/zeros")
    groups = _group_reshape(reshape1, x)
    if scale.size != groups or bias.size != groups:
        raise _NoMatch(f"InstanceNormalization has {scale.size} channels, the grouping Reshape {groups} groups")
    matched = [reshape1, node]
    _only_use(reshape1.outputs[0], matched)
    reshape2 = _only_use(node.outputs[0], matched)
    if reshape2.op_type != "Reshape":
        raise _NoMatch("InstanceNormalization's output is not reshaped back to the input's shape")
    matched.append(reshape2)
    return _finish_decomposition(INSTANCE_NORM_DECOMPOSITION, node, matched, x, groups,
                                 float(_attr(node, "epsilon", 1e-5)), reshape2, scale.dtype)


def _axes(node: ir.Node, opset: int) -> list[int] | None:
    axes = _attr(node, "axes", None)
    if axes is None and len(node.inputs) > 1 and node.inputs[1] is not None:
        arr = _const(node.inputs[1])
        axes = None if arr is None else arr.reshape(-1).tolist()
    return None if axes is None else [int(a) for a in axes]


def _variance(add_eps: ir.Node) -> tuple[ir.Node, float]:
    """(the variance node, eps) of Add(variance, eps): ReduceMean(...) or, expanded, Sub(E[x^2], E[x]^2)."""
    for a, b in ((0, 1), (1, 0)):
        cand = add_eps.inputs[a].producer() if add_eps.inputs[a] is not None else None
        arr = _const(add_eps.inputs[b])
        if cand is not None and cand.op_type in ("ReduceMean", "Sub") and cand.domain in ("", "ai.onnx") \
                and arr is not None and arr.size == 1:
            return cand, float(arr.reshape(-1)[0])
    raise _NotGroupNorm


def _expanded_grouping(reshape: ir.Node):
    """ONNX's own expansion of GroupNormalization groups x in two Reshapes:
    Reshape(Reshape([Cast](x), Concat(Shape(x)[0:1], [G], Shape(x)[1:2] / [G], Shape(x)[2:])), [0, 0, -1]),
    which is exactly Reshape(x, [N, G, -1]). Returns (x, G, nodes) or None for any other form."""
    if _reshape_dims(reshape, reshape.inputs[0]) != [0, 0, -1]:
        return None
    inner = _producer(reshape.inputs[0], "Reshape")
    concat = _producer(inner.inputs[1], "Concat") if inner is not None else None
    if concat is None or len(concat.inputs) != 4:
        return None
    n_shape, g_const, size, rest = concat.inputs
    shape_n, div, shape_rest = _producer(n_shape, "Shape"), _producer(size, "Div"), _producer(rest, "Shape")
    g = _const(g_const)
    if shape_n is None or div is None or shape_rest is None or g is None or g.size != 1:
        return None
    shape_c, g2 = _producer(div.inputs[0], "Shape"), _const(div.inputs[1])
    x = shape_n.inputs[0]
    spans = ((shape_n, 0, 1), (shape_c, 1, 2), (shape_rest, 2, None))
    if shape_c is None or g2 is None or g2.size != 1 or int(g2.reshape(-1)[0]) != int(g.reshape(-1)[0]):
        return None
    for node, start, end in spans:
        if node.inputs[0] is not x or _attr(node, "start", 0) != start or _attr(node, "end", None) != end:
            return None
    data, nodes = inner.inputs[0], [inner, reshape]
    cast = _producer(data, "Cast")  # to the stash type; left to _drop_dead (Shape(Cast(x)) may use it)
    if data is not x and (cast is None or cast.inputs[0] is not x):
        return None
    stash = x.dtype if data is x else ir.DataType(_attr(cast, "to"))
    if stash not in (ir.DataType.FLOAT, x.dtype):  # the plugin's statistics are float32
        raise _NoMatch(f"the statistics are taken in {stash.name}, not in float32 or the input's type")
    groups = int(g.reshape(-1)[0])
    if groups <= 0:
        raise _NoMatch(f"the grouping Reshape's target has num_groups {groups}")
    return x, groups, nodes, stash


def _grouping(grouped: ir.Value):
    """(x, num_groups, nodes, type the statistics are taken in) of the value the statistics are taken
    over, proven to be x as [N, G, -1]."""
    reshape = _producer(grouped, "Reshape")
    if reshape is None:
        raise _NotGroupNorm  # statistics over the tensor as it is (LayerNorm-like), not over groups
    expanded = _expanded_grouping(reshape)
    if expanded is not None:
        return expanded
    x = reshape.inputs[0]
    return x, _group_reshape(reshape, x), [reshape], x.dtype


def _match_reduce_mean_decomposition(sqrt: ir.Node, opset: int) -> _Match:
    add_eps = _producer(sqrt.inputs[0], "Add")
    if add_eps is None:
        raise _NotGroupNorm
    var, eps = _variance(add_eps)
    if var.op_type == "ReduceMean":  # E[(x - E[x])^2]
        sq = var.inputs[0].producer()
        if sq is None or sq.op_type not in ("Pow", "Mul"):
            raise _NotGroupNorm
        sub = _producer(sq.inputs[0], "Sub")
        if sub is None:
            raise _NotGroupNorm
        if sq.op_type == "Pow":
            exponent = _const(sq.inputs[1])
            if exponent is None or exponent.size != 1 or float(exponent.reshape(-1)[0]) != 2.0:
                raise _NotGroupNorm
        elif sq.inputs[1] is not sq.inputs[0]:
            raise _NotGroupNorm
        mean = _producer(sub.inputs[1], "ReduceMean")
        if mean is None or mean.inputs[0] is not sub.inputs[0]:
            raise _NotGroupNorm
        grouped = sub.inputs[0]
        pattern, stats, reductions = REDUCE_MEAN_DECOMPOSITION, [mean, sub, sq, var], (mean, var)
        grouped_users, centred_users, mean_users = {mean, sub}, {sq}, {sub}
    else:  # E[x^2] - E[x]^2, the expanded form of ONNX GroupNormalization
        mean_sq, sq_mean = _producer(var.inputs[0], "ReduceMean"), _producer(var.inputs[1], "Mul")
        if mean_sq is None or sq_mean is None or sq_mean.inputs[0] is not sq_mean.inputs[1]:
            raise _NotGroupNorm
        mean = _producer(sq_mean.inputs[0], "ReduceMean")
        square = _producer(mean_sq.inputs[0], "Mul")
        if mean is None or square is None or square.inputs[0] is not square.inputs[1] \
                or square.inputs[0] is not mean.inputs[0]:
            raise _NotGroupNorm
        grouped = mean.inputs[0]
        sub = next((u.node for u in grouped.uses() if u.node.op_type == "Sub" and u.node.inputs[0] is grouped
                    and u.node.inputs[1] is mean.outputs[0]), None)
        if sub is None:
            raise _NoMatch("the mean is not subtracted from the grouped values")
        pattern, stats, reductions = EXPANDED_DECOMPOSITION, [mean, square, mean_sq, sq_mean, var, sub], (mean, mean_sq)
        grouped_users, centred_users, mean_users = {mean, square, sub}, set(), {sq_mean, sub}
    x, groups, head, stash = _grouping(grouped)
    for rm in reductions:
        axes = _axes(rm, opset)
        if _attr(rm, "keepdims", 1) != 1 or axes is None or sorted(a % 3 for a in axes) != [2]:
            raise _NoMatch("the statistics are not taken over every axis after the group axis")
    div = None
    for user in (u.node for u in sub.outputs[0].uses()):
        if user.op_type == "Div" and user.inputs[0] is sub.outputs[0] and user.inputs[1] is sqrt.outputs[0]:
            div = user
    if div is None:
        raise _NoMatch("the centred values are not divided by the standard deviation")
    matched = head + stats + [add_eps, sqrt, div]
    _only_users(grouped, grouped_users)
    _only_users(sub.outputs[0], centred_users | {div})
    _only_users(mean.outputs[0], mean_users)
    for node in stats + [add_eps, sqrt]:
        if node not in (sub, mean):
            _only_use(node.outputs[0], matched)
    for node in head[:-1]:
        _only_users(node.outputs[0], set(matched) | {u.node for u in node.outputs[0].uses() if u.node.op_type == "Shape"})
    return _group_space_tail(pattern, sqrt, matched, x, groups, eps, div.outputs[0], stash)


def _param(value: ir.Value, size: int | None, what: str):
    """A per-group or per-channel parameter applied as [1, size, 1] (or [size, 1]) to a rank-3 value:
    (flat constant, size) or, not constant, the 1-D tensor p of Reshape(p, [1, -1, 1]). A Cast that
    makes p (to the type the Mul/Add computes in) stays, unless it is a no-op: p has that type."""
    arr = _const(value)
    if arr is not None:
        found = _per_channel(arr, size, 3)
        if found is None:
            raise _NoMatch(f"the {what} of shape {list(arr.shape)} is not one value per {what.split()[0]}")
        return found[0], found[1]
    reshape = _producer(value, "Reshape")
    if reshape is None or _const(reshape.inputs[1]) is None or _const(reshape.inputs[1]).reshape(-1).tolist() != [1, -1, 1]:
        raise _NoMatch(f"the {what} is neither a constant nor a 1-D tensor reshaped to [1, -1, 1]")
    source = reshape.inputs[0]
    cast = _producer(source, "Cast")
    if cast is not None and _value_dtype(cast.inputs[0]) == ir.DataType(_attr(cast, "to")):
        source, cast = cast.inputs[0], None  # a no-op Cast
    shape = source.shape if source.shape is not None or cast is None else cast.inputs[0].shape
    if shape is None or len(shape) != 1:
        raise _NoMatch(f"the {what} is not a 1-D tensor")
    n = shape[0] if isinstance(shape[0], int) else size
    return source, n


def _group_space_tail(pattern, anchor, matched, x, groups, eps, value, compute) -> _Match:
    """From the normalised [N, G, -1] values (of type `compute`) to x's shape: any of Reshape back to
    x's shape, Reshape to [N, C, -1], Cast to x's type, per-group (in [N, G, -1]) or per-channel (in
    [N, C, -1]) Mul then Add, ending in x's shape and type; then the per-channel Mul/Add of
    _finish_decomposition."""
    space, gamma, beta = "group", None, None
    channels = _static_dim(x, 1)
    while True:
        users = [u.node for u in value.uses()]
        if value.is_graph_output() or len(users) != 1 or users[0].domain not in ("", "ai.onnx"):
            break
        node = users[0]
        if node.op_type == "Reshape" and node.inputs[0] is value:
            if _restores_shape(node, x, channels):
                nxt = "x"
            elif space == "x" and _reshape_dims(node, x) == [0, 0, -1]:
                nxt = "channel"
            else:
                break
            space, last_reshape = nxt, node
        elif _is_cast_to(node, x.dtype) or _is_cast_to(node, compute):  # back to x's type, or a no-op
            compute = ir.DataType(_attr(node, "to"))
        elif node.op_type in ("Mul", "Add") and space in ("group", "channel") and beta is None \
                and (node.op_type == "Add" or gamma is None):
            other = node.inputs[1] if node.inputs[0] is value else node.inputs[0]
            param, n = _param(other, groups if space == "group" else channels, f"{space} {'scale' if node.op_type == 'Mul' else 'bias'}")
            if space == "group":
                if not isinstance(param, np.ndarray):
                    raise _NoMatch("per-group scale/bias that are not constants cannot be expanded to per-channel")
                if channels is None:
                    raise _NoMatch("the channel count C is not static")
                param = np.repeat(param, channels // groups)
            elif channels is None:
                channels = n
            if node.op_type == "Mul":
                gamma = param
            else:
                beta = param
        else:
            break
        matched.append(node)
        value = node.outputs[0]
    if space != "x":
        raise _NoMatch("the normalised values are not reshaped back to the input's shape")
    if compute != x.dtype:  # x fp16, statistics in float32 and no Cast back: a float32 output
        raise _NoMatch("the normalised values are not cast back to the input's type")
    matched.remove(last_reshape)
    matched.append(last_reshape)
    return _finish_decomposition(pattern, anchor, matched, x, groups, eps, last_reshape, None, gamma, beta,
                                 channels, value)


def _finish_decomposition(pattern, anchor, matched, x, groups, eps, reshape2, fallback_dtype,
                          gamma=None, beta=None, channels=None, out=None) -> _Match:
    rank = _rank(x)
    channels = channels or _static_dim(x, 1)
    out = reshape2.outputs[0] if out is None else out  # after the Casts the group-space tail took
    if gamma is None and beta is None:
        gamma, beta, out, channels, rank = _affine_tail(out, matched, channels, rank, x.dtype)
    elif beta is None:
        _, beta, out, channels, rank = _affine_tail(out, matched, channels, rank, x.dtype, only=("Add",))
    if not _restores_shape(reshape2, x, channels):
        raise _NoMatch("cannot prove that the final Reshape restores the input's shape")
    if channels is None:
        raise _NoMatch("the channel count C is not static")
    if channels % groups != 0:
        raise _NoMatch(f"C={channels} is not divisible by num_groups={groups}")
    for param in (gamma, beta):
        if isinstance(param, np.ndarray) and param.size != channels:
            raise _NoMatch(f"the scale/bias has {param.size} values, not one per channel (C={channels})")
    dtype = x.dtype
    if dtype is None and fallback_dtype is not None:
        dtype = ir.DataType.from_numpy(fallback_dtype)
    if dtype is None and isinstance(gamma, np.ndarray):
        dtype = ir.DataType.from_numpy(gamma.dtype)
    if dtype is None:
        raise _NoMatch("the input's element type is unknown")
    return _Match(pattern, anchor, matched, x, rank, channels, groups, eps, dtype, gamma, beta, out)


# The node's element types: x (and y) one of these; gamma and beta both x's type or float32.
NODE_TYPES = (ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16)


def _value_dtype(value: ir.Value) -> ir.DataType | None:
    if value.dtype is not None:
        return value.dtype
    cast = _producer(value, "Cast")
    return None if cast is None else ir.DataType(_attr(cast, "to"))


def _affine_dtype(match: _Match) -> ir.DataType:
    """The one type of the fused node's gamma and beta: float32 where either already is (the other is
    cast to it, exactly), else x's type; a type the node does not take leaves the GroupNorm."""
    if match.dtype not in NODE_TYPES:
        raise _NoMatch(f"the input's element type is {match.dtype.name}; the node takes FLOAT, FLOAT16 or BFLOAT16")
    types = set()
    for what, param in (("scale", match.gamma), ("bias", match.beta)):
        if param is None:
            continue
        dtype = _value_dtype(param) if isinstance(param, ir.Value) else ir.DataType.from_numpy(param.dtype)
        if dtype is None:
            raise _NoMatch(f"the {what}'s element type is unknown")
        if dtype not in (match.dtype, ir.DataType.FLOAT):
            raise _NoMatch(f"the {what} is {dtype.name}, neither the input's type {match.dtype.name} nor FLOAT")
        types.add(dtype)
    return ir.DataType.FLOAT if ir.DataType.FLOAT in types else match.dtype


def _silu_tail(out: ir.Value) -> tuple[list[ir.Node], ir.Value] | None:
    """Sigmoid(y) + Mul(y, sigmoid) or Swish(y, alpha=1) right after y (y used by nothing else)."""
    if out.is_graph_output():
        return None
    users = [u.node for u in out.uses()]
    if len(users) == 1 and users[0].op_type == "Swish" and users[0].domain in ("", "ai.onnx"):
        if float(_attr(users[0], "alpha", 1.0)) == 1.0:
            return [users[0]], users[0].outputs[0]
        return None
    if len(users) != 2:
        return None
    sig = next((u for u in users if u.op_type == "Sigmoid" and u.domain in ("", "ai.onnx")), None)
    mul = next((u for u in users if u.op_type == "Mul" and u.domain in ("", "ai.onnx")), None)
    if sig is None or mul is None:
        return None
    s = sig.outputs[0]
    if s.is_graph_output() or [u.node for u in s.uses()] != [mul] or set(map(id, mul.inputs)) != {id(out), id(s)}:
        return None
    return [sig, mul], mul.outputs[0]


# The anchor op type of each form, its pattern name and its matcher, in the order the pass tries them.
_MATCHERS: tuple[tuple[str, str, Callable[[ir.Node, int], _Match]], ...] = (
    ("GroupNormalization", GROUP_NORMALIZATION, _match_group_normalization),
    ("InstanceNormalization", INSTANCE_NORM_DECOMPOSITION, _match_instance_norm),
    ("Sqrt", REDUCE_MEAN_DECOMPOSITION, _match_reduce_mean_decomposition),
)
