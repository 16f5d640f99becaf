"""`trt-gn bench` without a GPU, and the benchmark's table/CSV/plot writers (timings come from the GPU suite)."""

from __future__ import annotations

import csv
import shutil
import subprocess
import sys

import pytest
import torch

from trt_gn import compile_check
from trt_gn.lab import bench
from trt_gn.cli import SUBCOMMAND_MODULES, build_parser, main
from trt_gn.lab.shapes import SHAPES, select_shapes


def test_shape_list_is_the_issues():
    assert len(SHAPES) == 13
    assert [s.size for s in SHAPES][9] == (1, 128, 512, 512)
    # the SDXL VAE decoder at 1024x1024
    sdxl = select_shapes(["sdxl-vae-dec-512x256", "sdxl-vae-dec-256x1024", "sdxl-vae-dec-128x1024"])
    assert [s.size for s in sdxl] == [(1, 512, 256, 256), (1, 256, 1024, 1024), (1, 128, 1024, 1024)]
    assert all(s.groups == 32 and s.eps == 1e-6 for s in sdxl) and list(SHAPES[-3:]) == sdxl
    assert all(s.c % s.groups == 0 for s in SHAPES)
    assert len({s.name for s in SHAPES}) == len(SHAPES)
    assert select_shapes(["vae-dec-256x512"])[0].eps == 1e-6
    with pytest.raises(ValueError, match="unknown shape\\(s\\) nope; known: sd15-unet-320x64"):
        select_shapes(["nope"])


def test_every_subcommand_module_registers():
    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    assert "bench" in SUBCOMMAND_MODULES and len(commands) >= len(SUBCOMMAND_MODULES)
    args = parser.parse_args(["bench", "--replays", "40", "--dtypes", "bf16", "--layouts", "nhwc"])
    assert callable(args.func) and args.replays == 40 and args.dtypes == ["bf16"] and args.layouts == ["nhwc"]
    assert args.compile is True  # the torch.compile variants by default
    assert parser.parse_args(["bench", "--no-compile"]).compile is False


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


def test_slow_copies_are_named():
    # The H200's copies of vae-dec-256x512 (128 MiB) and sdxl-vae-dec-256x1024 (exactly 512 MiB, where
    # the driver's memcpy runs at 2.7 TB/s) in one run, with a trt_gn row that must not count.
    rows = []
    for shape, us in (("vae-dec-256x512", 64.8), ("sdxl-vae-dec-256x1024", 396.5), ("sd15-unet-320x64", 0.5)):
        s = select_shapes([shape])[0]
        meta = dict(shape=s.name, n=s.n, c=s.c, h=s.h, w=s.w, groups=s.groups, eps=s.eps, dtype="fp16")
        rows.append(bench.Row(**meta, impl=bench.COPY, us_per_launch=us, ratio_to_copy=1.0))
        rows.append(bench.Row(**meta, impl=bench.OURS["nhwc"], us_per_launch=us / 10, ratio_to_copy=0.1))
    l2 = 50 << 20
    assert bench.slow_copy_note(rows, 2 * l2) == (
        "Slow copies: sdxl-vae-dec-256x1024 fp16 (512 MiB) at 2.71 TB/s, against 4.14 TB/s for vae-dec-256x512 fp16 "
        "(bytes read and written): the copy is the driver's device-to-device memcpy, slower on some sizes, so those "
        "shapes' ratios are against a slower copy than the others'.")
    # The 2.6 MB tensor (in L2, 21 TB/s here) is left out below the size; taken in, it is the fastest.
    assert "against 20.97 TB/s for sd15-unet-320x64 fp16" in bench.slow_copy_note(rows, 1)
    assert "vae-dec-256x512 fp16 (128 MiB) at 4.14 TB/s" in bench.slow_copy_note(rows, 1)
    # The H100's copies of the same two tensors (90.2 and 442.3 us: 2.98 and 2.43 TB/s).
    rows[0].us_per_launch, rows[2].us_per_launch = 90.2, 442.3
    assert bench.slow_copy_note(rows, 2 * l2).startswith(
        "Slow copies: sdxl-vae-dec-256x1024 fp16 (512 MiB) at 2.43 TB/s, against 2.98 TB/s for vae-dec-256x512 fp16")
    # One copy past the size: nothing to compare with.
    assert bench.slow_copy_note(rows, 256 << 20) is None
    # Within SLOW_COPY of the fastest: no note.
    rows[0].us_per_launch, rows[2].us_per_launch = 64.8, 64.8 * 4 / bench.SLOW_COPY * 0.99
    assert bench.slow_copy_note(rows, 2 * l2) is None


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


