"""Benchmark: the trt_gn kernels vs PyTorch GroupNorm+SiLU (eager and torch.compile with Inductor, NCHW
and channels_last) vs a device copy of the same tensor.

Each variant is timed as LAUNCHES launches captured once in a CUDA graph; the graph is replayed
(after warm-up) at least 30 times with CUDA events around each replay; the time per launch is the
median replay time / LAUNCHES. Data is random (torch.randn). Small shapes stay in L2 between
launches for the copy and the kernels alike, so their ratios compare like with like but are not
DRAM-bound numbers.

Each (shape, dtype) is timed in ROUNDS rounds, every variant once a round in turn, and each variant
keeps its fastest round: a GPU disturbed for a second or two (clocks, a neighbour) then slows one
round, not the reported time or the copy every ratio divides by. Where a variant's rounds differ by
more than UNSTEADY, the table marks it.

The compiled variants are compiled once per (shape, dtype, layout), before any timing, with dynamo's
recompile limits raised; each is checked to have compiled one graph and to compile nothing more
while it is timed (trt_gn.compile_check), so no cell reports eager PyTorch under a compiled name.
The best peer of a (shape, dtype) is the fastest PyTorch variant in the table.
"""

from __future__ import annotations

import csv
import io
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from .. import abi, fileio
from ..errors import EXIT_FAILED, EXIT_MISSING, Error
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
COMPILED = {"nchw": "torch.compile NCHW", "nhwc": "torch.compile channels_last"}
PEERS = (*TORCH.values(), *COMPILED.values())  # the PyTorch variants, among which the best peer is


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
    best_peer: str | None = None  # trt_gn rows: the fastest PyTorch variant of this (shape, dtype)
    speedup_vs_best_peer: float | None = None  # trt_gn rows: best peer's time / this time
    plan: str | None = None  # trt_gn rows: the path the library ran (plan_summary)


def _torch_dtype(name: str):
    from ..ops import DTYPE_BY_NAME as table

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


def kernel_launcher(x, y, weight, bias, shape: Shape, layout: str):
    """A closure enqueuing one trtgn_group_norm() with fixed buffers (no allocation per launch)."""
    import torch

    from ..ops import abi_params

    params = abi_params(x, y, weight, bias, shape.groups, shape.eps, "silu", layout=layout)
    nbytes = abi.workspace_size(params)
    workspace = torch.empty(max(nbytes, 1), dtype=torch.uint8, device=x.device)

    def launch():
        abi.group_norm(params, workspace.data_ptr() if nbytes else None, nbytes,
                        torch.cuda.current_stream().cuda_stream)

    launch.keep_alive = (params, workspace)  # the buffers live as long as the closure
    # Libraries before ABI 3 (trt_gn.lab.ab times earlier revisions) cannot say.
    launch.plan = plan_summary(abi.describe_plan(params)) if abi.abi_version() >= 3 else None
    return launch


# The short form of each path's plan, one a path of the ABI's table (trt_gn.abi.PATHS).
_PLAN_SUMMARIES = {
    "clusters": lambda p: f"clusters of {p['cluster']}, {p['vpt']} vec/thread"
                          + (" x2 blocks" if p.get("split", 1) > 1 else ""),
    "on-chip-grid": lambda p: "on-chip grid" + (f", {p['slices']} slices" if p.get("slices", 1) > 1 else ""),
    "streaming-grid": lambda p: "rolling grid" if p.get("kernel") == "gnRollingNCHW" else "streaming grid",
    "two-pass": lambda p: f"two passes, vec {p['vec']}",
}
assert tuple(_PLAN_SUMMARIES) == abi.PATHS, "bench's plan summaries and the ABI's paths disagree"


def plan_summary(plan: dict) -> str:
    """A short form of trt_gn.abi.describe_plan()'s plan for the table: the path and what tells
    its launches apart (cluster size and vectors a thread; channel slices; vector width)."""
    path = plan.get("path", "?")
    return _PLAN_SUMMARIES[path](plan) if path in _PLAN_SUMMARIES else path


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


