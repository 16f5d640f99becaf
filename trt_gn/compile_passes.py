"""A torch.compile (Inductor) graph pass that moves the additions in front of trt_gn's GroupNorm into
it: torch.ops.trt_gn.group_norm_act_add instead of separate bias and residual passes.

    from trt_gn import compile_passes
    with compile_passes.enable() as pre_add:       # or pre_add = compile_passes.enable() ... .disable()
        compiled = torch.compile(model)
        compiled(*args)                              # the pass runs while Inductor compiles
    print(pre_add.summary())                         # what it rewrote, and what it left and why

It runs on Inductor's post-grad graph (torch._inductor.config.post_grad_custom_post_pass, after
Inductor's own passes, right before lowering; the joint graph has already dropped a division by
1), where a convolution still carries its bias, and rewrites each

    y = group_norm_act(add(convolution(a, w, b, ...), r), ...)
    y = group_norm_act(add(x, r), ...)    y = group_norm_act(convolution(a, w, b, ...), ...)

into convolution(a, w, None, ...) and (y, s) = group_norm_act_add(x, ..., pre_bias, residual,
write_sum), with the other users of the add (or of a convolution feeding the norm directly) reading
s (write_sum is True where there are any). It takes only what is exact:
  - r of x's shape and dtype is the residual; r of per-channel shape ([N or 1, C, 1, 1], x's dtype:
    a time embedding) joins the pre-bias (with the convolution's bias, summed in float32);
  - a convolution's bias moves where the add is its output's only user, or where the norm takes the
    output directly (its other users then read s, the output plus the bias rounded once, as
    Inductor forms it once it has taken the bias off the convolution), the bias 1-D [C] of the
    output's dtype or float32;
  - an add with alpha, of a scalar, of broadcasting or promoting operands, is left alone.
enable(shared_bias=False) leaves a convolution whose output has other users alone (to measure that rule).
Module-level additions (a block's output sum feeding the next block's norm: diffusers' ResnetBlock2D
chain) are what this pass is for; within one module, trt_gn.swap.swap_group_norms(pre_add=True)
does the same before tracing.

The pass's uuid covers this file, so Inductor's FX graph cache keys compiled graphs by it; a graph
served from that cache was rewritten when it was compiled, but the pass does not run and reports
nothing for it. That needs Inductor's CustomGraphPass (torch 2.6 and later): before it the cache key
leaves a custom pass out, and enable() refuses. Where post_grad_custom_post_pass holds one pass, not
a list (before torch 2.13), enable() installs one pass that runs the configured one and then this.
"""

from __future__ import annotations

import dataclasses
import operator

import torch
from torch._inductor import config as inductor_config

from . import ops  # noqa: F401  (registers the ops)
from .errors import EXIT_MISSING, Error

try:  # torch 2.6 and later: a pass whose uuid keys Inductor's FX graph cache
    from torch._inductor import custom_graph_pass as _custom_graph_pass
except ImportError:
    _custom_graph_pass = None
# CustomGraphPass only stands in for the base class where torch has none: enable() refuses there
CustomGraphPass = getattr(_custom_graph_pass, "CustomGraphPass", object)
# torch 2.13 and later: post_grad_custom_post_pass may be a list of passes, run in order
TAKES_A_LIST = hasattr(_custom_graph_pass, "get_custom_graph_passes")
# torch 2.12 and later: a pass Inductor calls with is_inference too
_INFERENCE_AWARE = getattr(_custom_graph_pass, "CustomInferenceAwareGraphPass", None)

aten = torch.ops.aten
GROUP_NORM_ACT = torch.ops.trt_gn.group_norm_act.default
GROUP_NORM_ACT_ADD = torch.ops.trt_gn.group_norm_act_add.default
CONVOLUTION = aten.convolution.default


@dataclasses.dataclass
class Decision:
    node: str  # the group_norm_act node of the graph it was found in
    action: str  # "fused" or "left"
    reason: str  # what moved in (fused) or why nothing did (left)


@dataclasses.dataclass
class PreAddReport:
    decisions: list[Decision] = dataclasses.field(default_factory=list)
    graphs: int = 0  # graphs the pass ran on

    @property
    def fused(self) -> list[Decision]:
        return [d for d in self.decisions if d.action == "fused"]

    @property
    def left(self) -> list[Decision]:
        return [d for d in self.decisions if d.action == "left"]

    def summary(self) -> str:
        lines = [f"pre-add pass: {self.graphs} graph(s), {len(self.fused)} group_norm_act node(s) rewritten to "
                 f"group_norm_act_add, {len(self.left)} left"]
        lines += [f"  {d.action:5s} {d.node}: {d.reason}" for d in self.decisions]
        return "\n".join(lines)


