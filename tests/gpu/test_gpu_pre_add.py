"""torch.ops.trt_gn.group_norm_act_add on a GPU: the kernels' pre-add (pre_bias, residual, the written
sum) against the float64 reference within the accuracy rule, the C++ implementation against the
Python one (the same bits, the same errors), inputs untouched, and torch.compile with the swap's
and the graph pass's rewrites against the reference."""

from __future__ import annotations

import copy
import os
import sys
from pathlib import Path

import pytest
import torch
from gpu_helpers import DTYPES, GPU, affine_for

from trt_gn import compile_passes, ops
from trt_gn.reference import assert_close, group_norm_act_add_reference

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fresh_python import child, result  # noqa: E402
from op_bad_inputs import ADD_BAD_INPUTS, add_outcomes, bad_add_cases  # noqa: E402
from pre_add_models import Chain, compile_and_run, float64_reference, randomise  # noqa: E402

pytestmark = GPU

DEVICE = "cuda"
op = torch.ops.trt_gn.group_norm_act_add


def _layout(t, layout):
    if layout == "channels_last":
        return t.contiguous(memory_format=torch.channels_last)
    if layout == "strided":  # neither NCHW- nor NHWC-contiguous: copied first
        return t.transpose(2, 3).contiguous().transpose(2, 3)
    return t


def _pre_bias(kind, n, c, dtype, gen):
    if kind == "none":
        return None
    shape = (n, c) if kind.startswith("nc") else (c,)
    return (2 * torch.randn(shape, device=DEVICE, generator=gen)).to(torch.float32 if kind.endswith("fp32") else dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[1])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "strided"])
def test_pre_add_matches_reference(dtype, layout):
    """Every pre-bias kind with and without a residual (in x's layout and the other one), write_sum on
    and off, on shapes of each path's size class; C++ and Python give the same bits."""
    gen = torch.Generator(device=DEVICE).manual_seed(61)
    for shape, groups in (((1, 32, 8, 8), 32), ((2, 320, 24, 24), 32), ((3, 96, 7, 5), 32), ((2, 64, 1, 1), 8),
                          ((1, 512, 64, 64), 32)):
        n, c = shape[:2]
        x = _layout((torch.randn(shape, device=DEVICE, generator=gen) * 2 + 0.5).to(dtype), layout)
        weight, bias = affine_for(c, "fp32", dtype, DEVICE, gen)
        for pre_kind, residual_layout in (("c", None), ("c_fp32", "same"), ("nc", "other"), ("nc_fp32", None),
                                          ("none", "same"), ("none", "other")):
            pre_bias = _pre_bias(pre_kind, n, c, dtype, gen)
            residual = None
            if residual_layout is not None:
                residual = (torch.randn(shape, device=DEVICE, generator=gen) - 1).to(dtype)
                other = "contiguous" if layout == "channels_last" else "channels_last"
                residual = _layout(residual, layout if residual_layout == "same" else other)
            before = [t.clone() for t in (x, pre_bias, residual) if t is not None]
            for activation in ("silu", "none"):
                what = f"{shape} {layout} pre_bias={pre_kind} residual={residual_layout} {activation}"
                y, s = op(x, weight, bias, groups, 1e-5, activation, pre_bias, residual, True)
                y_only, empty = op(x, weight, bias, groups, 1e-5, activation, pre_bias, residual, False)
                python = ops._group_norm_act_add_cuda(x, weight, bias, groups, 1e-5, activation, pre_bias, residual,
                                                      True)
                ref_y, ref_s = group_norm_act_add_reference(x, weight, bias, groups, 1e-5, activation, pre_bias,
                                                            residual)
                assert y.dtype == s.dtype == dtype and y.stride() == s.stride() == python[0].stride(), what
                assert (y.is_contiguous(memory_format=torch.channels_last) if layout == "channels_last"
                        else y.is_contiguous()), what
                assert torch.equal(y, python[0]) and torch.equal(s, python[1]), what
                assert torch.equal(y_only, y) and empty.numel() == 0 and empty.dtype == dtype, what
                assert_close(y, ref_y, dtype, what=what)
                assert_close(s, ref_s, dtype, what=f"{what} (sum)")
            assert all(torch.equal(a, b) for a, b in zip(before, (t for t in (x, pre_bias, residual)
                                                                  if t is not None))), "an input was changed"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
def test_float32_pre_bias_beside_gamma_of_x_dtype_converts_nothing(dtype):
    """A UNet resnet's norm2: gamma/beta of x's dtype, the pre-bias (conv bias + time embedding) summed
    in float32. Neither is converted (pre_bias_float32): trt_gn's kernel alone, no copy kernels; the result
    is the reference's, and the Python implementation's bits."""
    gen = torch.Generator(device=DEVICE).manual_seed(63)
    for shape in ((2, 320, 64, 64), (2, 1280, 8, 8), (1, 512, 64, 64)):
        n, c = shape[:2]
        x = (torch.randn(shape, device=DEVICE, generator=gen) * 2 + 0.5).to(dtype)
        x = x.contiguous(memory_format=torch.channels_last)
        weight, bias = affine_for(c, "x", dtype, DEVICE, gen)
        for pre_shape in ((n, c), (c,)):
            pre_bias = 2 * torch.randn(pre_shape, device=DEVICE, generator=gen)
            residual = (torch.randn(shape, device=DEVICE, generator=gen) - 1).to(dtype).contiguous(
                memory_format=torch.channels_last)
            what = f"{shape} pre_bias {pre_shape}"
            op(x, weight, bias, 32, 1e-5, "silu", pre_bias, residual, True)  # warm
            torch.cuda.synchronize()
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                y, s = op(x, weight, bias, 32, 1e-5, "silu", pre_bias, residual, True)
                torch.cuda.synchronize()
            kernels = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
            assert kernels and all("trtgn::" in k for k in kernels), (what, kernels)  # trt_gn's alone
            python = ops._group_norm_act_add_cuda(x, weight, bias, 32, 1e-5, "silu", pre_bias, residual, True)
            assert torch.equal(y, python[0]) and torch.equal(s, python[1]), what
            ref_y, ref_s = group_norm_act_add_reference(x, weight, bias, 32, 1e-5, "silu", pre_bias, residual)
            assert_close(y, ref_y, dtype, what=what)
            assert_close(s, ref_s, dtype, what=f"{what} (sum)")