def test_outputs_go_into_a_new_folder(tmp_path):
    """--out may name a folder that does not exist yet: it and its parents are made."""
    from rich.console import Console

    console = Console(width=200, record=True)
    out = tmp_path / "new" / "bench"
    bench.write_outputs(_rows(), out, console)
    assert (out / "bench.csv").read_text().startswith("shape,")
    assert f"wrote {out / 'bench.csv'}" in console.export_text()


def test_log_width_holds_the_whole_table():
    """Where stdout is a log, no cell of the widest table (every variant, the plans) is cut to "…"."""
    from rich.console import Console

    rows = _peer_rows(ALL_IMPLS) + _peer_rows(ALL_IMPLS, dtype="bf16")
    bench.annotate_best_peer(rows)
    for r in rows:
        if r.impl in bench.OURS.values():
            r.plan = "clusters of 1, 4 vec/thread x2 blocks"
    console = Console(width=bench.LOG_WIDTH, record=True)
    console.print(bench.render_table(rows))
    text = console.export_text()
    assert "…" not in text and "clusters of 1, 4 vec/thread x2 blocks" in text


def test_console_script():
    exe = shutil.which("trt-gn")
    if exe is None:
        pytest.skip("trt-gn console script not installed (pip install .)")
    out = subprocess.run([exe, "--help"], capture_output=True, text=True, check=True).stdout
    assert "bench" in out


def _peer_rows(times: dict[str, float], shape=SHAPES[7], dtype="fp16"):
    meta = dict(shape=shape.name, n=shape.n, c=shape.c, h=shape.h, w=shape.w, groups=shape.groups,
                eps=shape.eps, dtype=dtype)
    rows = []
    for impl, us in times.items():
        errs = {}
        if impl in bench.OURS.values():
            errs = dict(max_abs_err=1e-3, max_rel_err=2e-3)
        elif impl in bench.PEERS:
            errs = dict(max_abs_err=4e-3, max_rel_err=5e-3)
        rows.append(bench.Row(**meta, impl=impl, us_per_launch=us, ratio_to_copy=us / times[bench.COPY], **errs))
    return rows


ALL_IMPLS = {bench.COPY: 6.0, bench.OURS["nhwc"]: 12.0, bench.OURS["nchw"]: 15.0, bench.TORCH["nchw"]: 247.0,
             bench.TORCH["nhwc"]: 233.0, bench.COMPILED["nchw"]: 19.8, bench.COMPILED["nhwc"]: 18.0}


def test_best_peer_is_the_fastest_pytorch_variant():
    rows = _peer_rows(ALL_IMPLS)
    by_impl = {r.impl: r for r in rows}
    assert bench.best_peer(by_impl) == (bench.COMPILED["nhwc"], 18.0)
    # trt_gn and the copy are never the peer, however fast
    assert bench.best_peer({i: r for i, r in by_impl.items() if i not in bench.PEERS}) is None
    eager_only = {i: r for i, r in by_impl.items() if i not in bench.COMPILED.values()}
    assert bench.best_peer(eager_only) == (bench.TORCH["nhwc"], 233.0)
    bench.annotate_best_peer(rows)
    assert by_impl[bench.OURS["nhwc"]].best_peer == bench.COMPILED["nhwc"]
    assert by_impl[bench.OURS["nhwc"]].speedup_vs_best_peer == pytest.approx(1.5)
    assert by_impl[bench.OURS["nchw"]].speedup_vs_best_peer == pytest.approx(1.2)
    assert all(r.best_peer is None and r.speedup_vs_best_peer is None for r in rows if r.impl not in bench.OURS.values())