def _val(node):
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def _is(node, target) -> bool:
    return isinstance(node, torch.fx.Node) and node.op == "call_function" and node.target is target


def _fake(target, args):
    """The fake value of target(*args), args' nodes replaced by their fake values."""
    vals = [_val(a) if isinstance(a, torch.fx.Node) else a for a in args]
    if target is operator.getitem:
        return target(*vals)
    with torch._guards.detect_fake_mode(vals):
        return target(*vals)


def _insert(graph, target, args, meta_from=None, inserted=None):
    """A new node of target(*args) with its fake value (computed first: a refusal inserts nothing)."""
    val = _fake(target, args)
    node = graph.call_function(target, tuple(args))
    if meta_from is not None:  # where it came from (stack trace, module); not another op's input values
        node.meta.update({k: v for k, v in meta_from.meta.items() if k not in ("val", "eager_input_vals")})
    node.meta["val"] = val
    if inserted is not None:
        inserted.append(node)
    return node


def _one(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == 1


def _per_channel(t, n: int, c: int) -> bool:
    return t.dim() == 4 and t.shape[0] in (1, n) and tuple(t.shape[1:]) == (c, 1, 1)


class _Candidate:
    """What can move into one group_norm_act node, or why nothing can (reason)."""

    def __init__(self, gn: torch.fx.Node, shared_bias: bool = True):
        self.gn = gn
        self.shared_bias = shared_bias
        self.base = self.conv = self.add = self.div = self.residual = self.channel_term = None
        self.reason = ""
        x = gn.args[0]
        xv = _val(x)
        if _is(x, aten.div.Tensor) and _is(x.args[0], aten.add.Tensor) and _one(x.args[1]):
            self.div, x = x, x.args[0]  # (a + b) / 1 is a + b, to the bit
        if xv is None or xv.dim() != 4:
            self.reason = "its input has no 4-D value to check"
            return
        if _is(x, aten.add.Tensor):
            self._from_add(x, xv)
        elif _is(x, CONVOLUTION):
            self.base, self.conv = x, self._conv(x, gn, shared=self.shared_bias)
            if self.conv is None:
                return
        else:
            self.reason = "its input is neither an add nor a convolution"
            return
        if self.conv is None and self.residual is None and self.channel_term is None:
            self.reason = self.reason or "nothing to move"

    def _from_add(self, add, xv):
        a, b = add.args[:2]
        if add.kwargs.get("alpha", 1) != 1 or len(add.args) > 2:
            self.reason = "the add has an alpha"
            return
        av, bv = _val(a), _val(b)
        if av is None or bv is None:
            self.reason = "the add is of a scalar"
            return
        if av.dtype != xv.dtype or bv.dtype != xv.dtype or av.device != xv.device or bv.device != xv.device:
            self.reason = "the add's operands differ in dtype or device from its result"
            return
        n, c = xv.shape[:2]
        same = [tuple(t.shape) == tuple(xv.shape) for t in (av, bv)]
        if all(same):
            # a convolution whose bias can move is the base, the other operand the residual
            movable = [t for t in (a, b) if _is(t, CONVOLUTION) and self._conv(t, add, quiet=True) is not None]
            self.base, self.residual = (b, a) if movable[:1] == [b] else (a, b)
        elif same[0] and _per_channel(bv, n, c):
            self.base, self.channel_term = a, b
        elif same[1] and _per_channel(av, n, c):
            self.base, self.channel_term = b, a
        else:
            self.reason = "the add broadcasts an operand that is neither per-channel nor of x's shape"
            return
        self.add = add
        if _is(self.base, CONVOLUTION):
            self.conv = self._conv(self.base, add, quiet=True)

    def _conv(self, conv, user, quiet=False, shared=False):
        """conv, where its bias can move into `user`; shared: other users may read s instead."""
        bias = conv.args[2]
        bv, cv = _val(bias), _val(conv)
        why = ""
        if bias is None:
            why = "the convolution has no bias"
        elif user not in conv.users or (len(conv.users) != 1 and not shared):
            why = "the convolution's output has other users"
        elif bv is None or bv.dim() != 1 or bv.shape[0] != cv.shape[1] or bv.dtype not in (cv.dtype, torch.float32):
            why = "the convolution's bias is not a [C] tensor of its dtype or float32"
        if why:
            if not quiet:
                self.reason = why
            return None
        return conv


def _position(graph) -> dict:
    return {node: i for i, node in enumerate(graph.nodes)}


def _rewrite(graph, cand: _Candidate) -> str:
    """Rewrite one candidate; returns the decision's reason (what moved)."""
    gn = cand.gn
    _, weight, bias, _, _, _ = gn.args
    add = cand.add
    # the other users of the sum (of the add, and of its division by 1; without an add, of the
    # convolution the norm reads): they read s instead
    sums = [t for t in (add, cand.div) if t is not None] or ([cand.conv] if cand.conv is not None else [])
    others = [u for t in sums for u in t.users if u is not gn and u is not cand.div]
    order = _position(graph)
    # Where the fused node goes: at the sum (its other users may come before the norm), which needs
    # the norm's weight and bias defined before it; else at the norm, after which the others must come.
    first = sums[0] if sums else None
    anchor = gn
    if first is not None and all(not isinstance(t, torch.fx.Node) or order[t] < order[first] for t in (weight, bias)):
        anchor = first
    elif any(order[u] < order[gn] for u in others):
        raise _Skip("the sum's other users come before the norm, whose weight or bias is computed after the sum")
    moved, inserted = [], []
    with graph.inserting_before(anchor):
        try:
            fused, base, s = _insert_fused(graph, cand, moved, inserted, others)
        except (TypeError, ValueError) as e:  # the op's own checks, on the fake values
            for node in reversed(inserted):
                graph.erase_node(node)
            raise _Skip(f"group_norm_act_add refuses it: {e}") from e
    gn.replace_all_uses_with(fused)
    graph.erase_node(gn)
    for t in reversed(sums):  # the division (if any) first: it uses the add
        if s is not None:
            t.replace_all_uses_with(s)
        graph.erase_node(t)
    if cand.conv is not None and cand.conv not in sums:
        graph.erase_node(cand.conv)
    reason = " + ".join(moved)
    kept = "the biased output" if cand.add is None else "the sum"
    return reason + (f"; {kept} kept for {len(others)} other user(s)" if others else "")


def _insert_fused(graph, cand: _Candidate, moved: list, inserted: list, others: list):
    """Insert the bias-free convolution, the pre-bias and group_norm_act_add at the graph's insertion
    point; returns (y, the new base, s or None). Every node inserted is appended to `inserted`."""
    _, weight, bias, groups, eps, activation = cand.gn.args

    def insert(target, args, meta_from=None):
        return _insert(graph, target, args, meta_from, inserted)

    base, pre_bias = cand.base, None
    if cand.conv is not None:
        conv = cand.conv
        base = insert(CONVOLUTION, (conv.args[0], conv.args[1], None, *conv.args[3:]), meta_from=conv)
        pre_bias = conv.args[2]
        moved.append(f"{conv.name}'s bias")
    if cand.channel_term is not None:
        term = cand.channel_term
        term = insert(aten.squeeze.dims, (term, [0, 2, 3] if _val(term).shape[0] == 1 else [2, 3]))
        if pre_bias is not None:  # summed in float32: the op takes a float32 pre-bias
            f32 = torch.ops.prims.convert_element_type.default
            pre_bias = insert(aten.add.Tensor, (insert(f32, (pre_bias, torch.float32)),
                                                insert(f32, (term, torch.float32))))
        else:
            pre_bias = term
        moved.append(f"{cand.channel_term.name} (per channel)")
    if cand.residual is not None:
        moved.append(f"{cand.residual.name} (residual)")
    args = (base, weight, bias, groups, eps, activation, pre_bias, cand.residual, bool(others))
    fused = insert(GROUP_NORM_ACT_ADD, args, meta_from=cand.gn)
    y = insert(operator.getitem, (fused, 0), meta_from=cand.gn)
    s = insert(operator.getitem, (fused, 1), meta_from=cand.div or cand.add or cand.conv) if others else None
    return y, base, s


class _Skip(Exception):
    pass


class PreAddPass(CustomGraphPass):
    """The pass (a CustomGraphPass); its report collects the decisions of every graph it ran on."""

    def __init__(self, shared_bias: bool = True):
        # shared_bias: take the bias of a convolution whose output has other users too (they read s)
        self.shared_bias = shared_bias
        self.report = PreAddReport()
        self._previous = None
        self._installed = False

    def __call__(self, graph: torch.fx.Graph) -> None:
        decisions = []
        for gn in [n for n in graph.nodes if _is(n, GROUP_NORM_ACT)]:
            name = gn.name
            cand = _Candidate(gn, self.shared_bias)
            if cand.reason:
                decisions.append(Decision(name, "left", cand.reason))
                continue
            try:
                decisions.append(Decision(name, "fused", _rewrite(graph, cand)))
            except _Skip as e:
                decisions.append(Decision(name, "left", str(e)))
        graph.lint()
        self.report.graphs += 1
        self.report.decisions.extend(decisions)

    def uuid(self) -> bytes:
        files = _custom_graph_pass.get_hash_for_files((__file__, ops.__file__))
        return files if self.shared_bias else files + b"; shared convolution biases left"

    # enable() / disable() / context manager

    def summary(self) -> str:
        return self.report.summary()

    def install(self) -> "PreAddPass":
        if self._installed:
            raise RuntimeError("this pre-add pass is enabled already")
        if CustomGraphPass is object:
            raise Error(f"trt_gn.compile_passes needs torch 2.6 or later (Inductor's CustomGraphPass, which keys "
                        f"its FX graph cache by the pass); this is torch {torch.__version__}",
                        exit_code=EXIT_MISSING)
        self._previous = inductor_config.post_grad_custom_post_pass
        inductor_config.post_grad_custom_post_pass = chain_passes(self._previous, self)
        self._installed = True
        return self

    def disable(self) -> None:
        """Put back the post-grad pass that was configured before enable()."""
        if self._installed:
            inductor_config.post_grad_custom_post_pass = self._previous
            self._installed = False

    def __enter__(self) -> "PreAddPass":
        return self

    def __exit__(self, *exc) -> None:
        self.disable()


def _passes(value) -> tuple:
    """The passes a post_grad_custom_post_pass value runs, in order (torch's get_custom_graph_passes)."""
    if value is None:
        return ()
    if isinstance(value, (list, tuple)):
        return tuple(q for p in value for q in _passes(p))
    return value.passes if isinstance(value, _ChainedPasses) else (value,)


def chain_passes(*passes):
    """The post_grad_custom_post_pass value that runs passes (each a pass or such a value) in order, on
    this torch: the pass itself where there is one, else a list where Inductor takes one (torch 2.13
    and later), else one _ChainedPasses."""
    passes = tuple(q for p in passes for q in _passes(p))
    if len(passes) == 1:
        return passes[0]
    if TAKES_A_LIST:
        return list(passes)
    aware = _INFERENCE_AWARE is not None and any(isinstance(p, _INFERENCE_AWARE) for p in passes)
    return (_InferenceAwareChainedPasses if aware else _ChainedPasses)(passes)


class _ChainedPasses(CustomGraphPass):
    """Passes run in order as one, for an Inductor whose post_grad_custom_post_pass holds one pass. Its
    uuid is theirs, or None (the FX graph cache bypassed, as Inductor does for a list) where one of
    them is not a CustomGraphPass or has no uuid."""

    def __init__(self, passes):
        self.passes = tuple(passes)

    def __call__(self, graph: torch.fx.Graph, **kwargs) -> None:
        for p in self.passes:
            if _INFERENCE_AWARE is not None and isinstance(p, _INFERENCE_AWARE):
                p(graph, **kwargs)
            else:
                p(graph)

    def uuid(self):
        uuids = tuple(p.uuid() if isinstance(p, CustomGraphPass) else None for p in self.passes)
        return uuids if all(uuids) else None


if _INFERENCE_AWARE is not None:
    class _InferenceAwareChainedPasses(_ChainedPasses, _INFERENCE_AWARE):
        """_ChainedPasses of which one takes is_inference: Inductor passes it to this one."""


def enable(shared_bias: bool = True) -> PreAddPass:
    """Install the pre-add pass for the torch.compile (Inductor) compilations that follow, after any
    post-grad pass configured already; returns it: its report (and summary()) says what it did;
    disable() (or leaving a `with` block) uninstalls it. Compilations done before are unchanged.
    shared_bias=False leaves a convolution whose output has other users alone (for measuring that rule)."""
    return PreAddPass(shared_bias).install()
