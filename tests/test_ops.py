"""torch.ops.trt_gn.group_norm_act on the CPU: values, memory formats, validation, fake/meta tracing."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import trt_gn.ops  # noqa: F401  (registers the op)
from trt_gn.reference import assert_close, group_norm_act_reference

from op_bad_inputs import BAD_INPUTS

op = torch.ops.trt_gn.group_norm_act


def test_schema_is_the_contract():
    assert str(op.default._schema) == (
        "trt_gn::group_norm_act(Tensor x, Tensor? weight, Tensor? bias, int num_groups, float eps, "
        "str activation) -> Tensor")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("activation", ["none", "silu"])
@pytest.mark.parametrize("affine_dtype", ["x", "fp32", None])
def test_cpu_matches_reference(dtype, activation, affine_dtype):
    g = torch.Generator().manual_seed(3)
    x = (torch.randn(2, 12, 5, 3, generator=g) * 2 + 1).to(dtype)
    wd = {"x": dtype, "fp32": torch.float32}.get(affine_dtype)
    w = (torch.rand(12, generator=g) + 0.5).to(wd) if wd else None
    b = torch.randn(12, generator=g).to(wd) if wd else None
    y = op(x, w, b, 3, 1e-5, activation)
    assert y.dtype == dtype and y.shape == x.shape and y.is_contiguous()
    ref = group_norm_act_reference(x, w, b, 3, 1e-5, activation)
    assert_close(y, ref, dtype)
    assert torch.equal(y, ref.to(dtype))  # one rounding of the float64 result


def test_matches_torch_group_norm_silu_fp32():
    x = torch.randn(2, 64, 8, 8)
    w, b = torch.randn(64), torch.randn(64)
    torch.testing.assert_close(op(x, w, b, 32, 1e-6, "silu"), F.silu(F.group_norm(x, 32, w, b, 1e-6)),
                               rtol=1e-5, atol=1e-6)


def test_memory_formats():
    x = torch.randn(2, 8, 4, 6)
    ref = group_norm_act_reference(x, None, None, 2, 1e-5, "silu").float()
    cl = op(x.contiguous(memory_format=torch.channels_last), None, None, 2, 1e-5, "silu")
    assert cl.is_contiguous(memory_format=torch.channels_last) and not cl.is_contiguous()
    torch.testing.assert_close(cl, ref)
    strided = x.transpose(2, 3).contiguous().transpose(2, 3)  # neither NCHW- nor NHWC-contiguous
    out = op(strided, None, None, 2, 1e-5, "silu")
    assert out.is_contiguous()
    torch.testing.assert_close(out, ref)
    sliced = torch.randn(2, 16, 4, 6)[:, ::2]
    torch.testing.assert_close(op(sliced, None, None, 2, 1e-5, "none"),
                               group_norm_act_reference(sliced, None, None, 2, 1e-5, "none").float())


@pytest.mark.parametrize("shape", [(0, 8, 4, 4), (2, 8, 0, 4), (2, 8, 4, 0)])
def test_zero_size(shape):
    y = op(torch.empty(shape), None, None, 4, 1e-5, "silu")
    assert y.shape == shape




@pytest.mark.parametrize("args,error,message", BAD_INPUTS)
def test_bad_input_messages(args, error, message):
    with pytest.raises(error) as info:
        op(*args)
    assert str(info.value) == message
    meta_args = tuple(a.to("meta") if isinstance(a, torch.Tensor) else a for a in args)
    with pytest.raises(error) as info:  # the fake implementation checks the same
        op(*meta_args)
    assert str(info.value) == message


def test_integer_input_is_rejected():
    with pytest.raises(TypeError, match="x dtype torch.int32 is not supported"):
        op(torch.zeros(1, 4, 2, 2, dtype=torch.int32), None, None, 2, 1e-5, "none")


def test_meta_keeps_memory_format():
    x = torch.empty(2, 8, 4, 6, device="meta").contiguous(memory_format=torch.channels_last)
    y = op(x, torch.empty(8, device="meta"), None, 4, 1e-5, "silu")
    assert y.device.type == "meta" and y.shape == x.shape and y.stride() == x.stride()


def test_opcheck():
    x = torch.randn(2, 8, 3, 5)
    w, b = torch.rand(8) + 0.5, torch.randn(8)
    for xi in (x, x.contiguous(memory_format=torch.channels_last)):
        torch.library.opcheck(op.default, (xi, w, b, 4, 1e-5, "silu"))
        torch.library.opcheck(op.default, (xi.half(), None, None, 2, 1e-6, "none"))


def test_torch_compile_traces_the_op():
    def f(x, w, b):
        return op(x * 2, w, b, 4, 1e-5, "silu") + 1

    x = torch.randn(2, 8, 3, 5)
    w, b = torch.rand(8) + 0.5, torch.randn(8)
    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(compiled(x, w, b), f(x, w, b))
    x_cl = torch.randn(3, 8, 4, 4).contiguous(memory_format=torch.channels_last)
    out = compiled(x_cl, w, b)
    assert out.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(out, f(x_cl, w, b))


def test_no_backward():
    x = torch.randn(1, 4, 2, 2, requires_grad=True)
    y = op(x, None, None, 2, 1e-5, "silu")
    with pytest.raises(RuntimeError, match="no autograd formula"):
        y.sum().backward()
