"""The float64 reference of y = act(GroupNorm(s)), s = x + pre_bias + residual (the pre-add; s = x
without one), of s itself (sum_out), and the accuracy rule every test uses."""

from __future__ import annotations

import torch

from . import spec

# Mantissa bits (without the implicit one) and smallest subnormal of each output dtype.
_MANTISSA_BITS = {torch.float16: 10, torch.bfloat16: 7, torch.float32: 23}
_SMALLEST_SUBNORMAL = {torch.float16: 2.0**-24, torch.bfloat16: 2.0**-133, torch.float32: 2.0**-149}

# The accuracy rule: a forward error analysis of the kernels' arithmetic.
#
# Every path computes, in fp32 (u = 2^-24), d = x - k with k the group's first element (or, in
# the two-pass NHWC and streaming statistics, a thread's first value), sums of d and d^2 over at
# most R = 256 terms before they are merged (Chan) or added in double, then
#     z~ = fma(x - k, s, b),  s = rstd * gamma,  b = beta - (mean - k) * s,
#     y  = act(z~), rounded once to the output dtype.
# With z = xh * gamma + beta the exact pre-activation (xh = (x - mean) * rstd) and xh_k the
# normalised first element of the group:
#  - mean: a sum of R fp32 terms errs by at most lam * sqrt(R) * u * sum|terms| but with a
#    negligible probability (probabilistic rounding-error analysis, Higham & Mary 2019; lam = 5,
#    so lam * sqrt(R) = 80). sum|d| / (n * std) <= 1 + |xh_k|, so the normalised mean errs by
#    <= 80 u (1 + |xh_k|), which enters z times gamma;
#  - variance: likewise sum(d^2) / (n * var) <= 1 + xh_k^2, plus 1 (the mean square of xh) for
#    threads shifted by their own first value: 80 u (2 + xh_k^2); and var = mean(d^2) - mean(d)^2
#    with mean(d) = -xh_k * std inherits the mean's error times 2 |xh_k|: 160 u |xh_k| (1 + |xh_k|)
#    (zero where the sums of d are exact, as for 16-bit inputs without a pre-add, but not for s);
#    relative error <= 80 u (2 + 2 |xh_k| + 3 xh_k^2); rstd halves it and adds 2 u (rsqrt), and it
#    enters z times xh * gamma;
#  - the roundings of s, b and the fma: 3 u (|xh * gamma| + |beta|) (the fma's share of
#    |(mean - k) * s| is in the mean's term);
#  - SiLU (x * rcp(1 + ex2(-x log2 e)) on approximate instructions): relative error <= (4 + |z|) u,
#    and |silu'| <= 1.1 scales the error of z; below z = -43 the kernels cap 2^(-z log2 e) at
#    2^62 (absolute error <= |z| 2^-62), and results under 2^-126 may be flushed to zero;
#  - the output's rounding: included above in fp32; half an ulp in 16 bits, of the value the
#    kernel rounded, which lies within the terms above of the reference.
# So, elementwise:
#     terms = act' u [(3 + 40 (2 + 2 |xh_k| + 3 xh_k^2)) |xh gamma| + 80 (1 + |xh_k|) |gamma| + 3 |beta|]
#             + [SiLU] (4 + |z|) u |y| + |z| 2^-62 + 2^-126
#     tol   = terms (fp32),  terms + ulp(|y| + terms) / 2 (fp16, bf16).
# The terms are magnitudes before cancellation, not |y|: where xh * gamma and beta cancel, y is
# near zero but its error is not (fp32 outputs of inputs of mean -50 err by ~1e-6 near 1e-7).
#
# The pre-add. The kernels form s = fl_T(fl(fl(x + b) + r)): x, pre_bias b and residual r as
# stored (x's dtype, b also fp32), added in fp32 in this order (IEEE additions, round to nearest: no
# FMA can contract them), then rounded once to x's dtype T (round to nearest even; nothing in fp32).
# This s is what sum_out holds and what an unfused model would normalise, and the kernels take its
# statistics and y of it. The reference forms the same s bit for bit (float32 tensor additions and
# a dtype conversion round the same way on every device), so sum_out's reference is exact and y's is
# the rule above with s as the input.
_U32 = 2.0**-24
_C_SUM = 80.0  # lam * sqrt(R)


