"""End to end on a GPU: a VAE decode or a UNet step, stock PyTorch against trt_gn's module swap, each
eager, with torch.compile (default mode) and with torch.compile mode="reduce-overhead" (CUDA graphs).

Models: diffusers models built from their published configurations with seeded random weights
(trt_gn/onnx/recipes.py, no download).
  --model vae (default): AutoencoderKL decoders (post_quant_conv + decoder, as `vae.decode` runs
    them); 512x512 is the SD 1.5 VAE (latents 1x4x64x64), 1024x1024 the SDXL VAE (latents
    1x4x128x128).
  --model unet: one SD 1.5 UNet step (latents 2x4x64x64, a timestep each, text 2x77x768).

Variants: stock eager NCHW and channels_last; stock torch.compile NCHW and channels_last in each
mode of --modes; trt_gn swap eager channels_last and torch.compile channels_last in each mode.

Every variant is measured in two passes, one after the other:
  1. timed: --iters calls after --warmup untimed ones, no profiler attached; the median GPU time
     between CUDA events is the wall time of the table, its speedup is against the best (fastest)
     stock variant of the same size, and its output is compared with stock eager NCHW's (max abs
     diff). The host time of a call (how long it took to enqueue its work: the GPU idles meanwhile)
     is its median.
  2. profiled, separately afterwards: --profile-iters calls under torch.profiler. The kernels it
     records are summed by kind (rules below) and divided by the calls: kernel time per call. The
     GPU idle time per call is the timed pass's wall time minus that kernel time; the gaps between a
     call's kernels are summed by the kind of kernel after each. The profiler slows the host side
     down: where the host launches each kernel (eager), those gaps are wider than in the timed pass.

Compiled variants are compiled (Inductor, static shapes) before they are timed, with dynamo's
recompile limits raised, and checked to have compiled and to compile nothing more while timed and
profiled (trt_gn.compile_check): no row reports eager PyTorch under a compiled name. The
reduce-overhead variants fail where Inductor leaves out CUDA graphs, and the profiled pass counts
their graph launches. The trt_gn torch.compile variants run with trt_gn's fusion passes
(trt_gn.compile_passes) on where that module exists, and every trt_gn variant swaps with
pre_add=True (the additions in front of a GroupNorm moved into the op where one forward shows them);
--no-fusion-passes turns both off; the report says which were on. Progress lines go to stderr, the report (header, markdown table, summary) to stdout.

    python -m trt_gn.lab.vae_decode [--model vae|unet] [--resolutions 512,1024]
        [--modes default,reduce-overhead] [--iters 20] [--profile-iters 5] [--out vae.csv]
        [--markdown vae.md]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import csv
import importlib
import io
import json
import re
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from ..errors import EXIT_MISSING, Error

PROG = "python -m trt_gn.lab.vae_decode"
# resolution -> (recipe of trt_gn/onnx/recipes.py, latent height and width)
RESOLUTIONS = {512: ("sd15-vae-decoder", 64), 1024: ("sdxl-vae-decoder", 128)}
UNET = ("sd15-unet", 64, 2)  # recipe, latent height and width, batch
MODELS = ("vae", "unet")
MODES = ("default", "reduce-overhead")  # torch.compile modes
SIDES = ("stock", "trt_gn")
MIN_ITERS = 5

STOCK_EAGER_NCHW = "stock eager NCHW"


@dataclass(frozen=True)
class Variant:
    name: str
    side: str  # "stock" or "trt_gn"
    layout: str  # "nchw" or "nhwc"
    mode: str | None  # torch.compile mode; None: eager


def variants(modes=MODES, sides=SIDES) -> tuple[Variant, ...]:
    """The variants in table order: stock eager, stock compiled per mode, trt_gn eager, trt_gn
    compiled per mode (the trt_gn compiled ones last: the fusion passes are on only for them); those of
    `sides` only."""
    def compiled(side, layout, mode):
        label = "NCHW" if layout == "nchw" else "channels_last"
        return Variant(f"{side} torch.compile{'' if mode == 'default' else ' ' + mode} {label}", side, layout, mode)

    out = [Variant(STOCK_EAGER_NCHW, "stock", "nchw", None), Variant("stock eager channels_last", "stock", "nhwc", None)]
    out += [compiled("stock", layout, m) for m in modes for layout in ("nchw", "nhwc")]
    out.append(Variant("trt_gn eager channels_last", "trt_gn", "nhwc", None))
    out += [compiled("trt_gn", "nhwc", m) for m in modes]
    return tuple(v for v in out if v.side in sides)


VARIANTS = variants()

# Kernel kinds, in table order: (key, label).
KINDS = (("conv_gemm", "conv/gemm"), ("attention", "attention"), ("trt_gn", "trt_gn"),
         ("stock_gn", "stock GroupNorm"), ("feeds_trt_gn", "Inductor in front of trt_gn"),
         ("other", "other pointwise/reduction"), ("copy", "memcpy/memset"), ("unclassified", "unclassified"))
KIND_LABEL = dict(KINDS)

# How a kernel's name gives its kind: the first rule that matches (re.search) wins. Inductor's
# kernels (triton_*) come first, named after the ATen ops they fuse: a pointwise kernel feeding
# attention may carry "attention" in its name, one adding a convolution's bias "convolution".
KERNEL_RULES = (
    ("trt_gn", r"\bgn(Fused|OnChip|Stream|Persistent|Rolling|Stats|Apply)\w*|\bgnFinalize\b",
     "trt_gn's kernels: gnFused*, gnOnChip*, gnStream*, gnPersistent*, gnRolling*, gnStats*, gnFinalize, gnApply*"),
    ("feeds_trt_gn", r"^triton_\w*group_norm_act",
     "Inductor kernels named after trt_gn's op (triton_*group_norm_act*): the passes in front of it"),
    ("stock_gn", r"^triton_\w*group_norm",
     "Inductor kernels with group_norm in their name (stock GroupNorm, fused with what Inductor put in)"),
    ("conv_gemm", r"^triton_tem_", "Inductor's template kernels (triton_tem_*: convolution and matmul)"),
    ("other", r"^triton_", "every other Inductor kernel (triton_*)"),
    ("stock_gn", r"GroupNorm|RowwiseMomentsCUDAKernel(NHWC\d)?<[^,<>]*>|ComputeFusedParamsCUDAKernel",
     "ATen's GroupNorm kernels (GroupNorm*, one-type RowwiseMomentsCUDAKernel, ComputeFusedParamsCUDAKernel)"),
    ("attention", r"(?i)flash|fmha|attention|attn|sdpa", "flash, fmha, attention, attn, sdpa (any case)"),
    ("conv_gemm", r"(?i)cutlass|cudnn|xmma|gemm|gemv|nvjet|conv|splitKreduce",
     "cutlass, cudnn, xmma, gemm, gemv, nvjet, conv, splitKreduce (any case)"),
    ("copy", r"^Mem(cpy|set)\b", "the profiler's Memcpy and Memset records"),
    ("other", r"at::native::|at::cuda::|cub::|(?i:elementwise|reduce)",
     "ATen's and CUB's other kernels (at::native::, at::cuda::, cub::, elementwise, reduce)"),
)
_RULES = tuple((kind, re.compile(pattern)) for kind, pattern, _ in KERNEL_RULES)
# the kinds whose kernels the summary lists by name (the most time first, OTHER_TOP of them)
OTHER_KINDS = ("feeds_trt_gn", "other")
OTHER_TOP = 8
# trace event categories of GPU work, and the host calls that launch a CUDA graph
KERNEL_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
GRAPH_LAUNCH = re.compile(r"^cu(da)?GraphLaunch")


def classify_kernel(name: str) -> str:
    """The kind (a key of KINDS) of a kernel named `name`: the first rule of KERNEL_RULES that matches."""
    return next((kind for kind, rule in _RULES if rule.search(name)), "unclassified")


def rules_table() -> str:
    """KERNEL_RULES as the text table of --help."""
    lines = ["Kernel kinds, by name (the first rule that matches wins; the rest is 'unclassified'):"]
    lines += [f"  {i:>2}. {KIND_LABEL[kind]:<28}{text}" for i, (kind, _, text) in enumerate(KERNEL_RULES, 1)]
    return "\n".join(lines)


@dataclass
class Breakdown:
    """The kernels of a profiled pass: microseconds by kind, over `calls` calls."""

    calls: int
    kernels: int = 0  # kernel and memcpy/memset records
    graph_launches: int = 0  # CUDA graph launches from the host
    us: dict[str, float] = field(default_factory=lambda: {k: 0.0 for k, _ in KINDS})
    unclassified: dict[str, float] = field(default_factory=dict)  # name -> microseconds
    # Gaps inside a call: the GPU idle between one record's end (the latest so far) and the next
    # record's start, charged to the kind of the record after it; None where the records do not
    # split into `calls` equal calls (so call boundaries are unknown).
    gap_us: dict[str, float] | None = None
    gap_count: dict[str, int] | None = None
    gap_names: dict[str, float] | None = None  # name of the record after a gap -> microseconds
    trt_gn_names: dict[str, list[float]] = field(default_factory=dict)  # trt_gn kernel -> [launches, us]
    # the kernels of the kinds in OTHER_KINDS (what is neither convolution nor GroupNorm), by name
    other_names: dict[str, list[float]] = field(default_factory=dict)

    @property
    def kernel_us(self) -> float:
        return sum(self.us.values())

    def per_call_ms(self, kind: str | None = None) -> float:
        """Kernel time per call in ms, of one kind or (None) of all."""
        return (self.kernel_us if kind is None else self.us[kind]) / self.calls / 1000.0


def kernel_breakdown(events: list[dict], calls: int) -> Breakdown:
    """Sum the GPU records of a chrome trace's events (torch.profiler's export) by kind, and count its
    CUDA graph launches; `calls` is the number of calls the trace covers."""
    if calls < 1:
        raise ValueError(f"calls must be >= 1, got {calls}")
    b = Breakdown(calls)
    records = []  # (start, duration, kind, name) of each GPU record
    for e in events:
        cat, name = e.get("cat"), e.get("name", "")
        if cat in KERNEL_CATEGORIES and "dur" in e:
            kind = classify_kernel(name)
            b.us[kind] += float(e["dur"])
            b.kernels += 1
            records.append((float(e["ts"]), float(e["dur"]), kind, name))
            if kind == "unclassified":
                b.unclassified[name] = b.unclassified.get(name, 0.0) + float(e["dur"])
            elif kind in ("trt_gn",) + OTHER_KINDS:
                count_us = (b.trt_gn_names if kind == "trt_gn" else b.other_names).setdefault(name, [0, 0.0])
                count_us[0] += 1
                count_us[1] += float(e["dur"])
        elif cat in ("cuda_runtime", "cuda_driver") and GRAPH_LAUNCH.search(name):
            b.graph_launches += 1
    if records and len(records) % calls == 0:
        # The calls run one after another and launch the same records, so the k-th slice of the
        # records in time order is the k-th call; the gaps between slices are the host's, not a call's.
        records.sort()
        per_call = len(records) // calls
        b.gap_us, b.gap_count, b.gap_names = {k: 0.0 for k, _ in KINDS}, {k: 0 for k, _ in KINDS}, {}
        for first in range(0, len(records), per_call):
            end = records[first][0] + records[first][1]
            for start, dur, kind, name in records[first + 1:first + per_call]:
                if start > end:
                    b.gap_us[kind] += start - end
                    b.gap_count[kind] += 1
                    b.gap_names[name] = b.gap_names.get(name, 0.0) + start - end
                end = max(end, start + dur)
    return b


@dataclass
class Row:
    resolution: str  # "512x512" (VAE image), "64x64 latents" (UNet)
    recipe: str
    latents: str  # "1x4x64x64"
    dtype: str
    variant: str
    median_ms: float  # timed pass: GPU time between CUDA events
    min_ms: float
    max_ms: float
    iters: int
    host_ms: float | None = None  # timed pass: median host time of a call (enqueueing its work)
    speedup_vs_best_stock: float | None = None  # best stock variant's median / this median
    max_abs_diff: float | None = None  # max |output - stock eager NCHW's output|
    graphs: int | None = None  # compiled variants: graphs torch.compile compiled
    graph_breaks: int | None = None
    compile_s: float | None = None  # compiled variants: wall time of the compiling call
    mode: str | None = None  # torch.compile mode; None: eager
    fusion_passes: str | None = None  # trt_gn compiled variants: the fusion passes that were on
    # profiled pass, per call: kernel time, GPU idle (median_ms - kernel_ms), time by kind
    profiled_calls: int | None = None
    kernel_ms: float | None = None
    gpu_idle_ms: float | None = None
    conv_gemm_ms: float | None = None
    attention_ms: float | None = None
    trt_gn_ms: float | None = None
    stock_gn_ms: float | None = None
    feeds_trt_gn_ms: float | None = None
    other_ms: float | None = None
    copy_ms: float | None = None
    unclassified_ms: float | None = None
    unclassified_share: float | None = None  # of the kernel time
    kernels_per_call: float | None = None
    graph_launches_per_call: float | None = None
    gaps_ms: float | None = None  # GPU idle inside a call, in the profiled pass
    gaps_by_kind: str | None = None  # that idle by the kind of the record after each gap
    trt_gn_kernels: str | None = None  # trt_gn's kernels by name: launches and ms a call, most time first
    other_kernels: str | None = None  # the OTHER_KINDS kernels by name, likewise (the OTHER_TOP first)

    def add_breakdown(self, b: Breakdown) -> None:
        self.profiled_calls = b.calls
        self.kernel_ms = b.per_call_ms()
        self.gpu_idle_ms = self.median_ms - self.kernel_ms
        for kind, _ in KINDS:
            setattr(self, f"{kind}_ms", b.per_call_ms(kind))
        self.unclassified_share = b.us["unclassified"] / b.kernel_us if b.kernel_us else 0.0
        self.kernels_per_call = b.kernels / b.calls
        self.graph_launches_per_call = b.graph_launches / b.calls
        def by_name(names, top=None):
            ranked = sorted(((n, cu) for n, cu in names.items() if cu[1] > 0.0), key=lambda kv: -kv[1][1])
            shown = "; ".join(f"{_short(n)} x{c / b.calls:.0f} {us / b.calls / 1000.0:.3f} ms"
                              for n, (c, us) in ranked[:top])
            rest = ranked[top:] if top is not None else []
            if rest:
                shown += (f"; {len(rest)} more x{sum(c for _, (c, _) in rest) / b.calls:.0f} "
                          f"{sum(us for _, (_, us) in rest) / b.calls / 1000.0:.3f} ms")
            return shown

        if b.trt_gn_names:
            self.trt_gn_kernels = by_name(b.trt_gn_names)
        if any(us > 0.0 for _, us in b.other_names.values()):
            self.other_kernels = by_name(b.other_names, OTHER_TOP)
        if b.gap_us is not None:
            self.gaps_ms = sum(b.gap_us.values()) / b.calls / 1000.0
            kinds = sorted((k for k in b.gap_us if b.gap_count[k]), key=lambda k: -b.gap_us[k])
            parts = [f"before {KIND_LABEL[k]} {b.gap_us[k] / b.calls / 1000.0:.3f} ms "
                     f"({b.gap_count[k] / b.calls:.0f} gaps, {b.gap_us[k] / b.gap_count[k]:.1f} us each)" for k in kinds]
            worst = sorted(b.gap_names.items(), key=lambda kv: -kv[1])[:3]
            parts.append("most after: " + ", ".join(f"{_short(n)} {us / b.calls:.0f} us" for n, us in worst))
            self.gaps_by_kind = "; ".join(parts)


def _short(name: str, width: int = 60) -> str:
    """A kernel name without "void " and trt_gn's namespaces, cut to `width` characters (template
    arguments kept: they tell a kernel's variants apart)."""
    name = re.sub(r"^void |trtgn::(\(anonymous namespace\)::)?", "", name)
    return name if len(name) <= width else name[:width - 3] + "..."


