"""trt_gn.nn.GroupNormAct as a drop-in for nn.GroupNorm + nn.SiLU (CPU)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from trt_gn.nn import GroupNormAct
from trt_gn.reference import assert_close, group_norm_act_reference


def _randomise(module):
    with torch.no_grad():
        module.weight.copy_(torch.rand_like(module.weight) + 0.5)
        module.bias.copy_(torch.randn_like(module.bias))
    return module


def test_state_dict_compatible_with_group_norm():
    gn = _randomise(nn.GroupNorm(8, 32))
    m = GroupNormAct(8, 32)
    assert list(m.state_dict()) == list(gn.state_dict()) == ["weight", "bias"]
    m.load_state_dict(gn.state_dict())
    back = nn.GroupNorm(8, 32)
    back.load_state_dict(m.state_dict())
    assert torch.equal(back.weight, gn.weight) and torch.equal(back.bias, gn.bias)
    assert GroupNormAct(4, 8, affine=False).state_dict() == {}
    for name in ("num_groups", "num_channels", "eps", "affine"):
        assert getattr(m, name) == getattr(gn, name)


@pytest.mark.parametrize("activation", ["silu", "none"])
def test_forward_matches_group_norm_then_activation(activation):
    gn = _randomise(nn.GroupNorm(4, 16, eps=1e-6))
    ref_module = nn.Sequential(gn, nn.SiLU()) if activation == "silu" else gn
    m = GroupNormAct.from_group_norm(gn, activation)
    x = torch.randn(2, 16, 7, 5)
    with torch.no_grad():
        torch.testing.assert_close(m(x), ref_module(x), rtol=1e-5, atol=1e-6)
        assert_close(m(x), group_norm_act_reference(x, gn.weight, gn.bias, 4, 1e-6, activation))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_module(dtype):
    m = _randomise(GroupNormAct(2, 6, dtype=dtype))
    x = torch.randn(3, 6, 4, 4).to(dtype)
    with torch.no_grad():
        y = m(x)
    assert y.dtype == dtype
    assert_close(y, group_norm_act_reference(x, m.weight, m.bias, 2, 1e-5, "silu"))


def test_returns_the_memory_format_it_got():
    m = _randomise(GroupNormAct(4, 16))
    x = torch.randn(2, 16, 5, 3)
    with torch.no_grad():
        y = m(x)
        y_cl = m(x.contiguous(memory_format=torch.channels_last))
    assert y.is_contiguous()
    assert y_cl.is_contiguous(memory_format=torch.channels_last) and not y_cl.is_contiguous()
    torch.testing.assert_close(y, y_cl)


def test_from_group_norm_copies_settings():
    gn = _randomise(nn.GroupNorm(2, 8, eps=1e-3).to(torch.bfloat16)).eval()
    m = GroupNormAct.from_group_norm(gn)
    assert (m.num_groups, m.num_channels, m.eps, m.affine, m.activation) == (2, 8, 1e-3, True, "silu")
    assert m.weight.dtype == torch.bfloat16 and not m.training
    assert torch.equal(m.weight, gn.weight) and m.weight.data_ptr() != gn.weight.data_ptr()
    plain = GroupNormAct.from_group_norm(nn.GroupNorm(2, 8, affine=False), "none")
    assert plain.weight is None and plain.activation == "none"
    with pytest.raises(TypeError, match="expected nn.GroupNorm, got BatchNorm2d"):
        GroupNormAct.from_group_norm(nn.BatchNorm2d(8))
    assert repr(m) == "GroupNormAct(2, 8, eps=0.001, affine=True, activation='silu')"


def test_bad_construction_and_input():
    with pytest.raises(ValueError, match="num_channels=10 must be divisible by num_groups=4"):
        GroupNormAct(4, 10)
    with pytest.raises(ValueError, match="unknown activation 'relu'"):
        GroupNormAct(4, 8, activation="relu")
    for eps in (-1e-5, float("inf"), float("nan")):  # refused when built, as the op refuses it when run
        with pytest.raises(ValueError, match=rf"^eps must be finite and >= 0, got {eps}$"):
            GroupNormAct(4, 8, eps=eps)
    with pytest.raises(ValueError, match=r"expected 8 channels, got input of shape \(1, 4, 2, 2\)"):
        GroupNormAct(4, 8)(torch.zeros(1, 4, 2, 2))
    with pytest.raises(ValueError, match="x must be 4-D"):
        GroupNormAct(4, 8)(torch.zeros(1, 8, 2))


def test_torch_export():
    model = nn.Sequential(nn.Conv2d(4, 8, 3, padding=1), _randomise(GroupNormAct(4, 8))).eval()
    x = torch.randn(2, 4, 6, 6)
    batch, height = torch.export.Dim("batch", max=64), torch.export.Dim("height", max=512)
    exported = torch.export.export(model, (x,), dynamic_shapes=({0: batch, 2: height},))
    targets = [str(n.target) for n in exported.graph.nodes if n.op == "call_function"]
    assert "trt_gn.group_norm_act.default" in targets
    x2 = torch.randn(3, 4, 9, 6)
    with torch.no_grad():
        torch.testing.assert_close(exported.module()(x2), model(x2))


def test_torch_compile_module_channels_last():
    m = _randomise(GroupNormAct(4, 8)).eval()
    compiled = torch.compile(m, backend="aot_eager", fullgraph=True)
    x = torch.randn(2, 8, 5, 5).contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        y = compiled(x)
        assert y.is_contiguous(memory_format=torch.channels_last)
        torch.testing.assert_close(y, m(x))


def test_pre_add_forward():
    """forward(x, pre_bias, residual, write_sum, addends): the additions normalised with x in one op,
    the values of the float64 reference of the sum; additions of other forms computed as written."""
    from trt_gn.reference import group_norm_act_add_reference

    m = _randomise(GroupNormAct(4, 8)).eval()
    g = torch.Generator().manual_seed(11)
    x, r = torch.randn(2, 8, 3, 3, generator=g), torch.randn(2, 8, 3, 3, generator=g)
    b, t = torch.randn(8, generator=g), torch.randn(2, 8, 1, 1, generator=g)
    with torch.no_grad():
        y, s = m(x, pre_bias=b, addends=(t, None, r), write_sum=True)
        pre = b.reshape(1, 8) + t.reshape(2, 8)  # float32, the one rounding of the combined pre-bias
        _, s_ref = group_norm_act_add_reference(x, m.weight, m.bias, 4, 1e-5, "silu", pre, r)
        # s rounded once to float32, y of that s
        assert torch.equal(s, s_ref.float())
        assert torch.equal(y, group_norm_act_reference(s, m.weight, m.bias, 4, 1e-5, "silu").float())
        only_r = group_norm_act_reference((x.double() + r.double()).float(), m.weight, m.bias, 4, 1e-5, "silu")
        assert torch.equal(m(x, residual=r), only_r.float())
        assert torch.equal(m(x), m(x, addends=(None,)))
        y0, s0 = m(x, write_sum=True)
        assert s0 is x and torch.equal(y0, m(x))
        # neither per channel nor x's shape: x + t as written, then the norm
        odd = torch.randn(2, 8, 3, 1, generator=g)
        torch.testing.assert_close(m(x, addends=(odd,)), m(x + odd), rtol=0, atol=0)
        # a dtype x + t promotes x's to: computed as written (a float32 result of float16 x)
        promoted = m(x.half(), addends=(t,))
        assert promoted.dtype == torch.float32
        assert torch.equal(promoted, m(x.half() + t))
    with pytest.raises(ValueError, match=r"^group_norm_act_add: pre_bias must have shape \(C,\) = \(8,\) or "
                                         r"\(N, C\) = \(2, 8\), got \(3,\)$"):
        m(x, pre_bias=torch.zeros(3))