def _error_terms(xh, xh_first, weight, bias, activation, z, y) -> torch.Tensor:
    """The rule's `terms` for every element (float64)."""
    g = 1.0 if weight is None else weight.abs()
    b = 0.0 if bias is None else bias.abs()
    k = xh_first.abs()
    c_rstd = 3.0 + 0.5 * _C_SUM * (2.0 + 2.0 * k + 3.0 * k * k)
    err = _U32 * (c_rstd * (xh * g).abs() + _C_SUM * (1.0 + k) * g + 3.0 * b)
    if activation == "silu":
        err = 1.1 * err + _U32 * (4.0 + z.abs()) * y.abs()
    return err + z.abs() * 2.0**-62 + 2.0**-126


def _pre_add(x: torch.Tensor, pre_bias: torch.Tensor | None, residual: torch.Tensor | None) -> torch.Tensor:
    """s as the kernels form it (see the rule), as a contiguous float64 NCHW tensor: (x + pre_bias[n, c])
    + residual in float32, rounded once to x's dtype (float64 x: added in float64); x alone without a
    pre-add."""
    if x.dim() != 4:
        raise ValueError(f"x must be 4-D (N, C, H, W), got shape {tuple(x.shape)}")
    n, c = x.shape[:2]
    if pre_bias is not None and tuple(pre_bias.shape) not in ((c,), (n, c)):
        raise ValueError(f"pre_bias must be [C] or [N, C] = [{c}] or [{n}, {c}], got {tuple(pre_bias.shape)}")
    if residual is not None and tuple(residual.shape) != tuple(x.shape):
        raise ValueError(f"residual must have x's shape {tuple(x.shape)}, got {tuple(residual.shape)}")
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    s = x.to(work)
    if pre_bias is not None:
        s = s + pre_bias.to(device=s.device, dtype=work).reshape(-1, c, 1, 1)
    if residual is not None:
        s = s + residual.to(device=s.device, dtype=work)
    return s.to(x.dtype).to(torch.float64).contiguous()


def sum_reference(x: torch.Tensor, pre_bias: torch.Tensor | None = None,
                  residual: torch.Tensor | None = None) -> torch.Tensor:
    """s = x + pre_bias[n, c] + residual as the kernels form it (pre_bias [C] or [N, C], residual x's
    shape; see the rule): the reference of sum_out, a contiguous float64 NCHW tensor whose rule terms
    (`.trtgn_error`) are zero (tolerance() adds half an ulp of the dtype, in which s is exact)."""
    s = _pre_add(x, pre_bias, residual)
    s.trtgn_error = torch.zeros_like(s)  # formed exactly as the kernels form it
    return s


