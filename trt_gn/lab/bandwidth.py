"""Device bandwidth by tensor size: where a copy of a large tensor slows down, and why.

For each size (MB of one tensor), timed like every kernel of the lab (20 launches in a CUDA graph,
median of the replays, trt_gn.lab.bench.time_per_launch_us):

  copy       y.copy_(x), one launch over the whole tensor: PyTorch copies a contiguous tensor of one
             dtype with cudaMemcpyAsync, so this is the driver's device-to-device memcpy
  neg        torch.neg(x, out=y): a kernel on the SMs with a copy's traffic, for where the memcpy
             is slower than the SMs would be
  copy/2     the same bytes as 2 memcpys of the halves (4: quarters): if the pieces run faster
  copy/4     than the whole, the cost grows with the span of one memcpy
  read       x.sum() over fp16 (reads x once; the fp32 result is tiny)
  write      y.fill_(1): writes y once
  copy>4K    the copy into a y that starts 4 KiB (2 MiB) past the start of its allocation: the
  copy>2M    caching allocator puts tensors of a power-of-two size a power of two apart, and if
             the copy is slow only there, reads and writes fall on the same memory channels

Bandwidth counts the bytes each moves (the copies and neg: read + write). Run it once as is and once with
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (the allocator maps memory in 2 MB pages then,
not in one cudaMalloc a tensor); `--label` names the run in the CSV.

    python -m trt_gn.lab.bandwidth [--sizes-mb 67,134,268,537,1074] [--replays 30] [--out bw.csv]
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import sys
from pathlib import Path

from .. import fileio
from ..errors import EXIT_BAD_INPUT, EXIT_MISSING
from .bench import MIN_REPLAYS, time_per_launch_us

PROG = "python -m trt_gn.lab.bandwidth"
# Tensor sizes of the shape list's VAE decoder activations (fp16): 1x128x512x512 is 67 MB,
# 1x256x1024x1024 537 MB.
DEFAULT_SIZES_MB = (34, 67, 134, 268, 537, 1074)
MB = 1 << 20
KINDS = ("copy", "neg", "copy/2", "copy/4", "read", "write", "copy>4K", "copy>2M")


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a comma-separated list of integers") from None
    if not sizes or min(sizes) < 1 or max(sizes) > 16384:
        raise argparse.ArgumentTypeError(f"'{text}': give sizes from 1 to 16384 MB")
    return sizes


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes-mb", type=_sizes, default=list(DEFAULT_SIZES_MB),
                   help="sizes of one tensor in MiB (default: %(default)s)")
    p.add_argument("--replays", type=int, default=MIN_REPLAYS, help=f"graph replays a timing (>= {MIN_REPLAYS})")
    p.add_argument("--label", default=None, help="the run's name in the CSV (default: the allocator setting)")
    p.add_argument("--out", type=Path, default=None, help="also write the rows to this CSV file")
    args = p.parse_args(argv)
    if args.replays < MIN_REPLAYS:
        p.error(f"--replays {args.replays}: the lab times medians of at least {MIN_REPLAYS} replays")
    if args.out is not None:
        problem = fileio.output_file_problem(args.out)
        if problem:
            p.error(problem)
    return args


def measure(size_mb: int, replays: int) -> dict[str, float]:
    """Microseconds per launch of each kind on tensors of size_mb MiB."""
    import torch

    n = size_mb * MB // 2
    x = torch.randn(n, device="cuda", dtype=torch.float16)
    y = torch.empty_like(x)
    halves, quarters = x.chunk(2), x.chunk(4)
    y_4k = torch.empty(n + MB, device="cuda", dtype=torch.float16)[2048:2048 + n]
    y_2m = torch.empty(n + MB, device="cuda", dtype=torch.float16)[MB:]
    y_halves, y_quarters = y.chunk(2), y.chunk(4)

    def pieces(src, dst):
        def run():
            for s, d in zip(src, dst):
                d.copy_(s)
        return run

    # Each graph launch of copy/2 is two copies: time_per_launch_us divides by launches, so the
    # piece-wise rows are per whole tensor as the copy row is.
    fns = {
        "copy": lambda: y.copy_(x),
        "neg": lambda: torch.neg(x, out=y),
        "copy/2": pieces(halves, y_halves),
        "copy/4": pieces(quarters, y_quarters),
        "read": lambda: x.sum(dtype=torch.float32),
        "write": lambda: y.fill_(1.0),
        "copy>4K": lambda: y_4k.copy_(x),
        "copy>2M": lambda: y_2m.copy_(x),
    }
    return {kind: time_per_launch_us(fn, replays) for kind, fn in fns.items()}


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        import torch
    except ImportError:
        print(f"{PROG}: error: needs the Python module 'torch', which is not installed", file=sys.stderr)
        return EXIT_MISSING
    if not torch.cuda.is_available():
        print(f"{PROG}: error: needs a CUDA GPU; none is visible to torch", file=sys.stderr)
        return EXIT_MISSING
    free, _ = torch.cuda.mem_get_info()
    too_big = [s for s in args.sizes_mb if 4.2 * s * MB > free]
    if too_big:
        print(f"{PROG}: error: sizes {too_big} MiB need four tensors each; {free // MB} MiB are free", file=sys.stderr)
        return EXIT_BAD_INPUT
    label = args.label or os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "") or "default allocator"
    device = torch.cuda.get_device_name()
    rows = []
    print(f"{device}, {label}", file=sys.stderr)
    print("| MiB | " + " | ".join(f"{k} µs (TB/s)" for k in KINDS) + " |")
    print("|---:|" + "---:|" * len(KINDS))
    for size in args.sizes_mb:
        times = measure(size, args.replays)
        cells = []
        for kind in KINDS:
            moved = (1 if kind in ("read", "write") else 2) * size * MB
            tbps = moved / (times[kind] * 1e-6) / 1e12
            cells.append(f"{times[kind]:.1f} ({tbps:.2f})")
            rows.append({"device": device, "label": label, "size_mib": size, "kind": kind,
                         "us": round(times[kind], 2), "tb_per_s": round(tbps, 3)})
        print(f"| {size} | " + " | ".join(cells) + " |", flush=True)
        torch.cuda.empty_cache()
    if args.out is not None:
        text = io.StringIO()
        writer = csv.DictWriter(text, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
        fileio.write_text(args.out, text.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
