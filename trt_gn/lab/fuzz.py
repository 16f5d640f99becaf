"""Random GroupNorm(+SiLU) cases over the whole accepted input space, on a CUDA GPU, each checked
against the float64 reference (trt_gn.reference) through the kernels library's raw C ABI:

    trt-gn fuzz --cases 10000 --seed 1          (or python -m trt_gn.lab.fuzz ...)
    trt-gn fuzz --case "2,459,97,125,17,bf16,nhwc,x,silu,1e-05,1,3,7"   # one case again

Half the cases add a pre-add in front of the normalisation (s = x + pre_bias + residual; see
PreAdd): pre_bias none, [C] or [N, C], in x's dtype or fp32 (also beside an affine of x's dtype:
pre_bias_float32); a residual or none; sum_out or none.
Every case records the plan it ran (trtgn_describe_plan), so the run proves which paths it
reached: the summary gives cases and failures per path, dtype and layout, and per path and pre-add
kind, and the run fails when a path ran on fewer than --min-per-path cases of a dtype and layout,
a path of abi.PRE_ADD_PATHS on fewer of a pre-add kind, or a kernel of COVERED_KERNELS (a path's
variant for part of its region) on fewer of a dtype in its layouts. Outputs (y, and sum_out) are
NaN-poisoned before each launch (an unwritten element fails), and NaN/Inf positions must match
exactly.
Exit codes: 0 all passed, 1 a case failed or a path was not covered, 2 bad arguments, 3 no GPU or
no kernels library.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from collections import Counter
from dataclasses import dataclass, replace

from .. import abi
from ..errors import EXIT_MISSING, Error

DTYPES = ("fp32", "fp16", "bf16")
LAYOUTS = ("nhwc", "nchw")
AFFINES = ("x", "fp32", "none")  # gamma/beta in x's dtype, in fp32, or absent
ACTIVATIONS = ("silu", "none")
EPSILONS = (0.0, 1e-6, 1e-5, 1e-3, 0.1)
PATHS = abi.PATHS  # the paths the summary counts: the ABI's table
# What each drawn case aims at: the size and channel counts that make a path likely. The plan the
# library picks is what counts; the aims only spread the cases over every path's region.
AIMS = ("clusters", "grid", "stream", "two-pass", "any")
MAX_C, MAX_N, MAX_HW = 4096, 64, 512
MAX_ELEMENTS = 1 << 26  # 256 MB of fp32; the reference needs about 10x that in float64
# The pre-add kinds a case may have (Case.pre without the bias dtype): "+"-joined tokens, bias "bc"
# ([C]) or "bnc" ([N, C]) with "32" appended for fp32, "r" a residual, "s" sum_out; "-" none.
PRE_ADD_KINDS = ("-", "r", "r+s", "bc", "bc+s", "bc+r", "bc+r+s", "bnc", "bnc+s", "bnc+r", "bnc+r+s")


@dataclass(frozen=True)
class PreAdd:
    """A case's pre-add, parsed from its spec token (see PRE_ADD_KINDS)."""

    bias: str = ""  # "", "c" or "nc"
    bias_fp32: bool = False
    residual: bool = False
    sum_out: bool = False

    @property
    def kind(self) -> str:
        """The token without the bias dtype: one of PRE_ADD_KINDS."""
        tokens = ([f"b{self.bias}"] if self.bias else []) + (["r"] if self.residual else []) + (["s"] if self.sum_out else [])
        return "+".join(tokens) or "-"

    def __bool__(self) -> bool:
        return bool(self.bias) or self.residual


def parse_pre_add(text: str) -> PreAdd:
    """The PreAdd of a spec token: "-", or "+"-joined "bc"/"bnc" (+"32"), "r", "s"."""
    if text == "-":
        return PreAdd()
    fields: dict = {}
    for token in text.split("+"):
        if token in ("bc", "bnc", "bc32", "bnc32") and "bias" not in fields:
            fields["bias"], fields["bias_fp32"] = token[1:].removesuffix("32"), token.endswith("32")
        elif token in ("r", "s") and token not in fields:
            fields[token] = True
        else:
            raise ValueError(f"pre-add {text!r}: {token!r} is not one of bc, bnc, bc32, bnc32, r, s (each once)")
    pre = PreAdd(fields.get("bias", ""), fields.get("bias_fp32", False), fields.get("r", False), fields.get("s", False))
    if pre.sum_out and not pre:
        raise ValueError(f"pre-add {text!r}: s (sum_out) needs a bias or r")
    return pre


