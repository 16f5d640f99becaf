"""Module swap: what is replaced, with which activation, and the swapped model's numerics."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from trt_gn.nn import GroupNormAct
from trt_gn.onnx import recipes
from trt_gn.swap import swap_group_norms

from onnx_helpers import group_norm_counts, rel_err, swapped


def test_tiny_vae_decoder(tiny_models):
    model = tiny_models["tiny-vae-decoder"]
    args, _, _ = recipes.example_inputs("tiny-vae-decoder")
    n_gn, n_silu = group_norm_counts(model, args)
    m, report = swapped(model)
    assert len(report.replaced) == n_gn and report.num_silu == n_silu
    by_name = {e.name: e for e in report.entries}
    assert by_name["decoder.conv_norm_out"].action == "silu"  # Decoder: conv_norm_out + conv_act
    assert by_name["decoder.mid_block.attentions.0.group_norm"].action == "none"  # 3-D input, no SiLU
    assert not any(isinstance(x, nn.GroupNorm) and not isinstance(x, GroupNormAct) for x in m.modules())
    with torch.no_grad():
        assert rel_err(m(*args).numpy(), model(*args).numpy()) < 1e-5


def test_tiny_unet_keeps_time_embedding_silu(tiny_models):
    model = tiny_models["tiny-unet"]
    args, _, _ = recipes.example_inputs("tiny-unet")
    n_gn, n_silu = group_norm_counts(model, args)
    m, report = swapped(model)
    assert len(report.replaced) == n_gn and report.num_silu == n_silu
    assert {e.name: e.action for e in report.entries}["unet.conv_norm_out"] == "silu"
    with torch.no_grad():
        assert rel_err(m(*args).numpy(), model(*args).numpy()) < 1e-5


class _Functional(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.GroupNorm(2, 4)
        self.other = nn.GroupNorm(2, 4)
        self.seq = nn.Sequential(nn.GroupNorm(2, 4), nn.SiLU(), nn.GroupNorm(1, 4))

    def forward(self, x):
        h = F.silu(self.norm(x))
        h = self.other(h)
        h = h * 2
        return self.seq(h)


def test_functional_silu_and_sequential():
    torch.manual_seed(0)
    model = _Functional().eval()
    x = torch.randn(2, 4, 5, 6)
    with torch.no_grad():
        ref = model(x)
    report = swap_group_norms(model)
    actions = {e.name: e.action for e in report.entries}
    assert actions == {"norm": "silu", "other": "none", "seq.0": "silu", "seq.2": "none"}
    assert isinstance(model.seq[1], nn.Identity)
    with torch.no_grad():
        assert rel_err(model(x).numpy(), ref.numpy()) < 1e-6
    assert _Functional.forward is not model.forward.__func__  # only the instance was rewritten


def test_other_instances_untouched():
    a, b = _Functional().eval(), _Functional().eval()
    b.load_state_dict(a.state_dict())
    swap_group_norms(a)
    assert all(type(m) is nn.GroupNorm for m in (b.norm, b.other, b.seq[0]))
    x = torch.randn(1, 4, 3, 3)
    with torch.no_grad():
        assert rel_err(a(x).numpy(), b(x).numpy()) < 1e-6