def torch_group_norm_act(x, weight, bias, groups: int, eps: float):
    """PyTorch's GroupNorm+SiLU, the peer timed eager and compiled."""
    import torch.nn.functional as F

    return F.silu(F.group_norm(x, groups, weight, bias, eps))


def compile_group_norm_act(x, weight, bias, groups: int, eps: float, name: str, backend: str = "inductor"):
    """torch_group_norm_act compiled for these arguments (static shapes, one graph), checked to have
    compiled (not run eager): a CheckedCompile whose first call has been made. Call it within
    compile_check.raised_recompile_limits()."""
    from ..compile_check import CheckedCompile

    compiled = CheckedCompile(torch_group_norm_act, name, backend=backend, fullgraph=True, dynamic=False)
    compiled.first_call(x, weight, bias, groups, eps)
    return compiled


def best_peer(by_impl: dict) -> tuple[str, float] | None:
    """(name, us per launch) of the fastest PyTorch variant among {impl: Row}, or None without one."""
    peers = [(r.us_per_launch, impl) for impl, r in by_impl.items() if impl in PEERS]
    if not peers:
        return None
    us, impl = min(peers)
    return impl, us


def annotate_best_peer(rows: list[Row]) -> None:
    """Set best_peer and speedup_vs_best_peer on the trt_gn rows of every (shape, dtype)."""
    for key in dict.fromkeys((r.shape, r.dtype) for r in rows):
        by_impl = {r.impl: r for r in rows if (r.shape, r.dtype) == key}
        best = best_peer(by_impl)
        if best is None:
            continue
        for impl in OURS.values():
            if impl in by_impl:
                by_impl[impl].best_peer = best[0]
                by_impl[impl].speedup_vs_best_peer = best[1] / by_impl[impl].us_per_launch