def test_table_csv_and_plot_with_the_compiled_variants(tmp_path):
    rows = _peer_rows(ALL_IMPLS) + _peer_rows({**ALL_IMPLS, bench.TORCH["nchw"]: 17.0}, dtype="bf16")
    bench.annotate_best_peer(rows)
    from rich.console import Console

    console = Console(width=400, record=True)
    console.print(bench.render_table(rows))
    lines = console.export_text().splitlines()
    header = next(line for line in lines if "shape" in line and "dtype" in line)
    assert [c.strip() for c in header.split("┃")[1:-1]] == [
        "shape", "dtype", "copy", "trt_gn NHWC", "trt_gn NCHW", "torch NCHW", "torch channels_last",
        "torch.compile NCHW", "torch.compile channels_last", "best peer", "speedup vs best (NHWC / NCHW)",
        "max abs / rel err", "torch max abs / rel err"]
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in lines if "vae-dec-512x128" in line]
    assert cells[0][2:] == ["6.0", "12.0 (2.00x)", "15.0 (2.50x)", "247.0 (41.17x)", "233.0 (38.83x)",
                            "19.8 (3.30x)", "18.0 (3.00x)", "compile cl", "1.50x / 1.20x",
                            "1.00e-03 / 2.00e-03", "4.00e-03 / 5.00e-03"]
    assert cells[1][9:11] == ["eager NCHW", "1.42x / 1.13x"]  # an eager variant the fastest this time

    bench.write_csv(rows, tmp_path / "bench.csv")
    with open(tmp_path / "bench.csv") as f:
        read = list(csv.DictReader(f))
    # the existing columns first, in their order, the new ones after them
    assert list(read[0])[:14] == ["shape", "n", "c", "h", "w", "groups", "eps", "dtype", "impl", "us_per_launch",
                                  "ratio_to_copy", "max_abs_err", "max_rel_err", "round_spread"]
    assert list(read[0])[14:] == ["best_peer", "speedup_vs_best_peer", "plan"]
    nhwc = next(r for r in read if r["impl"] == "trt_gn NHWC" and r["dtype"] == "fp16")
    assert nhwc["best_peer"] == "torch.compile channels_last" and float(nhwc["speedup_vs_best_peer"]) == 1.5
    compiled = next(r for r in read if r["impl"] == "torch.compile NCHW")
    assert compiled["best_peer"] == "" and float(compiled["max_abs_err"]) == 4e-3

    shapes, series = bench.plot_series(rows, "bf16")
    assert shapes == ["vae-dec-512x128"]
    assert list(series) == ["trt_gn NHWC", "trt_gn NCHW", "torch NCHW", "torch channels_last", "torch.compile NCHW",
                            "torch.compile channels_last", bench.BEST_PEER]
    assert series[bench.BEST_PEER] == pytest.approx([17.0 / 6.0])
    assert bench.plot_series(rows, "fp16")[1][bench.BEST_PEER] == pytest.approx([3.0])
    pytest.importorskip("matplotlib")
    bench.write_plot(rows, tmp_path / "bench.png")
    assert (tmp_path / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_table_without_peers_has_no_peer_columns():
    rows = _peer_rows({bench.COPY: 6.0, bench.OURS["nhwc"]: 12.0})
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(bench.render_table(rows))
    text = console.export_text()
    assert "best peer" not in text and "torch max abs" not in text and "12.0 (2.00x)" in text
    assert bench.plot_series(rows, "fp16")[1] == {"trt_gn NHWC": [2.0]}


def test_compile_summary():
    log = [("a", "fp16", bench.COMPILED["nchw"], 1, 4.4), ("a", "fp16", bench.COMPILED["nhwc"], 1, 3.0)]
    assert bench.compile_summary(log) == (
        "torch.compile (inductor): 2 variant(s) compiled before timing, 1 graph(s) each, none ran eager or compiled "
        "again while timed; 7 s compiling (not in the times)")


def _gn(x, groups):
    return torch.nn.functional.group_norm(x, groups)


def test_checked_compile_catches_an_eager_fallback():
    """Past dynamo's recompile limit a function runs eager without an error (fullgraph off); the check
    must say so, and raised_recompile_limits() must keep many shapes compiled."""
    torch._dynamo.reset()
    try:
        cfg = torch._dynamo.config
        limit = compile_check._first_existing(cfg, ("recompile_limit", "cache_size_limit"))
        fail = compile_check._first_existing(cfg, ("fail_on_recompile_limit_hit", "fail_on_cache_limit_hit"))
        with cfg.patch({limit: 2, fail: False}):
            for w in (4, 5):
                fn = compile_check.CheckedCompile(_gn, f"w{w}", backend="eager", fullgraph=False)
                fn.first_call(torch.randn(1, 8, 4, w), 4)
                assert fn.graphs == 1
            fn = compile_check.CheckedCompile(_gn, "w6", backend="eager", fullgraph=False)
            with pytest.raises(compile_check.CompileFallbackError, match="w6: torch.compile compiled no graph, so the "
                               "call ran eager"):
                fn.first_call(torch.randn(1, 8, 4, 6), 4)
            with pytest.raises(compile_check.CompileFallbackError, match="called before first_call"):
                fn.check_settled()
        torch._dynamo.reset()
        # 12 shapes of one function, past the default limit of 8: each compiles
        with compile_check.raised_recompile_limits():
            assert getattr(cfg, fail) is True and getattr(cfg, limit) == compile_check.RECOMPILE_LIMIT
            for w in range(1, 13):
                fn = compile_check.CheckedCompile(_gn, f"w{w}", backend="eager", fullgraph=False)
                y = fn.first_call(torch.randn(1, 8, 3, w), 4)
                assert fn.graphs == 1 and y.shape == (1, 8, 3, w)
                fn(torch.randn(1, 8, 3, w), 4)
                fn.check_settled()
                # a new shape compiles again: the check sees it
                fn(torch.randn(1, 8, 3, w + 20), 4)
                with pytest.raises(compile_check.CompileFallbackError, match="compiled 1 more graph"):
                    fn.check_settled()
        # within the raised limits, reaching one is an error, not an eager run
        torch._dynamo.reset()
        with compile_check.raised_recompile_limits(limit=1):
            compile_check.CheckedCompile(_gn, "a", backend="eager", fullgraph=False).first_call(torch.randn(1, 8, 2, 2), 4)
            with pytest.raises(compile_check.CompileFallbackError, match="b: torch.compile failed"):
                compile_check.CheckedCompile(_gn, "b", backend="eager", fullgraph=False).first_call(
                    torch.randn(1, 8, 2, 3), 4)
    finally:
        torch._dynamo.reset()


def test_checked_compile_reports_graph_breaks_and_failures():
    def breaks(x):
        y = x + 1
        torch._dynamo.graph_break()
        return y * 2

    torch._dynamo.reset()
    try:
        with compile_check.raised_recompile_limits():
            fn = compile_check.CheckedCompile(breaks, "breaks", backend="eager", fullgraph=False)
            assert torch.equal(fn.first_call(torch.ones(3)), torch.full((3,), 4.0))
            assert fn.graphs == 2 and fn.graph_breaks >= 1
            strict = compile_check.CheckedCompile(breaks, "strict", backend="eager", fullgraph=True)
            with pytest.raises(compile_check.CompileFallbackError, match="strict: torch.compile failed"):
                strict.first_call(torch.ones(3))
    finally:
        torch._dynamo.reset()


def test_compiled_group_norm_act_inductor_on_cpu():
    """The benchmark's compiled peer, through Inductor (here on the CPU), against the float64 reference."""
    from trt_gn.reference import assert_close, group_norm_act_reference

    torch._dynamo.reset()
    try:
        g = torch.Generator().manual_seed(3)
        x = torch.randn(2, 64, 6, 5, generator=g).contiguous(memory_format=torch.channels_last)
        weight, bias = 1 + 0.1 * torch.randn(64, generator=g), 0.1 * torch.randn(64, generator=g)
        with compile_check.raised_recompile_limits():
            fn = bench.compile_group_norm_act(x, weight, bias, 32, 1e-5, "cpu fp32 channels_last")
            y = fn(x, weight, bias, 32, 1e-5)
            fn.check_settled()
        assert fn.graphs == 1 and fn.graph_breaks == 0 and fn.compile_s > 0
        assert_close(y, group_norm_act_reference(x, weight, bias, 32, 1e-5, "silu"), torch.float32)
    finally:
        torch._dynamo.reset()


def test_plan_column_and_summary():
    rows = _peer_rows(ALL_IMPLS)
    for r in rows:
        if r.impl == bench.OURS["nhwc"]:
            r.plan = bench.plan_summary({"path": "two-pass", "vec": 1})
        elif r.impl == bench.OURS["nchw"]:
            r.plan = bench.plan_summary({"path": "clusters", "cluster": 2, "vpt": 4, "split": 1})
    bench.annotate_best_peer(rows)
    from rich.console import Console

    console = Console(width=500, record=True)
    console.print(bench.render_table(rows))
    lines = console.export_text().splitlines()
    header = next(line for line in lines if "shape" in line and "dtype" in line)
    assert [c.strip() for c in header.split("┃")[1:-1]][-1] == "trt_gn plan (NHWC / NCHW)"
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in lines if "vae-dec-512x128" in line]
    assert cells[0][-1] == "two passes, vec 1 / clusters of 2, 4 vec/thread"
    assert bench.plan_summary({"path": "on-chip-grid", "slices": 4}) == "on-chip grid, 4 slices"
    assert bench.plan_summary({"path": "clusters", "cluster": 1, "vpt": 2, "split": 2}) == \
        "clusters of 1, 2 vec/thread x2 blocks"
    assert bench.plan_summary({"path": "streaming-grid", "slices": 1}) == "streaming grid"
    assert bench.plan_summary({"path": "streaming-grid", "kernel": "gnRollingNCHW", "slices": 1}) == "rolling grid"


