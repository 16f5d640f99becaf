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

With pre_add=True, the additions right in front of a GroupNorm move into it as well
(torch.ops.trt_gn.group_norm_act_add: one pass instead of separate bias and add passes), read off
the same source, where the GroupNorm is called once, as `W = self.normY(V)`:

    h = self.conv1(h)            # an nn.Conv2d with bias: run without it (state_dict unchanged),
    if temb is not None:         #   its bias becomes the norm's pre_bias, read at each call
        h = h + temb             # `V = V + T` (or guarded by `if T is not None`): T an addend
    h = self.norm2(h)

    out = (x + h) / self.scale   # a sum (divided by a scale that is 1 at swap time): x, addend h
    out = self.norm(out)

Statements in between that do not touch V (nor the added names) may stand anywhere. The rewritten
call is `self.normY(x, pre_bias=self.convX.bias, addends=(T, ...))`; where the sum V outlives the
call (W is another name), it asks for the sum too: `W, V = self.normY(..., write_sum=True)`. A
convolution's bias moves only where its output reaches nothing but the additions and the norm. At
run time an addend of per-channel shape joins the pre-bias, one of V's shape and dtype is the
residual, and anything else is added as written (GroupNormAct.forward): each form computes what
the original code computed. Additions across modules (a block's output sum feeding the next
block's norm) are out of a module swap's sight: trt_gn.compile_passes rewrites those in the
torch.compile graph. Each decision is in the report (SwapEntry.pre_add, SwapEntry.pre_add_reason).
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

    def _norm(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 4:
            return super()._norm(x)
        if x.dim() < 2:
            raise ValueError(f"GroupNorm input must have at least 2 dims, got shape {tuple(x.shape)}")
        y = super()._norm(x.reshape(x.shape[0], x.shape[1], -1, 1))
        return y.reshape(x.shape)


@dataclasses.dataclass
class SwapEntry:
    name: str  # qualified module name
    action: str  # "silu", "none" or "left"
    reason: str
    pre_add: str = ""  # what moved into it with pre_add=True ("" none), e.g. "conv1.bias + temb"
    pre_add_reason: str = ""  # why (or why nothing moved); "" where pre_add was not asked for


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

    @property
    def num_pre_add(self) -> int:
        return sum(bool(e.pre_add) for e in self.entries)

    def summary(self) -> str:
        lines = [f"replaced {len(self.replaced)} GroupNorm(s) ({self.num_silu} with SiLU fused), left {len(self.left)}"]
        if any(e.pre_add_reason for e in self.entries):
            lines[0] += f"; {self.num_pre_add} absorb the additions in front of them"
        for e in self.entries:
            lines.append(f"  {e.action:5s} {e.name}: {e.reason}")
            if e.pre_add_reason:
                lines.append(f"        pre-add {e.pre_add or 'none'}: {e.pre_add_reason}")
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

    def statements(self):
        """(statement list, index, statement) for every statement of the forward, at any depth."""
        for block in ast.walk(self.func):
            for field in ("body", "orelse", "finalbody"):
                stmts = getattr(block, field, None)
                if isinstance(stmts, list):
                    for i, stmt in enumerate(stmts):
                        yield stmts, i, stmt

    def statement_of(self, call: ast.Call) -> tuple[list, int] | None:
        """(statement list, index) of `W = call` (one name assigned), else None."""
        for stmts, i, stmt in self.statements():
            if (isinstance(stmt, ast.Assign) and stmt.value is call and len(stmt.targets) == 1
                    and isinstance(stmt.targets[0], ast.Name)):
                return stmts, i
        return None

    def sites(self, attr: str) -> list[tuple]:
        """(covered call nodes, edit) for each SiLU applied right after self.attr(...)."""
        found = []
        for stmts, i, stmt in self.statements():
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


def _apply(analysis: _Analysis, edits: list[tuple], pre_adds: list[_PreAdd] = ()) -> str | None:
    """Remove the SiLU calls: replace a once-used SiLU module with nn.Identity, else bind a
    rewritten forward to the instance; move the pre-adds (always a rewritten forward). Returns an
    error string when that is not possible."""
    parent = analysis.parent
    module_edits = [e for e in edits if e[2] is not None and analysis.original_calls.get(e[2], 0) == 1]
    code_edits = [e for e in edits if e not in module_edits]
    if (code_edits or pre_adds) and not analysis.can_rewrite:
        return f"{type(parent).__name__}.forward cannot be rewritten (decorated, closure or super())"
    for _, _, attr in module_edits:
        setattr(parent, attr, nn.Identity())
    for pre_add in pre_adds:
        pre_add.apply()
    if not code_edits and not pre_adds:
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


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _one(node: ast.AST, parent: nn.Module) -> bool:
    """A divisor that is 1 at swap time: the constant 1 or a plain number attribute of the instance."""
    if isinstance(node, ast.Constant):
        value = node.value
    elif isinstance(node, ast.Attribute) and _dotted(node.value) == "self":
        value = getattr(parent, node.attr, None)
    else:
        return False
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == 1


def _addition(stmt: ast.stmt, var: str, parent: nn.Module):
    """(base, addend, guarded) for `var = A + B` (or `(A + B) / one`) with A, B names, or for
    `if T is not None: var = var + T`; base is None where var itself is the base. Else None."""
    guarded = False
    if (isinstance(stmt, ast.If) and not stmt.orelse and len(stmt.body) == 1 and isinstance(stmt.test, ast.Compare)
            and isinstance(stmt.test.left, ast.Name) and len(stmt.test.ops) == 1
            and isinstance(stmt.test.ops[0], ast.IsNot) and isinstance(stmt.test.comparators[0], ast.Constant)
            and stmt.test.comparators[0].value is None):
        guarded, tested, stmt = True, stmt.test.left.id, stmt.body[0]
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
            and stmt.targets[0].id == var):
        return None
    value = stmt.value
    if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Div) and not guarded and _one(value.right, parent):
        value = value.left
    if not (isinstance(value, ast.BinOp) and isinstance(value.op, ast.Add) and isinstance(value.left, ast.Name)
            and isinstance(value.right, ast.Name)):
        return None
    a, b = value.left.id, value.right.id
    if guarded:  # only `var = var + T` / `var = T + var` under `if T is not None`
        addend = b if a == var else a if b == var else None
        return (None, addend, True) if addend == tested and addend != var else None
    if a == var or b == var:
        return None if a == b else (None, b if a == var else a, False)
    return (a, b, False)


