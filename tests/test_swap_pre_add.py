"""swap_group_norms(pre_add=True): the additions in front of a GroupNorm move into
torch.ops.trt_gn.group_norm_act_add where exact, each decision reported, the swapped model's values
within the accuracy rule of the float64 reference (CPU)."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.fx.experimental.proxy_tensor import make_fx

from trt_gn.reference import assert_close, group_norm_act_add_reference, group_norm_act_reference
from trt_gn.swap import swap_group_norms

from pre_add_models import randomise

diffusers_resnet = pytest.importorskip("diffusers.models.resnet")

ADD = torch.ops.trt_gn.group_norm_act_add.default
PLAIN = torch.ops.trt_gn.group_norm_act.default


def _calls(fn, *args):
    """The call_function nodes of fn's traced graph (decomposed to aten, custom ops kept)."""
    graph = make_fx(fn)(*args).graph
    return [n for n in graph.nodes if n.op == "call_function"]


class Tail(nn.Module):
    """A diffusers ResnetBlock2D followed by a GroupNorm + SiLU, as in a decoder's last stage."""

    def __init__(self, temb_channels):
        super().__init__()
        self.block = diffusers_resnet.ResnetBlock2D(in_channels=8, out_channels=16, temb_channels=temb_channels,
                                                     groups=4, eps=1e-6)
        self.norm_out = nn.GroupNorm(4, 16, eps=1e-6)

    def forward(self, x, temb):
        h = self.block(x, temb)
        h = self.norm_out(h)
        h = F.silu(h)
        return h


@pytest.mark.parametrize("temb_channels", [None, 12])
def test_resnet_block_conv_bias_and_time_embedding(temb_channels):
    model = randomise(Tail(temb_channels), 1)
    original = copy.deepcopy(model)
    report = swap_group_norms(model, pre_add=True)
    entries = {e.name: e for e in report.entries}
    assert [e.action for e in report.entries] == ["silu"] * 3 and report.num_pre_add == 1
    assert entries["block.norm2"].pre_add == "conv1.bias + temb"
    assert entries["block.norm2"].pre_add_reason == (
        "ResnetBlock2D.forward: self.conv1 runs without its bias, which becomes the pre-bias; temb added to its "
        "input (per channel: pre-bias; x's shape and dtype: residual; else added as written)")
    assert (entries["block.norm1"].pre_add, entries["block.norm1"].pre_add_reason) == (
        "", "nothing is added to its input right before it")
    assert "1 absorb the additions in front of them" in report.summary().splitlines()[0]
    assert list(model.state_dict()) == list(original.state_dict())  # the conv keeps its bias parameter

    x = torch.randn(2, 8, 6, 5, generator=torch.Generator().manual_seed(2))
    temb = torch.randn(2, 12, generator=torch.Generator().manual_seed(3)) if temb_channels else None
    calls = _calls(lambda x: model(x, temb), x)
    adds = [n for n in calls if n.target is ADD]
    assert len(adds) == 1 and sum(n.target is PLAIN for n in calls) == 2
    pre_bias = adds[0].args[6]
    assert tuple(pre_bias.meta["val"].shape) == ((2, 16) if temb_channels else (16,))
    convs = [n for n in calls if n.target is torch.ops.aten.convolution.default]
    assert [c.args[2] is None for c in convs] == [True, False, False]  # conv1 without its bias, the others with

    # The float64 reference: the original model in float64 up to the last GroupNorm's input; the
    # swapped float32 model's output within the accuracy rule of it.
    seen = {}
    reference = copy.deepcopy(original).double()
    reference.norm_out.register_forward_pre_hook(lambda m, args: seen.update(s=args[0]))
    with torch.no_grad():
        expected = reference(x.double(), None if temb is None else temb.double())
        out = model(x, temb)
    ref = group_norm_act_reference(seen["s"], original.norm_out.weight, original.norm_out.bias, 4, 1e-6, "silu")
    torch.testing.assert_close(ref, expected, rtol=1e-12, atol=1e-12)
    assert_close(out, ref, torch.float32)


class Residual(nn.Module):
    def __init__(self, scale=1.0):
        super().__init__()
        self.conv = nn.Conv2d(8, 8, 3, padding=1)
        self.norm = nn.GroupNorm(4, 8)
        self.scale = scale

    def forward(self, x):
        h = self.conv(x)
        out = (x + h) / self.scale
        y = self.norm(out)
        y = F.silu(y)
        return y, out


