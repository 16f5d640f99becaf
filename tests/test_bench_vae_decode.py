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

TABLE_HEADER = ("| resolution | variant | wall ms | vs best stock | kernel ms | GPU idle ms | conv/gemm | attention | "
                "trt_gn | stock GroupNorm | Inductor in front of trt_gn | other pointwise/reduction | memcpy/memset | "
                "unclassified | kernels | graph launches | max abs diff vs stock eager NCHW | compile |")


def run(*args, cwd):
    from cli_helpers import cli_env

    return subprocess.run([sys.executable, "-m", "trt_gn.lab.vae_decode", *args], capture_output=True, text=True,
                          cwd=cwd, env=cli_env())


def parse_error(capsys, argv):
    with pytest.raises(SystemExit) as exc:
        vae.parse_args(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


def test_options(tmp_path, capsys):
    args = vae.parse_args([])
    assert args.model == "vae" and args.resolutions == [512, 1024] and args.compile is True and args.iters == 20
    assert args.modes == ["default", "reduce-overhead"] and args.profile_iters == 5 and args.batch == 1
    assert args.out is None and args.markdown is None and args.fusion is True
    args = vae.parse_args(["--resolutions", "1024", "--no-compile", "--iters", "5", "--out", "x.csv",
                           "--modes", "reduce-overhead", "--profile-iters", "0", "--no-fusion-passes"])
    assert args.resolutions == [1024] and args.compile is False and args.out == Path("x.csv")
    assert args.modes == ["reduce-overhead"] and args.profile_iters == 0 and args.fusion is False
    assert args.sides == ["stock", "trt_gn"] and args.shared_bias is True
    args = vae.parse_args(["--sides", "trt_gn", "--no-shared-bias"])
    assert args.sides == ["trt_gn"] and args.shared_bias is False
    args = vae.parse_args(["--model", "unet", "--markdown", str(tmp_path / "unet.md")])
    assert args.model == "unet" and args.resolutions == [] and args.batch == 2 and args.markdown == tmp_path / "unet.md"
    assert vae.parse_args(["--model", "unet", "--batch", "1"]).batch == 1
    assert vae.RESOLUTIONS == {512: ("sd15-vae-decoder", 64), 1024: ("sdxl-vae-decoder", 128)}
    assert vae.UNET == ("sd15-unet", 64, 2)
    prog = "python -m trt_gn.lab.vae_decode: error: "
    for bad, message in ((["--resolutions", "768"], "--resolutions: [768] not among [512, 1024]"),
                         (["--resolutions", "big"], "--resolutions: integers expected, got 'big'"),
                         (["--iters", "4"], "--iters must be >= 5"),
                         (["--model", "unet", "--resolutions", "512"],
                          "--resolutions applies to --model vae only (the UNet step is 64x64 latents)"),
                         (["--modes", "default,max-autotune"],
                          "--modes: ['max-autotune'] not among ['default', 'reduce-overhead']"),
                         (["--modes", ","], "--modes: none not among ['default', 'reduce-overhead']"),
                         (["--profile-iters", "-1"], "--profile-iters must be >= 0"),
                         (["--sides", "trt_gn,ort"], "--sides: ['ort'] not among ['stock', 'trt_gn']"),
                         (["--sides", "stock", "--no-shared-bias"],
                          "--no-shared-bias needs the trt_gn side with its fusion passes on"),
                         (["--no-fusion-passes", "--no-shared-bias"],
                          "--no-shared-bias needs the trt_gn side with its fusion passes on"),
                         (["--out", str(tmp_path)],
                          f"--out {tmp_path}: is a directory; give a file name such as {tmp_path / 'vae.csv'}"),
                         (["--markdown", str(tmp_path / "no" / "r.md")],
                          f"--markdown {tmp_path / 'no' / 'r.md'}: folder {tmp_path / 'no'} does not exist")):
        assert parse_error(capsys, bad) == prog + message
    proc = run("--resolutions", "768", cwd=tmp_path)  # the module as a program: the same words, exit 2
    assert proc.returncode == 2 and proc.stderr.splitlines()[-1] == prog + "--resolutions: [768] not among [512, 1024]"


def test_help_documents_the_passes_and_the_rules(capsys):
    with pytest.raises(SystemExit) as exc:
        vae.parse_args(["--help"])
    assert exc.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for words in ("reduce-overhead", "--model {vae,unet}", "one SD 1.5 UNet step (latents 2x4x64x64",
                  "timed: --iters calls after --warmup untimed ones, no profiler attached",
                  "profiled, separately afterwards: --profile-iters calls under torch.profiler",
                  "the timed pass's wall time minus that kernel time", "--no-fusion-passes",
                  "Kernel kinds, by name (the first rule that matches wins",
                  "gnFused*, gnOnChip*, gnStream*, gnPersistent*, gnRolling*, gnStats*, gnFinalize, gnApply*"):
        assert words in text, words
    assert all(f" {i}. " in text for i in range(1, len(vae.KERNEL_RULES) + 1))


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
                                    modes=("default",), backend="eager", log=lines.append)
    finally:
        torch._dynamo.reset()
    assert [r.variant for r in rows] == [v.name for v in vae.variants(("default",))] == [
        "stock eager NCHW", "stock eager channels_last", "stock torch.compile NCHW", "stock torch.compile channels_last",
        "trt_gn eager channels_last", "trt_gn torch.compile channels_last"]
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
        assert r.mode == ("default" if compiled else None) and r.kernel_ms is None and r.gpu_idle_ms is None
    # the fusion passes: said for the trt_gn compiled variant alone
    assert [r.fusion_passes is not None for r in rows] == [False] * 5 + [True]
    # the eager backend runs no Inductor pass: said so, not reported as on
    assert rows[-1].fusion_passes == "off (backend eager runs no Inductor pass)"
    stock = [r for r in rows if r.variant.startswith("stock ")]
    best = min(stock, key=lambda r: r.median_ms)
    assert best.speedup_vs_best_stock == 1.0 and all(r.speedup_vs_best_stock <= 1.0 for r in stock)
    fused = by_name["trt_gn eager channels_last"]
    assert fused.speedup_vs_best_stock == pytest.approx(best.median_ms / fused.median_ms)
    assert any("GroupNorm" in line for line in lines)  # the swap's report
    assert any("stock torch.compile NCHW: compiling (eager, mode default)" in line for line in lines)

    table = vae.markdown_table(rows).splitlines()
    assert table[0] == TABLE_HEADER and len(table) == 2 + len(rows)
    assert table[2].startswith("| 32x32 | stock eager NCHW | ") and table[2].endswith(
        " | - | - | - | - | - | - | - | - | - | - | - | - | 0.000e+00 | - |")
    assert "graph(s)" in table[4]
    summary = vae.summary_lines(rows)
    assert len(summary) == 2 and summary[0].startswith(f"32x32: best stock is {best.variant} (")
    assert summary[1].startswith("32x32: GPU idle a call (wall - kernel time): ") and "not profiled" in summary[1]

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
        "6.39 ms, 1.22x faster",
        "512x512: GPU idle a call (wall - kernel time): trt_gn torch.compile channels_last not profiled vs best stock "
        "stock torch.compile channels_last not profiled; trt_gn vs stock, same mode and layout: eager channels_last: "
        "not profiled vs not profiled; torch.compile channels_last: not profiled vs not profiled"]


