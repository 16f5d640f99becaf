"""The float64 reference of y = act(GroupNorm(x)) and the accuracy rule every test uses."""

from __future__ import annotations

import torch

from . import spec

# Mantissa bits (without the implicit one) and smallest subnormal of each output dtype.
_MANTISSA_BITS = {torch.float16: 10, torch.bfloat16: 7, torch.float32: 23}
_SMALLEST_SUBNORMAL = {torch.float16: 2.0**-24, torch.bfloat16: 2.0**-133, torch.float32: 2.0**-149}

FP32_RTOL = 1e-5
FP32_ATOL = 1e-6  # the floor for outputs near zero, where a relative bound means nothing
HALF_ULPS = 2
HALF_ATOL = 1e-6


def group_norm_act_reference(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    num_groups: int,
    eps: float,
    activation: str,
) -> torch.Tensor:
    """act(GroupNorm(x)) computed in float64 on x's device; returns a contiguous float64 NCHW tensor.

    Two-pass statistics (mean, then the mean of squared deviations): no cancellation.
    NaN/Inf propagate as the formula says: a group with a NaN or Inf is NaN throughout.
    """
    if x.dim() != 4:
        raise ValueError(f"x must be 4-D (N, C, H, W), got shape {tuple(x.shape)}")
    if activation not in spec.ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; expected one of {spec.ACTIVATIONS}")
    n, c, h, w = x.shape
    if num_groups <= 0 or c % num_groups != 0:
        raise ValueError(f"num_groups={num_groups} must be > 0 and divide C={c}")
    x64 = x.to(torch.float64).contiguous().reshape(n, num_groups, -1)
    mean = x64.mean(dim=-1, keepdim=True)
    centered = x64 - mean
    var = (centered * centered).mean(dim=-1, keepdim=True)
    y = (centered * torch.rsqrt(var + eps)).reshape(n, c, h, w)
    if weight is not None:
        y = y * weight.to(device=y.device, dtype=torch.float64).reshape(1, c, 1, 1)
    if bias is not None:
        y = y + bias.to(device=y.device, dtype=torch.float64).reshape(1, c, 1, 1)
    if activation == "silu":
        y = y * torch.sigmoid(y)
    return y.contiguous()


def tolerance(ref: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Allowed |out - ref| per element for an output of `dtype` (ref in float64).

    fp16/bf16: 2 units in the last place of `dtype` at |ref|, plus 1e-6 (a fixed absolute
    tolerance is wrong for bf16, whose values near 8 are 0.0625 apart). fp32: 1e-5 * |ref| + 1e-6.
    """
    mag = ref.abs().to(torch.float64)
    if dtype == torch.float32:
        return FP32_RTOL * mag + FP32_ATOL
    if dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(f"no tolerance defined for {dtype}")
    tiny = _SMALLEST_SUBNORMAL[dtype]
    exponent = torch.floor(torch.log2(mag.clamp_min(tiny)))
    ulp = torch.exp2(exponent - _MANTISSA_BITS[dtype]).clamp_min(tiny)
    return HALF_ULPS * ulp + HALF_ATOL


def assert_close(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype | None = None, what: str = "") -> None:
    """Raise AssertionError unless `out` matches the float64 `ref` within tolerance(ref, dtype).

    NaN must appear exactly where ref has NaN; +-Inf exactly where ref has the same Inf.
    """
    dtype = out.dtype if dtype is None else dtype
    prefix = f"{what}: " if what else ""
    if tuple(out.shape) != tuple(ref.shape):
        raise AssertionError(f"{prefix}shape {tuple(out.shape)} != reference shape {tuple(ref.shape)}")
    o = out.to(torch.float64)
    r = ref.to(device=o.device, dtype=torch.float64)
    nan_o, nan_r = torch.isnan(o), torch.isnan(r)
    if not torch.equal(nan_o, nan_r):
        extra = int((nan_o & ~nan_r).sum())
        missing = int((nan_r & ~nan_o).sum())
        raise AssertionError(f"{prefix}NaN positions differ: {extra} unexpected NaN, {missing} missing NaN")
    inf_r = torch.isinf(r)
    inf_o = torch.isinf(o)
    if not torch.equal(inf_o, inf_r) or not torch.equal(o[inf_r], r[inf_r]):
        raise AssertionError(f"{prefix}Inf positions or signs differ from the reference")
    finite = ~(nan_r | inf_r)
    if not bool(finite.any()):
        return
    of, rf = o[finite], r[finite]
    err = (of - rf).abs()
    tol = tolerance(rf, dtype)
    bad = err > tol
    if bool(bad.any()):
        rel = err / rf.abs().clamp_min(1e-300)
        worst = int(torch.argmax(err / tol))
        raise AssertionError(
            f"{prefix}{int(bad.sum())} of {err.numel()} elements out of tolerance ({dtype}): "
            f"max abs err {float(err.max()):.3e}, max rel err {float(rel.max()):.3e}; "
            f"worst: out {float(of[worst]):.9g} vs ref {float(rf[worst]):.9g} (tol {float(tol[worst]):.3e})"
        )


def max_errors(out: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    """(max abs error, max relative error) over the finite reference elements.

    The relative error is taken against max(|ref|, 1e-3): near zero only the absolute error means something.
    """
    o = out.to(torch.float64)
    r = ref.to(device=o.device, dtype=torch.float64)
    finite = torch.isfinite(r)
    if not bool(finite.any()):
        return 0.0, 0.0
    err = (o[finite] - r[finite]).abs()
    rel = err / r[finite].abs().clamp_min(1e-3)
    return float(err.max()), float(rel.max())
