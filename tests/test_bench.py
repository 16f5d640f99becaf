"""`trt-gn bench` without a GPU, and the benchmark's table/CSV/plot writers (timings come from the GPU suite)."""

from __future__ import annotations

import csv
import shutil
import subprocess

import pytest
import torch

from trt_gn import bench
from trt_gn.cli import SUBCOMMAND_MODULES, build_parser, main
from trt_gn.shapes import SHAPES, select_shapes


def test_shape_list_is_the_issues():
    assert len(SHAPES) == 10
    assert [s.size for s in SHAPES][-1] == (1, 128, 512, 512)
    assert all(s.c % s.groups == 0 for s in SHAPES)
    assert select_shapes(["vae-dec-256x512"])[0].eps == 1e-6
    with pytest.raises(ValueError, match="unknown shape\\(s\\) nope; known: sd15-unet-320x64"):
        select_shapes(["nope"])


def test_every_subcommand_module_registers():
    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    assert "bench" in SUBCOMMAND_MODULES and len(commands) >= len(SUBCOMMAND_MODULES)
    args = parser.parse_args(["bench", "--replays", "40", "--dtypes", "bf16", "--layouts", "nhwc"])
    assert callable(args.func) and args.replays == 40 and args.dtypes == ["bf16"] and args.layouts == ["nhwc"]


def test_bench_without_gpu_is_one_clear_line(capsys, tmp_path):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    assert main(["bench", "--out", str(tmp_path)]) == 3  # EXIT_MISSING: no CUDA GPU here
    err = capsys.readouterr().err
    assert err == "trt-gn bench: error: no CUDA device: the benchmark needs a GPU (torch.cuda.is_available() is False)\n"
    assert list(tmp_path.iterdir()) == []


def test_bench_bad_options(capsys, tmp_path):
    assert main(["bench", "--shapes", "nope"]) == 2
    assert "unknown shape(s) nope" in capsys.readouterr().err
    assert main(["bench", "--dtypes", "fp8"]) == 2
    assert "unknown dtype 'fp8'" in capsys.readouterr().err
    # reported the same with or without a GPU, before anything is timed or written
    assert main(["bench", "--rounds", "0", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err == "trt-gn bench: error: --rounds must be >= 1, got 0\n"
    assert main(["bench", "--replays", "29", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err == "trt-gn bench: error: --replays must be >= 30, got 29\n"
    assert main(["bench", "--layouts", "nhcw", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err == "trt-gn bench: error: unknown layout 'nhcw'; expected one of nhwc, nchw\n"
    assert list(tmp_path.iterdir()) == []


def test_library_lines_warn_of_a_build_without_hopper_code():
    path = "/opt/trt_gn/lib/libtrt_gn_kernels.so"
    line = f"kernels: {path}, running code built for compute_"
    assert bench.library_lines((9, 0), 90, path) == [line + "90"]
    assert bench.library_lines((10, 0), 90, path) == [line + "90"]  # Blackwell from the sm_90 build's PTX
    assert bench.library_lines((8, 6), 80, path) == [line + "80"]  # Ampere: nothing is missing
    assert bench.library_lines((9, 0), 80, path) == [
        line + "80",
        "warning: this GPU has compute capability 9.0 but the kernels library was built without sm_90 or later, so "
        "its cluster and on-chip paths are off and these times are not those of a build for this GPU: rebuild with "
        "CMAKE_CUDA_ARCHITECTURES including 90",
    ]


def test_rounds_keep_each_variants_fastest():
    # A disturbed GPU slows one round: the copy's second round and the kernel's first here.
    script = {"copy": [10.0, 30.0], "kernel": [25.0, 20.0], "steady": [5.0, 5.0]}
    calls = []

    def timer(fn, replays):
        calls.append((fn, replays))
        return script[fn].pop(0)

    timed = bench.fastest_of_rounds({"copy": "copy", "kernel": "kernel", "steady": "steady"}, 2, 40, timer)
    assert timed == {"copy": (10.0, 2.0), "kernel": (20.0, 0.25), "steady": (5.0, 0.0)}
    # the variants alternate: a round times each once, in order
    assert calls == [("copy", 40), ("kernel", 40), ("steady", 40)] * 2
    assert bench.fastest_of_rounds({"a": "a"}, 1, 30, lambda fn, r: 7.0) == {"a": (7.0, 0.0)}


def test_unsteady_rounds_are_marked():
    rows = _rows()
    assert bench.unsteady_note(rows) is None
    rows[0].round_spread = 0.05  # within UNSTEADY: no mark
    rows[1].round_spread = 0.4
    rows[3].round_spread = 0.2  # the second shape's copy
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(bench.render_table(rows))
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in console.export_text().splitlines()
             if "fp16" in line]
    assert cells[0][2:4] == ["10.0", "15.0* (1.50x)"] and cells[1][2:4] == ["10.0*", "15.0 (1.50x)"]
    assert cells[0][4] == cells[1][4] == "120.0 (12.00x)"
    assert bench.unsteady_note(rows) == (
        "* 2 time(s) differed by more than 10% between rounds (worst: sd15-unet-320x64 fp16 trt_gn NHWC, 40%): "
        "the GPU was disturbed during one; the faster round is shown. Run again if the marked ratios matter.")


def _rows():
    rows = []
    for shape in SHAPES[:2]:
        meta = dict(shape=shape.name, n=shape.n, c=shape.c, h=shape.h, w=shape.w, groups=shape.groups,
                    eps=shape.eps, dtype="fp16")
        rows.append(bench.Row(**meta, impl=bench.COPY, us_per_launch=10.0, ratio_to_copy=1.0))
        rows.append(bench.Row(**meta, impl=bench.OURS["nhwc"], us_per_launch=15.0, ratio_to_copy=1.5,
                              max_abs_err=1e-3, max_rel_err=2e-3))
        rows.append(bench.Row(**meta, impl=bench.TORCH["nchw"], us_per_launch=120.0, ratio_to_copy=12.0))
    return rows


def test_csv_table_and_plot(tmp_path):
    rows = _rows()
    bench.write_csv(rows, tmp_path / "bench.csv")
    with open(tmp_path / "bench.csv") as f:
        read = list(csv.DictReader(f))
    assert len(read) == 6 and read[1]["impl"] == "trt_gn NHWC" and float(read[1]["ratio_to_copy"]) == 1.5
    assert read[0]["max_abs_err"] == ""
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(bench.render_table(rows))
    text = console.export_text()
    assert "15.0 (1.50x)" in text and "120.0 (12.00x)" in text and "1.00e-03 / 2.00e-03" in text
    pytest.importorskip("matplotlib")
    bench.write_plot(rows, tmp_path / "bench.png")
    assert (tmp_path / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench.csv", "bench.png"]  # no temp files left


def test_console_script():
    exe = shutil.which("trt-gn")
    if exe is None:
        pytest.skip("trt-gn console script not installed (pip install .)")
    out = subprocess.run([exe, "--help"], capture_output=True, text=True, check=True).stdout
    assert "bench" in out