# Kernel names as torch.profiler reports them (demangled) on an H100/H200, one or more a kind.
NAMED_KERNELS = (
    ("void trtgn::(anonymous namespace)::gnStreamNHWC<__half, true>(trtgn::(anonymous namespace)::GridArgs)", "trt_gn"),
    ("void trtgn::(anonymous namespace)::gnOnChipNHWC<__half>(trtgn::(anonymous namespace)::GridArgs, "
     "trtgn::(anonymous namespace)::OnChipPlan, int)", "trt_gn"),
    ("void trtgn::(anonymous namespace)::gnFusedNHWC<__half, 8>(trtgn::(anonymous namespace)::ClusterArgs)", "trt_gn"),
    ("gnFusedSet2", "trt_gn"),
    ("void trtgn::(anonymous namespace)::gnStatsNHWC<__half>(trtgn::(anonymous namespace)::TwoPassArgs)", "trt_gn"),
    ("void trtgn::(anonymous namespace)::gnFinalize(trtgn::(anonymous namespace)::FinalizeArgs)", "trt_gn"),
    ("void trtgn::(anonymous namespace)::gnApplyNCHW<float>(trtgn::(anonymous namespace)::TwoPassArgs)", "trt_gn"),
    ("gnPersistentNCHW", "trt_gn"),
    ("void trtgn::(anonymous namespace)::gnRollingNCHW<__half>(trtgn::GridArgs, trtgn::RollPlan)", "trt_gn"),
    ("triton_poi_fused_convolution_group_norm_act_4", "feeds_trt_gn"),
    ("triton_per_fused_add_clone_convolution_div_native_group_norm_silu_7", "stock_gn"),
    ("triton_red_fused_native_group_norm_0", "stock_gn"),
    ("triton_poi_fused_add_convolution_div_12", "other"),
    ("triton_poi_fused__scaled_dot_product_flash_attention_clone_3", "other"),  # a copy feeding attention
    ("triton_tem_fused_convolution_0", "conv_gemm"),
    ("void at::native::(anonymous namespace)::RowwiseMomentsCUDAKernel<c10::Half>(long, c10::Half, c10::Half const*, "
     "c10::Half*, c10::Half*)", "stock_gn"),
    ("void at::native::(anonymous namespace)::ComputeFusedParamsCUDAKernel<c10::Half>(long, long, long, c10::Half "
     "const*, c10::Half const*, c10::Half const*, c10::Half const*, float*, float*)", "stock_gn"),
    ("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::(anonymous "
     "namespace)::GroupNormKernelImplInternal<c10::Half>(at::Tensor const&)::{lambda(c10::Half, float, float)#1}>"
     "(at::TensorIteratorBase&, ...)::{lambda(int)#1}>(int, ...)", "stock_gn"),
    # LayerNorm's moments (two types) are not GroupNorm
    ("void at::native::(anonymous namespace)::RowwiseMomentsCUDAKernel<c10::Half, float>(long, float, c10::Half "
     "const*, float*, float*)", "other"),
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cutlass::half_t, "
     "Flash_kernel_traits<64, 128, 128, 4, cutlass::half_t> >, false, false, false, false, true, true, false, "
     "false>(pytorch_flash::Flash_fwd_params)", "attention"),
    ("fmha_cutlassF_f16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::half_t, "
     "cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)", "attention"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x64_4x1x1_kernel0_0", "attention"),
    ("sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_warpgroupsize1x1x1_g1_"
     "execute_segment_k_off_kernel__5x_cudnn", "conv_gemm"),
    ("void cutlass__5x_cudnn::Kernel<cutlass_tensorop_f16_s16816fprop_optimized_f16_128x128_32x5_nhwc_align8>"
     "(cutlass_tensorop_f16_s16816fprop_optimized_f16_128x128_32x5_nhwc_align8::Params)", "conv_gemm"),
    ("void cudnn::ops::nchwToNhwcKernel<__half, __half, float, false, true, (cudnnKernelDataType_t)0>"
     "(cudnn::ops::nchw2nhwc_params_t<float>, __half const*, __half*)", "conv_gemm"),
    ("nvjet_hsh_128x256_64x4_1x2_h_bz_coopA_NNT", "conv_gemm"),
    ("sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__"
     "5x_cublas", "conv_gemm"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::silu_kernel(at::TensorIteratorBase&)::{lambda()#1}"
     "::operator()() const::{lambda()#6}::operator()() const::{lambda(c10::Half)#1}, std::array<char*, 2ul> >(int, "
     "...)", "other"),
    ("void at::native::(anonymous namespace)::upsample_nearest2d_nhwc_out_frame<c10::Half, "
     "at::native::nearest_idx>(c10::Half const*, c10::Half*, ...)", "other"),
    ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous namespace)::OpaqueType<2u>, "
     "unsigned int, 4, 64, 64>(...)", "other"),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::Half, float>(int, float, "
     "c10::Half const*, c10::Half const*, c10::Half const*, float*, float*, c10::Half*)", "other"),
    ("Memcpy DtoD (Device -> Device)", "copy"),
    ("Memset (Device)", "copy"),
    ("my_custom_kernel(float*)", "unclassified"),
)