@dataclass(frozen=True)
class Case:
    n: int
    c: int
    h: int
    w: int
    groups: int
    dtype: str
    layout: str
    affine: str
    activation: str
    eps: float
    scale: float
    offset: float
    seed: int
    special: str = "-"  # "-", "nan" or "inf": one such element at a random place
    pre: str = "-"  # the pre-add (parse_pre_add): "-" none, else e.g. "bnc32+r+s"

    def spec(self) -> str:
        """The one-line form --case takes (the pre-add last, where there is one)."""
        fields = (self.n, self.c, self.h, self.w, self.groups, self.dtype, self.layout, self.affine,
                  self.activation, repr(self.eps), repr(self.scale), repr(self.offset), self.seed, self.special)
        fields += (self.pre,) if self.pre != "-" else ()
        return ",".join(str(f) for f in fields)

    @property
    def pre_add(self) -> PreAdd:
        return parse_pre_add(self.pre)

    @property
    def elements(self) -> int:
        return self.n * self.c * self.h * self.w


def parse_case(text: str) -> Case:
    """A Case from Case.spec()'s form (the last fields, special and the pre-add, may be left out)."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) not in (13, 14, 15):
        raise ValueError(f"a case has 13 to 15 comma-separated fields (N,C,H,W,G,dtype,layout,affine,act,eps,"
                         f"scale,offset,seed[,special[,pre-add]]), got {len(parts)}")
    n, c, h, w, g = (int(p) for p in parts[:5])
    case = Case(n, c, h, w, g, parts[5], parts[6], parts[7], parts[8], float(parts[9]), float(parts[10]),
                float(parts[11]), int(parts[12]), parts[13] if len(parts) >= 14 else "-",
                parts[14] if len(parts) == 15 else "-")
    pre = parse_pre_add(case.pre)
    if pre.bias and case.affine == "fp32" and not pre.bias_fp32:
        raise ValueError(f"pre-add {case.pre!r}: beside an fp32 affine the bias is fp32: bc32/bnc32")
    for value, allowed, what in ((case.dtype, DTYPES, "dtype"), (case.layout, LAYOUTS, "layout"),
                                 (case.affine, AFFINES, "affine"), (case.activation, ACTIVATIONS, "activation"),
                                 (case.special, ("-", "nan", "inf"), "special")):
        if value not in allowed:
            raise ValueError(f"{what} {value!r} is not one of {allowed}")
    if min(n, c, h, w, g) <= 0 or c % g:
        raise ValueError(f"sizes must be > 0 and G must divide C: N={n} C={c} H={h} W={w} G={g}")
    return case


class RandomPick:
    """The drawing interface of draw_case over random.Random (the fuzz command)."""

    def __init__(self, rng: random.Random):
        self.rng = rng

    def integer(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def choice(self, options):
        return options[self.rng.randrange(len(options))]

    def unit(self) -> float:
        return self.rng.random()


def _log_int(pick, lo: int, hi: int) -> int:
    """An integer in [lo, hi], log-uniform (small sizes as likely per octave as large ones)."""
    if hi <= lo:
        return lo
    return min(hi, max(lo, int(math.exp(math.log(lo) + pick.unit() * (math.log(hi + 1) - math.log(lo))))))


def _divisors(c: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(c) + 1) if c % d == 0]
    return sorted(set(small + [c // d for d in small]))


def draw_case(pick, aim: str | None = None, max_elements: int = MAX_ELEMENTS, dtype: str | None = None,
              layout: str | None = None, pre_add: bool = True) -> Case:
    """One random case. `pick` draws integers, choices and unit floats (RandomPick, or the
    hypothesis adapter of the GPU tests), so the fuzz command and the property tests share one
    definition of the input space: any N <= 64, H, W <= 512, C <= 4096, G any divisor of C, every
    dtype, layout, affine kind, activation, eps (0 included), input scale and offset, and, in half
    the cases, a pre-add. pre_add=False draws no pre-add and nothing for it: the same cases as
    before there was one (to compare the plans of a library without it)."""
    # max_elements >= MAX_C: one pixel of any C fits.
    aim = aim or pick.choice(AIMS)
    dtype = dtype or pick.choice(DTYPES)
    layout = layout or pick.choice(LAYOUTS)
    # Channels: multiples of 8 fill 16-byte vectors in every dtype (the single-pass paths);
    # any other C takes two passes in NHWC, and NCHW then depends on H*W.
    if aim == "two-pass" and pick.unit() < 0.7:
        c = _log_int(pick, 1, MAX_C)
        while c % 8 == 0:
            c = _log_int(pick, 1, MAX_C)
    elif aim in ("clusters", "grid", "stream") or pick.unit() < 0.5:
        c = 8 * _log_int(pick, 1, (2048 if aim in ("grid", "stream") else MAX_C) // 8)
    else:
        c = _log_int(pick, 1, MAX_C)
    divisors = _divisors(c)
    grid_nchw = aim in ("grid", "stream") and layout == "nchw"
    if grid_nchw:  # the NCHW grids take one (image, group) a block or more: N * G <= the SMs
        divisors = [d for d in divisors if d <= 32] or [1]
    groups = pick.choice(divisors)
    # Elements: the single-pass paths by size (clusters to a few MB, the on-chip grid to what
    # the SMs' shared memory holds, streaming beyond), two passes at any size.
    lo, hi = {"clusters": (1, 1 << 20), "grid": (1 << 20, 3 << 22), "stream": (1 << 24, 1 << 26)}.get(aim, (1, 1 << 26))
    hi = min(hi, max_elements)
    lo = min(lo, hi)
    target = _log_int(pick, lo, hi)
    # N, then H, drawn from the values that still reach the target under the bounds on H and W.
    pixels = max(1, target // c)
    n_max = min(MAX_N, pixels, 4 if grid_nchw or aim == "grid" else MAX_N)
    n = _log_int(pick, min(n_max, -(-pixels // (MAX_HW * MAX_HW))), n_max)
    per_image = max(1, pixels // n)
    h_max = min(MAX_HW, per_image)
    h = _log_int(pick, min(h_max, -(-per_image // MAX_HW)), h_max)
    w = min(MAX_HW, max(1, per_image // h))
    if layout == "nchw" and aim != "two-pass" and pick.unit() < 0.8 and w >= 8:
        w -= w % 8  # H*W a multiple of the vector width: NCHW's single-pass paths
    assert n * c * h * w <= max_elements
    eps = pick.choice(EPSILONS)
    scale = 10.0 ** (pick.unit() * 4 - 2)  # 1e-2 .. 1e2
    offset_kind = pick.choice(("zero", "scaled", "absolute"))
    offset = 0.0 if offset_kind == "zero" else (pick.unit() * 200 - 100) * (scale if offset_kind == "scaled" else 1.0)
    special = pick.choice(("-",) * 30 + ("nan", "inf"))
    case = Case(n, c, h, w, groups, dtype, layout, pick.choice(AFFINES), pick.choice(ACTIVATIONS), eps,
                round(scale, 6), round(offset, 4), pick.integer(0, 2**31 - 1), special)
    if not pre_add:
        return case
    kind = pick.choice(PRE_ADD_KINDS[1:]) if pick.unit() < 0.5 else "-"
    # The bias: fp32 beside an fp32 affine (the ABI's affine_dtype is both's); else either, fp32
    # beside an affine of x's dtype being pre_bias_float32.
    fp32 = case.affine == "fp32" or pick.unit() < 0.5
    if kind.startswith("b") and fp32:
        head, _, rest = kind.partition("+")
        kind = "+".join([head + "32"] + ([rest] if rest else []))
    return replace(case, pre=kind)


# ------------------------------------------------------------------------------ running ----

def _torch_dtype(name: str):
    from ..ops import DTYPE_BY_NAME

    return DTYPE_BY_NAME[name]


def make_inputs(case: Case, device="cuda"):
    """x (in the case's layout), weight, bias, all from the case's seed."""
    import torch

    gen = torch.Generator(device=device).manual_seed(case.seed)
    dtype = _torch_dtype(case.dtype)
    x = torch.randn((case.n, case.c, case.h, case.w), device=device, generator=gen)
    x = (x * case.scale + case.offset).to(dtype)
    if case.special != "-":
        flat = int(torch.randint(0, x.numel(), (1,), device=device, generator=gen))
        x.view(-1)[flat] = float("nan") if case.special == "nan" else float("inf")
    x = x.contiguous(memory_format=torch.channels_last) if case.layout == "nhwc" else x.contiguous()
    weight = bias = None
    if case.affine != "none":
        wd = dtype if case.affine == "x" else torch.float32
        weight = (1 + 0.25 * torch.randn(case.c, device=device, generator=gen)).to(wd)
        bias = (0.5 * torch.randn(case.c, device=device, generator=gen)).to(wd)
    return x, weight, bias


def make_pre_add(case: Case, x, device="cuda"):
    """(pre_bias, residual) of the case's pre-add (None where absent), from the case's seed apart
    from make_inputs' draws: a bias of x's scale, a residual like x (scale and offset, x's layout)."""
    import torch

    pre = case.pre_add
    gen = torch.Generator(device=device).manual_seed(case.seed ^ 0x5EED)
    pre_bias = residual = None
    if pre.bias:
        shape = (case.c,) if pre.bias == "c" else (case.n, case.c)
        pre_bias = (torch.randn(shape, device=device, generator=gen) * case.scale).to(
            torch.float32 if pre.bias_fp32 else x.dtype)
    if pre.residual:
        r = torch.randn(x.shape, device=device, generator=gen) * case.scale + case.offset
        residual = r.to(x.dtype).contiguous(memory_format=torch.channels_last if case.layout == "nhwc"
                                            else torch.contiguous_format)
    return pre_bias, residual


def _bias_float32(case: Case) -> bool:
    """Whether the case's bias is float32 beside gamma/beta of x's 16-bit dtype (pre_bias_float32)."""
    return case.pre_add.bias_fp32 and case.affine == "x" and case.dtype != "fp32"


def set_pre_add(params, case: Case, pre_bias, residual, sum_out) -> None:
    """Fill the pre-add fields of `params` (pointers of the tensors, None where absent); checks
    first that the library reads them (abi.require_pre_add)."""
    from ..ops import ABI_DTYPE

    if pre_bias is None and residual is None:
        return
    abi.require_pre_add()
    if pre_bias is not None and _bias_float32(case):
        abi.require_pre_bias_float32()
        params.pre_bias_float32 = 1
    elif pre_bias is not None:  # affine_dtype is the bias's too (parse_case keeps them one)
        params.affine_dtype = ABI_DTYPE[pre_bias.dtype]
    params.pre_bias = pre_bias.data_ptr() if pre_bias is not None else None
    params.pre_bias_n_stride = case.c if pre_bias is not None and pre_bias.dim() == 2 else 0
    params.residual = residual.data_ptr() if residual is not None else None
    params.sum_out = sum_out.data_ptr() if sum_out is not None else None


def plan_of(case: Case) -> dict:
    """The plan a case runs, from trtgn_describe_plan on the current device, without buffers: the
    data pointers are stand-ins with the alignment of fresh torch allocations (nothing is read)."""
    from ..ops import ABI_DTYPE

    dtype = _torch_dtype(case.dtype)
    affine = {"x": dtype, "fp32": _torch_dtype("fp32"), "none": dtype}[case.affine]
    fake = 1 << 30  # 512-byte aligned, like the caching allocator's blocks
    params = abi.Params(
        x=fake, y=fake * 2, n=case.n, c=case.c, h=case.h, w=case.w, num_groups=case.groups, channel_stride=case.c,
        layout=abi.Layout.NHWC if case.layout == "nhwc" else abi.Layout.NCHW, dtype=ABI_DTYPE[dtype],
        activation=abi.ACTIVATION_BY_NAME[case.activation], epsilon=case.eps,
        gamma=fake * 3 if case.affine != "none" else None, beta=fake * 4 if case.affine != "none" else None,
        affine_dtype=ABI_DTYPE[affine])
    pre = case.pre_add
    if pre:
        abi.require_pre_add()
        params.pre_bias = fake * 5 if pre.bias else None
        params.pre_bias_n_stride = case.c if pre.bias == "nc" else 0
        params.residual = fake * 6 if pre.residual else None
        params.sum_out = fake * 7 if pre.sum_out else None
        if pre.bias and _bias_float32(case):
            abi.require_pre_bias_float32()
            params.pre_bias_float32 = 1
        elif pre.bias:
            params.affine_dtype = ABI_DTYPE[_torch_dtype("fp32") if pre.bias_fp32 else dtype]
    return abi.describe_plan(params)


def run_case(case: Case) -> tuple[dict, str | None]:
    """Launch one case through the raw ABI into a NaN-poisoned output and check it.

    Returns (plan, None) when the output matches the reference, (plan, message) otherwise.
    """
    import torch

    from ..ops import abi_params
    from ..reference import assert_close, group_norm_act_reference, sum_reference

    x, weight, bias = make_inputs(case)
    pre_bias, residual = make_pre_add(case, x)
    y = torch.empty_like(x).fill_(float("nan"))
    sum_out = torch.empty_like(x).fill_(float("nan")) if case.pre_add.sum_out else None
    params = abi_params(x, y, weight, bias, case.groups, case.eps, case.activation, layout=case.layout)
    set_pre_add(params, case, pre_bias, residual, sum_out)
    plan = abi.describe_plan(params)
    nbytes = abi.workspace_size(params)
    # Garbage in the workspace: its content on entry must not matter.
    workspace = torch.randint(0, 256, (max(nbytes, 1),), dtype=torch.uint8, device=x.device)
    abi.group_norm(params, workspace.data_ptr() if nbytes else None, nbytes, torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    ref = group_norm_act_reference(x, weight, bias, case.groups, case.eps, case.activation,
                                   pre_bias=pre_bias, residual=residual)
    try:
        assert_close(y, ref, x.dtype)
        if sum_out is not None:
            assert_close(sum_out, sum_reference(x, pre_bias, residual), x.dtype, what="sum_out")
    except AssertionError as exc:
        return plan, str(exc)
    finally:
        del ref
    return plan, None


def coverage_gaps(counts: Counter, minimum: int) -> list[str]:
    """'path dtype layout: k' for every path x dtype x layout that ran fewer than `minimum` cases."""
    return [f"{path} {dtype} {layout}: {counts[(path, dtype, layout)]}"
            for path in PATHS for dtype in DTYPES for layout in LAYOUTS
            if counts[(path, dtype, layout)] < minimum]


# Kernels that run part of a path's region, each with the layouts it takes: the summary counts
# them per dtype and layout too, and the run fails where one ran fewer than --min-per-path cases.
COVERED_KERNELS = {"gnRollingNCHW": ("nchw",)}


def kernel_gaps(counts: Counter, minimum: int) -> list[str]:
    """'kernel dtype layout: k' for every kernel of COVERED_KERNELS x dtype x its layouts that ran
    fewer than `minimum` cases; counts are keyed (kernel, dtype, layout)."""
    return [f"{kernel} {dtype} {layout}: {counts[(kernel, dtype, layout)]}"
            for kernel, layouts in COVERED_KERNELS.items() for dtype in DTYPES for layout in layouts
            if counts[(kernel, dtype, layout)] < minimum]


def pre_add_gaps(counts: Counter, minimum: int) -> list[str]:
    """'path pre-add: k' for every path of abi.PRE_ADD_PATHS x pre-add kind that ran fewer than
    `minimum` cases; counts are keyed (path, kind)."""
    return [f"{path} {kind}: {counts[(path, kind)]}" for path in abi.PRE_ADD_PATHS for kind in PRE_ADD_KINDS
            if counts[(path, kind)] < minimum]


def _pre_add_table(ran: Counter, failed: Counter) -> str:
    lines = ["| pre-add | " + " | ".join(PATHS) + " |", "|---|" + "---|" * len(PATHS)]
    for kind in PRE_ADD_KINDS:
        lines.append(f"| {kind} | " + " | ".join(f"{ran[(p, kind)]} ({failed[(p, kind)]} failed)" for p in PATHS) + " |")
    return "\n".join(lines)


def _table(ran: Counter, failed: Counter) -> str:
    lines = ["| path | dtype | nhwc ran | nhwc failed | nchw ran | nchw failed |", "|---|---|---|---|---|---|"]
    for path in PATHS:
        for dtype in DTYPES:
            cells = []
            for layout in LAYOUTS:
                key = (path, dtype, layout)
                cells += [str(ran[key]), str(failed[key])]
            lines.append(f"| {path} | {dtype} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _write_plans(path: str, records) -> None:
    """case, plan, result a line (CSV), written whole or not at all."""
    import csv
    import io

    from ..fileio import write_text

    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(("case", "plan", "result"))
    writer.writerows(records)
    write_text(path, buf.getvalue())


def _plans_only(prog: str, cases: list[Case], path: str) -> int:
    """Every case's plan (plan_of: stand-in pointers, no kernel runs) to the CSV; the paths counted."""

    records, paths = [], Counter()
    for case in cases:
        try:
            plan = plan_of(case)
        except abi.TrtGnError as exc:
            plan = {"path": "error", "message": str(exc)}
        paths[plan.get("path", "?")] += 1
        records.append((case.spec(), " ".join(f"{k}={v}" for k, v in plan.items()), "planned"))
    _write_plans(path, records)
    print(f"{prog}: {len(cases)} plans written to {path}: "
          + ", ".join(f"{p} {n}" for p, n in sorted(paths.items())))
    return 1 if paths["error"] else 0


DESCRIPTION = ("Random GroupNorm(+SiLU) cases over the accepted input space, checked on a CUDA GPU "
               "against the float64 reference; the plan of each case proves which paths ran.")
EPILOG = ("examples: trt-gn fuzz --cases 10000 --seed 1;  "
          "trt-gn fuzz --case '2,459,97,125,17,bf16,nhwc,x,silu,1e-05,1.0,3.0,7'.  "
          "exit codes: 0 all passed; 1 a case failed or a path was not covered; 2 bad arguments; "
          "3 no CUDA GPU or no kernels library; 130 interrupted")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `trt-gn fuzz` and `python -m trt_gn.lab.fuzz` (no third-party import)."""
    parser.add_argument("--cases", type=int, default=10000, help="random cases to run (default: 10000)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the case generator (default: 0)")
    parser.add_argument("--case", action="append", default=[], metavar="SPEC",
                        help="run this case (as printed in a failure's reproduction) instead of random ones; repeatable")
    parser.add_argument("--min-per-path", type=int, default=None, metavar="K",
                        help="fail unless every path x dtype x layout, and every kernel of "
                             "COVERED_KERNELS x dtype x its layouts, ran at least K cases "
                             "(default: 5 from 5000 cases, else 0)")
    parser.add_argument("--max-elements", type=int, default=MAX_ELEMENTS,
                        help=f"largest tensor drawn, in elements (default: {MAX_ELEMENTS})")
    parser.add_argument("--show", type=int, default=10, help="failures printed in full (default: 10)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    parser.add_argument("--plans", metavar="CSV", default=None,
                        help="also write every case with the plan it ran and its result (to compare the plans "
                             "of two builds case by case)")
    parser.add_argument("--no-pre-add", action="store_true",
                        help="draw no pre-add (pre_bias, residual, sum_out): the cases of a seed as before the "
                             "pre-add, e.g. to compare plans with a library without one")
    parser.add_argument("--plans-only", action="store_true",
                        help="with --plans: describe every case's plan, run no kernel (compares two builds' "
                             "planners in seconds)")


def main(argv: list[str] | None = None) -> int:
    """`python -m trt_gn.lab.fuzz`: the same run as `trt-gn fuzz`, errors in the CLI's format."""
    from ..cli._errors import print_error

    parser = argparse.ArgumentParser(prog="python -m trt_gn.lab.fuzz", description=DESCRIPTION, epilog=EPILOG)
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args, parser.prog)
    except Error as exc:
        print_error(parser.prog, exc.message, exc.hint)
        return exc.exit_code


def run(args, prog: str) -> int:
    """Run the cases the options ask for; a bad option, no GPU or no library raises errors.Error."""
    if args.plans_only and not args.plans:
        raise Error("--plans-only needs --plans CSV")
    if args.cases < 0 or args.show < 0 or args.max_elements < MAX_C:
        raise Error(f"--cases and --show must be >= 0, --max-elements >= {MAX_C}")
    try:
        fixed = [parse_case(text) for text in args.case]
    except ValueError as exc:
        raise Error(f"--case: {exc}") from None
    if args.plans:  # written after the run: checked before it
        from ..fileio import output_file_problem

        problem = output_file_problem(args.plans, example="plans.csv")
        if problem:
            raise Error(f"--plans {args.plans}: {problem}", "give a new or writable CSV file path")

    import torch

    if not torch.cuda.is_available():
        raise Error("no CUDA device (torch.cuda.is_available() is False)", "run it on a machine with a CUDA GPU",
                    exit_code=EXIT_MISSING)
    abi.load()  # a missing or unloadable library raises abi.LibraryError, an errors.Error (exit 3)
    minimum = args.min_per_path if args.min_per_path is not None else (5 if not fixed and args.cases >= 5000 else 0)

    rng = random.Random(args.seed)
    cases = fixed or [draw_case(RandomPick(rng), max_elements=args.max_elements, pre_add=not args.no_pre_add)
                      for _ in range(args.cases)]
    print(f"{prog}: {len(cases)} cases on {torch.cuda.get_device_name()}, kernels {abi.library_path()}"
          + ("" if fixed else f", seed {args.seed}"), flush=True)
    if args.plans_only:
        return _plans_only(prog, cases, args.plans)
    ran, failed, kernels, covered = Counter(), Counter(), Counter(), Counter()
    pre_ran, pre_failed = Counter(), Counter()  # (path, pre-add kind)
    records = []
    failures: list[tuple[Case, dict, str]] = []
    t0 = last = time.monotonic()
    for i, case in enumerate(cases):
        try:
            plan, message = run_case(case)
        except abi.TrtGnError as exc:
            plan, message = {"path": "error"}, str(exc)
        records.append((case.spec(), " ".join(f"{k}={v}" for k, v in plan.items()), "ok" if message is None else "FAIL"))
        key = (plan.get("path", "?"), case.dtype, case.layout)
        pre_key = (plan.get("path", "?"), case.pre_add.kind)
        ran[key] += 1
        pre_ran[pre_key] += 1
        kernels[f"{plan.get('kernel', '?')}/vec{plan.get('vec', '?')}"] += 1
        covered[(plan.get("kernel", "?"), case.dtype, case.layout)] += 1
        if message is not None:
            failed[key] += 1
            pre_failed[pre_key] += 1
            failures.append((case, plan, message))
            if len(failures) <= args.show:
                print(f"FAIL {case.spec()} [{plan.get('path')} {plan.get('kernel', '')}]: {message}", flush=True)
        now = time.monotonic()
        if not args.quiet and now - last > 10:
            print(f"  {i + 1}/{len(cases)} cases, {len(failures)} failed, {now - t0:.0f} s", flush=True)
            last = now
    elapsed = time.monotonic() - t0
    print(_table(ran, failed))
    print(_pre_add_table(pre_ran, pre_failed))
    print("kernels: " + ", ".join(f"{k} {v}" for k, v in sorted(kernels.items())))
    print("covered kernels: " + "; ".join(
        f"{k} " + ", ".join(f"{d} {l} {covered[(k, d, l)]}" for d in DTYPES for l in ls) for k, ls in COVERED_KERNELS.items()))
    if failures:
        print("first failures (reproduce with trt-gn fuzz --case '<spec>'):")
        for case, plan, message in failures[: args.show]:
            print(f"  {case.spec()}  [{plan.get('path')}]  {message.splitlines()[0][:200]}")
    gaps = coverage_gaps(ran, minimum) + kernel_gaps(covered, minimum) if minimum else []
    if minimum and not args.no_pre_add:
        gaps += pre_add_gaps(pre_ran, minimum)
    if gaps:
        print(f"paths that ran fewer than {minimum} cases: " + "; ".join(gaps))
    if args.plans:
        _write_plans(args.plans, records)
    print(f"{len(cases) - len(failures)} passed, {len(failures)} failed in {elapsed:.1f} s")
    return 1 if failures or gaps else 0


if __name__ == "__main__":
    sys.exit(main())
