"""Replace nn.GroupNorm modules of a model with trt_gn.nn.GroupNormAct, in place.

A GroupNorm whose output goes straight into SiLU becomes GroupNormAct(activation="silu") and the
SiLU call is taken out of the parent's forward; every other GroupNorm becomes
GroupNormAct(activation="none"). "Straight into SiLU" is read off the parent module's forward
source (Python AST), statement by statement:

    h = self.norm1(h)            # the GroupNorm attribute
    h = self.nonlinearity(h)     # an nn.SiLU module attribute (diffusers' ResnetBlock2D), or
    h = F.silu(h)                # torch.nn.functional.silu / torch.nn.functional.silu / F.silu
    h = self.act(self.norm(h))   # nested form

Every call site of the GroupNorm attribute in forward must be followed by SiLU; those SiLU calls
are removed from a rewritten copy of the parent's forward bound to that instance (the class and
its other instances are untouched; other uses of the same SiLU module, e.g. on diffusers' time
embedding, stay). In nn.Sequential containers a GroupNorm followed by an nn.SiLU element fuses and
the SiLU element becomes nn.Identity. GroupNorms on inputs of rank other than 4 (diffusers'
attention group_norm sees (N, C, L)) are handled by a GroupNormAct that views them as 4-D.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
import types

import torch
from torch import nn

from .nn import GroupNormAct

_FUNCTIONAL_SILU = {"F.silu", "nn.functional.silu", "torch.nn.functional.silu", "functional.silu"}


class GroupNormActND(GroupNormAct):
    """GroupNormAct for inputs of any rank >= 2: (N, C, *S) is viewed as (N, C, prod(S), 1),
    which leaves the groups' statistics unchanged; 4-D inputs pass straight through."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 4:
            return super().forward(x)
        if x.dim() < 2:
            raise ValueError(f"GroupNorm input must have at least 2 dims, got shape {tuple(x.shape)}")
        y = super().forward(x.reshape(x.shape[0], x.shape[1], -1, 1))
        return y.reshape(x.shape)


@dataclasses.dataclass
class SwapEntry:
    name: str  # qualified module name
    action: str  # "silu", "none" or "left"
    reason: str


@dataclasses.dataclass
class SwapReport:
    entries: list[SwapEntry] = dataclasses.field(default_factory=list)

    @property
    def replaced(self) -> list[SwapEntry]:
        return [e for e in self.entries if e.action != "left"]

    @property
    def left(self) -> list[SwapEntry]:
        return [e for e in self.entries if e.action == "left"]

    @property
    def num_silu(self) -> int:
        return sum(e.action == "silu" for e in self.entries)

    def summary(self) -> str:
        lines = [f"replaced {len(self.replaced)} GroupNorm(s) ({self.num_silu} with SiLU fused), left {len(self.left)}"]
        for e in self.entries:
            lines.append(f"  {e.action:5s} {e.name}: {e.reason}")
        return "\n".join(lines)


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def _self_attr_call(node: ast.AST) -> str | None:
    """'name' for a call self.name(...), else None."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and _dotted(node.func.value) == "self":
        return node.func.attr
    return None


_SOURCE_CACHE: dict[type, tuple[str, object] | str] = {}


def _forward_source(cls: type) -> tuple[str, object] | str:
    """(dedented source, function) of cls.forward, or a reason string."""
    if cls not in _SOURCE_CACHE:
        fn = cls.forward
        try:
            src = textwrap.dedent(inspect.getsource(fn))
            tree = ast.parse(src)
            if not isinstance(tree.body[0], ast.FunctionDef):
                raise TypeError
            _SOURCE_CACHE[cls] = (src, fn)
        except (OSError, TypeError, SyntaxError, IndentationError):
            _SOURCE_CACHE[cls] = f"the source of {cls.__name__}.forward is unavailable"
    return _SOURCE_CACHE[cls]


_UNKNOWN = object()


def _static_truth(test: ast.AST, parent: nn.Module):
    """Value of an if-test that depends only on the instance's configuration, else _UNKNOWN."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _static_truth(test.operand, parent)
        return inner if inner is _UNKNOWN else not inner
    if isinstance(test, ast.BoolOp):
        values = [_static_truth(v, parent) for v in test.values]
        if isinstance(test.op, ast.And):
            if any(v is False for v in values):
                return False
            return True if all(v is True for v in values) else _UNKNOWN
        if any(v is True for v in values):
            return True
        return False if all(v is False for v in values) else _UNKNOWN
    if isinstance(test, ast.Attribute) and _dotted(test.value) == "self" and test.attr != "training":
        value = getattr(parent, test.attr, _UNKNOWN)
        return bool(value) if isinstance(value, (bool, int, str, type(None))) else _UNKNOWN
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.comparators[0], ast.Constant):
        left = test.left
        if not (isinstance(left, ast.Attribute) and _dotted(left.value) == "self" and left.attr != "training"):
            return _UNKNOWN
        value = getattr(parent, left.attr, _UNKNOWN)
        const = test.comparators[0].value
        op = test.ops[0]
        if isinstance(op, ast.Is):
            return value is const if const is None else _UNKNOWN
        if isinstance(op, ast.IsNot):
            return value is not const if const is None else _UNKNOWN
        if isinstance(value, (bool, int, str, type(None))):
            if isinstance(op, ast.Eq):
                return value == const
            if isinstance(op, ast.NotEq):
                return value != const
    return _UNKNOWN