def run_bench(shapes: list[Shape], dtypes, layouts, replays: int, progress=None, rounds: int = ROUNDS,
              with_compile: bool = True, compile_log=None, log=None) -> list[Row]:
    """Time every variant on every (shape, dtype); `with_compile` adds the torch.compile variants.
    `compile_log`, a list if given, receives one (shape, dtype, impl, graphs, compile seconds) per
    compiled variant; `log(line)`, if given, is called as each (shape, dtype) starts and ends."""
    import torch
    import torch._dynamo

    from ..compile_check import CompileFallbackError, raised_recompile_limits
    from ..reference import group_norm_act_reference, max_errors

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
    abi.load()  # a missing or unloadable library raises abi.LibraryError, an errors.Error (exit 3)
    torch_dtypes = [(name, _torch_dtype(name)) for name in dtypes]

    rows: list[Row] = []
    task = None
    per_key = rounds * (1 + (3 if with_compile else 2) * len(layouts)) + (len(layouts) if with_compile else 0)
    if progress is not None:
        task = progress.add_task("benchmark", total=len(shapes) * len(torch_dtypes) * per_key)
    gen = torch.Generator(device="cuda").manual_seed(0)
    for shape in shapes:
        for dtype_name, dtype in torch_dtypes:
            x = torch.randn(shape.size, device="cuda", dtype=dtype, generator=gen)
            weight = (1 + 0.1 * torch.randn(shape.c, device="cuda", generator=gen)).to(dtype)
            bias = (0.1 * torch.randn(shape.c, device="cuda", generator=gen)).to(dtype)
            meta = dict(shape=shape.name, n=shape.n, c=shape.c, h=shape.h, w=shape.w,
                        groups=shape.groups, eps=shape.eps, dtype=dtype_name)

            def step(name, advance=1):
                if progress is not None:
                    progress.update(task, advance=advance, description=f"{shape.name} {dtype_name} {name}")

            started = time.perf_counter()
            if log is not None:
                log(f"{shape.name} {dtype_name}: {'compiling and ' if with_compile else ''}timing")

            # Every variant with its buffers, in table order; all live for the rounds.
            y_copy = torch.empty_like(x)
            variants = {COPY: lambda y=y_copy, x=x: y.copy_(x)}
            outputs = {}
            inputs = {layout: x.contiguous(memory_format=torch.channels_last) if layout == "nhwc" else x
                      for layout in layouts}
            for layout in layouts:
                outputs[layout] = torch.empty_like(inputs[layout])
                variants[OURS[layout]] = kernel_launcher(inputs[layout], outputs[layout], weight, bias, shape, layout)
            peer_outputs = {}  # PyTorch variant -> a callable giving its output, for the error columns
            for layout in ("nchw", "nhwc"):
                if layout in layouts:
                    xl = inputs[layout]
                    variants[TORCH[layout]] = (
                        lambda xl=xl: torch_group_norm_act(xl, weight, bias, shape.groups, shape.eps))
                    peer_outputs[TORCH[layout]] = variants[TORCH[layout]]
            compiled = {}
            if with_compile:
                # A fresh dynamo cache per (shape, dtype): the compiles of earlier shapes neither count
                # toward the recompile limit nor keep their memory.
                torch._dynamo.reset()
                with raised_recompile_limits():
                    for layout in ("nchw", "nhwc"):
                        if layout not in layouts:
                            continue
                        name = COMPILED[layout]
                        step(f"{name}: compiling", advance=0)
                        if log is not None:
                            log(f"{shape.name} {dtype_name}: compiling {name}")
                        xl = inputs[layout]
                        try:
                            fn = compile_group_norm_act(xl, weight, bias, shape.groups, shape.eps,
                                                        f"{shape.name} {dtype_name} {name}")
                        except CompileFallbackError as e:
                            raise BenchError(f"{e} (--no-compile leaves the torch.compile variants out)") from e
                        compiled[name] = fn
                        variants[name] = lambda fn=fn, xl=xl: fn(xl, weight, bias, shape.groups, shape.eps)
                        peer_outputs[name] = variants[name]
                        if compile_log is not None:
                            compile_log.append((shape.name, dtype_name, name, fn.graphs, fn.compile_s))
                        step(f"{name}: compiled")

            timed = fastest_of_rounds(variants, rounds, replays, timed=step)
            for fn in compiled.values():
                try:
                    fn.check_settled()
                except CompileFallbackError as e:
                    raise BenchError(str(e)) from e
            copy_us = timed[COPY][0]
            if log is not None:
                log(f"{shape.name} {dtype_name}: done in {time.perf_counter() - started:.0f} s")
            ref = group_norm_act_reference(x, weight, bias, shape.groups, shape.eps, "silu")
            for name, (us, spread) in timed.items():
                errs = {}
                for layout in layouts:
                    if name == OURS[layout]:
                        abs_err, rel_err = max_errors(outputs[layout], ref)
                        errs = dict(max_abs_err=abs_err, max_rel_err=rel_err)
                if name in peer_outputs:
                    abs_err, rel_err = max_errors(peer_outputs[name](), ref)
                    errs = dict(max_abs_err=abs_err, max_rel_err=rel_err)
                plan = next((variants[OURS[la]].plan for la in layouts if name == OURS[la]), None)
                rows.append(Row(**meta, impl=name, us_per_launch=us, ratio_to_copy=us / copy_us,
                                round_spread=spread if rounds > 1 else None, plan=plan, **errs))
            del x, y_copy, variants, outputs, inputs, ref, peer_outputs, compiled
            torch.cuda.empty_cache()
    if with_compile:
        torch._dynamo.reset()
    annotate_best_peer(rows)
    return rows


# Host time per call: what a call costs the CPU, on a tensor so small (launch-bound) that the GPU
# finishes each kernel before the host has issued the next, so the loop's wall time is host time.
HOST_SHAPE = (1, 32, 8, 8)
HOST_GROUPS = 32
HOST_EPS = 1e-5
HOST_CHAIN = 10  # calls in one compiled function (its per-call time is the function's / HOST_CHAIN)
HOST_CALLS = 2000  # calls of a variant per round
HOST_ROUNDS = 7
HOST_WARMUP = 50
STOCK_EAGER, OURS_EAGER = "stock eager", "trt_gn eager"
STOCK_COMPILED, OURS_COMPILED = "stock compiled", "trt_gn compiled"
HOST_VARIANTS = (STOCK_EAGER, OURS_EAGER, STOCK_COMPILED, OURS_COMPILED)


