"""End-to-end VAE decode on a GPU: stock PyTorch (eager and torch.compile, NCHW and channels_last)
against trt_gn's module swap (eager and torch.compile, channels_last).

diffusers AutoencoderKL decoders (post_quant_conv + decoder, as `vae.decode` runs them) built from
their published configurations with seeded random weights (trt_gn/onnx/recipes.py, no download):
512x512 is the SD 1.5 VAE (latents 1x4x64x64), 1024x1024 the SDXL VAE (latents 1x4x128x128). For
each variant: the median GPU time of a decode (CUDA events), its speedup against the best stock
variant (the fastest of the four stock PyTorch ones), and the largest absolute difference of its
image from stock eager NCHW's.

The compiled variants are compiled (Inductor, static shapes) before they are timed, with dynamo's
recompile limits raised, and checked to have compiled and to compile nothing more while timed
(trt_gn.compile_check): no row reports eager PyTorch under a compiled name. Progress lines go to
stderr, the markdown table to stdout.

    python -m trt_gn.lab.vae_decode [--resolutions 512,1024] [--iters 20] [--out vae.csv]
"""

from __future__ import annotations

import argparse
import copy
import csv
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from ..errors import EXIT_MISSING

PROG = "python -m trt_gn.lab.vae_decode"
# resolution -> (recipe of trt_gn/onnx/recipes.py, latent height and width)
RESOLUTIONS = {512: ("sd15-vae-decoder", 64), 1024: ("sdxl-vae-decoder", 128)}
MIN_ITERS = 5

STOCK_EAGER_NCHW = "stock eager NCHW"
# (variant, stock or trt_gn, layout, compiled), in table order
VARIANTS = (
    (STOCK_EAGER_NCHW, "stock", "nchw", False),
    ("stock eager channels_last", "stock", "nhwc", False),
    ("stock torch.compile NCHW", "stock", "nchw", True),
    ("stock torch.compile channels_last", "stock", "nhwc", True),
    ("trt_gn eager channels_last", "trt_gn", "nhwc", False),
    ("trt_gn torch.compile channels_last", "trt_gn", "nhwc", True),
)


@dataclass
class Row:
    resolution: str  # "512x512"
    recipe: str
    latents: str  # "1x4x64x64"
    dtype: str
    variant: str
    median_ms: float
    min_ms: float
    max_ms: float
    iters: int
    speedup_vs_best_stock: float | None = None  # best stock variant's median / this median
    max_abs_diff: float | None = None  # max |image - stock eager NCHW's image|
    graphs: int | None = None  # compiled variants: graphs torch.compile compiled
    graph_breaks: int | None = None
    compile_s: float | None = None  # compiled variants: wall time of the compiling call


class Progress:
    """Progress lines with the time since the start, to stderr."""

    def __init__(self, stream=sys.stderr):
        self.start = time.perf_counter()
        self.stream = stream

    def __call__(self, line: str) -> None:
        print(f"[{time.perf_counter() - self.start:6.1f} s] {line}", file=self.stream, flush=True)


def time_ms(fn, iters: int, warmup: int, device: torch.device) -> tuple[list[float], torch.Tensor]:
    """(per-call times in ms, the last output): GPU time between CUDA events on a GPU, wall time elsewhere."""
    for _ in range(warmup):
        out = fn()
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
    times = []
    for _ in range(iters):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            out = fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            out = fn()
            times.append((time.perf_counter() - t0) * 1000.0)
    return times, out


def fill_comparisons(rows: list[Row]) -> None:
    """Speedup against the best (fastest) stock variant of the same resolution, per row."""
    for res in dict.fromkeys(r.resolution for r in rows):
        stock = [r.median_ms for r in rows if r.resolution == res and r.variant.startswith("stock ")]
        if not stock:
            continue
        best = min(stock)
        for r in rows:
            if r.resolution == res:
                r.speedup_vs_best_stock = best / r.median_ms