def group_norm_act_reference(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    num_groups: int,
    eps: float,
    activation: str,
    pre_bias: torch.Tensor | None = None,
    residual: torch.Tensor | None = None,
) -> torch.Tensor:
    """act(GroupNorm(s)) computed in float64 on x's device, s = x + pre_bias[n, c] + residual formed as
    the kernels form it (the pre-add, see the rule; x alone without one); returns a contiguous float64
    NCHW tensor.

    Two-pass statistics (mean, then the mean of squared deviations): no cancellation.
    NaN/Inf propagate as the formula says: a group with a NaN or Inf is NaN throughout.
    The result carries the accuracy rule's terms as `.trtgn_error` (see tolerance()).
    """
    if activation not in spec.ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; expected one of {spec.ACTIVATIONS}")
    s = _pre_add(x, pre_bias, residual)
    n, c, h, w = x.shape
    if num_groups <= 0 or c % num_groups != 0:
        raise ValueError(f"num_groups={num_groups} must be > 0 and divide C={c}")
    x64 = s.reshape(n, num_groups, -1)
    # Shifted by each group's first element (exact for 16-bit inputs and fp32 ones of one scale): a constant
    # group is then centred to exact zeros (variance 0: NaN with eps 0, as in exact arithmetic),
    # where a float64 mean of equal values may miss them by an ulp and give a finite result.
    d = x64 - x64[..., :1]
    centered = d - d.mean(dim=-1, keepdim=True)
    var = (centered * centered).mean(dim=-1, keepdim=True)
    rstd = torch.rsqrt(var + eps)
    xh = centered * rstd
    xh_first = xh[..., :1].expand_as(xh).reshape(n, c, h, w)
    xh = xh.reshape(n, c, h, w)
    if weight is not None:
        weight = weight.to(device=xh.device, dtype=torch.float64).reshape(1, c, 1, 1)
    if bias is not None:
        bias = bias.to(device=xh.device, dtype=torch.float64).reshape(1, c, 1, 1)
    z = xh
    if weight is not None:
        z = z * weight
    if bias is not None:
        z = z + bias
    y = (z * torch.sigmoid(z) if activation == "silu" else z).contiguous()
    y.trtgn_error = _error_terms(xh, xh_first, weight, bias, activation, z, y).contiguous()
    return y


def group_norm_act_add_reference(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    num_groups: int,
    eps: float,
    activation: str,
    pre_bias: torch.Tensor | None = None,
    residual: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, s) of torch.ops.trt_gn.group_norm_act_add in float64: group_norm_act_reference and
    sum_reference of the same pre-add, each with its accuracy terms."""
    return (group_norm_act_reference(x, weight, bias, num_groups, eps, activation, pre_bias=pre_bias,
                                     residual=residual),
            sum_reference(x, pre_bias, residual))


def _values_and_terms(ref) -> tuple[torch.Tensor, torch.Tensor]:
    if isinstance(ref, tuple):
        return ref
    terms = getattr(ref, "trtgn_error", None)
    if terms is None:
        raise ValueError("the reference carries no error terms: compute it with group_norm_act_reference()")
    return ref, terms


def _half_ulp(mag: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Half an ulp in `dtype` (16 bits) of values of magnitude up to `mag` (float64): the most that
    rounding such a value to `dtype` moves it."""
    tiny = _SMALLEST_SUBNORMAL[dtype]
    exponent = torch.floor(torch.log2(mag.clamp_min(tiny)))
    return 0.5 * torch.exp2(exponent - _MANTISSA_BITS[dtype]).clamp_min(tiny)


def tolerance(ref, dtype: torch.dtype) -> torch.Tensor:
    """Allowed |out - ref| per element for an output of `dtype`: the rule above.

    `ref` comes from group_norm_act_reference() (it carries the rule's terms), or is a
    (values, terms) pair of float64 tensors of one shape, such as a selection of both.
    """
    values, terms = _values_and_terms(ref)
    if dtype == torch.float32:
        return terms
    if dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(f"no tolerance defined for {dtype}")
    return terms + _half_ulp(values.abs() + terms, dtype)


def assert_close(out: torch.Tensor, ref, dtype: torch.dtype | None = None, what: str = "") -> None:
    """Raise AssertionError unless `out` matches the float64 reference within tolerance(ref, dtype).

    `ref` as tolerance() takes it. NaN must appear exactly where the reference has NaN; +-Inf
    exactly where it has the same Inf.
    """
    dtype = out.dtype if dtype is None else dtype
    prefix = f"{what}: " if what else ""
    values, terms = _values_and_terms(ref)
    if tuple(out.shape) != tuple(values.shape):
        raise AssertionError(f"{prefix}shape {tuple(out.shape)} != reference shape {tuple(values.shape)}")
    o = out.to(torch.float64)
    r = values.to(device=o.device, dtype=torch.float64)
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
    tol = tolerance((rf, terms.to(device=o.device, dtype=torch.float64)[finite]), dtype)
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