@dataclass
class HostTime:
    variant: str
    us_per_call: float  # median of the rounds
    rounds_us: list[float]


def host_us_per_call(fn, calls: int, per_call: int = 1, sync=None) -> float:
    """Microseconds per op call of `calls` back-to-back calls of fn (each making `per_call` op
    calls), `sync()` (the device drained) before and after."""
    sync = sync or (lambda: None)
    sync()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    sync()
    return (time.perf_counter() - start) * 1e6 / (calls * per_call)


def _chain(step):
    """A function of HOST_CHAIN steps, each step's output the next one's input."""
    def chained(x, weight, bias):
        for _ in range(HOST_CHAIN):
            x = step(x, weight, bias)
        return x

    return chained


def run_host_overhead(shape=HOST_SHAPE, dtype: str = "fp16", layout: str = "nhwc", calls: int = HOST_CALLS,
                      rounds: int = HOST_ROUNDS, log=None, device: str = "cuda",
                      backend: str = "inductor") -> dict[str, HostTime]:
    """Host time per call of stock F.silu(F.group_norm(...)) and of torch.ops.trt_gn.group_norm_act,
    eager and inside a torch.compile'd (Inductor) function of HOST_CHAIN calls, on one GPU in one run:
    every variant once a round, in turn, HOST_ROUNDS rounds, the median kept. The compiled functions
    are checked to have compiled one graph with no break and to compile nothing while timed.
    (`device` "cpu" and another `backend` run the same steps without a GPU, for the tests.)"""
    import torch
    import torch._dynamo

    from .. import ops
    from ..compile_check import CheckedCompile, CompileFallbackError, raised_recompile_limits

    if calls < 1 or rounds < 1:
        raise BenchError(f"calls and rounds must be >= 1, got {calls} and {rounds}")
    if layout not in LAYOUTS:
        raise BenchError(f"unknown layout {layout!r}; expected one of {', '.join(LAYOUTS)}")
    if device == "cuda" and not torch.cuda.is_available():
        raise BenchError("no CUDA device: the benchmark needs a GPU (torch.cuda.is_available() is False)",
                         exit_code=EXIT_MISSING)
    dt = _torch_dtype(dtype)
    ops.implementation()  # chosen (and a C++ op built) now, not inside the first timed call
    sync = torch.cuda.synchronize if device == "cuda" else None
    gen = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(shape, device=device, dtype=dt, generator=gen)
    if layout == "nhwc":
        x = x.contiguous(memory_format=torch.channels_last)
    c = shape[1]
    weight = (1 + 0.1 * torch.randn(c, device=device, generator=gen)).to(dt)
    bias = (0.1 * torch.randn(c, device=device, generator=gen)).to(dt)
    op = torch.ops.trt_gn.group_norm_act

    def stock(x, weight, bias):
        return torch_group_norm_act(x, weight, bias, HOST_GROUPS, HOST_EPS)

    def ours(x, weight, bias):
        return op(x, weight, bias, HOST_GROUPS, HOST_EPS, "silu")

    variants = {STOCK_EAGER: (lambda: stock(x, weight, bias), 1), OURS_EAGER: (lambda: ours(x, weight, bias), 1)}
    compiled = []
    torch._dynamo.reset()
    with raised_recompile_limits():
        for name, step in ((STOCK_COMPILED, stock), (OURS_COMPILED, ours)):
            if log is not None:
                log(f"compiling {name} ({HOST_CHAIN} calls in one function)")
            fn = CheckedCompile(_chain(step), name, backend=backend, fullgraph=True, dynamic=False)
            try:
                fn.first_call(x, weight, bias)
            except CompileFallbackError as e:
                raise BenchError(str(e), exit_code=EXIT_FAILED) from e
            if fn.graphs != 1 or fn.graph_breaks:
                raise BenchError(f"{name}: compiled {fn.graphs} graphs with {fn.graph_breaks} graph breaks, "
                                 "expected one graph without a break", exit_code=EXIT_FAILED)
            compiled.append(fn)
            variants[name] = (lambda fn=fn: fn(x, weight, bias), HOST_CHAIN)
        for fn, per_call in variants.values():
            for _ in range(HOST_WARMUP):
                fn()
        times: dict[str, list[float]] = {name: [] for name in variants}
        for r in range(rounds):
            for name, (fn, per_call) in variants.items():
                times[name].append(host_us_per_call(fn, calls, per_call, sync))
            if log is not None:
                log(f"round {r + 1}/{rounds}: " + ", ".join(f"{n} {times[n][-1]:.1f} us" for n in variants))
        for fn in compiled:
            try:
                fn.check_settled()
            except CompileFallbackError as e:
                raise BenchError(str(e), exit_code=EXIT_FAILED) from e
    torch._dynamo.reset()
    return {name: HostTime(name, statistics.median(ts), ts) for name, ts in times.items()}