def best_stock(rows: list[Row], resolution: str) -> Row | None:
    stock = [r for r in rows if r.resolution == resolution and r.variant.startswith("stock ")]
    return min(stock, key=lambda r: r.median_ms) if stock else None


def markdown_table(rows: list[Row]) -> str:
    lines = ["| resolution | variant | median ms | vs best stock | max abs diff vs stock eager NCHW | compile |",
             "|---|---|---:|---:|---:|---|"]
    for r in rows:
        speedup = "-" if r.speedup_vs_best_stock is None else f"{r.speedup_vs_best_stock:.2f}x"
        diff = "-" if r.max_abs_diff is None else f"{r.max_abs_diff:.3e}"
        comp = "-"
        if r.graphs is not None:
            breaks = f", {r.graph_breaks} graph break(s)" if r.graph_breaks else ""
            comp = f"{r.graphs} graph(s){breaks}, {r.compile_s:.0f} s"
        lines.append(f"| {r.resolution} | {r.variant} | {r.median_ms:.2f} | {speedup} | {diff} | {comp} |")
    return "\n".join(lines)


def summary_lines(rows: list[Row]) -> list[str]:
    """Per resolution: the best stock variant and the fastest trt_gn variant's speedup against it."""
    out = []
    for res in dict.fromkeys(r.resolution for r in rows):
        best = best_stock(rows, res)
        ours = [r for r in rows if r.resolution == res and r.variant.startswith("trt_gn ")]
        if best is None or not ours:
            continue
        fastest = min(ours, key=lambda r: r.median_ms)
        out.append(f"{res}: best stock is {best.variant} ({best.median_ms:.2f} ms); {fastest.variant} "
                   f"{fastest.median_ms:.2f} ms, {best.median_ms / fastest.median_ms:.2f}x faster")
    return out


def write_csv(rows: list[Row], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(Row.__dataclass_fields__), lineterminator="\n")
        writer.writeheader()
        for r in rows:
            writer.writerow({k: ("" if v is None else v) for k, v in asdict(r).items()})


