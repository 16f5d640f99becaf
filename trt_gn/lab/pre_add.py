"""The pre-add against the separate pass it replaces, per shape and plan, on one GPU.

    python -m trt_gn.lab.pre_add [--shapes a,b] [--dtypes fp16] [--layouts nhwc,nchw]
        [--kinds bias,residual,bias+residual] [--replays 30] [--rounds 2] [--out pre_add.csv]

For each case four things are timed the benchmark's way (trt_gn.lab.bench: 20 launches in a CUDA
graph, median of the replays, random data, fastest of --rounds rounds), in one process:
  copy       a device copy of x
  plain      the plain kernel on x (trtgn_group_norm, no pre-add)
  fused      the kernel with the pre-add: s = x + pre_bias + residual, y = act(GN(s)), s written
             where a residual is added (its later users read it)
  separate   the pass it replaces, then the plain kernel on s: one elementwise kernel writing s
             (x + pre_bias, or x + residual, eager; x + pre_bias + residual compiled by Inductor
             into one kernel, as torch.compile would run it)

Kinds: bias (a convolution's bias, [C]), residual (a residual add, s written), bias+residual (both).
Tensor passes a launch moves, the floor each ratio is read against: plain 2 (read x, write y);
fused: bias 2, residual and bias+residual 4 (read x and the residual, write s and y); separate:
bias 4, the others 5. So a fused/separate ratio at the floor is 0.5 and 0.8.
The fused y is compared with the separate y (max abs difference, in the CSV and table).
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import EXIT_MISSING, Error
from .shapes import SHAPES_BY_NAME, select_shapes

PROG = "python -m trt_gn.lab.pre_add"
KINDS = ("bias", "residual", "bias+residual")
LAYOUTS = ("nhwc", "nchw")
DTYPES = ("fp16", "bf16", "fp32")
# tensor passes of one launch: (fused, separate), as the docstring derives them
PASSES = {"bias": (2, 4), "residual": (4, 5), "bias+residual": (4, 5)}


@dataclass
class Row:
    shape: str
    dtype: str
    layout: str
    kind: str
    plan: str  # the fused launch's plan (trt_gn.lab.bench.plan_summary), "with the pre-add" or not
    plain_plan: str
    copy_us: float
    plain_us: float
    fused_us: float
    separate_us: float
    add_us: float  # the separate elementwise pass alone
    max_abs_diff: float  # fused y against separate y

    @property
    def fused_vs_separate(self) -> float:
        return self.fused_us / self.separate_us

    @property
    def floor(self) -> float:
        fused, separate = PASSES[self.kind]
        return fused / separate


def _split(parser, option: str, text: str, allowed) -> list[str]:
    values = [v.strip() for v in text.split(",") if v.strip()]
    bad = [v for v in values if v not in allowed]
    if bad or not values:
        parser.error(f"{option}: {', '.join(bad) or 'none given'}: expected some of {', '.join(allowed)}")
    return list(dict.fromkeys(values))


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default="", help="comma-separated shape names (default: all of trt_gn.lab.shapes)")
    parser.add_argument("--dtypes", default="fp16", help=f"comma-separated, of {', '.join(DTYPES)} (default: fp16)")
    parser.add_argument("--layouts", default="nhwc", help="comma-separated, of nhwc, nchw (default: nhwc)")
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated, of {', '.join(KINDS)} (default: all)")
    parser.add_argument("--replays", type=int, default=30, help="graph replays a timing, >= 30 (default: 30)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds; each timing keeps its fastest (default: 2)")
    parser.add_argument("--out", type=Path, default=None, help="also write the rows to this CSV file")
    args = parser.parse_args(argv)
    args.shapes = _split(parser, "--shapes", args.shapes, SHAPES_BY_NAME) if args.shapes else []
    args.dtypes = _split(parser, "--dtypes", args.dtypes, DTYPES)
    args.layouts = _split(parser, "--layouts", args.layouts, LAYOUTS)
    args.kinds = _split(parser, "--kinds", args.kinds, KINDS)
    if args.replays < 30 or args.rounds < 1:
        parser.error("--replays must be >= 30 and --rounds >= 1")
    from ..fileio import output_file_problem

    problem = args.out is not None and output_file_problem(args.out, example="pre_add.csv")
    if problem:
        parser.error(f"--out {args.out}: {problem}")
    return args


def _add_into(a, c, r, out):
    out.copy_(a + c + r)


def time_case(shape, dtype: str, layout: str, kind: str, replays: int, rounds: int) -> Row:
    import torch

    from .. import abi
    from ..ops import DTYPE_BY_NAME, abi_params, affine_for_abi
    from .bench import kernel_launcher, plan_summary, time_per_launch_us

    g = torch.Generator(device="cuda").manual_seed(0)
    fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
    tdtype = DTYPE_BY_NAME[dtype]

    def tensor(*size):
        return torch.randn(*size, generator=g, device="cuda", dtype=torch.float32).to(tdtype)

    x = tensor(*shape.size).contiguous(memory_format=fmt)
    weight, bias = tensor(shape.c), tensor(shape.c)
    pre_bias = tensor(shape.c) if "bias" in kind else None
    residual = tensor(*shape.size).contiguous(memory_format=fmt) if "residual" in kind else None
    y_fused, s_fused = torch.empty_like(x), (torch.empty_like(x) if residual is not None else None)
    s_sep, y_sep, copy_out = torch.empty_like(x), torch.empty_like(x), torch.empty_like(x)
    w, b, *rest = affine_for_abi(x, weight, bias, pre_bias)
    pb = rest[0] if pre_bias is not None else None

    params = abi_params(x, y_fused, w, b, shape.groups, shape.eps, "silu", layout=layout, pre_bias=pb,
                        residual=residual, sum_out=s_fused)
    nbytes = abi.workspace_size(params)
    workspace = torch.empty(max(nbytes, 1), dtype=torch.uint8, device="cuda")

    def fused():
        abi.group_norm(params, workspace.data_ptr() if nbytes else None, nbytes, torch.cuda.current_stream().cuda_stream)

    bias_view = None if pre_bias is None else pre_bias.view(1, -1, 1, 1)
    if kind == "bias+residual":
        # one Inductor kernel, as torch.compile fuses the two adds (it stores into the mutated
        # input `out` from that kernel); checked to have compiled
        import torch._dynamo

        from ..compile_check import CheckedCompile

        torch._dynamo.reset()
        compiled_add = CheckedCompile(_add_into, f"{shape.name} add")
        compiled_add.first_call(x, bias_view, residual, s_sep)

    def add():
        if kind == "bias":
            torch.add(x, bias_view, out=s_sep)
        elif kind == "residual":
            torch.add(x, residual, out=s_sep)
        else:
            compiled_add(x, bias_view, residual, s_sep)

    plain_on_x = kernel_launcher(x, copy_out, w, b, shape, layout)
    plain_on_s = kernel_launcher(s_sep, y_sep, w, b, shape, layout)

    def separate():
        add()
        plain_on_s()

    variants = {"copy": lambda: copy_out.copy_(x), "plain": plain_on_x, "fused": fused, "separate": separate,
                "add": add}
    best = {name: float("inf") for name in variants}
    for _ in range(rounds):
        for name, fn in variants.items():
            best[name] = min(best[name], time_per_launch_us(fn, replays))
    if kind == "bias+residual":
        compiled_add.check_settled()
    fused()
    separate()
    torch.cuda.synchronize()
    diff = float((y_fused.float() - y_sep.float()).abs().max())
    return Row(shape.name, dtype, layout, kind, plan_summary(abi.describe_plan(params)), plain_on_x.plan,
               best["copy"], best["plain"], best["fused"], best["separate"], best["add"], diff)


def table(rows: list[Row]) -> str:
    lines = ["| shape | dtype | layout | kind | plan (fused) | copy us | plain (x copy) | fused (x copy) | "
             "separate (x copy) | add alone us | fused / separate | floor | max abs diff |",
             "|---|---|---|---|---|" + "---:|" * 8]
    for r in rows:
        lines.append(f"| {r.shape} | {r.dtype} | {r.layout} | {r.kind} | {r.plan} | {r.copy_us:.1f} | "
                     f"{r.plain_us:.1f} ({r.plain_us / r.copy_us:.2f}x) | {r.fused_us:.1f} ({r.fused_us / r.copy_us:.2f}x) | "
                     f"{r.separate_us:.1f} ({r.separate_us / r.copy_us:.2f}x) | {r.add_us:.1f} | "
                     f"{r.fused_vs_separate:.2f} | {r.floor:.2f} | {r.max_abs_diff:.2e} |")
    return "\n".join(lines)


def write_csv(rows: list[Row], path: Path) -> None:
    from ..fileio import write_text

    text = io.StringIO()
    fields = [*Row.__dataclass_fields__, "fused_vs_separate", "floor"]
    writer = csv.DictWriter(text, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({**asdict(r), "fused_vs_separate": r.fused_vs_separate, "floor": r.floor})
    write_text(path, text.getvalue())


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print(f"{PROG}: error: no CUDA device; this measurement needs a GPU", file=sys.stderr)
        return EXIT_MISSING
    from .. import abi

    try:
        abi.require_pre_add()
        rows = []
        cases = [(s, d, lay, k) for s in select_shapes(args.shapes) for d in args.dtypes for lay in args.layouts
                 for k in args.kinds]
        for i, (shape, dtype, layout, kind) in enumerate(cases, 1):
            print(f"[{i}/{len(cases)}] {shape.name} {dtype} {layout} {kind}", file=sys.stderr, flush=True)
            rows.append(time_case(shape, dtype, layout, kind, args.replays, args.rounds))
    except Error as e:
        print(f"{PROG}: error: {e.message}" + (f"\n  hint: {e.hint}" if e.hint else ""), file=sys.stderr)
        return e.exit_code
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}; us a launch, fastest of "
          f"{args.rounds} round(s), {args.replays} replays of 20 launches")
    print(table(rows))
    if args.out is not None:
        write_csv(rows, args.out)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