def host_ratios(times: dict[str, HostTime]) -> tuple[float, float]:
    """(trt_gn eager / stock eager, trt_gn compiled / stock compiled) of run_host_overhead's times."""
    return (times[OURS_EAGER].us_per_call / times[STOCK_EAGER].us_per_call,
            times[OURS_COMPILED].us_per_call / times[STOCK_COMPILED].us_per_call)


LOG_WIDTH = 1000  # columns of the console where stdout is no terminal


def write_csv(rows: list[Row], path: Path) -> None:
    buf = io.StringIO()
    fields = list(Row.__dataclass_fields__)
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if v is None else v) for k, v in asdict(row).items()})
    fileio.write_bytes(path, buf.getvalue().encode())


def impl_order(rows: list[Row]) -> list[str]:
    order = [COPY, OURS["nhwc"], OURS["nchw"], TORCH["nchw"], TORCH["nhwc"], COMPILED["nchw"], COMPILED["nhwc"]]
    present = {r.impl for r in rows}
    return [i for i in order if i in present]


BEST_PEER = "best PyTorch"


def plot_series(rows: list[Row], dtype: str) -> tuple[list[str], dict[str, list[float]]]:
    """(shapes, {series: time / copy time per shape}) of one dtype: every implementation but the
    copy, and BEST_PEER, the fastest PyTorch variant of each shape (NaN where one is missing)."""
    nan = float("nan")
    shapes = list(dict.fromkeys(r.shape for r in rows if r.dtype == dtype))
    series = {}
    for impl in impl_order(rows):
        if impl != COPY:
            vals = {r.shape: r.ratio_to_copy for r in rows if r.dtype == dtype and r.impl == impl}
            series[impl] = [vals.get(s, nan) for s in shapes]
    if any(i in PEERS for i in series):
        best = []
        for shape in shapes:
            by_impl = {r.impl: r for r in rows if r.dtype == dtype and r.shape == shape}
            b = best_peer(by_impl)
            best.append(nan if b is None else by_impl[b[0]].ratio_to_copy)
        series[BEST_PEER] = best
    return shapes, series