class _PreAdd:
    """The additions in front of one GroupNorm call `W = self.attr(V)`: what moves into it and why
    (moved, reason), and the edit that moves it (None where nothing does)."""

    @classmethod
    def nothing(cls, reason: str) -> "_PreAdd":
        pre_add = cls.__new__(cls)
        pre_add.moved, pre_add.reason, pre_add.edit = "", reason, None
        return pre_add

    def __init__(self, analysis: "_Analysis", attr: str):
        self.moved, self.reason, self.edit = "", "", None
        parent = analysis.parent
        if not analysis.can_rewrite:
            self.reason = f"{type(parent).__name__}.forward cannot be rewritten (decorated, closure or super())"
            return
        calls = analysis.calls(attr)
        found = analysis.statement_of(calls[0]) if len(calls) == 1 else None
        if len(calls) != 1:
            self.reason = f"called {len(calls)} times in {type(parent).__name__}.forward"
            return
        call = calls[0]
        if found is None or len(call.args) != 1 or call.keywords or not isinstance(call.args[0], ast.Name):
            self.reason = f"not called as `W = self.{attr}(V)` in {type(parent).__name__}.forward"
            return
        stmts, j = found
        target, var = stmts[j].targets[0].id, call.args[0].id
        base, addends, removed = None, [], []
        touched: set[str] = set()  # names read or written between an addition and the call
        conv = None
        for k in range(j - 1, -1, -1):
            stmt = stmts[k]
            used = _names(stmt)
            if var not in used:
                touched |= used
                continue
            added = _addition(stmt, var, parent)
            if added is None or added[1] in touched or (added[0] is not None and added[0] in touched):
                conv = self._conv(stmt, var, parent)
                break
            base, addend, _ = added
            addends.insert(0, addend)
            removed.append(stmt)
            touched |= used - {var}
            if base is not None:
                break
        if isinstance(conv, str):
            self.reason, conv = conv, None
        elif conv is not None and not addends and target != var:
            self.reason, conv = f"the output of self.{conv[0]} is used after it", None
        if not addends and conv is None:
            self.reason = self.reason or "nothing is added to its input right before it"
            return
        write_sum = target != var
        self.moved = " + ".join(([f"{conv[0]}.bias"] if conv else []) + addends)
        parts = []
        if conv:
            parts.append(f"self.{conv[0]} runs without its bias, which becomes the pre-bias")
        if addends:
            parts.append(f"{', '.join(addends)} added to {base or 'its input'} (per channel: pre-bias; x's shape "
                         "and dtype: residual; else added as written)")
        if write_sum:
            parts.append(f"it returns the sum too ({var} is kept)")
        self.reason = f"{type(parent).__name__}.forward: " + "; ".join(parts)
        self.edit = (stmts[j], call, base or var, conv, addends, removed, stmts, write_sum, target, var)

    @staticmethod
    def _conv(stmt, var, parent):
        """(attr, statement) for `var = self.convX(arg)` of an nn.Conv2d with bias; a reason string for
        a convolution that cannot give up its bias; None for anything else."""
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
                and stmt.targets[0].id == var):
            return None
        attr = _self_attr_call(stmt.value)
        module = getattr(parent, attr, None) if attr else None
        if not isinstance(module, nn.Conv2d) or module.bias is None:
            return None
        if type(module) is not nn.Conv2d:
            return f"self.{attr} is a {type(module).__name__}, an nn.Conv2d with its own behaviour"
        if len(stmt.value.args) != 1 or stmt.value.keywords:
            return f"self.{attr} is not called with one positional argument"
        if module._forward_hooks or module._forward_pre_hooks:
            return f"self.{attr} has forward hooks, which a call without its bias would skip"
        return (attr, stmt)

    def apply(self) -> None:
        assign, call, x, conv, addends, removed, stmts, write_sum, target, var = self.edit
        for stmt in removed:
            stmts.remove(stmt)

        def self_attr(*names):
            node = ast.Name(id="self", ctx=ast.Load())
            for name in names:
                node = ast.Attribute(value=node, attr=name, ctx=ast.Load())
            return node

        call.args = [ast.Name(id=x, ctx=ast.Load())]
        if conv:
            attr, conv_stmt = conv
            # nn.Conv2d.forward is self._conv_forward(input, self.weight, self.bias)
            conv_stmt.value = ast.Call(func=self_attr(attr, "_conv_forward"),
                                       args=[conv_stmt.value.args[0], self_attr(attr, "weight"), ast.Constant(None)],
                                       keywords=[])
            call.keywords.append(ast.keyword(arg="pre_bias", value=self_attr(attr, "bias")))
        if addends:
            call.keywords.append(ast.keyword(arg="addends", value=ast.Tuple(
                elts=[ast.Name(id=a, ctx=ast.Load()) for a in addends], ctx=ast.Load())))
        if write_sum:
            call.keywords.append(ast.keyword(arg="write_sum", value=ast.Constant(True)))
            assign.targets = [ast.Tuple(elts=[ast.Name(id=target, ctx=ast.Store()), ast.Name(id=var, ctx=ast.Store())],
                                        ctx=ast.Store())]