def test_host_overhead_steps_without_a_gpu():
    """run_host_overhead's steps (the four variants, the compiled ones one graph each and settled,
    rounds in turn, medians, ratios) on the CPU through aot_eager; the times mean nothing here."""
    lines = []
    times = bench.run_host_overhead(dtype="fp32", calls=3, rounds=3, log=lines.append, device="cpu",
                                    backend="aot_eager")
    assert list(times) == list(bench.HOST_VARIANTS)
    for t in times.values():
        assert len(t.rounds_us) == 3 and all(v > 0 for v in t.rounds_us)
        assert t.us_per_call == sorted(t.rounds_us)[1]
    eager, compiled = bench.host_ratios(times)
    assert eager == times[bench.OURS_EAGER].us_per_call / times[bench.STOCK_EAGER].us_per_call
    assert compiled == times[bench.OURS_COMPILED].us_per_call / times[bench.STOCK_COMPILED].us_per_call
    assert lines[:2] == [f"compiling {name} ({bench.HOST_CHAIN} calls in one function)"
                         for name in (bench.STOCK_COMPILED, bench.OURS_COMPILED)]
    assert [line.split(":")[0] for line in lines[2:]] == ["round 1/3", "round 2/3", "round 3/3"]


def test_host_overhead_script_errors(tmp_path):
    from cli_helpers import cli_env

    def run(*args):
        return subprocess.run([sys.executable, "-m", "trt_gn.lab.host_overhead", *args], capture_output=True,
                              text=True, cwd=tmp_path, env=cli_env())

    proc = run("--shape", "1,30,8,8")
    assert proc.returncode == 2 and proc.stderr.splitlines()[-1] == (
        "python -m trt_gn.lab.host_overhead: error: argument --shape: '1,30,8,8': expected N,C,H,W, positive, C a multiple of "
        "32 (32 groups)")
    proc = run("--rounds", "0", "--out", str(tmp_path / "h.csv"))
    assert proc.returncode == 2
    assert proc.stderr == "python -m trt_gn.lab.host_overhead: error: calls and rounds must be >= 1, got 2000 and 0\n"
    if not torch.cuda.is_available():
        proc = run("--out", str(tmp_path / "h.csv"))
        assert proc.returncode == 3 and proc.stderr == (
            "python -m trt_gn.lab.host_overhead: error: no CUDA device: the benchmark needs a GPU "
            "(torch.cuda.is_available() is False)\n")
    assert list(tmp_path.iterdir()) == []
