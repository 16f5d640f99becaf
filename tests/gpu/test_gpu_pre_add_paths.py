"""The pre-add in the kernels library, path by path (the op's own pre-add tests: test_gpu_pre_add.py)
(s = x + pre_bias + residual before the statistics, sum_out = s) on the GPU: on the
SD 1.5 VAE decoder's and UNet's shapes it runs on the plain call's path and plan (clusters: the
path, with fewer vectors a thread where the registers need it; streaming NHWC: without a second
batch in flight), y and sum_out against the float64 reference; a group whose mean lies far from
its spread on every path (s rounded to 16 bits keeps little of the spread: y must be the
normalisation of that s); and
in-place calls (y = x) with a residual on every path."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from gpu_helpers import GPU, launch, skip_unless_free

from trt_gn.lab import fuzz
from trt_gn.ops import abi_params
from trt_gn.reference import assert_close, group_norm_act_reference, sum_reference

pytestmark = GPU

# (N, C, H, W), G = 32: the VAE decoder's 64x64 .. 512x512 activations (the 1024x1024 ones are the
# streaming grid's and two passes' as the 512x512 ones are, at 4x the reference's memory), the UNet's.
SD_SHAPES = [(1, 512, 64, 64), (1, 512, 128, 128), (1, 512, 256, 256), (1, 256, 256, 256), (1, 128, 512, 512),
             (2, 320, 64, 64), (2, 640, 32, 32), (2, 1280, 16, 16), (2, 1280, 8, 8), (2, 2560, 8, 8)]
# Plan keys that a pre-add keeps on every path but clusters (whose vectors a thread may halve).
PLAN_KEYS = ("path", "vec", "blocks", "threads", "cluster", "split", "slices", "chunk", "workspace")


def case_of(shape, dtype, layout, pre, scale=1.0, offset=0.0, seed=5):
    n, c, h, w, *g = shape
    return fuzz.Case(n, c, h, w, g[0] if g else 32, dtype, layout, "fp32" if "32" in pre else "x", "silu", 1e-5, scale, offset, seed,
                     "-", pre)


def assert_plain_plan(case):
    plain = fuzz.plan_of(dataclasses.replace(case, pre="-"))
    plan = fuzz.plan_of(case)
    assert "with the pre-add" in plan["why"], plan["why"]
    if plain["path"] == "clusters":
        assert plan["path"] == "clusters" and plan["vpt"] <= plain["vpt"], (plan, plain)
        return plan
    assert {k: plan[k] for k in PLAN_KEYS} == {k: plain[k] for k in PLAN_KEYS}, (plan, plain)
    assert plan["kernel"] == plain["kernel"].replace("gnStreamNHWC<ahead>", "gnStreamNHWC"), (plan, plain)
    return plan


@pytest.mark.parametrize("shape", SD_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
@pytest.mark.parametrize("pre", ["bnc+r+s", "r", "bc"])
def test_sd_shapes_keep_the_plain_path(shape, layout, pre):
    skip_unless_free(48 * shape[0] * shape[1] * shape[2] * shape[3])
    case = case_of(shape, "fp16", layout, pre)
    plan = assert_plain_plan(case)
    plan, message = fuzz.run_case(case)
    assert message is None, f"trt-gn fuzz --case '{case.spec()}' [{plan['path']} {plan['kernel']}]: {message}"


# Shapes of every path on an H100/H200 (N, C, H, W[, G]): clusters, on-chip grid (NCHW: clusters),
# on-chip grid, streaming grid, two passes (no 16-byte vectors in any dtype: C = 30, H*W = 2401).
PATH_SHAPES = [(2, 1280, 16, 16), (2, 320, 64, 64), (1, 512, 128, 128), (1, 256, 256, 256), (2, 30, 49, 49, 3)]


@pytest.mark.parametrize("shape", PATH_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
@pytest.mark.parametrize("pre", ["bnc32+r+s", "r+s"])
def test_mean_far_from_the_spread(shape, dtype, layout, pre):
    # |mean| / std = 1e4: in 16 bits s keeps a few distinct values, every path must normalise those.
    skip_unless_free(48 * shape[0] * shape[1] * shape[2] * shape[3])
    case = case_of(shape, dtype, layout, pre, scale=0.01, offset=100.0, seed=9)
    assert_plain_plan(case)
    plan, message = fuzz.run_case(case)
    assert message is None, f"trt-gn fuzz --case '{case.spec()}' [{plan['path']} {plan['kernel']}]: {message}"


@pytest.mark.parametrize("shape", PATH_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
def test_in_place_with_a_residual(shape, layout):
    skip_unless_free(48 * shape[0] * shape[1] * shape[2] * shape[3])
    case = case_of(shape, "fp16", layout, "bnc+r+s", seed=11)
    x, weight, bias = fuzz.make_inputs(case)
    pre_bias, residual = fuzz.make_pre_add(case, x)
    sum_out = torch.full_like(x, float("nan"))
    ref = group_norm_act_reference(x, weight, bias, case.groups, case.eps, "silu", pre_bias=pre_bias,
                                   residual=residual)
    sum_ref = sum_reference(x, pre_bias, residual)
    params = abi_params(x, x, weight, bias, case.groups, case.eps, "silu", layout=layout)
    fuzz.set_pre_add(params, case, pre_bias, residual, sum_out)
    path = assert_plain_plan(case)["path"]
    launch(params, "cuda")
    torch.cuda.synchronize()
    assert_close(x, ref, x.dtype, what=f"in place ({path})")
    assert_close(sum_out, sum_ref, x.dtype, what=f"sum_out in place ({path})")