class Progress:
    """Progress lines with the time since the start, to stderr."""

    def __init__(self, stream=sys.stderr):
        self.start = time.perf_counter()
        self.stream = stream

    def __call__(self, line: str) -> None:
        print(f"[{time.perf_counter() - self.start:6.1f} s] {line}", file=self.stream, flush=True)


def time_ms(fn, iters: int, warmup: int, device: torch.device) -> tuple[list[float], list[float], torch.Tensor]:
    """(per-call times in ms, per-call host times in ms, the last output): GPU time between CUDA events
    on a GPU, wall time elsewhere; the host time is how long fn() took to return (on a GPU, to enqueue
    its work: the GPU has nothing to run until the first launch, so a long host call shows as idle)."""
    for _ in range(warmup):
        out = fn()
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
    times, host = [], []
    for _ in range(iters):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            t0 = time.perf_counter()
            out = fn()
            host.append((time.perf_counter() - t0) * 1000.0)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            out = fn()
            times.append((time.perf_counter() - t0) * 1000.0)
            host.append(times[-1])
    return times, host, out


def profile_calls(fn, calls: int, device: torch.device) -> Breakdown:
    """The kernels of `calls` calls of fn under torch.profiler, after one call outside it (so no
    first-call work is inside the window)."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize(device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize(device)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "trace.json"
        prof.export_chrome_trace(str(path))
        events = json.loads(path.read_text())["traceEvents"]
    return kernel_breakdown(events, calls)


def fill_comparisons(rows: list[Row]) -> None:
    """Speedup against the best (fastest) stock variant of the same resolution, per row."""
    for res in dict.fromkeys(r.resolution for r in rows):
        best = best_stock(rows, res)
        if best is None:
            continue
        for r in rows:
            if r.resolution == res:
                r.speedup_vs_best_stock = best.median_ms / r.median_ms


def best_stock(rows: list[Row], resolution: str) -> Row | None:
    stock = [r for r in rows if r.resolution == resolution and r.variant.startswith("stock ")]
    return min(stock, key=lambda r: r.median_ms) if stock else None


def _ms(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def markdown_table(rows: list[Row]) -> str:
    """One line a variant: wall time, speedup, kernel time, GPU idle and the kernel time by kind (ms a
    call), kernels and CUDA graph launches a call, max abs diff, compile."""
    kinds = " | ".join(label for _, label in KINDS)
    lines = [f"| resolution | variant | wall ms | vs best stock | kernel ms | GPU idle ms | {kinds} | kernels "
             "| graph launches | max abs diff vs stock eager NCHW | compile |",
             "|---|---|" + "---:|" * (4 + len(KINDS) + 3) + "---|"]
    for r in rows:
        speedup = "-" if r.speedup_vs_best_stock is None else f"{r.speedup_vs_best_stock:.2f}x"
        diff = "-" if r.max_abs_diff is None else f"{r.max_abs_diff:.3e}"
        comp = "-"
        if r.graphs is not None:
            breaks = f", {r.graph_breaks} graph break(s)" if r.graph_breaks else ""
            comp = f"{r.graphs} graph(s){breaks}, {r.compile_s:.0f} s"
        by_kind = " | ".join(_ms(getattr(r, f"{kind}_ms"), 3) for kind, _ in KINDS)
        lines.append(f"| {r.resolution} | {r.variant} | {r.median_ms:.2f} | {speedup} | {_ms(r.kernel_ms)} | "
                     f"{_ms(r.gpu_idle_ms)} | {by_kind} | {_ms(r.kernels_per_call, 0)} | "
                     f"{_ms(r.graph_launches_per_call, 0)} | {diff} | {comp} |")
    return "\n".join(lines)


def _idle(r: Row) -> str:
    return "not profiled" if r.gpu_idle_ms is None else f"{r.gpu_idle_ms:.2f} ms"


def summary_lines(rows: list[Row]) -> list[str]:
    """Per resolution: the best stock variant and the fastest trt_gn variant's speedup against it;
    their GPU idle times and those of each trt_gn variant against the stock one of the same mode and
    layout. Then the unclassified share of the kernel time, and the CUDA graph variants whose
    profile shows no graph launch or fewer kernels than their default-mode twin."""
    out = []
    by_name = {(r.resolution, r.variant): r for r in rows}
    for res in dict.fromkeys(r.resolution for r in rows):
        best = best_stock(rows, res)
        ours = [r for r in rows if r.resolution == res and r.variant.startswith("trt_gn ")]
        if best is None or not ours:
            continue
        fastest = min(ours, key=lambda r: r.median_ms)
        out.append(f"{res}: best stock is {best.variant} ({best.median_ms:.2f} ms); {fastest.variant} "
                   f"{fastest.median_ms:.2f} ms, {best.median_ms / fastest.median_ms:.2f}x faster")
        pairs = [(r, by_name.get((res, "stock" + r.variant[len("trt_gn"):]))) for r in ours]
        same = "; ".join(f"{r.variant[len('trt_gn '):]}: {_idle(r)} vs {_idle(s)}" for r, s in pairs if s)
        out.append(f"{res}: GPU idle a call (wall - kernel time): {fastest.variant} {_idle(fastest)} vs best stock "
                   f"{best.variant} {_idle(best)}" + (f"; trt_gn vs stock, same mode and layout: {same}" if same else ""))
    profiled = [r for r in rows if r.kernel_ms is not None]
    if profiled:
        total = sum(r.kernel_ms for r in profiled)
        unclassified = sum(r.unclassified_ms for r in profiled)
        share = unclassified / total if total else 0.0
        worst = max(profiled, key=lambda r: r.unclassified_ms)
        out.append(f"unclassified kernel time: {share:.2%} of all profiled kernel time"
                   + (f" (most in {worst.resolution} {worst.variant}: {worst.unclassified_ms:.3f} ms a call)"
                      if unclassified else ""))
    for r in profiled:
        if r.trt_gn_kernels:
            out.append(f"{r.resolution} {r.variant}: trt_gn kernels a call: {r.trt_gn_kernels}")
        if r.other_kernels:
            out.append(f"{r.resolution} {r.variant}: other pointwise/reduction and Inductor in front of trt_gn, "
                       f"a call: {r.other_kernels}")
        if r.gaps_ms:
            host = "" if r.host_ms is None else f" (the host took {r.host_ms:.2f} ms a call to enqueue it, timed pass)"
            out.append(f"{r.resolution} {r.variant}: GPU idle inside a call in the profiled pass {r.gaps_ms:.3f} ms"
                       f"{host}: {r.gaps_by_kind}")
        elif r.gaps_ms is None:
            out.append(f"{r.resolution} {r.variant}: its profiled records do not split into equal calls, so its GPU "
                       "idle inside a call is not known")
    for r in profiled:
        if r.mode in (None, "default"):
            continue
        twin = by_name.get((r.resolution, r.variant.replace(f" {r.mode}", "")))
        if not r.graph_launches_per_call:
            out.append(f"warning: {r.resolution} {r.variant}: the profile shows no CUDA graph launch")
        if twin is not None and twin.kernels_per_call and r.kernels_per_call < 0.9 * twin.kernels_per_call:
            out.append(f"warning: {r.resolution} {r.variant}: the profiler recorded {r.kernels_per_call:.0f} kernels a "
                       f"call against {twin.kernels_per_call:.0f} for {twin.variant}: kernels inside CUDA graph "
                       "replays went unrecorded, so its kernel time and GPU idle are not comparable")
    return out


def write_csv(rows: list[Row], path: Path) -> None:
    from ..fileio import write_text

    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=list(Row.__dataclass_fields__), lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: ("" if v is None else v) for k, v in asdict(r).items()})
    write_text(path, text.getvalue())


FUSION_PASSES_MODULE = "trt_gn.compile_passes"


def fusion_passes_module(wanted: bool):
    """(trt_gn.compile_passes or None, what the trt_gn torch.compile variants run with)."""
    if not wanted:
        return None, "off (--no-fusion-passes)"
    try:
        passes = importlib.import_module(FUSION_PASSES_MODULE)
    except ModuleNotFoundError as e:
        if e.name != FUSION_PASSES_MODULE:
            raise
        return None, f"none ({FUSION_PASSES_MODULE} is not in this build)"
    if not callable(getattr(passes, "enable", None)):
        raise Error(f"{FUSION_PASSES_MODULE} has no enable(): cannot turn its passes on for the trt_gn variants alone",
                    "run with --no-fusion-passes to measure without them")
    return passes, f"{FUSION_PASSES_MODULE}.enable() around the trt_gn torch.compile variants"


class _PassesOn:
    """What a fusion pass did, read when the row is made (after the compilation)."""

    def __init__(self, handle, shared_bias: bool = True):
        self.handle = handle
        self.call = "enable()" if shared_bias else "enable(shared_bias=False)"

    def __str__(self) -> str:
        report = getattr(self.handle, "report", None)
        done = report.summary().splitlines()[0] if report is not None else "on"
        return f"{FUSION_PASSES_MODULE}.{self.call}: {done}"


@contextlib.contextmanager
def fusion_passes(wanted: bool, backend: str = "inductor", shared_bias: bool = True):
    """The one place where trt_gn's torch.compile fusion passes (a convolution's bias and a residual
    add moved into the GroupNorm op) are turned on: around the trt_gn torch.compile variants only, and
    off again after them, with Inductor's and AOTAutograd's graph caches off so that the pass runs (and reports) on every
    graph. Yields what is on, for the report: "none ..." where trt_gn.compile_passes does not exist,
    "off ..." without `wanted`. shared_bias=False: the pass leaves a convolution whose output has other
    users alone."""
    if wanted and backend != "inductor":
        yield f"off (backend {backend} runs no Inductor pass)"
        return
    passes, described = fusion_passes_module(wanted)
    if passes is None:
        yield described
        return
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    with inductor_config.patch(fx_graph_cache=False), functorch_config.patch(enable_autograd_cache=False):
        handle = passes.enable() if shared_bias else passes.enable(shared_bias=False)
        try:
            yield _PassesOn(handle, shared_bias)
        finally:
            handle.disable()


@contextlib.contextmanager
def cudagraphs_or_error(mode: str | None):
    """Within, for mode reduce-overhead: Inductor raises where it would run a graph without CUDA graphs
    (instead of a warning)."""
    import torch._inductor.config as inductor_config

    if mode != "reduce-overhead":
        yield
        return
    with inductor_config.patch({"triton.cudagraph_or_error": True}):
        yield


def cudagraph_skips() -> int:
    from torch._dynamo.utils import counters

    return counters["inductor"]["cudagraph_skips"]


def model_inputs(recipe: str, latent: int, batch: int, dtype, seed: int) -> tuple[torch.Tensor, ...]:
    """The inputs of one call, on the CPU: the latents (VAE); latents, timesteps and text (UNet)."""
    from ..onnx.recipes import RECIPES, example_inputs

    if RECIPES[recipe].kind == "unet":
        args, _, _ = example_inputs(recipe, batch=batch, latent=latent, dtype=dtype)
        return args
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, 4, latent, latent, generator=g).to(dtype),)


def bench_resolution(recipe: str, latent: int, *, device, dtype, iters: int, warmup: int, with_compile: bool = True,
                     modes=MODES, profile_iters: int = 0, fusion: bool = True, backend: str = "inductor",
                     batch: int = 1, seed: int = 0, sides=SIDES, shared_bias: bool = True,
                     log=print) -> list[Row]:
    """Every variant on one model and latent size, one after another: each compiled variant is
    compiled, checked, timed, profiled (profile_iters > 0, a CUDA device) and checked again before
    the next starts (a fresh dynamo cache each, so no variant reuses or evicts another's compiled code)."""
    import torch._dynamo

    from ..compile_check import CheckedCompile, CompileFallbackError, raised_recompile_limits
    from ..onnx.recipes import RECIPES, build
    from ..swap import swap_group_norms

    device = torch.device(device)
    if profile_iters and device.type != "cuda":
        raise ValueError("the profiled pass needs a CUDA device (profile_iters=0 elsewhere)")
    dtype_name = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}[dtype]
    unet = RECIPES[recipe].kind == "unet"
    args = tuple(a.to(device) for a in model_inputs(recipe, latent, batch, dtype, seed))
    inputs = {"nchw": args,
              "nhwc": tuple(a.contiguous(memory_format=torch.channels_last) if a.dim() == 4 else a for a in args)}
    log(f"{recipe}: building the models (seeded random weights)")
    stock_nchw = build(recipe, dtype=dtype, seed=seed).to(device)
    stock_cl = copy.deepcopy(stock_nchw).to(memory_format=torch.channels_last)
    fused_cl = copy.deepcopy(stock_cl)
    # With the fusion on, the swap also moves the additions in front of each GroupNorm into the op
    # (pre_add) where it can see them in one forward; the compile pass takes those across modules.
    log(f"{recipe}: {swap_group_norms(fused_cl, pre_add=fusion).summary().splitlines()[0]}")
    models = {("stock", "nchw"): stock_nchw, ("stock", "nhwc"): stock_cl, ("trt_gn", "nhwc"): fused_cl}

    rows: list[Row] = []
    reference = None
    for v in variants(modes if with_compile else (), sides):
        model, x = models[(v.side, v.layout)], inputs[v.layout]
        label = f"{recipe} {v.name}"
        checked = None
        passes_cm = (fusion_passes(fusion, backend, shared_bias) if (v.side == "trt_gn" and v.mode)
                     else contextlib.nullcontext(None))
        with torch.no_grad(), passes_cm as passes, cudagraphs_or_error(v.mode):
            if v.mode:
                torch._dynamo.reset()
                skips = cudagraph_skips()
                with raised_recompile_limits():
                    log(f"{label}: compiling ({backend}, mode {v.mode})" + (f", fusion passes: {passes}" if passes else ""))
                    # Graph breaks are allowed (diffusers code may have some) and counted; a call that
                    # compiles nothing, or compiles again, is an error.
                    checked = CheckedCompile(model, label, backend=backend, fullgraph=False, dynamic=False,
                                             mode=v.mode)
                    checked.first_call(*x)
                    log(f"{label}: {checked.graphs} graph(s), {checked.graph_breaks} graph break(s), "
                        f"{checked.compile_s:.0f} s" + (f"; {passes}" if isinstance(passes, _PassesOn) else ""))
                    if v.mode == "reduce-overhead":
                        def call(checked=checked, x=x):
                            # each call a new step: its outputs may overwrite the last call's
                            torch.compiler.cudagraph_mark_step_begin()
                            return checked(*x)
                    else:
                        def call(checked=checked, x=x):
                            return checked(*x)
                    times, host, out = time_ms(call, iters, warmup, device)
                    out = out.float()  # a copy: the profiled calls may overwrite CUDA graph outputs
                    breakdown = profile_calls(call, profile_iters, device) if profile_iters else None
                    checked.check_settled()
                if cudagraph_skips() != skips:
                    raise CompileFallbackError(f"{label}: Inductor ran without CUDA graphs (skipped "
                                               f"{cudagraph_skips() - skips} time(s)): not reduce-overhead")
            else:
                def call(model=model, x=x):
                    return model(*x)
                times, host, out = time_ms(call, iters, warmup, device)
                out = out.float()
                breakdown = profile_calls(call, profile_iters, device) if profile_iters else None
        if v.name == STOCK_EAGER_NCHW:
            reference = out
        size = f"{out.shape[-2]}x{out.shape[-1]}" + (" latents" if unet else "")
        diff = None if reference is None else float((out - reference).abs().max())
        row = Row(resolution=size, recipe=recipe, latents="x".join(map(str, args[0].shape)), dtype=dtype_name,
                  variant=v.name, median_ms=statistics.median(times), min_ms=min(times), max_ms=max(times),
                  host_ms=statistics.median(host),
                  iters=iters, max_abs_diff=diff, mode=v.mode, fusion_passes=None if passes is None else str(passes))
        if checked is not None:
            row.graphs, row.graph_breaks, row.compile_s = checked.graphs, checked.graph_breaks, checked.compile_s
        if breakdown is not None:
            row.add_breakdown(breakdown)
        rows.append(row)
        profiled = "" if breakdown is None else (f", kernels {row.kernel_ms:.2f} ms a call, GPU idle "
                                                 f"{row.gpu_idle_ms:.2f} ms ({profile_iters} profiled calls)")
        log(f"{label}: median {row.median_ms:.2f} ms over {iters} calls{profiled}, max abs diff "
            f"{'-' if diff is None else f'{diff:.3e}'}")
        del out, checked
        torch._dynamo.reset()
    fill_comparisons(rows)
    return rows