def write_plot(rows: list[Row], path: Path) -> None:
    """Grouped bars of the time relative to a copy, one panel per dtype, the best PyTorch variant of
    each shape drawn as a black line across its group (needs matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise BenchError("the PNG plot needs matplotlib: pip install matplotlib (or trt_gn[test])") from e
    dtypes = list(dict.fromkeys(r.dtype for r in rows))
    n_shapes = len(dict.fromkeys(r.shape for r in rows))
    fig, axes = plt.subplots(len(dtypes), 1, figsize=(max(8, 1.4 * n_shapes + 2), 4.6 * len(dtypes)), squeeze=False)
    for ax, dtype in zip(axes[:, 0], dtypes):
        shapes, series = plot_series(rows, dtype)
        bars = [k for k in series if k != BEST_PEER]
        width = 0.8 / max(1, len(bars))
        for k, impl in enumerate(bars):
            xs = [i + (k - (len(bars) - 1) / 2) * width for i in range(len(shapes))]
            ax.bar(xs, series[impl], width, label=impl)
        if BEST_PEER in series:
            ax.hlines(series[BEST_PEER], [i - 0.45 for i in range(len(shapes))], [i + 0.45 for i in range(len(shapes))],
                      colors="black", linewidth=2.0, label=BEST_PEER)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.axhline(2.0, color="gray", linestyle="--", linewidth=0.8)
        ax.set_yscale("log")
        ax.set_ylabel("time / copy time")
        ax.set_title(f"GroupNorm+SiLU, {dtype}, {LAUNCHES} launches per CUDA graph (lower is better)")
        ax.set_xticks(range(len(shapes)))
        ax.set_xticklabels(shapes, rotation=30, ha="right", fontsize=8)
        ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    fileio.write_bytes(path, buf.getvalue())


PEER_LABELS = {TORCH["nchw"]: "eager NCHW", TORCH["nhwc"]: "eager cl", COMPILED["nchw"]: "compile NCHW",
               COMPILED["nhwc"]: "compile cl"}


def _errors_cell(rows: list[Row]) -> str:
    errs = [r for r in rows if r.max_abs_err is not None]
    if not errs:
        return "-"
    return f"{max(r.max_abs_err for r in errs):.2e} / {max(r.max_rel_err for r in errs):.2e}"


def render_table(rows: list[Row]):
    """A rich Table: one line per (shape, dtype), microseconds and ratio to copy per implementation,
    the best peer (fastest PyTorch variant) and trt_gn's speedup over it, and the largest errors
    against the float64 reference of trt_gn and of PyTorch."""
    from rich.table import Table

    impls = impl_order(rows)
    ours = [i for i in impls if i in OURS.values()]
    has_peers = any(i in PEERS for i in impls)
    table = Table(title=f"GroupNorm+SiLU: us per launch (x copy time); median of graph replays / {LAUNCHES}, "
                  "fastest round")
    table.add_column("shape", no_wrap=True)
    table.add_column("dtype", no_wrap=True)
    for impl in impls:
        table.add_column(impl, justify="right", no_wrap=True)
    if has_peers:
        table.add_column("best peer", no_wrap=True)
        if ours:
            short = " / ".join(i.split()[-1] for i in ours)
            table.add_column(f"speedup vs best ({short})", justify="right", no_wrap=True)
    table.add_column("max abs / rel err", justify="right", no_wrap=True)
    if has_peers:
        table.add_column("torch max abs / rel err", justify="right", no_wrap=True)
    has_plans = any(r.plan for r in rows)
    if has_plans:
        table.add_column("trt_gn plan (" + " / ".join(i.split()[-1] for i in ours) + ")", no_wrap=True)
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
        best = best_peer(by_impl)
        if has_peers:
            cells.append("-" if best is None else PEER_LABELS[best[0]])
            if ours:
                cells.append("-" if best is None else " / ".join(
                    f"{best[1] / by_impl[i].us_per_launch:.2f}x" if i in by_impl else "-" for i in ours))
        cells.append(_errors_cell([r for i, r in by_impl.items() if i in OURS.values()]))
        if has_peers:
            cells.append(_errors_cell([r for i, r in by_impl.items() if i in PEERS]))
        if has_plans:
            cells.append(" / ".join(by_impl[i].plan or "-" if i in by_impl else "-" for i in ours))
        table.add_row(shape, dtype, *cells)
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


SLOW_COPY = 0.9  # a copy under this fraction of the run's fastest copy bandwidth is named


def slow_copy_note(rows: list[Row], min_bytes: int) -> str | None:
    """A note naming the copies of tensors of at least min_bytes (set it past the L2, so that the
    copies run from memory) whose bandwidth, read and written, is under SLOW_COPY of the fastest such
    copy of the run, or None. The copy is PyTorch's copy_, the driver's device-to-device memcpy,
    which runs markedly slower on some spans (exactly 512 MiB, or 1 GiB and more, on an H100 and an
    H200; docs/lab/bench-history/kernel-notes.md) while other copies of one GPU differ by a few
    percent: the ratios of those shapes are against a slower copy than the others'."""
    copies = []
    for r in rows:
        nbytes = r.n * r.c * r.h * r.w * _torch_dtype(r.dtype).itemsize
        if r.impl == COPY and nbytes >= min_bytes:
            copies.append((2 * nbytes / (r.us_per_launch * 1e-6) / 1e12, nbytes, r))
    if len(copies) < 2:
        return None
    fastest = max(copies, key=lambda c: c[0])
    slow = [c for c in copies if c[0] < SLOW_COPY * fastest[0]]
    if not slow:
        return None
    named = "; ".join(f"{r.shape} {r.dtype} ({nbytes / 2**20:.0f} MiB) at {tb:.2f} TB/s" for tb, nbytes, r in slow)
    return (f"Slow copies: {named}, against {fastest[0]:.2f} TB/s for {fastest[2].shape} {fastest[2].dtype} "
            "(bytes read and written): the copy is the driver's device-to-device memcpy, slower on some sizes, "
            "so those shapes' ratios are against a slower copy than the others'.")


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


