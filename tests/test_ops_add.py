"""torch.ops.trt_gn.group_norm_act_add on the CPU: the float64 reference of the pre-add, the sum
output, memory formats, validation (exact messages), fake/meta tracing."""

from __future__ import annotations

import hashlib

import pytest
import torch
import torch.nn.functional as F

import trt_gn.ops  # noqa: F401  (registers the ops)
from trt_gn.reference import assert_close, group_norm_act_add_reference, group_norm_act_reference

from op_bad_inputs import ADD_BAD_INPUTS

op = torch.ops.trt_gn.group_norm_act_add


def test_schema_is_the_contract():
    assert str(op.default._schema) == (
        "trt_gn::group_norm_act_add(Tensor x, Tensor? weight, Tensor? bias, int num_groups, float eps, "
        "str activation, Tensor? pre_bias, Tensor? residual, bool write_sum) -> (Tensor y, Tensor s)")
    # the pre-add is an op of its own: group_norm_act's schema is unchanged
    assert str(torch.ops.trt_gn.group_norm_act.default._schema) == (
        "trt_gn::group_norm_act(Tensor x, Tensor? weight, Tensor? bias, int num_groups, float eps, "
        "str activation) -> Tensor")


def _case(dtype, pre_bias_kind, with_residual, generator, shape=(2, 12, 5, 3)):
    n, c = shape[:2]
    x = (torch.randn(shape, generator=generator) * 2 + 1).to(dtype)
    pre_bias = None
    if pre_bias_kind is not None:
        pdtype = torch.float32 if pre_bias_kind.endswith("fp32") else dtype
        pshape = (n, c) if pre_bias_kind.startswith("nc") else (c,)
        pre_bias = (torch.randn(pshape, generator=generator) * 3).to(pdtype)
    residual = (torch.randn(shape, generator=generator) - 2).to(dtype) if with_residual else None
    return x, pre_bias, residual


def _sha(*tensors) -> list[str]:
    return [hashlib.sha256(t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()).hexdigest() if t is not None else ""
            for t in tensors]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("activation", ["none", "silu"])
@pytest.mark.parametrize("pre_bias_kind,with_residual",
                         [("c", False), ("c_fp32", True), ("nc", True), ("nc_fp32", False), (None, True)])
def test_cpu_matches_reference(dtype, activation, pre_bias_kind, with_residual):
    g = torch.Generator().manual_seed(5)
    x, pre_bias, residual = _case(dtype, pre_bias_kind, with_residual, g)
    w = (torch.rand(12, generator=g) + 0.5).to(dtype)
    b = torch.randn(12, generator=g).float()
    before = _sha(x, pre_bias, residual)
    y, s = op(x, w, b, 3, 1e-5, activation, pre_bias, residual, True)
    assert _sha(x, pre_bias, residual) == before  # inputs untouched
    assert y.dtype == s.dtype == dtype and y.shape == s.shape == x.shape and y.is_contiguous() and s.is_contiguous()
    ref_y, ref_s = group_norm_act_add_reference(x, w, b, 3, 1e-5, activation, pre_bias, residual)
    # s rounded once to the dtype, and y of that s (the s an unfused model normalises), rounded once
    assert torch.equal(s, ref_s.to(dtype))
    assert torch.equal(y, group_norm_act_reference(s, w, b, 3, 1e-5, activation).to(dtype))
    assert_close(y, ref_y, dtype)
    assert_close(s, ref_s, dtype)
    # the statistics are those of the sum as the kernels form it (fp32, rounded once to the dtype), not of x
    expected = x.float() + (0 if pre_bias is None else pre_bias.float().reshape(-1, 12, 1, 1))
    expected = (expected + (0 if residual is None else residual.float())).to(dtype).double()
    assert torch.equal(ref_s, expected)
    assert torch.equal(ref_y, group_norm_act_reference(expected, w, b, 3, 1e-5, activation))
    y_only, empty = op(x, w, b, 3, 1e-5, activation, pre_bias, residual, False)
    assert torch.equal(y_only, y)
    assert empty.numel() == 0 and empty.dtype == dtype and empty.device == x.device


def test_matches_torch_on_the_sum_fp32():
    g = torch.Generator().manual_seed(7)
    x, pre_bias, residual = _case(torch.float32, "nc", True, g, shape=(2, 64, 8, 8))
    w, b = torch.randn(64, generator=g), torch.randn(64, generator=g)
    y, s = op(x, w, b, 32, 1e-6, "silu", pre_bias, residual, True)
    total = x + pre_bias[:, :, None, None] + residual
    # float32's two roundings of the sum and s's one: within 3 u of the terms' magnitudes
    magnitude = x.abs() + pre_bias.abs()[:, :, None, None] + residual.abs()
    assert bool(((s - total).abs() <= 3 * 2.0**-24 * magnitude).all())
    torch.testing.assert_close(y, F.silu(F.group_norm(total, 32, w, b, 1e-6)), rtol=1e-5, atol=1e-6)


def _y_of(s_rounded):
    """y of the rounded s, as the op computes it (silu, no affine, 2 groups), rounded once to s's dtype."""
    return group_norm_act_reference(s_rounded, None, None, 2, 1e-5, "silu").to(s_rounded.dtype)