def _comma_list(parser, option: str, text: str, allowed, convert=str) -> list:
    try:
        values = [convert(v.strip()) for v in text.split(",") if v.strip()]
    except ValueError:
        parser.error(f"{option}: integers expected, got {text!r}")
    bad = [v for v in values if v not in allowed]
    if bad or not values:
        parser.error(f"{option}: {bad or 'none'} not among {list(allowed)}")
    return list(dict.fromkeys(values))


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__ + "\n" + rules_table(),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=MODELS, default="vae",
                        help="vae: the VAE decode at --resolutions; unet: one SD 1.5 UNet step (default: vae)")
    parser.add_argument("--resolutions", default=None,
                        help=f"--model vae: comma-separated image sizes of {sorted(RESOLUTIONS)} (default: 512,1024)")
    parser.add_argument("--modes", default=",".join(MODES),
                        help=f"comma-separated torch.compile modes of {list(MODES)} (default: all)")
    parser.add_argument("--iters", type=int, default=20, help="timed calls a variant (default: 20)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed calls before them (default: 3)")
    parser.add_argument("--profile-iters", type=int, default=5,
                        help="profiled calls a variant, after the timed ones; 0: no profiled pass (default: 5)")
    parser.add_argument("--dtype", choices=("fp16", "bf16"), default="fp16")
    parser.add_argument("--batch", type=int, default=None,
                        help=f"latents a call (default: 1 for vae, {UNET[2]} for unet)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-compile", dest="compile", action="store_false",
                        help="leave out the torch.compile variants (the best stock is then eager)")
    parser.add_argument("--no-fusion-passes", dest="fusion", action="store_false",
                        help="trt_gn variants without the pre-add fusion (swap pre_add=False, no "
                             "trt_gn.compile_passes)")
    parser.add_argument("--sides", default=",".join(SIDES),
                        help="comma-separated sides to run, of ['stock', 'trt_gn'] (default: both); one side "
                             "alone for an A/B of trt_gn builds (TRT_GN_KERNELS_LIBRARY) in separate runs, "
                             "which then has no speedup column")
    parser.add_argument("--no-shared-bias", dest="shared_bias", action="store_false",
                        help="the trt_gn compiled variants' fusion pass leaves a convolution whose output has "
                             "other users alone (trt_gn.compile_passes.enable(shared_bias=False)), to measure "
                             "that rule")
    parser.add_argument("--out", type=Path, default=None, help="also write the rows to this CSV file")
    parser.add_argument("--markdown", type=Path, default=None,
                        help="also write the report (header, table, summary) to this markdown file")
    args = parser.parse_args(argv)
    if args.model == "unet":
        if args.resolutions is not None:
            parser.error("--resolutions applies to --model vae only (the UNet step is 64x64 latents)")
        args.resolutions = []
    else:
        args.resolutions = _comma_list(parser, "--resolutions", args.resolutions or "512,1024", RESOLUTIONS, int)
    args.modes = _comma_list(parser, "--modes", args.modes, MODES)
    args.sides = _comma_list(parser, "--sides", args.sides, SIDES)
    if not args.shared_bias and not (args.fusion and "trt_gn" in args.sides):
        parser.error("--no-shared-bias needs the trt_gn side with its fusion passes on")
    if args.iters < MIN_ITERS:
        parser.error(f"--iters must be >= {MIN_ITERS}")
    if args.batch is None:
        args.batch = UNET[2] if args.model == "unet" else 1
    if args.warmup < 0 or args.batch < 1:
        parser.error("--warmup must be >= 0 and --batch >= 1")
    if args.profile_iters < 0:
        parser.error("--profile-iters must be >= 0")
    from ..fileio import output_file_problem

    for option, path, example in (("--out", args.out, "vae.csv"), ("--markdown", args.markdown, "vae.md")):
        problem = path is not None and output_file_problem(path, example=example)
        if problem:
            parser.error(f"{option} {path}: {problem}")
    return args