def test_kernel_names_classified():
    got = {name: vae.classify_kernel(name) for name, _ in NAMED_KERNELS}
    assert got == dict(NAMED_KERNELS)
    assert {kind for _, kind in NAMED_KERNELS} == {key for key, _ in vae.KINDS}  # every kind seen above
    assert {kind for kind, _, _ in vae.KERNEL_RULES} == {key for key, _ in vae.KINDS} - {"unclassified"}


def event(name, dur, cat="kernel"):
    return {"ph": "X", "cat": cat, "name": name, "dur": dur, "ts": 0.0}


def trace_of_two_calls():
    """Two calls' events: per call 300 us conv, 100 us trt_gn, 50 us Inductor pointwise, 20 us copy, 30 us
    unclassified, a CUDA graph launch; CPU ops and launches that are no GPU time."""
    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::convolution", "dur": 999.0},
              {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "dur": 5.0},
              {"ph": "i", "cat": "kernel", "name": "no duration: an instant"}]
    for _ in range(2):
        events += [event("sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc", 200.0),
                   event("void cutlass__5x_cudnn::Kernel<cutlass_tensorop_f16_s16816fprop>", 100.0),
                   event("void trtgn::(anonymous namespace)::gnFusedNHWC<__half, 8>(ClusterArgs)", 100.0),
                   event("triton_poi_fused_add_convolution_div_1", 50.0),
                   event("Memcpy HtoD (Pageable -> Device)", 20.0, cat="gpu_memcpy"),
                   event("my_custom_kernel", 30.0),
                   {"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "dur": 8.0}]
    return events


def test_breakdown_arithmetic():
    b = vae.kernel_breakdown(trace_of_two_calls(), calls=2)
    assert b.calls == 2 and b.kernels == 12 and b.graph_launches == 2
    assert b.us == {"conv_gemm": 600.0, "attention": 0.0, "trt_gn": 200.0, "stock_gn": 0.0, "feeds_trt_gn": 0.0,
                    "other": 100.0, "copy": 40.0, "unclassified": 60.0}
    assert b.unclassified == {"my_custom_kernel": 60.0}
    assert b.kernel_us == 1000.0 and b.per_call_ms() == 0.5 and b.per_call_ms("conv_gemm") == 0.3
    row = vae.Row("512x512", "sd15-vae-decoder", "1x4x64x64", "fp16", "trt_gn torch.compile channels_last",
                  0.65, 0.6, 0.7, 20)
    row.add_breakdown(b)
    assert row.profiled_calls == 2 and row.kernel_ms == 0.5 and row.gpu_idle_ms == pytest.approx(0.15)
    assert (row.conv_gemm_ms, row.trt_gn_ms, row.other_ms, row.copy_ms, row.unclassified_ms) == (0.3, 0.1, 0.05, 0.02, 0.03)
    assert row.attention_ms == row.stock_gn_ms == row.feeds_trt_gn_ms == 0.0
    assert row.unclassified_share == pytest.approx(0.06) and row.kernels_per_call == 6 and row.graph_launches_per_call == 1
    assert vae.kernel_breakdown([], calls=1).per_call_ms() == 0.0
    with pytest.raises(ValueError, match="^calls must be >= 1, got 0$"):
        vae.kernel_breakdown([], calls=0)


def test_other_kernels_by_name_most_time_first():
    # per call (2 calls): 10 Inductor kernels of 1..10 us, one in front of trt_gn of 20 us, and a conv
    events = [event("sm90_xmma_fprop_implicit_gemm", 100.0)] * 2
    events += [event(f"triton_poi_fused_{i}", float(i)) for i in range(1, 11) for _ in range(2)]
    events += [event("triton_poi_fused_group_norm_act_0", 20.0)] * 2 + [event("triton_poi_fused_idle", 0.0)] * 2
    row = vae.Row("64x64 latents", "sd15-unet", "2x4x64x64", "fp16", "trt_gn torch.compile channels_last",
                  1.0, 1.0, 1.0, 20)
    row.add_breakdown(vae.kernel_breakdown(events, calls=2))
    assert vae.OTHER_TOP == 8
    # the first 8 by time; the 3 smallest with time (1, 2, 3 us) summed; none of zero time listed
    assert row.other_kernels == ("triton_poi_fused_group_norm_act_0 x1 0.020 ms; " + "; ".join(
        f"triton_poi_fused_{i} x1 {i / 1000:.3f} ms" for i in range(10, 3, -1)) + "; 3 more x3 0.006 ms")
    assert row.trt_gn_kernels is None


def test_gaps_inside_calls_by_the_kind_after_them():
    # two calls of: conv 0-100, gap 10, trt_gn 110-150, gap 5 (overlapped by nothing), Inductor 155-165;
    # a second stream's record inside the conv leaves no gap; the calls start 1000 us apart
    def timed(name, ts, dur):
        return {**event(name, dur), "ts": ts}
    events = []
    for t0 in (1000.0, 0.0):  # out of order in the trace
        events += [timed("sm90_xmma_fprop_implicit_gemm", t0, 100.0), timed("cudnn_side_stream_kernel", t0 + 20, 30.0),
                   timed("void trtgn::(anonymous namespace)::gnFusedNHWC<__half, 8>(ClusterArgs)", t0 + 110, 40.0),
                   timed("triton_poi_fused_add_1", t0 + 155, 10.0)]
    b = vae.kernel_breakdown(events, calls=2)
    assert b.gap_us == {**{k: 0.0 for k, _ in vae.KINDS}, "trt_gn": 20.0, "other": 10.0}
    assert b.gap_count == {**{k: 0 for k, _ in vae.KINDS}, "trt_gn": 2, "other": 2}
    row = vae.Row("512x512", "sd15-vae-decoder", "1x4x64x64", "fp16", "trt_gn torch.compile channels_last",
                  0.2, 0.2, 0.2, 20)
    row.add_breakdown(b)
    assert row.gaps_ms == pytest.approx(0.015)
    assert row.trt_gn_kernels == "gnFusedNHWC<__half, 8>(ClusterArgs) x1 0.040 ms"
    assert vae.summary_lines([row])[-3] == ("512x512 trt_gn torch.compile channels_last: trt_gn kernels a call: "
                                            f"{row.trt_gn_kernels}")
    assert row.other_kernels == "triton_poi_fused_add_1 x1 0.010 ms"
    assert vae.summary_lines([row])[-2] == ("512x512 trt_gn torch.compile channels_last: other pointwise/reduction "
                                            "and Inductor in front of trt_gn, a call: triton_poi_fused_add_1 x1 0.010 ms")
    assert row.gaps_by_kind == ("before trt_gn 0.010 ms (1 gaps, 10.0 us each); before other pointwise/reduction "
                                "0.005 ms (1 gaps, 5.0 us each); most after: gnFusedNHWC<__half, 8>(ClusterArgs) 10 us, "
                                "triton_poi_fused_add_1 5 us")
    assert vae.summary_lines([row])[-1] == (f"512x512 trt_gn torch.compile channels_last: GPU idle inside a call in the "
                                            f"profiled pass 0.015 ms: {row.gaps_by_kind}")
    row.host_ms = 0.125
    assert vae.summary_lines([row])[-1] == (f"512x512 trt_gn torch.compile channels_last: GPU idle inside a call in the "
                                            f"profiled pass 0.015 ms (the host took 0.12 ms a call to enqueue it, timed "
                                            f"pass): {row.gaps_by_kind}")
    # 5 records cannot be 2 equal calls: no call boundaries, no gaps
    uneven = vae.kernel_breakdown(events[:5], calls=2)
    assert uneven.gap_us is None
    row.add_breakdown(uneven)
    row.gaps_ms = None
    assert vae.summary_lines([row])[-1] == ("512x512 trt_gn torch.compile channels_last: its profiled records do not "
                                            "split into equal calls, so its GPU idle inside a call is not known")


def profiled_rows():
    """Stock and trt_gn at one size, default and reduce-overhead; the reduce-overhead trt_gn variant's profile
    shows no graph launch and half the kernels of its default-mode twin."""
    def row(variant, wall, kernel_us, kernels, launches=0, mode=None, unclassified=0.0):
        r = vae.Row("512x512", "sd15-vae-decoder", "1x4x64x64", "fp16", variant, wall, wall, wall, 20, mode=mode)
        events = [event("sm90_xmma_fprop_implicit_gemm", kernel_us - unclassified)] + [
            event("void at::native::vectorized_elementwise_kernel<4>", 0.0) for _ in range(kernels - 1)]
        events += [event("odd_kernel", unclassified)] if unclassified else []
        events += [{"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "dur": 1.0}] * launches
        r.add_breakdown(vae.kernel_breakdown(events, calls=1))
        return r

    rows = [row("stock eager NCHW", 21.40, 20000.0, 400), row("stock eager channels_last", 26.40, 25000.0, 420),
            row("stock torch.compile NCHW", 8.85, 8000.0, 150, mode="default"),
            row("stock torch.compile channels_last", 7.83, 7180.0, 140, mode="default"),
            row("stock torch.compile reduce-overhead channels_last", 7.40, 7180.0, 140, 1, mode="reduce-overhead"),
            row("trt_gn eager channels_last", 8.31, 5300.0, 160, unclassified=10.0),
            row("trt_gn torch.compile channels_last", 6.50, 5230.0, 120, mode="default"),
            row("trt_gn torch.compile reduce-overhead channels_last", 5.40, 2600.0, 60, 0, mode="reduce-overhead")]
    vae.fill_comparisons(rows)
    return rows


def test_table_and_summary_of_profiled_rows():
    rows = profiled_rows()
    table = vae.markdown_table(rows).splitlines()
    assert table[0] == TABLE_HEADER
    assert table[1] == "|---|---|" + "---:|" * 15 + "---|"
    assert table[5] == ("| 512x512 | stock torch.compile channels_last | 7.83 | 0.95x | 7.18 | 0.65 | 7.180 | 0.000 | "
                        "0.000 | 0.000 | 0.000 | 0.000 | 0.000 | 0.000 | 140 | 0 | - | - |")
    assert table[7] == ("| 512x512 | trt_gn eager channels_last | 8.31 | 0.89x | 5.30 | 3.01 | 5.290 | 0.000 | 0.000 | "
                        "0.000 | 0.000 | 0.000 | 0.000 | 0.010 | 161 | 0 | - | - |")
    assert vae.summary_lines(rows) == [
        "512x512: best stock is stock torch.compile reduce-overhead channels_last (7.40 ms); trt_gn torch.compile "
        "reduce-overhead channels_last 5.40 ms, 1.37x faster",
        "512x512: GPU idle a call (wall - kernel time): trt_gn torch.compile reduce-overhead channels_last 2.80 ms vs "
        "best stock stock torch.compile reduce-overhead channels_last 0.22 ms; trt_gn vs stock, same mode and layout: "
        "eager channels_last: 3.01 ms vs 1.40 ms; torch.compile channels_last: 1.27 ms vs 0.65 ms; torch.compile "
        "reduce-overhead channels_last: 2.80 ms vs 0.22 ms",
        "unclassified kernel time: 0.01% of all profiled kernel time (most in 512x512 trt_gn eager channels_last: "
        "0.010 ms a call)",
        "warning: 512x512 trt_gn torch.compile reduce-overhead channels_last: the profile shows no CUDA graph launch",
        "warning: 512x512 trt_gn torch.compile reduce-overhead channels_last: the profiler recorded 60 kernels a call "
        "against 120 for trt_gn torch.compile channels_last: kernels inside CUDA graph replays went unrecorded, so its "
        "kernel time and GPU idle are not comparable"]
    header = ["device: H100", "wall: ..."]
    text = vae.report(rows, header)
    assert text.startswith("device: H100\nwall: ...\n\n| resolution |") and text.endswith("not comparable\n")
    assert text.count("\n") == len(header) + 1 + len(table) + 1 + 5


def test_csv_has_the_breakdown_columns(tmp_path):
    rows = profiled_rows()
    vae.write_csv(rows, tmp_path / "vae.csv")
    with open(tmp_path / "vae.csv") as f:
        read = list(csv.DictReader(f))
    for column in ("mode", "fusion_passes", "profiled_calls", "kernel_ms", "gpu_idle_ms", "unclassified_share",
                   "kernels_per_call", "graph_launches_per_call") + tuple(f"{k}_ms" for k, _ in vae.KINDS):
        assert column in read[0], column
    assert float(read[3]["kernel_ms"]) == 7.18 and float(read[3]["gpu_idle_ms"]) == pytest.approx(0.65)
    assert read[0]["mode"] == "" and read[4]["mode"] == "reduce-overhead" and read[4]["graph_launches_per_call"] == "1.0"
    assert [p.name for p in tmp_path.iterdir()] == ["vae.csv"]  # written in place, no temporary left


def test_fusion_passes_guard(monkeypatch):
    import types

    with vae.fusion_passes(False) as described:
        assert described == "off (--no-fusion-passes)"
    monkeypatch.delitem(sys.modules, vae.FUSION_PASSES_MODULE, raising=False)
    calls = []

    class Handle:
        class report:  # noqa: N801 - stands for the pass's report object
            @staticmethod
            def summary():
                return "pre-add pass: 1 graph(s), 2 rewritten\n  fused a: conv bias"

        def disable(self):
            calls.append("disable")

    module = types.ModuleType(vae.FUSION_PASSES_MODULE)
    module.enable = lambda: calls.append("enable") or Handle()
    monkeypatch.setitem(sys.modules, vae.FUSION_PASSES_MODULE, module)
    with vae.fusion_passes(True) as described:
        assert calls == ["enable"]
        assert str(described) == "trt_gn.compile_passes.enable(): pre-add pass: 1 graph(s), 2 rewritten"
    assert calls == ["enable", "disable"]
    with pytest.raises(RuntimeError), vae.fusion_passes(True):
        raise RuntimeError("a failed compile")
    assert calls == ["enable", "disable"] * 2  # off again after a failure too
    enable = module.enable
    module.enable = lambda shared_bias=True: calls.append(f"enable shared_bias={shared_bias}") or Handle()
    with vae.fusion_passes(True, shared_bias=False) as described:
        assert str(described) == ("trt_gn.compile_passes.enable(shared_bias=False): pre-add pass: 1 graph(s), "
                                  "2 rewritten")
    assert calls[4:] == ["enable shared_bias=False", "disable"]
    del calls[4:]
    module.enable = enable
    del module.enable
    with pytest.raises(vae.Error) as exc, vae.fusion_passes(True):
        pass
    assert exc.value.message == ("trt_gn.compile_passes has no enable(): cannot turn its passes on for the trt_gn "
                                 "variants alone") and exc.value.hint == "run with --no-fusion-passes to measure without them"
    assert calls == ["enable", "disable"] * 2
    monkeypatch.setitem(sys.modules, vae.FUSION_PASSES_MODULE, None)  # as if the module were not there
    with vae.fusion_passes(True) as described:
        assert described == "none (trt_gn.compile_passes is not in this build)"
    with vae.fusion_passes(True, backend="eager") as described:
        assert described == "off (backend eager runs no Inductor pass)"


def test_compile_modes_and_the_profiled_pass_need_what_they_need():
    from trt_gn.compile_check import CheckedCompile

    with pytest.raises(ValueError, match="^mode 'reduce-overhead' needs the inductor backend, not 'eager'$"):
        CheckedCompile(torch.nn.Identity(), "x", backend="eager", mode="reduce-overhead")
    with pytest.raises(ValueError, match=r"^the profiled pass needs a CUDA device \(profile_iters=0 elsewhere\)$"):
        vae.bench_resolution("tiny-vae-decoder", 16, device="cpu", dtype=torch.float32, iters=2, warmup=0,
                             profile_iters=1)
    assert [v.name for v in vae.VARIANTS] == [
        "stock eager NCHW", "stock eager channels_last", "stock torch.compile NCHW", "stock torch.compile channels_last",
        "stock torch.compile reduce-overhead NCHW", "stock torch.compile reduce-overhead channels_last",
        "trt_gn eager channels_last", "trt_gn torch.compile channels_last",
        "trt_gn torch.compile reduce-overhead channels_last"]
    assert [v.name for v in vae.variants(("reduce-overhead",), ("trt_gn",))] == [
        "trt_gn eager channels_last", "trt_gn torch.compile reduce-overhead channels_last"]
    assert [v.mode for v in vae.VARIANTS] == [None, None, "default", "default", "reduce-overhead", "reduce-overhead",
                                              None, "default", "reduce-overhead"]


def test_unet_step_eager_variants_on_the_tiny_unet():
    rows = vae.bench_resolution("tiny-unet", 16, device="cpu", dtype=torch.float32, iters=2, warmup=0,
                                with_compile=False, batch=2, log=lambda line: None)
    assert [r.variant for r in rows] == ["stock eager NCHW", "stock eager channels_last", "trt_gn eager channels_last"]
    assert all(r.resolution == "16x16 latents" and r.latents == "2x4x16x16" and r.recipe == "tiny-unet" for r in rows)
    assert rows[0].max_abs_diff == 0.0 and all(0.0 <= r.max_abs_diff < 1e-3 for r in rows)


def test_reduce_overhead_without_cuda_graphs_is_counted():
    """What bench_resolution checks after a reduce-overhead variant: Inductor counts a graph it runs
    without CUDA graphs (here: a CPU graph) as a cudagraph skip."""
    from trt_gn.compile_check import CheckedCompile, raised_recompile_limits

    torch._dynamo.reset()
    skips = vae.cudagraph_skips()
    try:
        with vae.cudagraphs_or_error("reduce-overhead"), raised_recompile_limits():
            checked = CheckedCompile(lambda x: torch.sin(x) * 2, "sin", mode="reduce-overhead")
            out = checked.first_call(torch.ones(8))
    finally:
        torch._dynamo.reset()
    assert checked.graphs == 1 and torch.equal(out, torch.sin(torch.ones(8)) * 2)
    assert vae.cudagraph_skips() == skips + 1


def test_time_ms_reports_host_time_per_call():
    import time as clock

    def call():
        clock.sleep(0.002)
        return torch.zeros(1)

    times, host, out = vae.time_ms(call, iters=5, warmup=1, device=torch.device("cpu"))
    assert len(times) == len(host) == 5 and host == times and min(host) >= 2.0 and torch.equal(out, torch.zeros(1))
