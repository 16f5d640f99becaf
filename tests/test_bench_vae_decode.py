"""python -m trt_gn.lab.vae_decode without a GPU: its options, and every variant of its flow (model
building, the trt_gn swap, the checked compiles, the image differences, table and CSV) on the tiny
diffusers VAE decoder on the CPU, compiled with dynamo's eager backend (the GPU run uses Inductor;
aot_eager trips over the CPU's native_group_norm, which Inductor decomposes)."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from trt_gn.lab import vae_decode as vae


def run(*args, cwd):
    from cli_helpers import cli_env

    return subprocess.run([sys.executable, "-m", "trt_gn.lab.vae_decode", *args], capture_output=True, text=True,
                          cwd=cwd, env=cli_env())


def test_options(tmp_path):
    args = vae.parse_args([])
    assert args.resolutions == [512, 1024] and args.compile is True and args.iters == 20 and args.out is None
    args = vae.parse_args(["--resolutions", "1024", "--no-compile", "--iters", "5", "--out", "x.csv"])
    assert args.resolutions == [1024] and args.compile is False and args.out == Path("x.csv")
    assert vae.RESOLUTIONS == {512: ("sd15-vae-decoder", 64), 1024: ("sdxl-vae-decoder", 128)}
    for bad, message in ((["--resolutions", "768"], "[768] not among [512, 1024]"),
                         (["--resolutions", "big"], "integers expected"),
                         (["--iters", "4"], "--iters must be >= 5")):
        proc = run(*bad, cwd=tmp_path)
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr


def test_without_gpu_is_one_clear_line(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    proc = run(cwd=tmp_path)
    assert proc.returncode == 3
    assert proc.stderr == "python -m trt_gn.lab.vae_decode: error: no CUDA device; this benchmark needs a GPU (H100/H200)\n" and proc.stdout == ""


def test_every_variant_on_the_tiny_decoder(tmp_path):
    lines = []
    try:
        rows = vae.bench_resolution("tiny-vae-decoder", 16, device="cpu", dtype=torch.float32, iters=2, warmup=1,
                                    backend="eager", log=lines.append)
    finally:
        torch._dynamo.reset()
    assert [r.variant for r in rows] == [v[0] for v in vae.VARIANTS]
    assert all(r.resolution == "32x32" and r.latents == "1x4x16x16" and r.dtype == "fp32" for r in rows)
    by_name = {r.variant: r for r in rows}
    assert by_name[vae.STOCK_EAGER_NCHW].max_abs_diff == 0.0
    # the same model in another layout, compiled, or with trt_gn's GroupNorm: the same image up to rounding
    assert all(0.0 <= r.max_abs_diff < 1e-3 for r in rows)
    assert any(r.max_abs_diff > 0.0 for r in rows if r.variant.startswith("trt_gn"))
    for r in rows:
        compiled = "torch.compile" in r.variant
        assert (r.graphs is not None and r.graphs >= 1 and r.compile_s > 0) == compiled
        assert r.min_ms <= r.median_ms <= r.max_ms and r.iters == 2
    stock = [r for r in rows if r.variant.startswith("stock ")]
    best = min(stock, key=lambda r: r.median_ms)
    assert best.speedup_vs_best_stock == 1.0 and all(r.speedup_vs_best_stock <= 1.0 for r in stock)
    fused = by_name["trt_gn eager channels_last"]
    assert fused.speedup_vs_best_stock == pytest.approx(best.median_ms / fused.median_ms)
    assert any("GroupNorm" in line for line in lines)  # the swap's report
    assert any("stock torch.compile NCHW: compiling (eager)" in line for line in lines)

    table = vae.markdown_table(rows).splitlines()
    assert table[0] == "| resolution | variant | median ms | vs best stock | max abs diff vs stock eager NCHW | compile |"
    assert len(table) == 2 + len(rows)
    assert table[2].startswith("| 32x32 | stock eager NCHW | ") and table[2].endswith(" | 0.000e+00 | - |")
    assert "graph(s)" in table[4]
    summary = vae.summary_lines(rows)
    assert len(summary) == 1 and summary[0].startswith(f"32x32: best stock is {best.variant} (")

    vae.write_csv(rows, tmp_path / "vae.csv")
    with open(tmp_path / "vae.csv") as f:
        read = list(csv.DictReader(f))
    assert [r["variant"] for r in read] == [r.variant for r in rows]
    assert read[0]["graphs"] == "" and int(read[2]["graphs"]) >= 1


def test_without_compile_and_comparisons():
    rows = [vae.Row("512x512", "sd15-vae-decoder", "1x4x64x64", "fp16", name, ms, ms, ms, 10)
            for name, ms in (("stock eager NCHW", 21.4), ("stock eager channels_last", 26.4),
                             ("stock torch.compile NCHW", 8.85), ("stock torch.compile channels_last", 7.78),
                             ("trt_gn eager channels_last", 8.31), ("trt_gn torch.compile channels_last", 6.39))]
    vae.fill_comparisons(rows)
    assert [round(r.speedup_vs_best_stock, 3) for r in rows] == [0.364, 0.295, 0.879, 1.0, 0.936, 1.218]
    assert vae.summary_lines(rows) == [
        "512x512: best stock is stock torch.compile channels_last (7.78 ms); trt_gn torch.compile channels_last "
        "6.39 ms, 1.22x faster"]