def _specialise(stmts: list, parent: nn.Module) -> list:
    """Splice in the taken branch of every `if` decided by the instance's configuration."""
    out = []
    for stmt in stmts:
        if isinstance(stmt, ast.If):
            truth = _static_truth(stmt.test, parent)
            if truth is not _UNKNOWN:
                out.extend(_specialise(stmt.body if truth else stmt.orelse, parent))
                continue
        for field in ("body", "orelse", "finalbody", "handlers"):
            inner = getattr(stmt, field, None)
            if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                setattr(stmt, field, _specialise(inner, parent))
        out.append(stmt)
    return out


def _ends_with_call(stmt: ast.stmt, attr: str, var: str) -> list | None:
    """The `var = self.attr(...)` call nodes that every path through `stmt` ends with, else None."""
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
        if stmt.targets[0].id == var and _self_attr_call(stmt.value) == attr:
            return [stmt.value]
        return None
    if isinstance(stmt, ast.If) and stmt.body and stmt.orelse:
        a = _ends_with_call(stmt.body[-1], attr, var)
        b = _ends_with_call(stmt.orelse[-1], attr, var)
        return None if a is None or b is None else a + b
    return None


def _silu_target(stmt: ast.stmt, parent: nn.Module) -> tuple[str, str | None] | None:
    """(var, silu module attribute or None for functional) for `var = SILU(var)`."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
        return None
    call = stmt.value
    var = stmt.targets[0].id
    if not (isinstance(call, ast.Call) and len(call.args) == 1 and not call.keywords):
        return None
    if not (isinstance(call.args[0], ast.Name) and call.args[0].id == var):
        return None
    return _silu_kind(call, parent, var)


def _silu_kind(call: ast.Call, parent: nn.Module, var=None):
    if _dotted(call.func) in _FUNCTIONAL_SILU:
        return (var, None)
    attr = _self_attr_call(call)
    if attr is not None and isinstance(getattr(parent, attr, None), nn.SiLU):
        return (var, attr)
    return None


class _Analysis:
    """SiLU sites after GroupNorm calls in one instance's (specialised) forward."""

    def __init__(self, parent: nn.Module):
        self.parent = parent
        got = _forward_source(type(parent))
        self.error = got if isinstance(got, str) else None
        if self.error:
            return
        self.source, self.fn = got
        tree = ast.parse(self.source)
        self.tree = tree
        self.func = tree.body[0]
        self.original_calls: dict[str, int] = {}
        for n in ast.walk(self.func):
            a = _self_attr_call(n)
            if a:
                self.original_calls[a] = self.original_calls.get(a, 0) + 1
        self.func.body = _specialise(self.func.body, parent)
        self.can_rewrite = not self.func.decorator_list and not getattr(self.fn, "__closure__", None) and not any(
            isinstance(n, ast.Name) and n.id == "super" for n in ast.walk(self.func)
        )

    def calls(self, attr: str) -> list:
        return [n for n in ast.walk(self.func) if _self_attr_call(n) == attr]

    def sites(self, attr: str) -> list[tuple]:
        """(covered call nodes, edit) for each SiLU applied right after self.attr(...)."""
        found = []
        for block in ast.walk(self.func):
            for field in ("body", "orelse", "finalbody"):
                stmts = getattr(block, field, None)
                if not isinstance(stmts, list):
                    continue
                for i, stmt in enumerate(stmts):
                    if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call) and len(stmt.value.args) == 1:
                        inner = stmt.value.args[0]
                        if _self_attr_call(inner) == attr and not stmt.value.keywords:
                            kind = _silu_kind(stmt.value, self.parent)
                            if kind is not None:
                                found.append(([inner], ("nested", stmt, kind[1])))
                                continue
                    target = _silu_target(stmt, self.parent)
                    if target is None or i == 0:
                        continue
                    covered = _ends_with_call(stmts[i - 1], attr, target[0])
                    if covered:
                        found.append((covered, ("next", (stmts, stmt), target[1])))
        return found