def compile_summary(log: list[tuple]) -> str:
    """One line on the compiled variants of a run: how many, the graphs each compiled, compile time."""
    graphs = sorted({g for *_, g, _ in log})
    each = " or ".join(str(g) for g in graphs)
    return (f"torch.compile (inductor): {len(log)} variant(s) compiled before timing, {each} graph(s) each, none "
            f"ran eager or compiled again while timed; {sum(s for *_, s in log):.0f} s compiling (not in the times)")


def main(shape_names=None, dtypes=DTYPES, layouts=LAYOUTS, replays=MIN_REPLAYS, out_dir="bench-out",
         rounds=ROUNDS, with_compile=True) -> list[Row]:
    """Run, print the table and write <out_dir>/bench.csv and <out_dir>/bench.png."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    # Logs and pipes get the whole table: rich would fold it into 80 columns, and shorten cells to
    # "…" in any fixed width narrower than the table (which grows with the compiled variants).
    tty = sys.stdout.isatty()
    console = Console() if tty else Console(width=LOG_WIDTH)
    try:
        shapes = select_shapes(shape_names)
    except ValueError as e:
        raise BenchError(str(e)) from e
    for d in dtypes:
        _torch_dtype(d)
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), console=console, transient=True) as progress:
        compile_log: list[tuple] = []
        # Where no progress bar shows (a log, a pipe), a line as each (shape, dtype) starts and ends.
        log = None if tty else (lambda line: console.print(line, markup=False, highlight=False, soft_wrap=True))
        rows = run_bench(shapes, list(dtypes), list(layouts), replays, progress, rounds, with_compile, compile_log, log)
    import torch

    from .. import ops

    console.print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    for line in library_lines(torch.cuda.get_device_capability(), abi.kernels_ptx_arch(), abi.library_path()):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    # The kernels are timed through the C ABI; the op, which models call, runs this implementation.
    console.print(f"op on CUDA tensors: {ops.implementation()}", markup=False, highlight=False, soft_wrap=True)
    if compile_log:
        console.print(compile_summary(compile_log), markup=False, highlight=False, soft_wrap=True)
    console.print(render_table(rows))
    note = unsteady_note(rows)
    if note:
        console.print(note)
    # Copies of at least twice the L2 run from memory: their bandwidths compare.
    note = slow_copy_note(rows, 2 * torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size)
    if note:
        console.print(note, markup=False, highlight=False, soft_wrap=True)
    console.print(L2_NOTE)
    write_outputs(rows, Path(out_dir), console)
    return rows


def write_outputs(rows: list[Row], out: Path, console) -> None:
    """<out>/bench.csv and <out>/bench.png, the folder (and its parents) created where missing."""
    out.mkdir(parents=True, exist_ok=True)
    write_csv(rows, out / "bench.csv")
    console.print(f"wrote {out / 'bench.csv'}")
    try:
        write_plot(rows, out / "bench.png")
        console.print(f"wrote {out / 'bench.png'}")
    except BenchError as e:
        console.print(f"no plot: {e}")
