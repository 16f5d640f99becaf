"""trt_gn.compile_passes: the Inductor post-grad pass that moves a convolution's bias, a residual add
and a time embedding into group_norm_act_add, on the CPU: what it rewrites and leaves (its report,
and the graph after it), and the compiled model's values within the accuracy rule of the float64
reference."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch._inductor import config as inductor_config

from trt_gn import compile_passes
from trt_gn.reference import assert_close, group_norm_act_add_reference
from trt_gn.swap import swap_group_norms

from pre_add_models import Chain, Recorder, compile_and_run, float64_reference, randomise

diffusers_resnet = pytest.importorskip("diffusers.models.resnet")

ADD = torch.ops.trt_gn.group_norm_act_add.default
PLAIN = torch.ops.trt_gn.group_norm_act.default


def test_resnet_chain_is_rewritten_across_blocks():
    original = randomise(Chain(), 21)
    model = copy.deepcopy(original)
    swap_group_norms(model, pre_add=True)  # conv1's bias into norm2, within each block
    x = torch.randn(2, 4, 8, 8, generator=torch.Generator().manual_seed(22))
    out, pre_add, graphs = compile_and_run(model, x)

    assert pre_add.report.graphs == 1
    assert [(d.node, d.action) for d in pre_add.report.decisions] == [
        ("group_norm_act", "fused"), ("group_norm_act_1", "fused"), ("group_norm_act_2", "fused")]
    shared, first, second = pre_add.report.decisions
    # conv_in feeds norm1 and the residual: its bias moves in, and the residual reads s
    assert shared.reason == "convolution's bias; the biased output kept for 1 other user(s)"
    assert first.reason.endswith(" (residual); the sum kept for 1 other user(s)") and "'s bias + " in first.reason
    assert second.reason.endswith(" (residual)") and "sum kept" not in second.reason
    assert "3 group_norm_act node(s) rewritten to group_norm_act_add, 0 left" in pre_add.summary()

    (graph,) = graphs
    fused = [args for target, args in graph if target is ADD]
    # the swap's two (conv1's bias) and the pass's three (conv_in's bias; conv2's bias and the residual)
    assert len(fused) == 5 and sum(target is PLAIN for target, _ in graph) == 0
    from_pass = [args for args in fused if args[7] is not None]
    assert [args[8] for args in from_pass] == [True, False]  # the first block's sum is kept for the second
    assert [args[8] for args in fused if args[6] is not None and args[7] is None].count(True) == 1  # conv_in's
    convs = [args for target, args in graph if target is torch.ops.aten.convolution.default]
    assert [args[2] is None for args in convs] == [True] * 5
    assert not any(target is torch.ops.aten.add.Tensor for target, _ in graph)

    ref = float64_reference(original, x)
    assert_close(out, ref, torch.float32, what="compiled with the pass")
    unfused, _, _ = compile_and_run(model, x, with_pass=False)
    assert_close(unfused, ref, torch.float32, what="compiled without the pass")


def test_time_embedding_joins_the_pre_bias():
    """Without the swap's pre-add, norm2's input is add(convolution, temb[:, :, None, None]) in the
    graph: the pass moves the conv's bias and the embedding into one [N, C] float32 pre-bias."""
    original = randomise(Chain(temb_channels=12), 23)
    model = copy.deepcopy(original)
    swap_group_norms(model)
    x = torch.randn(2, 4, 8, 8, generator=torch.Generator().manual_seed(24))
    temb = torch.randn(2, 12, generator=torch.Generator().manual_seed(25))
    out, pre_add, graphs = compile_and_run(model, x, temb)
    reasons = [d.reason for d in pre_add.report.fused]
    assert len(reasons) == 5 and sum(r.endswith(" (per channel)") for r in reasons) == 2, pre_add.summary()
    (graph,) = graphs
    pre_biases = [args[6] for target, args in graph if target is ADD and args[7] is None]
    # conv_in's bias, then each block's conv1 bias + embedding as one [N, C] float32 pre-bias
    assert [tuple(p.meta["val"].shape) + (p.meta["val"].dtype,) for p in pre_biases] == [
        (16, torch.float32)] + [(2, 16, torch.float32)] * 2
    assert_close(out, float64_reference(original, x, temb), torch.float32)