def _apply(analysis: _Analysis, edits: list[tuple]) -> str | None:
    """Remove the SiLU calls: replace a once-used SiLU module with nn.Identity, else bind a
    rewritten forward to the instance. Returns an error string when neither is possible."""
    parent = analysis.parent
    module_edits = [e for e in edits if e[2] is not None and analysis.original_calls.get(e[2], 0) == 1]
    code_edits = [e for e in edits if e not in module_edits]
    if code_edits and not analysis.can_rewrite:
        return f"{type(parent).__name__}.forward cannot be rewritten (decorated, closure or super())"
    for _, _, attr in module_edits:
        setattr(parent, attr, nn.Identity())
    if not code_edits:
        return None
    for kind, where, _ in code_edits:
        if kind == "nested":
            where.value = where.value.args[0]
        else:
            stmts, stmt = where
            stmts.remove(stmt)
    ast.fix_missing_locations(analysis.tree)
    code = compile(analysis.tree, filename=f"<trt_gn.swap {type(parent).__qualname__}.forward>", mode="exec")
    namespace: dict = {}
    exec(code, analysis.fn.__globals__, namespace)  # the forward's own module globals
    new_fn = namespace[analysis.func.name]
    new_fn.__defaults__ = analysis.fn.__defaults__
    new_fn.__kwdefaults__ = analysis.fn.__kwdefaults__
    parent.forward = types.MethodType(new_fn, parent)
    return None


def _make(gn: nn.GroupNorm, activation: str) -> GroupNormActND:
    factory = {}
    if gn.affine:
        factory = {"device": gn.weight.device, "dtype": gn.weight.dtype}
    module = GroupNormActND(gn.num_groups, gn.num_channels, gn.eps, gn.affine, activation, **factory)
    module.load_state_dict(gn.state_dict())
    module.train(gn.training)
    return module


def swap_group_norms(model: nn.Module) -> SwapReport:
    """Replace every nn.GroupNorm in `model` (in place) and report what was done and why.

    A rewritten forward is specialised to the instance's configuration at swap time (branches on
    plain attributes such as diffusers' ``time_embedding_norm`` or ``upsample is not None`` are
    resolved), so swap after configuring the model."""
    report = SwapReport()
    owners: dict[int, list[tuple[str, nn.Module, str]]] = {}
    for parent_name, parent in model.named_modules(remove_duplicate=False):
        for attr, child in parent.named_children():
            if isinstance(child, nn.GroupNorm):
                owners.setdefault(id(child), []).append((parent_name, parent, attr))
    analyses: dict[int, _Analysis] = {}
    edits: dict[int, list] = {}
    decided = []
    for places in owners.values():
        parent_name, parent, attr = places[0]
        qual = f"{parent_name}.{attr}" if parent_name else attr
        gn = getattr(parent, attr)
        if type(gn) is not nn.GroupNorm:
            report.entries.append(SwapEntry(qual, "left", f"{type(gn).__name__} subclasses nn.GroupNorm with its own behaviour"))
            continue
        activation, reason, edit = "none", "no SiLU directly follows it", None
        if len(places) > 1:
            reason = "the module is shared by several parents"
        elif isinstance(parent, nn.Sequential):
            names = list(parent._modules)
            idx = names.index(attr)
            nxt = parent._modules[names[idx + 1]] if idx + 1 < len(names) else None
            if isinstance(nxt, nn.SiLU):
                activation, reason = "silu", "nn.Sequential: followed by nn.SiLU (now nn.Identity)"
                parent._modules[names[idx + 1]] = nn.Identity()
        else:
            if id(parent) not in analyses:
                analyses[id(parent)] = _Analysis(parent)
            analysis = analyses[id(parent)]
            if analysis.error:
                reason = f"SiLU adjacency not checked: {analysis.error}"
            else:
                calls = analysis.calls(attr)
                sites = analysis.sites(attr)
                covered = {id(c) for cov, _ in sites for c in cov}
                if calls and all(id(c) in covered for c in calls):
                    activation = "silu"
                    reason = f"{type(parent).__name__}.forward applies SiLU right after it"
                    edit = [e for _, e in sites]
                elif sites:
                    reason = f"SiLU follows only some of its calls in {type(parent).__name__}.forward"
        decided.append((qual, parent, attr, gn, activation, reason, edit))
    for qual, parent, attr, gn, activation, reason, edit in decided:
        if edit:
            edits.setdefault(id(parent), []).extend(edit)
    failed: dict[int, str] = {}
    for pid, parent_edits in edits.items():
        error = _apply(analyses[pid], parent_edits)
        if error:
            failed[pid] = error
    for qual, parent, attr, gn, activation, reason, edit in decided:
        if edit and id(parent) in failed:
            activation, reason = "none", f"SiLU follows it, but {failed[id(parent)]}"
        setattr(parent, attr, _make(gn, activation))
        report.entries.append(SwapEntry(qual, activation, reason))
    return report