def report(rows: list[Row], header: list[str]) -> str:
    """The header lines, the markdown table and the summary lines, as printed."""
    return "\n".join([*header, "", markdown_table(rows), "", *summary_lines(rows)]) + "\n"


def main(argv=None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print(f"{PROG}: error: no CUDA device; this benchmark needs a GPU (H100/H200)", file=sys.stderr)
        return EXIT_MISSING
    from .. import abi, ops  # ops registers the op
    dtype = ops.DTYPE_BY_NAME[args.dtype]
    log = Progress()
    runs = [(UNET[0], UNET[1])] if args.model == "unet" else [RESOLUTIONS[r] for r in args.resolutions]
    rows: list[Row] = []
    try:
        _, passes = fusion_passes_module(args.fusion)  # checked before the first compile
        for recipe, latent in runs:
            log(f"{recipe}: latents {args.batch}x4x{latent}x{latent}, {args.dtype}")
            rows += bench_resolution(recipe, latent, device="cuda", dtype=dtype, iters=args.iters,
                                     warmup=args.warmup, with_compile=args.compile, modes=args.modes,
                                     profile_iters=args.profile_iters, fusion=args.fusion, batch=args.batch,
                                     seed=args.seed, sides=args.sides, shared_bias=args.shared_bias, log=log)
            torch.cuda.empty_cache()
    except Error as e:  # CompileFallbackError included: the measurement failed
        print(f"{PROG}: error: {e.message}" + (f"\n  hint: {e.hint}" if e.hint else ""), file=sys.stderr)
        return e.exit_code
    modes = ", ".join(args.modes) if args.compile else "none"
    header = [f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, {args.dtype}, batch {args.batch}, "
              f"torch.compile modes: {modes}",
              f"wall: median GPU time (CUDA events) of {args.iters} calls after {args.warmup} untimed, no profiler; "
              + (f"kernel time: torch.profiler over {args.profile_iters} further calls, ms a call by kind; "
                 "GPU idle = wall - kernel time" if args.profile_iters else "no profiled pass"),
              f"trt_gn torch.compile fusion passes: {passes if args.compile else 'no compiled variant'}",
              f"trt_gn op: {ops.implementation()}" + (f"; kernels library: {abi.library_path()}"
                                                      if "trt_gn" in args.sides else ""),
              f"sides: {', '.join(args.sides)}"]
    text = report(rows, header)
    print(text, end="")
    if args.out is not None:
        write_csv(rows, args.out)
        print(f"wrote {args.out}")
    if args.markdown is not None:
        from ..fileio import write_text

        write_text(args.markdown, text)
        print(f"wrote {args.markdown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