def test_memory_formats():
    g = torch.Generator().manual_seed(8)
    x, pre_bias, residual = _case(torch.float16, "c", True, g, shape=(2, 8, 4, 6))
    ref_y, ref_s = group_norm_act_add_reference(x, None, None, 2, 1e-5, "silu", pre_bias, residual)
    cl = x.contiguous(memory_format=torch.channels_last)
    for r in (residual, residual.contiguous(memory_format=torch.channels_last)):
        y, s = op(cl, None, None, 2, 1e-5, "silu", pre_bias, r, True)
        for t in (y, s):
            assert t.is_contiguous(memory_format=torch.channels_last) and not t.is_contiguous()
        assert torch.equal(s, ref_s.half()) and torch.equal(y, _y_of(ref_s.half()))
    strided = x.transpose(2, 3).contiguous().transpose(2, 3)  # neither NCHW- nor NHWC-contiguous
    y, s = op(strided, None, None, 2, 1e-5, "silu", pre_bias, residual.contiguous(memory_format=torch.channels_last),
              True)
    assert y.is_contiguous() and s.is_contiguous()
    assert torch.equal(s, ref_s.half()) and torch.equal(y, _y_of(ref_s.half()))
    assert_close(y, ref_y, torch.float16)
    sliced = torch.randn(2, 16, 4, 6)[:, ::2]
    y, _ = op(sliced, None, None, 2, 1e-5, "none", None, sliced, False)
    assert torch.equal(y, group_norm_act_reference((sliced + sliced).float(), None, None, 2, 1e-5, "none").float())


@pytest.mark.parametrize("shape", [(0, 8, 4, 4), (2, 8, 0, 4), (2, 8, 4, 0)])
def test_zero_size(shape):
    y, s = op(torch.empty(shape), None, None, 4, 1e-5, "silu", torch.zeros(8), torch.empty(shape), True)
    assert y.shape == s.shape == shape




@pytest.mark.parametrize("args,error,message", ADD_BAD_INPUTS)
def test_bad_input_messages(args, error, message):
    before = _sha(*(a for a in args if isinstance(a, torch.Tensor)))
    with pytest.raises(error) as info:
        op(*args)
    assert str(info.value) == message
    assert _sha(*(a for a in args if isinstance(a, torch.Tensor))) == before
    meta_args = tuple(a.to("meta") if isinstance(a, torch.Tensor) else a for a in args)
    with pytest.raises(error) as info:  # the fake implementation checks the same
        op(*meta_args)
    assert str(info.value) == message


@pytest.mark.parametrize("write_sum", [True, False])
def test_meta_keeps_memory_format(write_sum):
    x = torch.empty(2, 8, 4, 6, device="meta").contiguous(memory_format=torch.channels_last)
    y, s = op(x, torch.empty(8, device="meta"), None, 4, 1e-5, "silu", torch.empty(2, 8, device="meta"),
              torch.empty(2, 8, 4, 6, device="meta"), write_sum)
    assert y.device.type == "meta" and y.shape == x.shape and y.stride() == x.stride()
    if write_sum:
        assert s.shape == x.shape and s.stride() == x.stride()
    else:
        assert s.shape == (0,) and s.dtype == x.dtype


def test_opcheck():
    g = torch.Generator().manual_seed(9)
    x, pre_bias, residual = _case(torch.float32, "nc", True, g, shape=(2, 8, 3, 5))
    w, b = torch.rand(8) + 0.5, torch.randn(8)
    for xi in (x, x.contiguous(memory_format=torch.channels_last)):
        torch.library.opcheck(op.default, (xi, w, b, 4, 1e-5, "silu", pre_bias, residual, True))
        torch.library.opcheck(op.default, (xi.half(), None, None, 2, 1e-6, "none", pre_bias[0], None, False))
        torch.library.opcheck(op.default, (xi, None, b, 2, 1e-6, "none", None, residual, False))


def test_torch_compile_traces_the_op():
    def f(x, w, b, p, r):
        y, s = op(x * 2, w, b, 4, 1e-5, "silu", p, r, True)
        return y + 1, s * 3

    g = torch.Generator().manual_seed(10)
    x, pre_bias, residual = _case(torch.float32, "c", True, g, shape=(2, 8, 3, 5))
    w, b = torch.rand(8) + 0.5, torch.randn(8)
    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    for got, want in zip(compiled(x, w, b, pre_bias, residual), f(x, w, b, pre_bias, residual)):
        assert torch.equal(got, want)
    x_cl = x.contiguous(memory_format=torch.channels_last)
    y, s = compiled(x_cl, w, b, pre_bias, residual)
    assert y.is_contiguous(memory_format=torch.channels_last) and s.is_contiguous(memory_format=torch.channels_last)


def test_no_backward():
    x = torch.randn(1, 4, 2, 2, requires_grad=True)
    y, _ = op(x, None, None, 2, 1e-5, "silu", torch.zeros(4), None, False)
    with pytest.raises(RuntimeError) as info:
        y.sum().backward()
    assert str(info.value) == ("Trying to backward through trt_gn.group_norm_act_add.default but no autograd "
                               "formula was registered. Please use register_autograd to add one.")
