"""Benchmark: the trt_gn kernels vs torch eager GroupNorm+SiLU vs a device copy of the same tensor.

Each variant is timed as LAUNCHES launches captured once in a CUDA graph; the graph is replayed
(after warm-up) at least 30 times with CUDA events around each replay; the time per launch is the
median replay time / LAUNCHES. Data is random (torch.randn). Small shapes stay in L2 between
launches for the copy and the kernels alike, so their ratios compare like with like but are not
DRAM-bound numbers.

Each (shape, dtype) is timed in ROUNDS rounds, every variant once a round in turn, and each variant
keeps its fastest round: a GPU disturbed for a second or two (clocks, a neighbour) then slows one
round, not the reported time or the copy every ratio divides by. Where a variant's rounds differ by
more than UNSTEADY, the table marks it.
"""

from __future__ import annotations

import csv
import io
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from . import fileio
from .errors import EXIT_MISSING, Error
from .shapes import Shape, select_shapes

LAUNCHES = 20
MIN_REPLAYS = 30
WARMUP_REPLAYS = 5
ROUNDS = 2
UNSTEADY = 0.10  # rounds further apart than this (relative) are marked in the table
DTYPES = ("fp16", "bf16")
LAYOUTS = ("nhwc", "nchw")
L2_NOTE = (
    "Note: 20 launches back to back on the same tensors: shapes that fit in L2 (tens of MB on H100/H200) "
    "stay there for the copy and the kernels alike."
)

# implementation names, in table order
COPY = "copy"
OURS = {"nhwc": "trt_gn NHWC", "nchw": "trt_gn NCHW"}
TORCH = {"nchw": "torch NCHW", "nhwc": "torch channels_last"}


class BenchError(Error, RuntimeError):
    """The benchmark cannot run here (no GPU, no kernels library: exit_code EXIT_MISSING; bad option)."""


@dataclass
class Row:
    shape: str
    n: int
    c: int
    h: int
    w: int
    groups: int
    eps: float
    dtype: str
    impl: str
    us_per_launch: float
    ratio_to_copy: float
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    round_spread: float | None = None  # slowest round / fastest round - 1


def _torch_dtype(name: str):
    import torch

    table = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
    if name not in table:
        raise BenchError(f"unknown dtype {name!r}; expected one of {', '.join(table)}")
    return table[name]