def test_residual_sum_kept_for_later_use():
    model = randomise(Residual(), 4)
    original = copy.deepcopy(model)
    report = swap_group_norms(model, pre_add=True)
    (entry,) = report.entries
    assert (entry.action, entry.pre_add) == ("silu", "h")
    assert entry.pre_add_reason == (
        "Residual.forward: h added to x (per channel: pre-bias; x's shape and dtype: residual; else added as "
        "written); it returns the sum too (out is kept)")
    x = torch.randn(2, 8, 5, 5, generator=torch.Generator().manual_seed(5))
    calls = _calls(model, x)
    (add,) = [n for n in calls if n.target is ADD]
    assert add.args[6] is None and add.args[8] is True  # residual only, the sum written
    with torch.no_grad():
        y, s = model(x)
        conv_out = original.conv(x)  # the residual the op is given: the conv's float32 output
    _, s_ref = group_norm_act_add_reference(x, original.norm.weight, original.norm.bias, 4, 1e-5, "silu",
                                            None, conv_out)
    assert torch.equal(s, s_ref.float())  # rounded once, and y of that s
    assert torch.equal(y, group_norm_act_reference(s, original.norm.weight, original.norm.bias, 4, 1e-5, "silu").float())


@pytest.mark.parametrize("scale,why", [
    (2.0, "nothing is added to its input right before it"),
])
def test_scaled_sum_is_left(scale, why):
    """(x + h) / 2 is not a sum the op computes: nothing moves, the model is unchanged in value."""
    model = randomise(Residual(scale), 6)
    original = copy.deepcopy(model)
    (entry,) = swap_group_norms(model, pre_add=True).entries
    assert (entry.pre_add, entry.pre_add_reason) == ("", why)
    x = torch.randn(1, 8, 4, 4)
    assert not any(n.target is ADD for n in _calls(model, x))
    with torch.no_grad():
        torch.testing.assert_close(model(x)[0], original(x)[0], rtol=1e-5, atol=1e-6)


class Reused(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 1)
        self.norm = nn.GroupNorm(2, 4)

    def forward(self, x):
        h = self.conv(x)
        y = self.norm(h)
        return y + h  # the conv's biased output is used after the norm


class Twice(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.GroupNorm(2, 4)

    def forward(self, x, r):
        h = x + r
        h = self.norm(h)
        return self.norm(h)


class Touched(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.GroupNorm(2, 4)

    def forward(self, x, r):
        h = x + r
        r = r * 2  # the added name changes before the norm
        h = self.norm(h)
        return h + r


@pytest.mark.parametrize("cls,reason", [
    (Reused, "the output of self.conv is used after it"),
    (Twice, "called 2 times in Twice.forward"),
    (Touched, "nothing is added to its input right before it"),
])
def test_left_where_not_exact(cls, reason):
    model = randomise(cls(), 7)
    original = copy.deepcopy(model)
    (entry,) = swap_group_norms(model, pre_add=True).entries
    assert (entry.pre_add, entry.pre_add_reason) == ("", reason)
    args = [torch.randn(2, 4, 3, 3)] * (1 if cls is Reused else 2)
    assert not any(n.target is ADD for n in _calls(model, *args))
    with torch.no_grad():
        torch.testing.assert_close(model(*args), original(*args), rtol=1e-5, atol=1e-6)


def test_default_swap_moves_nothing():
    model = randomise(Tail(12), 8)
    report = swap_group_norms(model)
    assert report.num_pre_add == 0 and all(e.pre_add_reason == "" for e in report.entries)
    assert "absorb" not in report.summary()
    temb = torch.randn(2, 12)
    assert not any(n.target is ADD for n in _calls(lambda x: model(x, temb), torch.randn(2, 8, 4, 4)))


def test_addends_not_per_channel_are_added_as_written():
    """A time embedding of a shape that is neither per-channel nor x's: the swapped call computes
    x + bias + t as the original code did (here it broadcasts over W)."""
    model = randomise(Tail(None), 9)
    original = copy.deepcopy(model)
    swap_group_norms(model, pre_add=True)
    x = torch.randn(2, 8, 4, 4)
    odd = torch.randn(2, 16, 4, 1)
    with torch.no_grad():
        torch.testing.assert_close(model(x, odd), original(x, odd), rtol=1e-5, atol=1e-5)
    assert not any(n.target is ADD for n in _calls(lambda x: model(x, odd), x))
