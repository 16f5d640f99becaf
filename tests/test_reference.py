"""The float64 reference against torch.nn.functional.group_norm, and the accuracy rule itself."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from trt_gn.reference import assert_close, group_norm_act_reference, max_errors, sum_reference, tolerance


def torch_group_norm_act(x, weight, bias, groups, eps, activation):
    y = F.group_norm(x.double(), groups, None if weight is None else weight.double(),
                     None if bias is None else bias.double(), eps)
    return F.silu(y) if activation == "silu" else y


@pytest.mark.parametrize("shape,groups", [((2, 32, 5, 7), 8), ((1, 12, 3, 3), 12), ((3, 9, 1, 4), 1),
                                          ((1, 30, 4, 1), 3), ((2, 320, 4, 4), 32)])
@pytest.mark.parametrize("activation", ["none", "silu"])
@pytest.mark.parametrize("affine", [True, False])
def test_matches_torch_group_norm(shape, groups, activation, affine):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(shape, dtype=torch.float64, generator=g) * 3 + 0.5
    c = shape[1]
    weight = torch.randn(c, dtype=torch.float64, generator=g) if affine else None
    bias = torch.randn(c, dtype=torch.float64, generator=g) if affine else None
    ref = group_norm_act_reference(x, weight, bias, groups, 1e-5, activation)
    assert ref.dtype == torch.float64 and ref.is_contiguous()
    torch.testing.assert_close(ref, torch_group_norm_act(x, weight, bias, groups, 1e-5, activation), rtol=1e-12, atol=1e-12)


def test_channels_last_and_low_precision_inputs():
    x = torch.randn(2, 16, 5, 3).to(torch.bfloat16)
    w = torch.rand(16) + 0.5
    ref = group_norm_act_reference(x.contiguous(memory_format=torch.channels_last), w, None, 4, 1e-6, "silu")
    torch.testing.assert_close(ref, torch_group_norm_act(x.double(), w, None, 4, 1e-6, "silu"), rtol=1e-12, atol=1e-12)


def test_large_mean_tiny_std_is_exact_in_float64():
    # x = 1e3 + 1e-2 * z with z standardised per group: the normalised output must be z.
    g = torch.Generator().manual_seed(2)
    z = torch.randn(2, 8, 16, 16, dtype=torch.float64, generator=g).reshape(2, 4, -1)
    z = (z - z.mean(-1, keepdim=True)) / z.std(-1, correction=0, keepdim=True)
    z = z.reshape(2, 8, 16, 16)
    x = 1e3 + 1e-2 * z
    ref = group_norm_act_reference(x, None, None, 4, 0.0, "none")
    torch.testing.assert_close(ref, z, rtol=0, atol=1e-9)
    torch.testing.assert_close(ref, torch_group_norm_act(x, None, None, 4, 0.0, "none"), rtol=0, atol=1e-9)
    # The E[x^2] - E[x]^2 formula loses everything here, which is what the reference avoids.
    xg = x.float().double().reshape(2, 4, -1)
    naive_var = (xg.float() ** 2).mean(-1) - xg.float().mean(-1) ** 2
    assert (naive_var.double() - 1e-4).abs().max() > 1e-5


def test_nan_and_inf_propagate_to_their_group():
    x = torch.randn(1, 8, 4, 4, dtype=torch.float64)
    x[0, 1, 2, 2] = float("nan")
    x[0, 6, 0, 0] = float("inf")
    ref = group_norm_act_reference(x, None, None, 4, 1e-5, "silu")
    assert torch.isnan(ref[0, 0:2]).all() and torch.isnan(ref[0, 6:8]).all()
    assert torch.isfinite(ref[0, 2:6]).all()


def test_reference_rejects_bad_arguments():
    with pytest.raises(ValueError, match="4-D"):
        group_norm_act_reference(torch.zeros(2, 4, 4), None, None, 2, 1e-5, "none")
    with pytest.raises(ValueError, match="divide C=6"):
        group_norm_act_reference(torch.zeros(1, 6, 2, 2), None, None, 4, 1e-5, "none")
    with pytest.raises(ValueError, match="unknown activation 'gelu'"):
        group_norm_act_reference(torch.zeros(1, 6, 2, 2), None, None, 3, 1e-5, "gelu")


def test_tolerance_is_half_an_ulp_plus_the_error_terms():
    values = torch.tensor([8.5, 1.0, 1000.0, 0.0], dtype=torch.float64)
    terms = torch.tensor([0.0, 0.0, 0.0, 1e-6], dtype=torch.float64)
    bf = tolerance((values, terms), torch.bfloat16)
    assert bf[0].item() == 0.5 * 0.0625  # bf16 values near 8 are 0.0625 apart
    assert bf[1].item() == 0.5 * 2**-7
    half = tolerance((values, terms), torch.float16)
    assert half[2].item() == 0.5 * 0.5
    assert half[3].item() == pytest.approx(1e-6 + 0.5 * 2**-24)  # at |y| + terms: fp16's subnormal spacing
    assert torch.equal(tolerance((values, terms), torch.float32), terms)
    with pytest.raises(ValueError, match="carries no error terms"):
        tolerance(values, torch.float32)


def test_error_terms_follow_the_analysis():
    # One group [a, b] of 2 elements: xh = -1, 1 (the first element -1), gamma 2, beta 0.5.
    x = torch.tensor([3.0, 5.0], dtype=torch.float64).reshape(1, 1, 2, 1)
    w = torch.tensor([2.0], dtype=torch.float64)
    b = torch.tensor([0.5], dtype=torch.float64)
    ref = group_norm_act_reference(x, w, b, 1, 0.0, "none")
    u = 2.0**-24
    c_rstd = 3 + 40 * (2 + 2 * 1 + 3 * 1)  # |xh_k| = 1
    expected = u * (c_rstd * 2.0 + 80 * 2 * 2.0 + 3 * 0.5) + 2.0**-126
    assert ref.flatten().tolist() == [-1.5, 2.5]
    assert ref.trtgn_error[0, 0, 0, 0].item() == pytest.approx(expected + 1.5 * 2.0**-62, rel=1e-12)
    silu = group_norm_act_reference(x, w, b, 1, 0.0, "silu")
    y1 = 2.5 / (1 + math.exp(-2.5))
    assert silu[0, 0, 1, 0].item() == pytest.approx(y1, rel=1e-12)
    assert silu.trtgn_error[0, 0, 1, 0].item() == pytest.approx(
        1.1 * (expected - 2.0**-126) + u * (4 + 2.5) * y1 + 2.5 * 2.0**-62 + 2.0**-126, rel=1e-12)


def test_tolerance_near_cancellation_and_against_gross_errors():
    # Inputs of mean -50: outputs near zero keep the error of the terms that cancelled there
    # (xh * gamma against beta), while a gross error (the NHWC two-pass failure: 2448 for 6.99)
    # stays orders of magnitude out.
    torch.manual_seed(3)
    x = (torch.randn(2, 64, 6, 5, dtype=torch.float64) - 50).float()
    w = 1 + 0.25 * torch.randn(64)
    b = 0.5 * torch.randn(64)
    ref = group_norm_act_reference(x, w, b, 8, 1e-5, "silu")
    tol = tolerance(ref, torch.float32)
    near_zero = ref.abs() < 1e-3
    assert bool(near_zero.any())
    assert bool((tol[near_zero] > 1e-6).all())  # not a bound relative to |y|
    assert float(tol.max()) < 1e-3
    off = ref.float().clone()
    off[0, 0, 0, 0] = 2448.0
    with pytest.raises(AssertionError, match="1 of 3840 elements out of tolerance"):
        assert_close(off, ref)


def test_assert_close_accepts_rounding_and_rejects_more():
    values = torch.linspace(-6, 6, 1001, dtype=torch.float64)
    for dtype in (torch.float16, torch.bfloat16):
        assert_close(values.to(dtype), (values, torch.zeros_like(values)), dtype)  # round to nearest: 1/2 ulp
    assert_close(values.float(), (values, 2.0**-24 * values.abs()))
    bf = values.to(torch.bfloat16)
    off = bf.clone()
    off[800] = (bf[800].double() + 4 * 2**-6).to(torch.bfloat16)  # 4 ulp at 3.6 (bf16 spacing 2**-6)
    with pytest.raises(AssertionError, match="1 of 1001 elements out of tolerance"):
        assert_close(off, (values, torch.zeros_like(values)), torch.bfloat16)
    f32 = values.float().clone()
    f32[10] *= 1 + 5e-5
    with pytest.raises(AssertionError, match="max rel err"):
        assert_close(f32, (values, 1e-5 * values.abs()))


def test_assert_close_nan_and_inf_positions():
    values = torch.tensor([1.0, float("nan"), float("inf"), -2.0], dtype=torch.float64)
    ref = (values, torch.zeros_like(values))
    assert_close(values.half(), ref)
    out = values.clone()
    out[0] = float("nan")
    with pytest.raises(AssertionError, match="NaN positions differ: 1 unexpected NaN, 0 missing NaN"):
        assert_close(out.half(), ref)
    out = values.clone()
    out[2] = -float("inf")
    with pytest.raises(AssertionError, match="Inf positions"):
        assert_close(out.half(), ref)
    with pytest.raises(AssertionError, match="shape"):
        assert_close(values[:2].half(), ref)


def test_max_errors():
    ref = torch.tensor([1.0, 0.0, float("nan")], dtype=torch.float64)
    out = torch.tensor([1.001, 1e-7, 0.0], dtype=torch.float64)
    abs_err, rel_err = max_errors(out, ref)
    assert abs_err == pytest.approx(1e-3, rel=1e-3)
    assert rel_err == pytest.approx(1e-3, rel=1e-3)


# ---- the pre-add: s = x + pre_bias[n, c] + residual ----

def _kernel_sum(x, pre_bias, residual):
    """s~ as the kernels form it: fp32 (x + b) + r, each term in its stored dtype."""
    s = x.float()
    if pre_bias is not None:
        s = s + pre_bias.float().reshape(-1, x.shape[1], 1, 1)
    if residual is not None:
        s = s + residual.float()
    return s


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("bias_shape,with_residual", [(None, True), ("c", False), ("c", True), ("nc", False), ("nc", True)])
def test_pre_add_matches_groupnorm_of_the_sum(dtype, bias_shape, with_residual):
    g = torch.Generator().manual_seed(3)
    x = (torch.randn(2, 16, 5, 3, generator=g) * 2 + 30).to(dtype)
    pre_bias = None if bias_shape is None else (torch.randn((16,) if bias_shape == "c" else (2, 16), generator=g) * 5).to(dtype)
    residual = (torch.randn(2, 16, 5, 3, generator=g) - 40).to(dtype) if with_residual else None
    w, b = torch.rand(16, generator=g) + 0.5, torch.randn(16, generator=g)
    ref = group_norm_act_reference(x, w, b, 4, 1e-5, "silu", pre_bias=pre_bias, residual=residual)
    # s as the kernels form it: the fp32 sum rounded once to the dtype; y the plain reference of it
    s_hat = _kernel_sum(x, pre_bias, residual).to(dtype).double()
    s = sum_reference(x, pre_bias, residual)
    assert s.dtype == torch.float64 and torch.equal(s, s_hat) and not s.trtgn_error.any()
    torch.testing.assert_close(ref, torch_group_norm_act(s_hat, w, b, 4, 1e-5, "silu"), rtol=1e-12, atol=1e-12)
    plain = group_norm_act_reference(s_hat, w, b, 4, 1e-5, "silu")
    assert torch.equal(ref, plain) and torch.equal(ref.trtgn_error, plain.trtgn_error)


def test_pre_add_sum_rounds_as_the_kernels():
    # 2^24 + 0.5 + 0.5: fp32 rounds (x + b) to 2^24 (ties to even), then + 0.5 again: 2^24, not the
    # exact 2^24 + 1; in fp16, 2048 + 1 = 2049 rounds to 2048 (ulp 2). float64 x is added exactly.
    s = sum_reference(torch.full((1, 2, 1, 2), 2.0**24), torch.tensor([0.5, 0.5]), torch.full((1, 2, 1, 2), 0.5))
    assert torch.equal(s, torch.full((1, 2, 1, 2), 2.0**24, dtype=torch.float64))
    s = sum_reference(torch.full((1, 2, 1, 2), 2048.0).half(), None, torch.ones(1, 2, 1, 2).half())
    assert torch.equal(s, torch.full((1, 2, 1, 2), 2048.0, dtype=torch.float64))
    s = sum_reference(torch.full((1, 2, 1, 2), 2.0**24, dtype=torch.float64), torch.tensor([0.5, 0.5]),
                      torch.full((1, 2, 1, 2), 0.5, dtype=torch.float64))
    assert torch.equal(s, torch.full((1, 2, 1, 2), 2.0**24 + 1, dtype=torch.float64))
    plain = group_norm_act_reference(torch.randn(1, 4, 3, 3), None, None, 2, 1e-5, "none")
    same = group_norm_act_reference(torch.randn(1, 4, 3, 3), None, None, 2, 1e-5, "none", pre_bias=None, residual=None)
    assert plain.trtgn_error.shape == same.trtgn_error.shape


def test_pre_add_rejects_bad_shapes():
    x = torch.randn(2, 4, 3, 3)
    with pytest.raises(ValueError, match=r"^pre_bias must be \[C\] or \[N, C\] = \[4\] or \[2, 4\], got \(3,\)$"):
        group_norm_act_reference(x, None, None, 2, 1e-5, "none", pre_bias=torch.zeros(3))
    with pytest.raises(ValueError, match=r"^residual must have x's shape \(2, 4, 3, 3\), got \(2, 4, 3\)$"):
        sum_reference(x, residual=torch.zeros(2, 4, 3))


def test_pre_add_nan_and_inf():
    x = torch.zeros(1, 2, 2, 2)
    residual = torch.zeros(1, 2, 2, 2)
    x[0, 0, 0, 0] = math.inf
    residual[0, 0, 0, 0] = -math.inf  # inf + -inf: NaN in s and its whole group of y
    residual[0, 1, 1, 1] = math.inf
    s = sum_reference(x, None, residual)
    assert math.isnan(s[0, 0, 0, 0]) and s[0, 1, 1, 1] == math.inf and s[0, 0, 1, 1] == 0
    y = group_norm_act_reference(x, None, None, 2, 1e-5, "none", residual=residual)
    assert torch.isnan(y).all()


def _two_pass_nhwc_fp16_residual(x, r, chunk):
    """numpy float32 emulation of gnStatsNHWC + gnFinalize + gnApplyNHWC with a residual (fp16, one
    channel a group, one pixel row a block, no affine, SiLU), each row of x, r one group's pixels:
    the pre-rounding fp32 output. s = x + r in fp32, rounded once to fp16 (preSum). Chunks of `chunk`
    pixels, each one thread's run of fp32 sums of d = s - k shifted by the group's first s (FMAs as
    nvcc contracts them)."""
    import numpy as np

    f32, f64 = np.float32, np.float64

    def fma(a, b, c):  # a*b exact in float64, one rounding of the sum, then to fp32
        return (a.astype(f64) * b.astype(f64) + c.astype(f64)).astype(f32)

    s = (x.astype(f32) + r.astype(f32)).astype(np.float16).astype(f32)
    k = s[:, 0].copy()
    cnt = sm = sq = 0.0
    for p0 in range(0, s.shape[1], chunk):
        s1 = np.zeros(len(s), f32)
        s2 = np.zeros(len(s), f32)
        for p in range(p0, min(s.shape[1], p0 + chunk)):
            d = s[:, p] - k
            s1, s2 = s1 + d, fma(d, d, s2)
        nc = f32(min(s.shape[1], p0 + chunk) - p0)
        mean = s1 * (f32(1) / nc)
        m2 = np.maximum(fma(-s1, mean, s2), f32(0))
        cnt, sm, sq = cnt + f64(nc), sm + f64(nc) * mean, sq + f64(nc) * f64(mean) ** 2 + m2
    mean = sm / cnt
    var = np.maximum((sq - sm * mean) / cnt, 0.0)
    rstd = (1.0 / np.sqrt((var.astype(f32) + f32(1e-5)).astype(f64))).astype(f32)
    shift = -(mean.astype(f32) * rstd)
    z = fma(s - k[:, None], rstd[:, None], shift[:, None])
    e = np.exp2((z * f32(-1.4426950408889634)).astype(f64)).astype(f32)
    return z * (1.0 / (f32(1) + e).astype(f64)).astype(f32)


def test_pre_add_rule_bounds_the_two_pass_statistics_of_a_sum():
    # x and the residual drawn as the fuzz draws them for a two-pass NHWC fp16 case (scale 73.17,
    # offset -273.92; 975 pixels a group in 3 chunks), in the four groups (of 20000 drawn) whose
    # first element lies far out (|xh_k| 2.5 to 4.0), where the variance's term for the mean's
    # error, times 2 |xh_k|, is largest. The kernel rounds s to fp16 (|s| ~ 550, half an ulp 0.25,
    # about 2.4e-3 std): the rule's term for that rounding. The emulated kernel stays within the
    # rule's terms before rounding, so within its fp16 tolerance.
    gen = torch.Generator().manual_seed(6)
    x = (torch.randn((20000, 975), generator=gen) * 73.172017 - 273.9216).half()
    r = (torch.randn((20000, 975), generator=gen) * 73.172017 - 273.9216).half()
    rows = [1009, 3022, 7209, 12417, *range(40)]
    x, r = x[rows], r[rows]
    ref = group_norm_act_reference(x.reshape(-1, 1, 39, 25), None, None, 1, 1e-5, "silu",
                                   residual=r.reshape(-1, 1, 39, 25))
    v = torch.from_numpy(_two_pass_nhwc_fp16_residual(x.numpy(), r.numpy(), 325)).reshape(ref.shape)
    assert bool(((v.double() - ref).abs() <= ref.trtgn_error).all())
    assert_close(v.half(), ref)
    # Twice the tolerance off at the largest output is rejected.
    worst = int(torch.argmax(ref.abs()))
    wrong = v.half().flatten().clone()
    wrong[worst] = float(wrong[worst]) + 2 * float(tolerance(ref, torch.float16).flatten()[worst])
    with pytest.raises(AssertionError, match="1 of"):
        assert_close(wrong.reshape(ref.shape), ref)
