#!/usr/bin/env python3
"""End-to-end VAE decode on a GPU: stock nn.GroupNorm+SiLU vs trt_gn's module swap.

diffusers AutoencoderKL in the SD 1.5 configuration (seeded random weights), fp16, channels_last,
64x64 latents -> 512x512 images. Prints the median decode time of each (>= 10 timed decodes
after warm-up, CUDA events) and the max absolute difference between the two images.

    python export/bench_vae_decode.py [--iters 20] [--batch 1] [--latent 64]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import torch


def timed(fn, iters: int, warmup: int) -> tuple[float, torch.Tensor]:
    for _ in range(warmup):
        out = fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        out = fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times), out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--latent", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.iters < 10:
        parser.error("--iters must be >= 10")
    if not torch.cuda.is_available():
        print("error: no CUDA device; this benchmark needs an H100/H200", file=sys.stderr)
        return 2
    from diffusers import AutoencoderKL

    import trt_gn  # noqa: F401  (registers the op)
    from trt_gn.onnx.recipes import SD15_VAE
    from trt_gn.swap import swap_group_norms

    torch.manual_seed(args.seed)
    stock = AutoencoderKL(**SD15_VAE).to("cuda", torch.float16).eval().to(memory_format=torch.channels_last)
    fused = copy.deepcopy(stock)
    report = swap_group_norms(fused)
    print(report.summary().splitlines()[0])
    g = torch.Generator(device="cuda").manual_seed(args.seed)
    latents = torch.randn(args.batch, 4, args.latent, args.latent, device="cuda", generator=g, dtype=torch.float16)
    latents = latents.contiguous(memory_format=torch.channels_last)

    with torch.inference_mode():
        t_stock, img_stock = timed(lambda: stock.decode(latents).sample, args.iters, args.warmup)
        t_fused, img_fused = timed(lambda: fused.decode(latents).sample, args.iters, args.warmup)
    diff = (img_stock.float() - img_fused.float()).abs()
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}")
    print(f"VAE decode {args.batch}x4x{args.latent}x{args.latent} -> {tuple(img_stock.shape)} fp16 channels_last")
    print(f"stock nn.GroupNorm+SiLU: median {t_stock:.3f} ms over {args.iters} decodes")
    print(f"trt_gn GroupNormAct:     median {t_fused:.3f} ms over {args.iters} decodes  (speedup {t_stock / t_fused:.2f}x)")
    print(f"max |image difference|: {diff.max().item():.4e}  (mean {diff.mean().item():.3e}; image range "
          f"[{img_stock.min().item():.2f}, {img_stock.max().item():.2f}])")
    return 0


if __name__ == "__main__":
    sys.exit(main())