def time_per_launch_us(fn, replays: int, launches: int = LAUNCHES, warmup: int = WARMUP_REPLAYS) -> float:
    """Median over `replays` graph replays of (replay time / launches), in microseconds."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up outside the graph (lazy init, allocator)
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(launches):
            fn()
    for _ in range(warmup):
        graph.replay()
    torch.cuda.synchronize()
    times_ms = []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(replays):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times_ms.append(start.elapsed_time(end))
    del graph
    return statistics.median(times_ms) * 1000.0 / launches


def _kernel_launcher(x, y, weight, bias, shape: Shape, layout: str):
    """A closure enqueuing one trtgn_group_norm() with fixed buffers (no allocation per launch)."""
    import torch

    from . import _lib
    from .ops import ABI_DTYPE

    params = _lib.Params(
        x=x.data_ptr(), y=y.data_ptr(), n=shape.n, c=shape.c, h=shape.h, w=shape.w,
        num_groups=shape.groups, channel_stride=shape.c,
        layout=_lib.Layout.NHWC if layout == "nhwc" else _lib.Layout.NCHW,
        dtype=ABI_DTYPE[x.dtype], activation=_lib.Activation.SILU, epsilon=shape.eps,
        gamma=weight.data_ptr(), beta=bias.data_ptr(), affine_dtype=ABI_DTYPE[weight.dtype],
    )
    nbytes = _lib.workspace_size(params)
    workspace = torch.empty(max(nbytes, 1), dtype=torch.uint8, device=x.device)

    def launch():
        _lib.group_norm(params, workspace.data_ptr() if nbytes else None, nbytes,
                        torch.cuda.current_stream().cuda_stream)

    launch.keep_alive = (params, workspace)  # the buffers live as long as the closure
    return launch


def fastest_of_rounds(variants: dict, rounds: int, replays: int, timer=None,
                      timed=None) -> dict[str, tuple[float, float]]:
    """Time every variant once a round, in turn, for `rounds` rounds.

    Returns {name: (fastest round's us per launch, slowest / fastest - 1)}. `timer(fn, replays)`
    defaults to time_per_launch_us; `timed(name)`, if given, is called after each timing.
    """
    timer = timer or time_per_launch_us
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, fn in variants.items():
            times[name].append(timer(fn, replays))
            if timed is not None:
                timed(name)
    return {name: (min(ts), max(ts) / min(ts) - 1.0) for name, ts in times.items()}


def run_bench(shapes: list[Shape], dtypes, layouts, replays: int, progress=None, rounds: int = ROUNDS) -> list[Row]:
    import torch
    import torch.nn.functional as F

    from . import _lib
    from .reference import group_norm_act_reference, max_errors

    # The arguments first: a bad option is reported the same with or without a GPU.
    if replays < MIN_REPLAYS:
        raise BenchError(f"--replays must be >= {MIN_REPLAYS}, got {replays}")
    if rounds < 1:
        raise BenchError(f"--rounds must be >= 1, got {rounds}")
    for layout in layouts:
        if layout not in LAYOUTS:
            raise BenchError(f"unknown layout {layout!r}; expected one of {', '.join(LAYOUTS)}")
    if not torch.cuda.is_available():
        raise BenchError("no CUDA device: the benchmark needs a GPU (torch.cuda.is_available() is False)",
                         exit_code=EXIT_MISSING)
    try:
        _lib.load()
    except (FileNotFoundError, OSError, ImportError) as e:
        raise BenchError(str(e).splitlines()[0], exit_code=EXIT_MISSING) from e
    torch_dtypes = [(name, _torch_dtype(name)) for name in dtypes]

    rows: list[Row] = []
    task = None
    if progress is not None:
        task = progress.add_task("benchmark", total=len(shapes) * len(torch_dtypes) * rounds * (1 + 2 * len(layouts)))
    gen = torch.Generator(device="cuda").manual_seed(0)
    for shape in shapes:
        for dtype_name, dtype in torch_dtypes:
            x = torch.randn(shape.size, device="cuda", dtype=dtype, generator=gen)
            weight = (1 + 0.1 * torch.randn(shape.c, device="cuda", generator=gen)).to(dtype)
            bias = (0.1 * torch.randn(shape.c, device="cuda", generator=gen)).to(dtype)
            meta = dict(shape=shape.name, n=shape.n, c=shape.c, h=shape.h, w=shape.w,
                        groups=shape.groups, eps=shape.eps, dtype=dtype_name)

            # Every variant with its buffers, in table order; all live for the rounds.
            y_copy = torch.empty_like(x)
            variants = {COPY: lambda: y_copy.copy_(x)}
            outputs = {}
            inputs = {layout: x.contiguous(memory_format=torch.channels_last) if layout == "nhwc" else x
                      for layout in layouts}
            for layout in layouts:
                outputs[layout] = torch.empty_like(inputs[layout])
                variants[OURS[layout]] = _kernel_launcher(inputs[layout], outputs[layout], weight, bias, shape, layout)
            for layout in ("nchw", "nhwc"):
                if layout in layouts:
                    xl = inputs[layout]
                    variants[TORCH[layout]] = (
                        lambda xl=xl: F.silu(F.group_norm(xl, shape.groups, weight, bias, shape.eps)))

            def step(name):
                if progress is not None:
                    progress.update(task, advance=1, description=f"{shape.name} {dtype_name} {name}")

            timed = fastest_of_rounds(variants, rounds, replays, timed=step)
            copy_us = timed[COPY][0]
            ref = group_norm_act_reference(x, weight, bias, shape.groups, shape.eps, "silu")
            for name, (us, spread) in timed.items():
                errs = {}
                for layout in layouts:
                    if name == OURS[layout]:
                        abs_err, rel_err = max_errors(outputs[layout], ref)
                        errs = dict(max_abs_err=abs_err, max_rel_err=rel_err)
                rows.append(Row(**meta, impl=name, us_per_launch=us, ratio_to_copy=us / copy_us,
                                round_spread=spread if rounds > 1 else None, **errs))
            del x, y_copy, variants, outputs, inputs, ref
            torch.cuda.empty_cache()
    return rows


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fileio.write_bytes(path, data)


def write_csv(rows: list[Row], path: Path) -> None:
    buf = io.StringIO()
    fields = list(Row.__dataclass_fields__)
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if v is None else v) for k, v in asdict(row).items()})
    _atomic_write_bytes(path, buf.getvalue().encode())


def impl_order(rows: list[Row]) -> list[str]:
    order = [COPY, OURS["nhwc"], OURS["nchw"], TORCH["nchw"], TORCH["nhwc"]]
    present = {r.impl for r in rows}
    return [i for i in order if i in present]


def write_plot(rows: list[Row], path: Path) -> None:
    """Grouped bars of the time relative to a copy, one panel per dtype (needs matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise BenchError("the PNG plot needs matplotlib: pip install matplotlib (or trt_gn[test])") from e
    dtypes = list(dict.fromkeys(r.dtype for r in rows))
    shapes = list(dict.fromkeys(r.shape for r in rows))
    impls = [i for i in impl_order(rows) if i != COPY]
    fig, axes = plt.subplots(len(dtypes), 1, figsize=(max(8, 1.1 * len(shapes) + 2), 4.2 * len(dtypes)), squeeze=False)
    width = 0.8 / max(1, len(impls))
    for ax, dtype in zip(axes[:, 0], dtypes):
        for k, impl in enumerate(impls):
            vals = {r.shape: r.ratio_to_copy for r in rows if r.dtype == dtype and r.impl == impl}
            xs = [i + (k - (len(impls) - 1) / 2) * width for i in range(len(shapes))]
            ax.bar(xs, [vals.get(s, float("nan")) for s in shapes], width, label=impl)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.axhline(2.0, color="gray", linestyle="--", linewidth=0.8)
        ax.set_yscale("log")
        ax.set_ylabel("time / copy time")
        ax.set_title(f"GroupNorm+SiLU, {dtype}, {LAUNCHES} launches per CUDA graph (lower is better)")
        ax.set_xticks(range(len(shapes)))
        ax.set_xticklabels(shapes, rotation=30, ha="right", fontsize=8)
        ax.legend(fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    _atomic_write_bytes(path, buf.getvalue())


def render_table(rows: list[Row]):
    """A rich Table: one line per (shape, dtype), microseconds and ratio to copy per implementation."""
    from rich.table import Table

    impls = impl_order(rows)
    table = Table(title=f"GroupNorm+SiLU: us per launch (x copy time); median of graph replays / {LAUNCHES}, "
                  "fastest round")
    table.add_column("shape", no_wrap=True)
    table.add_column("dtype", no_wrap=True)
    for impl in impls:
        table.add_column(impl, justify="right", no_wrap=True)
    table.add_column("max abs / rel err", justify="right", no_wrap=True)
    keys = list(dict.fromkeys((r.shape, r.dtype) for r in rows))
    for shape, dtype in keys:
        by_impl = {r.impl: r for r in rows if r.shape == shape and r.dtype == dtype}
        cells = []
        for impl in impls:
            r = by_impl.get(impl)
            mark = "*" if r is not None and r.round_spread is not None and r.round_spread > UNSTEADY else ""
            if r is None:
                cells.append("-")
            elif impl == COPY:
                cells.append(f"{r.us_per_launch:.1f}{mark}")
            else:
                cells.append(f"{r.us_per_launch:.1f}{mark} ({r.ratio_to_copy:.2f}x)")
        errs = [r for r in by_impl.values() if r.max_abs_err is not None]
        err = "-"
        if errs:
            err = f"{max(r.max_abs_err for r in errs):.2e} / {max(r.max_rel_err for r in errs):.2e}"
        table.add_row(shape, dtype, *cells, err)
    return table


def unsteady_note(rows: list[Row]) -> str | None:
    """The footnote for cells marked '*' (rounds further apart than UNSTEADY), or None."""
    marked = [r for r in rows if r.round_spread is not None and r.round_spread > UNSTEADY]
    if not marked:
        return None
    worst = max(marked, key=lambda r: r.round_spread)
    return (f"* {len(marked)} time(s) differed by more than {UNSTEADY:.0%} between rounds (worst: {worst.shape} "
            f"{worst.dtype} {worst.impl}, {worst.round_spread:.0%}): the GPU was disturbed during one; the faster "
            "round is shown. Run again if the marked ratios matter.")


def library_lines(capability: tuple[int, int], ptx_arch: int, path: str) -> list[str]:
    """The kernels library a run uses and the code it runs on this GPU, and a warning where a GPU of
    compute capability 9.0 or later runs a build without a Hopper architecture (its times are then not
    those of a build for the GPU)."""
    major, minor = capability
    lines = [f"kernels: {path}, running code built for compute_{ptx_arch}"]
    if major >= 9 and ptx_arch < 90:
        lines.append(
            f"warning: this GPU has compute capability {major}.{minor} but the kernels library was built without "
            "sm_90 or later, so its cluster and on-chip paths are off and these times are not those of a build "
            "for this GPU: rebuild with CMAKE_CUDA_ARCHITECTURES including 90")
    return lines


def main(shape_names=None, dtypes=DTYPES, layouts=LAYOUTS, replays=MIN_REPLAYS, out_dir="bench-out",
         rounds=ROUNDS) -> list[Row]:
    """Run, print the table and write <out_dir>/bench.csv and <out_dir>/bench.png."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    # Logs and pipes get the whole table (rich would fold it into 80 columns).
    console = Console() if sys.stdout.isatty() else Console(width=200)
    try:
        shapes = select_shapes(shape_names)
    except ValueError as e:
        raise BenchError(str(e)) from e
    for d in dtypes:
        _torch_dtype(d)
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), console=console, transient=True) as progress:
        rows = run_bench(shapes, list(dtypes), list(layouts), replays, progress, rounds)
    import torch

    from . import _lib

    console.print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    for line in library_lines(torch.cuda.get_device_capability(), _lib.kernels_ptx_arch(), _lib.library_path()):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    console.print(render_table(rows))
    note = unsteady_note(rows)
    if note:
        console.print(note)
    console.print(L2_NOTE)
    out = Path(out_dir)
    write_csv(rows, out / "bench.csv")
    console.print(f"wrote {out / 'bench.csv'}")
    try:
        write_plot(rows, out / "bench.png")
        console.print(f"wrote {out / 'bench.png'}")
    except BenchError as e:
        console.print(f"no plot: {e}")
    return rows