def bench_resolution(recipe: str, latent: int, *, device, dtype, iters: int, warmup: int, with_compile: bool = True,
                     backend: str = "inductor", batch: int = 1, seed: int = 0, log=print) -> list[Row]:
    """Every variant of VARIANTS on one decoder and latent size, one after another: each compiled
    variant is compiled, checked, timed and checked again before the next starts (a fresh dynamo
    cache each, so no variant reuses or evicts another's compiled code)."""
    import torch._dynamo

    from ..compile_check import CheckedCompile, raised_recompile_limits
    from ..onnx.recipes import build
    from ..swap import swap_group_norms

    device = torch.device(device)
    dtype_name = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}[dtype]
    g = torch.Generator().manual_seed(seed)
    lat = torch.randn(batch, 4, latent, latent, generator=g).to(device, dtype)
    inputs = {"nchw": lat, "nhwc": lat.contiguous(memory_format=torch.channels_last)}
    log(f"{recipe}: building the models (seeded random weights)")
    stock_nchw = build(recipe, dtype=dtype, seed=seed).to(device)
    stock_cl = copy.deepcopy(stock_nchw).to(memory_format=torch.channels_last)
    fused_cl = copy.deepcopy(stock_cl)
    log(f"{recipe}: {swap_group_norms(fused_cl).summary().splitlines()[0]}")
    models = {("stock", "nchw"): stock_nchw, ("stock", "nhwc"): stock_cl, ("trt_gn", "nhwc"): fused_cl}

    rows: list[Row] = []
    reference = None
    for variant, kind, layout, compiled in VARIANTS:
        if compiled and not with_compile:
            continue
        model, x = models[(kind, layout)], inputs[layout]
        checked = None
        with torch.no_grad():
            if compiled:
                torch._dynamo.reset()
                with raised_recompile_limits():
                    log(f"{recipe} {variant}: compiling ({backend})")
                    # Graph breaks are allowed (diffusers code may have some) and counted; a call that
                    # compiles nothing, or compiles again, is an error.
                    checked = CheckedCompile(model, f"{recipe} {variant}", backend=backend, fullgraph=False,
                                             dynamic=False)
                    checked.first_call(x)
                    log(f"{recipe} {variant}: {checked.graphs} graph(s), {checked.graph_breaks} graph break(s), "
                        f"{checked.compile_s:.0f} s")
                    times, image = time_ms(lambda: checked(x), iters, warmup, device)
                    checked.check_settled()
            else:
                times, image = time_ms(lambda: model(x), iters, warmup, device)
        if variant == STOCK_EAGER_NCHW:
            reference = image.float()
        size = f"{image.shape[-2]}x{image.shape[-1]}"
        diff = None if reference is None else float((image.float() - reference).abs().max())
        row = Row(resolution=size, recipe=recipe, latents="x".join(map(str, lat.shape)), dtype=dtype_name,
                  variant=variant, median_ms=statistics.median(times), min_ms=min(times), max_ms=max(times),
                  iters=iters, max_abs_diff=diff)
        if checked is not None:
            row.graphs, row.graph_breaks, row.compile_s = checked.graphs, checked.graph_breaks, checked.compile_s
        rows.append(row)
        log(f"{recipe} {variant}: median {row.median_ms:.2f} ms over {iters} decodes, max abs diff "
            f"{'-' if diff is None else f'{diff:.3e}'}")
        del image, checked
        torch._dynamo.reset()
    fill_comparisons(rows)
    return rows


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--resolutions", default="512,1024",
                        help=f"comma-separated image sizes of {sorted(RESOLUTIONS)} (default: 512,1024)")
    parser.add_argument("--iters", type=int, default=20, help="timed decodes a variant (default: 20)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed decodes before them (default: 3)")
    parser.add_argument("--dtype", choices=("fp16", "bf16"), default="fp16")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-compile", dest="compile", action="store_false",
                        help="leave out the torch.compile variants (the best stock is then eager)")
    parser.add_argument("--out", type=Path, default=None, help="also write the rows to this CSV file")
    args = parser.parse_args(argv)
    try:
        args.resolutions = [int(v) for v in args.resolutions.split(",") if v.strip()]
    except ValueError:
        parser.error(f"--resolutions: integers expected, got {args.resolutions!r}")
    bad = [r for r in args.resolutions if r not in RESOLUTIONS]
    if bad or not args.resolutions:
        parser.error(f"--resolutions: {bad or 'none'} not among {sorted(RESOLUTIONS)}")
    if args.iters < MIN_ITERS:
        parser.error(f"--iters must be >= {MIN_ITERS}")
    if args.warmup < 0 or args.batch < 1:
        parser.error("--warmup must be >= 0 and --batch >= 1")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print(f"{PROG}: error: no CUDA device; this benchmark needs a GPU (H100/H200)", file=sys.stderr)
        return EXIT_MISSING
    from .. import ops  # registers the op
    from ..compile_check import CompileFallbackError

    dtype = ops.DTYPE_BY_NAME[args.dtype]
    log = Progress()
    rows: list[Row] = []
    try:
        for res in args.resolutions:
            recipe, latent = RESOLUTIONS[res]
            log(f"{res}x{res}: {recipe}, latents {args.batch}x4x{latent}x{latent}, {args.dtype}")
            rows += bench_resolution(recipe, latent, device="cuda", dtype=dtype, iters=args.iters,
                                     warmup=args.warmup, with_compile=args.compile, batch=args.batch,
                                     seed=args.seed, log=log)
            torch.cuda.empty_cache()
    except CompileFallbackError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, {args.dtype}, batch {args.batch}, "
          f"median GPU time (CUDA events) of {args.iters} decodes after {args.warmup} untimed")
    print()
    print(markdown_table(rows))
    print()
    for line in summary_lines(rows):
        print(line)
    if args.out is not None:
        write_csv(rows, args.out)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