class Cases(nn.Module):
    """One norm per case the pass must leave alone (and one it takes)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 8, 3, padding=1)
        self.shared = nn.Conv2d(8, 8, 1)
        self.w = nn.Parameter(torch.rand(8) + 0.5)

    def forward(self, x, r, r_half, r_row):
        gn = torch.ops.trt_gn.group_norm_act
        outs = [
            gn(torch.add(self.conv(x), r, alpha=2), self.w, None, 4, 1e-5, "silu"),  # alpha
            gn((self.conv(x) + r) / 2, self.w, None, 4, 1e-5, "silu"),  # a real scale
            gn(self.conv(x) + r_row, self.w, None, 4, 1e-5, "silu"),  # broadcast over W
            gn(self.conv(x) + r_half, self.w, None, 4, 1e-5, "silu"),  # float16 promoted to float32 by the add
            gn(self.conv(x) + x * 3, self.w, None, 4, 1e-5, "none"),  # taken: bias and residual
        ]
        h = self.shared(x)
        outs.append(gn(h, self.w, None, 4, 1e-5, "silu") + h)  # taken: the biased output is used again
        return torch.stack(outs)


def test_shared_convolution_bias_can_be_left_for_measuring():
    original = randomise(Chain(), 21)
    model = copy.deepcopy(original)
    swap_group_norms(model, pre_add=True)
    x = torch.randn(2, 4, 8, 8, generator=torch.Generator().manual_seed(22))
    out, pre_add, graphs = compile_and_run(model, x, shared_bias=False)
    assert [(d.node, d.action, d.reason) for d in pre_add.report.decisions][0] == (
        "group_norm_act", "left", "the convolution's output has other users")
    assert [d.action for d in pre_add.report.decisions] == ["left", "fused", "fused"]
    (graph,) = graphs
    assert sum(target is PLAIN for target, _ in graph) == 1  # conv_in's norm keeps the plain op
    assert compile_passes.PreAddPass(shared_bias=False).uuid() != compile_passes.PreAddPass().uuid()
    assert_close(out, float64_reference(original, x), torch.float32, what="compiled, shared biases left")


def test_left_where_not_exact():
    model = randomise(Cases(), 26)
    g = torch.Generator().manual_seed(27)
    args = (torch.randn(2, 8, 5, 5, generator=g), torch.randn(2, 8, 5, 5, generator=g),
            torch.randn(2, 8, 5, 5, generator=g).half(), torch.randn(2, 8, 5, 1, generator=g))
    out, pre_add, graphs = compile_and_run(model, *args)
    decisions = [(d.action, d.reason) for d in pre_add.report.decisions]
    assert decisions == [
        ("left", "the add has an alpha"),
        ("left", "its input is neither an add nor a convolution"),
        ("left", "the add broadcasts an operand that is neither per-channel nor of x's shape"),
        ("left", "the add's operands differ in dtype or device from its result"),
        ("fused", "convolution_4's bias + mul (residual)"),
        ("fused", "convolution_5's bias; the biased output kept for 1 other user(s)"),
    ], pre_add.summary()
    (graph,) = graphs
    assert sum(target is ADD for target, _ in graph) == 2 and sum(target is PLAIN for target, _ in graph) == 4
    with torch.no_grad():
        expected = model(*args)
        conv = F.conv2d(args[0], model.conv.weight, None, padding=1)
    left = [0, 1, 2, 3]
    torch.testing.assert_close(out[left], expected[left], rtol=1e-5, atol=1e-5)  # as without the pass
    # the shared convolution: s = its bias-free output plus the bias, one float32 rounding, for the
    # norm and for the add after it
    h = F.conv2d(args[0], model.shared.weight, None)
    ref, s_ref = group_norm_act_add_reference(h, model.w, None, 4, 1e-5, "silu", model.shared.bias, None)
    assert_close(out[5], (ref + s_ref, ref.trtgn_error), torch.float32)
    ref, _ = group_norm_act_add_reference(conv, model.w, None, 4, 1e-5, "none", model.conv.bias, args[0] * 3)
    assert_close(out[4], ref, torch.float32)


@pytest.mark.parametrize("takes_a_list", [True, False], ids=["list", "chained"])
def test_enable_keeps_a_configured_pass_and_restores_it(takes_a_list, monkeypatch):
    # Inductor takes a list of passes from torch 2.13; before, one chained pass stands for them.
    monkeypatch.setattr(compile_passes, "TAKES_A_LIST", takes_a_list)
    other = Recorder()
    with inductor_config.patch(post_grad_custom_post_pass=other):
        handle = compile_passes.enable()
        assert compile_passes._passes(inductor_config.post_grad_custom_post_pass) == (other, handle)
        # configured values flattened: a list is never nested in a list, None adds nothing
        assert compile_passes._passes(compile_passes.chain_passes([other], None, handle)) == (other, handle)
        with pytest.raises(RuntimeError, match="^this pre-add pass is enabled already$"):
            handle.install()
        handle.disable()
        assert inductor_config.post_grad_custom_post_pass is other
        handle.disable()  # a second time: nothing to do
        assert inductor_config.post_grad_custom_post_pass is other
    assert isinstance(handle.uuid(), bytes) and handle.uuid() == compile_passes.PreAddPass().uuid()


def test_one_pass_inductor_runs_the_configured_pass_then_this_one(monkeypatch):
    """Before torch 2.13, Inductor's post_grad_custom_post_pass holds one pass: enable() installs one
    that runs the configured pass and then the pre-add pass, keyed by both uuids; here that Inductor
    is the real one, told it takes no list."""
    monkeypatch.setattr(compile_passes, "TAKES_A_LIST", False)
    other = Recorder()
    with inductor_config.patch(post_grad_custom_post_pass=other):
        with compile_passes.enable() as handle:
            chained = inductor_config.post_grad_custom_post_pass
            assert type(chained) is compile_passes._ChainedPasses and chained.passes == (other, handle)
            assert chained.uuid() == (other.uuid(), handle.uuid())
        assert inductor_config.post_grad_custom_post_pass is other
    assert compile_passes.chain_passes(lambda graph: None, handle).uuid() is None  # the cache bypassed
    # compile_and_run chains the pre-add pass and a recorder: the recorder sees the rewritten graph
    original = randomise(Chain(), 21)
    model = copy.deepcopy(original)
    swap_group_norms(model, pre_add=True)
    x = torch.randn(2, 4, 8, 8, generator=torch.Generator().manual_seed(22))
    out, pre_add, graphs = compile_and_run(model, x)
    assert [d.action for d in pre_add.report.decisions] == ["fused", "fused", "fused"], pre_add.summary()
    (graph,) = graphs
    assert sum(target is ADD for target, _ in graph) == 5 and sum(target is PLAIN for target, _ in graph) == 0
    assert_close(out, float64_reference(original, x), torch.float32)


@pytest.mark.skipif(compile_passes._INFERENCE_AWARE is None, reason="this torch has no inference-aware pass")
def test_chained_passes_hand_is_inference_to_an_inference_aware_pass(monkeypatch):
    monkeypatch.setattr(compile_passes, "TAKES_A_LIST", False)
    seen = []

    class Aware(compile_passes._INFERENCE_AWARE):
        def __call__(self, graph, is_inference):
            seen.append(("aware", is_inference))

        def uuid(self):
            return b"aware"

    chained = compile_passes.chain_passes(Aware(), lambda graph: seen.append("plain"))
    assert isinstance(chained, compile_passes._INFERENCE_AWARE)
    chained(torch.fx.Graph(), is_inference=True)
    assert seen == [("aware", True), "plain"]


def test_enable_refuses_a_torch_without_custom_graph_pass(monkeypatch):
    monkeypatch.setattr(compile_passes, "CustomGraphPass", object)  # as before torch 2.6
    with inductor_config.patch(post_grad_custom_post_pass=None):
        with pytest.raises(compile_passes.Error) as exc:
            compile_passes.enable()
        assert inductor_config.post_grad_custom_post_pass is None
    assert exc.value.message == (
        "trt_gn.compile_passes needs torch 2.6 or later (Inductor's CustomGraphPass, which keys its FX graph "
        f"cache by the pass); this is torch {torch.__version__}") and exc.value.exit_code == 3
