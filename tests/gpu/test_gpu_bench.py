"""`trt-gn bench` end to end on one small shape (the full run is `trt-gn bench`, see README), and
python -m trt_gn.lab.ab on the same shape."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest
from gpu_helpers import GPU

from trt_gn import abi
from trt_gn.lab import bench
from trt_gn.cli import main

pytestmark = GPU


def test_bench_one_shape(tmp_path, capsys):
    assert main(["bench", "--shapes", "sd15-unet-1280x8", "--dtypes", "fp16,bf16", "--replays", "30",
                 "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "sd15-unet-1280x8" in out and "stay there for the copy and the kernels alike" in out
    assert ("torch.compile (inductor): 4 variant(s) compiled before timing, 1 graph(s) each, none ran eager or "
            "compiled again while timed") in out
    assert f"kernels: {abi.library_path()}, running code built for compute_{abi.kernels_ptx_arch()}\n" in out
    with open(tmp_path / "bench.csv") as f:
        rows = list(csv.DictReader(f))
    impls = {(r["dtype"], r["impl"]) for r in rows}
    assert impls == {(d, i) for d in ("fp16", "bf16") for i in
                     (bench.COPY, *bench.OURS.values(), *bench.TORCH.values(), *bench.COMPILED.values())}
    for r in rows:
        assert float(r["us_per_launch"]) > 0
        assert float(r["round_spread"]) >= 0  # two rounds by default: the slower one's excess
        if r["impl"] != bench.COPY:
            assert float(r["max_abs_err"]) < 0.1  # the GPU correctness tests hold trt_gn's exact bound
        if r["impl"] in bench.OURS.values():
            peers = {p["impl"]: float(p["us_per_launch"]) for p in rows
                     if p["dtype"] == r["dtype"] and p["impl"] in bench.PEERS}
            assert r["best_peer"] == min(peers, key=peers.get)
            assert float(r["speedup_vs_best_peer"]) == pytest.approx(min(peers.values()) / float(r["us_per_launch"]))
    pytest.importorskip("matplotlib")
    assert (tmp_path / "bench.png").stat().st_size > 1000


def test_bench_one_round(tmp_path, capsys):
    assert main(["bench", "--shapes", "sd15-unet-1280x8", "--dtypes", "fp16", "--layouts", "nhwc", "--rounds", "1",
                 "--out", str(tmp_path)]) == 0
    assert "differed by more than" not in capsys.readouterr().out  # one round: nothing to compare
    with open(tmp_path / "bench.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["impl"] for r in rows] == [bench.COPY, bench.OURS["nhwc"], bench.TORCH["nhwc"], bench.COMPILED["nhwc"]]
    assert all(r["round_spread"] == "" for r in rows)


def test_bench_without_compile(tmp_path, capsys):
    assert main(["bench", "--shapes", "sd15-unet-1280x8", "--dtypes", "fp16", "--rounds", "1", "--no-compile",
                 "--out", str(tmp_path)]) == 0
    assert "torch.compile" not in capsys.readouterr().out
    with open(tmp_path / "bench.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["impl"] for r in rows] == [bench.COPY, *bench.OURS.values(), bench.TORCH["nchw"], bench.TORCH["nhwc"]]
    assert {r["best_peer"] for r in rows if r["impl"] in bench.OURS.values()} <= set(bench.TORCH.values())


def test_ab_kernels_two_variants(tmp_path):
    """python -m trt_gn.lab.ab alternates two variants (here the loaded library under two names) and
    checks each output against the reference."""
    lib = abi.library_path()
    proc = subprocess.run([sys.executable, "-m", "trt_gn.lab.ab", "--variant", f"a={lib}", "--variant", f"b={lib}",
                           "--shapes", "sd15-unet-1280x8", "--layouts", "nhwc", "--rounds", "2",
                           "--out", str(tmp_path)], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == 0, proc.stderr
    with open(tmp_path / "ab.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["variant"], r["round"]) for r in rows] == [("a", "1"), ("b", "1"), ("b", "2"), ("a", "2")]
    assert all(r["case"] == "sd15-unet-1280x8 fp16 nhwc" and r["check"] == "ok" for r in rows)
    assert all(float(r["us_per_launch"]) > 0 and float(r["copy_us"]) > 0 for r in rows)
    assert "sd15-unet-1280x8 fp16 nhwc" in proc.stdout and proc.stdout.rstrip().endswith(str(tmp_path / "ab.csv"))


def test_pre_add_against_the_separate_pass(tmp_path, capsys):
    from trt_gn.lab import pre_add

    out_csv = tmp_path / "pre_add.csv"
    assert pre_add.main(["--shapes", "sd15-unet-1280x8", "--layouts", "nhwc,nchw", "--rounds", "1",
                         "--out", str(out_csv)]) == 0
    assert "| sd15-unet-1280x8 | fp16 | nhwc | bias+residual |" in capsys.readouterr().out
    with open(out_csv) as f:
        rows = list(csv.DictReader(f))
    assert [(r["layout"], r["kind"]) for r in rows] == [(lay, k) for lay in ("nhwc", "nchw") for k in pre_add.KINDS]
    for r in rows:
        assert all(float(r[k]) > 0 for k in ("copy_us", "plain_us", "fused_us", "separate_us", "add_us"))
        # fp16, randn data: the separate pass rounds s (|s| < 8) once, 2^-11 * 8 = 0.004, which the
        # normalisation (group std about 1.7) and gamma (|gamma| < 4.5) carry to about 0.011; each y
        # rounds once more, half an ulp of |y| < 32 apiece: 0.016 together. 0.05 bounds the sum.
        assert float(r["max_abs_diff"]) < 0.05, r


def test_bandwidth_probe_small_sizes(tmp_path):
    # Every kind measured at every size, a positive time and a bandwidth that the bytes and the
    # time give back.
    out = tmp_path / "bw.csv"
    proc = subprocess.run([sys.executable, "-m", "trt_gn.lab.bandwidth", "--sizes-mb", "1,4", "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    from trt_gn.lab import bandwidth

    with open(out) as f:
        rows = list(csv.DictReader(f))
    assert [(int(r["size_mib"]), r["kind"]) for r in rows] == [(s, k) for s in (1, 4) for k in bandwidth.KINDS]
    for r in rows:
        moved = (1 if r["kind"] in ("read", "write") else 2) * int(r["size_mib"]) * bandwidth.MB
        assert float(r["us"]) > 0
        assert float(r["tb_per_s"]) == pytest.approx(moved / (float(r["us"]) * 1e-6) / 1e12, rel=0.01, abs=2e-3)
    assert proc.stdout.count("\n| ") == 2