def test_zero_size_and_non_default_stream():
    for shape in ((0, 64, 4, 4), (2, 64, 0, 4)):
        x = torch.empty(shape, device=DEVICE, dtype=torch.float16)
        y, s = op(x, None, None, 8, 1e-5, "silu", torch.zeros(64, device=DEVICE, dtype=torch.float16), x, True)
        assert y.shape == s.shape == shape
    gen = torch.Generator(device=DEVICE).manual_seed(62)
    x = torch.randn(2, 320, 16, 16, device=DEVICE, generator=gen).bfloat16()
    r = torch.randn(2, 320, 16, 16, device=DEVICE, generator=gen).bfloat16()
    p = torch.randn(2, 320, device=DEVICE, generator=gen)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        y, s = op(x, None, None, 32, 1e-6, "silu", p, r, True)
    stream.synchronize()
    ref_y, ref_s = group_norm_act_add_reference(x, None, None, 32, 1e-6, "silu", p, r)
    assert_close(y, ref_y, torch.bfloat16)
    assert_close(s, ref_s, torch.bfloat16)


def test_cpp_raises_what_the_python_implementation_raises(tmp_path):
    if os.environ.get(ops.IMPLEMENTATION_ENV, "").strip().lower() == "python":
        pytest.skip("TRT_GN_TORCH_OP=python chooses the Python implementation")
    assert ops.implementation().kind == "cpp"
    cpp = add_outcomes(bad_add_cases(DEVICE))
    code = f"""
        import json, sys
        sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})
        from op_bad_inputs import bad_add_cases, add_outcomes
        from trt_gn import ops
        print(json.dumps([str(ops.implementation()), add_outcomes(bad_add_cases("cuda"))]))
    """
    python_impl, python = result(child(code, tmp_path, own_cache=False, TRT_GN_TORCH_OP="python"))
    assert python_impl == "Python (TRT_GN_TORCH_OP=python)"
    assert cpp == python
    assert cpp[:len(ADD_BAD_INPUTS)] == [[error.__name__, message] for _, error, message in ADD_BAD_INPUTS]
    assert cpp[len(ADD_BAD_INPUTS):] == [
        ["ValueError", "group_norm_act_add: pre_bias is on cpu but x is on cuda:0"],
        ["ValueError", "group_norm_act_add: residual is on cpu but x is on cuda:0"]]


@pytest.mark.parametrize("layout", ["channels_last", "contiguous"])
def test_compiled_chain_with_the_pass(layout):
    """The CPU test's ResnetBlock2D chain on the GPU in float32 (TF32 off: the rule is float32's),
    swapped with pre_add and compiled with the pass: rewritten as on the CPU, within the rule."""
    from trt_gn.swap import swap_group_norms

    original = randomise(Chain(), 63).to(DEVICE)
    model = copy.deepcopy(original)
    swap_group_norms(model, pre_add=True)
    x = _layout(torch.randn(2, 4, 16, 16, device=DEVICE, generator=torch.Generator(device=DEVICE).manual_seed(64)),
                layout)
    if layout == "channels_last":
        model = model.to(memory_format=torch.channels_last)
    tf32 = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    try:
        out, pre_add, _ = compile_and_run(model, x)
        ref = float64_reference(original, x)
    finally:
        torch.backends.cudnn.allow_tf32 = tf32
    assert [d.action for d in pre_add.report.decisions] == ["fused", "fused", "fused"], pre_add.summary()
    assert_close(out, ref, torch.float32)


def test_compiled_chain_float16_is_rewritten():
    """float16 channels_last, as a VAE decode runs: the same rewrites, and the compiled model runs."""
    from trt_gn.swap import swap_group_norms

    model = randomise(Chain(), 65).to(DEVICE).half().to(memory_format=torch.channels_last)
    swap_group_norms(model, pre_add=True)
    x = torch.randn(2, 4, 32, 32, device=DEVICE).half().contiguous(memory_format=torch.channels_last)
    out, pre_add, graphs = compile_and_run(model, x)
    assert [d.action for d in pre_add.report.decisions] == ["fused", "fused", "fused"], pre_add.summary()
    assert out.dtype == torch.float16 and bool(torch.isfinite(out).all())
    assert sum(target is torch.ops.trt_gn.group_norm_act_add.default for target, _ in graphs[0]) == 5
    assert compile_passes.PreAddPass().uuid() == pre_add.uuid()
