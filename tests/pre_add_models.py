"""Models and helpers of the pre-add tests (tests/test_swap_pre_add.py, tests/test_compile_passes.py,
tests/gpu/test_gpu_pre_add.py): seeded weights, a diffusers ResnetBlock2D chain, its float64
reference, and a fresh Inductor compilation with the pre-add pass and a recorder of its graphs."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch._inductor import config as inductor_config
from torch._inductor.custom_graph_pass import CustomGraphPass

from trt_gn import compile_passes
from trt_gn.reference import group_norm_act_add_reference


def randomise(model: nn.Module, seed: int) -> nn.Module:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * (0.2 if p.dim() > 1 else 0.5))
    return model.eval()


class Recorder(CustomGraphPass):
    """Runs after the pre-add pass: the targets of the graph as Inductor lowers it."""

    def __init__(self):
        self.graphs = []

    def __call__(self, graph):
        self.graphs.append([(n.target, n.args) for n in graph.nodes if n.op == "call_function"])

    def uuid(self):
        return b"trt_gn-test-recorder"


def compile_and_run(model, *args, with_pass=True, shared_bias=True):
    """(output, pass or None, recorded graphs) of a fresh Inductor compilation (no cache: the pass runs)."""
    torch._dynamo.reset()
    recorder = Recorder()
    with inductor_config.patch(fx_graph_cache=False, post_grad_custom_post_pass=None), \
            torch._functorch.config.patch(enable_autograd_cache=False), torch.no_grad():
        if with_pass:
            with compile_passes.enable(shared_bias=shared_bias) as pre_add:
                inductor_config.post_grad_custom_post_pass = compile_passes.chain_passes(pre_add, recorder)
                out = torch.compile(model, fullgraph=True)(*args)
            assert inductor_config.post_grad_custom_post_pass is None  # put back on leaving
        else:
            pre_add = None
            inductor_config.post_grad_custom_post_pass = recorder
            out = torch.compile(model, fullgraph=True)(*args)
    torch._dynamo.reset()
    return out, pre_add, recorder.graphs


class Chain(nn.Module):
    """conv_in, two diffusers ResnetBlock2D (conv bias, residual), GroupNorm + SiLU: block i's output
    sum feeds block i+1's norm1 and its residual, across modules."""

    def __init__(self, temb_channels=None):
        super().__init__()
        diffusers_resnet = pytest.importorskip("diffusers.models.resnet")
        self.conv_in = nn.Conv2d(4, 16, 3, padding=1)
        self.blocks = nn.ModuleList([
            diffusers_resnet.ResnetBlock2D(in_channels=16, out_channels=16, temb_channels=temb_channels, groups=4,
                                           eps=1e-6) for _ in range(2)])
        self.norm_out = nn.GroupNorm(4, 16, eps=1e-6)
        self.act = nn.SiLU()

    def forward(self, x, temb=None):
        h = self.conv_in(x)
        for block in self.blocks:
            h = block(h, temb)
        h = self.norm_out(h)
        h = self.act(h)
        return h


def float64_reference(original: Chain, x, temb=None):
    """group_norm_act_add_reference of the last norm's input as the original model computes it in
    float64: blocks[1].conv2's output without its bias, the bias, and the block's input as residual."""
    model = copy.deepcopy(original).double()
    seen = {}
    last = model.blocks[1]
    last.register_forward_pre_hook(lambda m, args: seen.update(residual=args[0]))
    last.conv2.register_forward_hook(lambda m, args, out: seen.update(conv=out))
    with torch.no_grad():
        expected = model(x.double(), None if temb is None else temb.double())
    conv = seen["conv"] - last.conv2.bias.reshape(1, -1, 1, 1)
    y, _ = group_norm_act_add_reference(conv, model.norm_out.weight, model.norm_out.bias, 4, 1e-6, "silu",
                                        last.conv2.bias, seen["residual"])
    torch.testing.assert_close(y, expected, rtol=1e-12, atol=1e-12)
    return y