def _make(gn: nn.GroupNorm, activation: str) -> GroupNormActND:
    factory = {}
    if gn.affine:
        factory = {"device": gn.weight.device, "dtype": gn.weight.dtype}
    module = GroupNormActND(gn.num_groups, gn.num_channels, gn.eps, gn.affine, activation, **factory)
    module.load_state_dict(gn.state_dict())
    module.train(gn.training)
    return module


def swap_group_norms(model: nn.Module, pre_add: bool = False) -> SwapReport:
    """Replace every nn.GroupNorm in `model` (in place) and report what was done and why.

    A rewritten forward is specialised to the instance's configuration at swap time (branches on
    plain attributes such as diffusers' ``time_embedding_norm`` or ``upsample is not None`` are
    resolved), so swap after configuring the model.

    pre_add=True also moves the additions right in front of each GroupNorm into it (see the module
    docstring); the swapped model then calls torch.ops.trt_gn.group_norm_act_add, which the ONNX
    export does not translate, so the export swaps without it."""
    report = SwapReport()
    owners: dict[int, list[tuple[str, nn.Module, str]]] = {}
    for parent_name, parent in model.named_modules(remove_duplicate=False):
        for attr, child in parent.named_children():
            if isinstance(child, nn.GroupNorm):
                owners.setdefault(id(child), []).append((parent_name, parent, attr))
    analyses: dict[int, _Analysis] = {}
    edits: dict[int, list] = {}
    pre_adds: dict[int, list[_PreAdd]] = {}
    decided = []
    for places in owners.values():
        parent_name, parent, attr = places[0]
        qual = f"{parent_name}.{attr}" if parent_name else attr
        gn = getattr(parent, attr)
        if type(gn) is not nn.GroupNorm:
            report.entries.append(SwapEntry(qual, "left", f"{type(gn).__name__} subclasses nn.GroupNorm with its own behaviour"))
            continue
        activation, reason, edit, moved = "none", "no SiLU directly follows it", None, None
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
                if pre_add:
                    moved = _PreAdd(analysis, attr)
        if pre_add and moved is None:
            if len(places) > 1:
                moved = _PreAdd.nothing("the module is shared by several parents")
            elif isinstance(parent, nn.Sequential):
                moved = _PreAdd.nothing("nn.Sequential containers are not searched for additions")
            else:
                moved = _PreAdd.nothing(f"not checked: {analyses[id(parent)].error}")
        decided.append((qual, parent, attr, gn, activation, reason, edit, moved))
    for qual, parent, attr, gn, activation, reason, edit, moved in decided:
        if edit:
            edits.setdefault(id(parent), []).extend(edit)
        if moved is not None and moved.edit is not None:
            pre_adds.setdefault(id(parent), []).append(moved)
            edits.setdefault(id(parent), [])
    failed: dict[int, str] = {}
    for pid, parent_edits in edits.items():
        error = _apply(analyses[pid], parent_edits, pre_adds.get(pid, []))
        if error:
            failed[pid] = error
    for qual, parent, attr, gn, activation, reason, edit, moved in decided:
        if edit and id(parent) in failed:
            activation, reason = "none", f"SiLU follows it, but {failed[id(parent)]}"
        entry = SwapEntry(qual, activation, reason)
        if moved is not None:
            entry.pre_add, entry.pre_add_reason = moved.moved, moved.reason
            if moved.edit is not None and id(parent) in failed:
                entry.pre_add, entry.pre_add_reason = "", f"{moved.moved} is added in front, but {failed[id(parent)]}"
        setattr(parent, attr, _make(gn, activation))
        report.entries.append(entry)
    return report
