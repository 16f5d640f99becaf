"""The CUDA kernels against the float64 reference: every dtype x layout x activation on the shape
list and on random shapes, affine variants, adversarial numerics, padded channel strides, 64-bit sizes.
Every raw-ABI run writes into a NaN-poisoned output, proving each element is written."""

from __future__ import annotations

import zlib

import pytest
import torch
from gpu_helpers import DTYPES, GPU, affine_for, launch, params_for, poison_, run_raw, skip_unless_free
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trt_gn.reference import assert_close, group_norm_act_reference
from trt_gn.lab.shapes import SHAPES

pytestmark = GPU

DEVICE = "cuda"
DTYPE_IDS = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


def check(x, weight, bias, groups, eps, activation, layout, what=""):
    y = run_raw(x, weight, bias, groups, eps, activation, layout)
    torch.cuda.synchronize()
    if layout == "nhwc":
        assert y.is_contiguous(memory_format=torch.channels_last)
    ref = group_norm_act_reference(x, weight, bias, groups, eps, activation)
    assert_close(y, ref, x.dtype, what=what)


# The SDXL VAE decoder's 1024x1024 activations (2**27 elements and more) need up to ~40 GiB for the
# float64 check (as test_streaming_limits): marked slow, skipped where the memory is not free.
BIG_SHAPE = 1 << 27


@pytest.mark.parametrize("shape", [pytest.param(s, id=s.name, marks=[pytest.mark.slow] if s.numel >= BIG_SHAPE else [])
                                   for s in SHAPES])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
@pytest.mark.parametrize("activation", ["silu", "none"])
def test_shape_list(shape, dtype, layout, activation):
    need = 20 * 8 * shape.numel  # x and y, the float64 reference and assert_close's float64 temporaries
    skip_unless_free(need)
    torch.manual_seed(zlib.crc32(f"{shape.name} {dtype} {layout} {activation}".encode()))
    x = (torch.randn(shape.size, device=DEVICE) * 2 + 0.5).to(dtype)
    # gamma/beta in x's dtype with SiLU, in fp32 without (both kinds on every shape and dtype)
    weight, bias = affine_for(shape.c, "x" if activation == "silu" else "fp32", dtype, DEVICE)
    check(x, weight, bias, shape.groups, shape.eps, activation, layout, shape.name)


@pytest.mark.parametrize("affine", ["x", "fp32", "none"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
@pytest.mark.parametrize(
    "size,groups", [((2, 320, 16, 16), 32), ((1, 96, 9, 7), 32), ((3, 64, 5, 5), 1), ((2, 320, 64, 64), 32)]
)
def test_affine_variants(affine, dtype, layout, size, groups):
    # (2, 320, 64, 64) runs on the on-chip grid, whose bf16 kernel loads aligned tables as 16-byte vectors
    torch.manual_seed(7)
    x = torch.randn(size, device=DEVICE).to(dtype)
    weight, bias = affine_for(size[1], affine, dtype, DEVICE)
    check(x, weight, bias, groups, 1e-5, "silu", layout)
    if affine != "none":  # only one of the two
        check(x, weight, None, groups, 1e-5, "silu", layout)
        check(x, None, bias, groups, 1e-5, "none", layout)


@pytest.mark.parametrize("affine", ["x", "fp32"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
@pytest.mark.parametrize(
    "size", [(2, 320, 16, 16), (2, 1280, 8, 8), (2, 2560, 8, 8), (2, 320, 64, 64), (1, 512, 128, 128)]
)
def test_affine_not_16_byte_aligned(affine, dtype, layout, size):
    # gamma/beta one element into their buffers: the kernels that load them as 16-byte vectors
    # where the pointer allows must fall back to one load an element here.
    torch.manual_seed(8)
    x = torch.randn(size, device=DEVICE).to(dtype)
    weight, bias = affine_for(size[1] + 1, affine, dtype, DEVICE)
    weight, bias = weight[1:], bias[1:]
    assert weight.data_ptr() % 16 != 0 and bias.data_ptr() % 16 != 0
    check(x, weight, bias, 32, 1e-5, "silu", layout)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(1, 3),
    groups=st.sampled_from([1, 2, 3, 4, 5, 8, 16, 32, 64]),
    cpg=st.one_of(st.integers(1, 12), st.sampled_from([15, 17, 20, 31, 32, 40, 63, 64, 80])),
    h=st.one_of(st.just(1), st.integers(1, 48)),
    w=st.one_of(st.just(1), st.integers(1, 48)),
    dtype=st.sampled_from(DTYPES),
    layout=st.sampled_from(["nhwc", "nchw"]),
    activation=st.sampled_from(["none", "silu"]),
    affine=st.sampled_from(["x", "fp32", "none"]),
    eps=st.sampled_from([1e-5, 1e-6, 0.0, 1e-2]),
    seed=st.integers(0, 2**31 - 1),
)
def test_random_shapes(n, groups, cpg, h, w, dtype, layout, activation, affine, eps, seed):
    c = groups * cpg
    torch.manual_seed(seed)
    x = (torch.randn(n, c, h, w, device=DEVICE) * 1.5 - 0.3).to(dtype)
    if eps == 0.0 and h * w * cpg < 16:
        eps = 1e-5  # a tiny group may round to one value: variance 0 with eps 0 is 0 * inf = NaN
    weight, bias = affine_for(c, affine, dtype, DEVICE)
    check(x, weight, bias, groups, eps, activation, layout, f"N={n} C={c} G={groups} H={h} W={w}")


def test_groups_equal_channels_and_single_group():
    for size, groups in [((2, 32, 8, 8), 32), ((1, 640, 4, 4), 640), ((2, 320, 12, 12), 1), ((1, 7, 3, 3), 7)]:
        for layout in ("nhwc", "nchw"):
            x = torch.randn(size, device=DEVICE, dtype=torch.float16)
            check(x, *affine_for(size[1], "fp32", torch.float16, DEVICE), groups, 1e-5, "silu", layout, str(size))


# Shapes that reach the less common launch paths: pixel rows wider than one block (the two-pass
# kernels split C into column slices), vectors spanning two groups in a set wider than a warp,
# whole-vector groups too large for one cluster, and a batch larger than the clusters of a wave.
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
@pytest.mark.parametrize("size,groups", [((1, 4160, 32, 32), 32), ((1, 8192, 64, 64), 32), ((1, 256, 96, 96), 8),
                                         ((24, 64, 8, 8), 32)])
def test_wide_and_uncommon_paths(dtype, layout, size, groups):
    torch.manual_seed(sum(size) + groups)
    x = torch.randn(size, device=DEVICE).to(dtype)
    check(x, *affine_for(size[1], "x", dtype, DEVICE), groups, 1e-5, "silu", layout, f"{size} G={groups}")


# NHWC whose channels fill no 16-byte vector (C not a multiple of 8 in 16 bits) takes two passes. Their
# statistics blocks merge each group's channels into one partial where no group straddles two column
# slices of 512 channels (one group of 324; 4 groups of 25; 257 groups of 4 over three slices), and
# write one partial a channel where groups do straddle them (4 groups of 257, 7 of 143). NaN in the
# first pixel and Inf in the last must reach exactly their groups.
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
@pytest.mark.parametrize("size,groups", [((1, 324, 16, 16), 1), ((2, 100, 64, 64), 4), ((1, 1028, 16, 16), 257),
                                         ((1, 1028, 16, 16), 4), ((2, 1001, 8, 8), 7)])
def test_two_pass_few_groups_of_many_channels(dtype, layout, size, groups):
    torch.manual_seed(sum(size) * groups + 5)
    check_then_nan_inf(size, groups, 1e-5, dtype, layout)


def check_then_nan_inf(size, groups, eps, dtype, layout):
    """Random input (mean 0.75, std 1.5) with SiLU; then NaN in the first element and Inf in the last."""
    x = (torch.randn(size, device=DEVICE) * 1.5 + 0.75).to(dtype)
    check(x, *affine_for(size[1], "x", dtype, DEVICE), groups, eps, "silu", layout, f"{size} G={groups}")
    x[0, 0, 0, 0] = float("nan")
    x[-1, -1, -1, -1] = float("inf")
    check(x, *affine_for(size[1], "fp32", dtype, DEVICE), groups, eps, "none", layout, f"{size} NaN/Inf")


# Tensors of 4 MB and more take the on-chip path on Hopper (unless the cluster kernels' plan is
# estimated faster, see below): a co-resident grid holding x in shared memory across a grid
# barrier. Odd group widths, one group, a batch that does not divide the SMs, a pixel row as wide as
# a block, and a constant input (variance exactly 0). (fp16/bf16 NCHW of the first two shapes run on
# clusters; fp32 keeps them on the grid.)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
@pytest.mark.parametrize("size,groups", [((1, 96, 160, 160), 32), ((3, 320, 48, 48), 32), ((1, 512, 64, 64), 1),
                                         ((1, 4096, 40, 40), 32), ((2, 256, 112, 112), 256)])
def test_on_chip_path(dtype, layout, size, groups):
    torch.manual_seed(sum(size) * groups)
    x = (torch.randn(size, device=DEVICE) * 1.5 - 0.25).to(dtype)
    check(x, *affine_for(size[1], "x", dtype, DEVICE), groups, 1e-5, "silu", layout, f"{size} G={groups}")
    const = torch.full(size, -1.75, device=DEVICE, dtype=dtype)
    check(const, *affine_for(size[1], "fp32", dtype, DEVICE), groups, 1e-5, "silu", layout, "constant")


# NHWC 16-bit tensors of the on-chip grid whose channels split into slices of 64-128 (whole groups,
# rows of whole 32-byte sectors) run in slices, each loaded by 2-D bulk copies: ragged last blocks
# and pieces (3x320x48x48: 210 pixels a block, pieces of 56 rows), 96-channel slices of 192-byte
# rows, one image of 64-channel slices, a batch of 4, and groups of 16 channels.
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=DTYPE_IDS.get)
@pytest.mark.parametrize("size,groups", [((3, 320, 48, 48), 32), ((2, 384, 64, 64), 32), ((1, 512, 128, 128), 32),
                                         ((4, 320, 64, 64), 32), ((1, 256, 128, 128), 16)])
def test_on_chip_channel_slices(dtype, size, groups):
    torch.manual_seed(sum(size) + groups)
    x = (torch.randn(size, device=DEVICE) * 1.5 - 0.25).to(dtype)
    for affine in ("x", "fp32"):
        check(x, *affine_for(size[1], affine, dtype, DEVICE), groups, 1e-5, "silu", "nhwc", f"{size} {affine}")


# Under 4 MB, shapes that no cluster plan fits (too many pixels a group for a cluster's registers)
# take the on-chip grid too, not the two-pass kernels: 1x320x80x80 in 16 bits (NHWC), one group
# (both layouts), one group of 8x8 pixels. So do those whose cluster plan is estimated slower than
# the grid: 2x320x48x48 and 1x960x40x40 in 16 bits (NHWC).
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
@pytest.mark.parametrize("size,groups", [((1, 320, 80, 80), 32), ((1, 320, 64, 80), 1), ((1, 128, 104, 40), 1),
                                         ((1, 320, 8, 8), 1), ((2, 320, 48, 48), 32), ((1, 960, 40, 40), 32)])
def test_small_shapes_without_cluster_plan(dtype, layout, size, groups):
    torch.manual_seed(sum(size) * groups + 3)
    x = (torch.randn(size, device=DEVICE) * 1.5 + 0.5).to(dtype)
    check(x, *affine_for(size[1], "x", dtype, DEVICE), groups, 1e-5, "silu", layout, f"{size} G={groups}")


# From 4 MB the cluster kernels run where their plan is estimated faster than the on-chip grid
# (the VAE decoder's 1x512x64x64, SDXL's 2x1280x32x32; 2x320x64x64 NCHW): clusters of 8 blocks with
# 4-8 vectors a thread, up to 4 blocks an SM. A constant input as well.
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
@pytest.mark.parametrize("size", [(1, 512, 64, 64), (2, 1280, 32, 32), (2, 320, 64, 64)])
def test_mid_size_cluster_plans(dtype, layout, size):
    torch.manual_seed(sum(size))
    x = (torch.randn(size, device=DEVICE) * 1.5 - 0.25).to(dtype)
    check(x, *affine_for(size[1], "x", dtype, DEVICE), 32, 1e-6, "silu", layout, f"{size}")
    const = torch.full(size, 0.5, device=DEVICE, dtype=dtype)
    check(const, *affine_for(size[1], "fp32", dtype, DEVICE), 32, 1e-6, "silu", layout, "constant")


# Tensors larger than the SMs' shared memory (about 29 MB) stream through the same grid on Hopper: each block keeps the tail of its chunk in shared memory and reads the head
# twice. One image or several (a batch that does not divide the SMs), odd group widths, one group,
# and NaN/Inf in the first pixel (a streamed head) and the last (a kept tail). (2, 72, 640, 640)
# in 16 bits is 78% head in NHWC: its second read loads a batch ahead (as vae-dec-256x512's).
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
@pytest.mark.parametrize("size,groups", [((1, 128, 400, 400), 32), ((2, 96, 300, 300), 32), ((1, 64, 640, 480), 1),
                                         ((3, 40, 512, 400), 8), ((2, 72, 640, 640), 24)])
def test_streaming_path(dtype, layout, size, groups):
    torch.manual_seed(sum(size) * groups + 1)
    check_then_nan_inf(size, groups, 1e-6, dtype, layout)


# NCHW tensors over the SMs' shared memory whose groups give each block a slice of 24 KB or more
# take the rolling grid (Hopper): x read once into shared memory in batches of groups, a batch
# written once every block has added its partials. One image and several, groups that end the last
# batch early (13 batches of 2), one group a batch, slices across 17 channels (H*W = 1024), and in
# every dtype; NaN/Inf in the first and last element; in place (y = x); the plan checked too.
ROLLING_CASES = [((1, 256, 512, 512), 32), ((3, 64, 512, 512), 8), ((1, 208, 512, 512), 26), ((1, 160, 640, 640), 20),
                 ((1, 16384, 32, 32), 8)]


def plan_kernel(x, groups, layout="nchw"):
    from trt_gn import abi
    from trt_gn.ops import abi_params

    return abi.describe_plan(abi_params(x, torch.empty_like(x), None, None, groups, 1e-6, "silu", layout=layout))["kernel"]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("size,groups", ROLLING_CASES, ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v))
def test_rolling_path(dtype, size, groups):
    skip_unless_free(24 * 8 * size[0] * size[1] * size[2] * size[3])
    torch.manual_seed(sum(size) * groups + 7)
    x = (torch.randn(size, device=DEVICE) * 1.5 + 0.75).to(dtype)
    assert plan_kernel(x, groups) == "gnRollingNCHW"
    check_then_nan_inf(size, groups, 1e-6, dtype, "nchw")
    weight, bias = affine_for(size[1], "fp32", dtype, DEVICE)
    ref = group_norm_act_reference(x, weight, bias, groups, 1e-5, "silu")
    launch(params_for(x, x, weight, bias, groups, 1e-5, "silu", "nchw"), DEVICE)
    torch.cuda.synchronize()
    assert_close(x, ref, dtype, what="in place")


# More (n, group)s than SMs in the rolling grid (2 x 72 groups of 4 MB in fp32; one image of more
# than 128 groups would not fit a block's gamma/beta table).
@pytest.mark.slow
def test_rolling_more_groups_than_sms():
    size, groups = (2, 288, 512, 512), 72
    skip_unless_free(24 * 8 * 2 * 288 * 512 * 512)
    torch.manual_seed(17)
    x = (torch.randn(size, device=DEVICE) * 0.5 - 2.0).float()
    assert plan_kernel(x, groups) == "gnRollingNCHW"
    check(x, *affine_for(size[1], "x", torch.float32, DEVICE), groups, 1e-5, "silu", "nchw", "144 groups")


# The streaming grid's upper limits (Hopper) and the two-pass fp32 statistics beyond them. NHWC
# streams while a thread's fp32 sums run over at most 256 rows (16 bits) or 160 (fp32), NCHW up to
# 2 GiB; beyond, two passes, whose fp32 NHWC statistics merge runs of 64 rows. In 16 bits
# 1x128x1024x1024 (the SDXL VAE decoder's last activations) is ~250 rows a thread. In fp32,
# 1x128x640x528 is 160 (it streams), and NHWC 1x128x1024x1024 (~500 rows) and 1x256x1024x1024
# (~1000, 1 GiB) take two passes, where one run of fp32 sums missed the tolerance by up to 2x; NCHW
# streams all of them. Mean 1e3 and std 1e-2 in fp32 are the hardest case for shifted fp32 sums.
@pytest.mark.slow
@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
@pytest.mark.parametrize("dtype,size", [(torch.float16, (1, 128, 1024, 1024)), (torch.bfloat16, (1, 128, 1024, 1024)),
                                        (torch.float32, (1, 128, 640, 528)), (torch.float32, (1, 128, 1024, 1024)),
                                        (torch.float32, (1, 256, 1024, 1024))],
                         ids=["fp16-1x128x1024x1024", "bf16-1x128x1024x1024", "fp32-1x128x640x528",
                              "fp32-1x128x1024x1024", "fp32-1x256x1024x1024"])
def test_streaming_limits(dtype, size, layout):
    numel = size[0] * size[1] * size[2] * size[3]
    need = 20 * 8 * numel  # x and y, the float64 reference and assert_close's float64 temporaries
    skip_unless_free(need)
    torch.manual_seed(sum(size) + 3)
    x = torch.empty(size, device=DEVICE, dtype=torch.float32)
    if dtype == torch.float32:
        x.normal_(1e3, 1e-2)
    else:
        x.normal_(0.75, 1.5)
    x = x.to(dtype)
    weight, bias = affine_for(size[1], "x", dtype, DEVICE)
    y = run_raw(x, weight, bias, 32, 1e-6, "silu", layout)
    torch.cuda.synchronize()
    assert_close(y, group_norm_act_reference(x, weight, bias, 32, 1e-6, "silu"), dtype, what=f"{size}")


# Every (n, group) with its own mean and spread, some at +-1e3 with std 1e-2 (elsewhere all groups
# share one distribution): an element summed, shifted or normalised with a neighbouring group's
# statistics, or a block's partial added to the wrong group, would be far off. In 16 bits the first
# three take the on-chip grid (2x320x64x64 NCHW the cluster kernels) and the last two stream; in
# fp32 1x512x128x128 streams as well. The last three have NHWC sets of one vector a pixel, doubled
# to two (several groups a cluster): C/G = 8 and 4 in 16 bits, 4 and 2 in fp32 (1x256x64x64 in fp32
# and 3x64x24x24 in 16 bits take other kernels).
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
@pytest.mark.parametrize("size,groups", [((1, 512, 128, 128), 32), ((2, 320, 64, 64), 32), ((3, 96, 128, 128), 12),
                                         ((1, 128, 512, 512), 32), ((2, 40, 512, 400), 20), ((1, 256, 64, 64), 32),
                                         ((2, 128, 32, 32), 32), ((3, 64, 24, 24), 32)])
def test_groups_with_distant_means(dtype, layout, size, groups):
    torch.manual_seed(sum(size) + 7 * groups)
    n, c, h, w = size
    seg = torch.arange(n * groups, device=DEVICE, dtype=torch.float64)
    sign = 1.0 - 2.0 * (seg % 2)
    far = (seg % 3) == 0
    mean = torch.where(far, 1e3 * sign, sign * (seg % 7 + 1) * 4.0).view(n, groups, 1, 1, 1)
    std = torch.where(far, torch.full_like(seg, 1e-2), 0.25 + seg % 5).view(n, groups, 1, 1, 1)
    x = torch.randn(n, groups, c // groups, h, w, device=DEVICE, dtype=torch.float64) * std + mean
    x = x.view(size).to(dtype)
    check(x, *affine_for(c, "x", dtype, DEVICE), groups, 1e-6, "silu", layout, f"{size} G={groups}")


# NHWC groups of 12, 20, 30 or 60 halves (10 or 30 floats) a pixel hold no whole 16-byte vector: one
# group a cluster, read in 8- or 4-byte vectors (gnFusedGroup with VB = 8 or 4), in clusters of 1-8
# blocks with 2-32 vectors a thread and 3-15 lanes a pixel. (In fp32 most of these are whole
# vectors; (2, 320, 32, 32) in fp16 takes the sets instead: 20 bytes a pixel.) Groups with distant
# means (each cluster shifts by its own group's first value), a NaN group and an infinite value
# in another image, and a constant input.
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("size,groups", [((2, 640, 32, 32), 32), ((1, 640, 32, 32), 32), ((2, 640, 16, 16), 32),
                                         ((2, 1920, 16, 16), 32), ((2, 1920, 32, 32), 32), ((2, 960, 32, 32), 32),
                                         ((1, 384, 24, 24), 32), ((3, 640, 7, 9), 32), ((1, 640, 64, 64), 32),
                                         ((2, 36, 40, 40), 3), ((1, 20, 128, 128), 1), ((2, 320, 32, 32), 32)])
def test_narrow_vector_groups(dtype, size, groups):
    torch.manual_seed(sum(size) + 5 * groups)
    n, c, h, w = size
    seg = torch.arange(n * groups, device=DEVICE, dtype=torch.float64)
    mean = torch.where(seg % 3 == 0, 1e3 * (1.0 - 2.0 * (seg % 2)), seg % 7 - 3.0).view(n, groups, 1, 1, 1)
    std = torch.where(seg % 3 == 0, torch.full_like(seg, 1e-2), 0.5 + seg % 4).view(n, groups, 1, 1, 1)
    x = (torch.randn(n, groups, c // groups, h, w, device=DEVICE, dtype=torch.float64) * std + mean).view(size)
    x = x.to(dtype)
    check(x, *affine_for(c, "x", dtype, DEVICE), groups, 1e-6, "silu", "nhwc", f"{size} G={groups}")
    x = torch.randn(size, device=DEVICE).to(dtype)
    x[0, 1, h - 1, 0] = float("nan")  # group 0 of image 0 (or its only group)
    x[n - 1, c - 1, 0, w - 1] = float("inf")  # the last group of the last image
    check(x, *affine_for(c, "fp32", dtype, DEVICE), groups, 1e-5, "silu", "nhwc", "NaN/Inf")
    const = torch.full(size, -0.75, device=DEVICE, dtype=dtype)
    check(const, *affine_for(c, "fp32", dtype, DEVICE), groups, 1e-5, "silu", "nhwc", "constant")


# Every kernel shifts its sums by the group's first value. With that value 3 std from the mean, the
# variance is a difference of sums ten times larger than itself, and a thread's single running sum
# of 64-128 values put 16-bit outputs near zero up to 1.5x (NHWC: clusters of sets and of narrow
# groups, 2x320x48x48, 2x1920x32x32) and 1.8x (NCHW clusters, 1x32x128x128 with one group, 1x64x128x128
# with 4) past their tolerance; each vector's sums are now added first. Cluster kernels of every
# kind and the on-chip grid, both layouts, 4 seeds.
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
@pytest.mark.parametrize("size,groups", [((2, 320, 48, 48), 32), ((1, 320, 64, 64), 32), ((1, 640, 64, 64), 32),
                                         ((2, 1920, 32, 32), 32), ((2, 960, 32, 32), 32), ((2, 1280, 32, 32), 32),
                                         ((1, 512, 128, 128), 32), ((1, 32, 128, 128), 1), ((1, 64, 128, 128), 4),
                                         ((2, 96, 96, 96), 4)])
def test_first_value_far_from_the_mean(dtype, layout, size, groups):
    n, c, h, w = size
    for seed in range(4):
        torch.manual_seed(2000 + seed)
        seg = torch.arange(n * groups, device=DEVICE, dtype=torch.float64)
        mean = (seg % 7 - 3.0).view(n, groups, 1, 1, 1)
        std = (0.5 + seg % 4).view(n, groups, 1, 1, 1)
        x = torch.randn(n, groups, c // groups, h, w, device=DEVICE, dtype=torch.float64) * std + mean
        x[:, :, 0, 0, 0] = (mean + 3 * std).view(n, groups)
        x = x.view(size).to(dtype)
        check(x, *affine_for(c, "x", dtype, DEVICE), groups, 1e-6, "silu", layout, f"{size} G={groups} seed {seed}")


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
@pytest.mark.parametrize("size", [(2, 320, 32, 32), (1, 128, 256, 256)])
def test_large_mean_tiny_std(dtype, layout, size):
    torch.manual_seed(11)
    x = (1e3 + 1e-2 * torch.randn(size, device=DEVICE, dtype=torch.float64)).to(dtype)
    check(x, None, None, 32, 1e-6, "none", layout, "mean 1e3 std 1e-2")
    check(x, *affine_for(size[1], "fp32", dtype, DEVICE), 32, 1e-6, "silu", layout, "mean 1e3 std 1e-2 silu")


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
def test_tiny_and_zero_variance(dtype, layout):
    torch.manual_seed(12)
    size = (2, 64, 24, 24)
    x = (-3.0 + 1e-4 * torch.randn(size, device=DEVICE, dtype=torch.float64)).to(dtype)
    check(x, None, None, 8, 1e-5, "none", layout, "tiny variance")
    const = torch.full(size, 2.5, device=DEVICE, dtype=dtype)  # variance exactly 0: output = beta
    weight, bias = affine_for(64, "fp32", dtype, DEVICE)
    check(const, weight, bias, 8, 1e-5, "silu", layout, "zero variance")
    big = (torch.randn(size, device=DEVICE) * 3e3).to(dtype)  # squares overflow fp16: stats must be fp32
    check(big, None, None, 8, 1e-5, "none", layout, "large magnitude")


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
@pytest.mark.parametrize("size,groups", [((2, 320, 16, 16), 32), ((1, 128, 128, 128), 32), ((2, 2560, 8, 8), 32)])
def test_nan_and_inf_propagate(dtype, layout, size, groups):
    torch.manual_seed(13)
    x = torch.randn(size, device=DEVICE).to(dtype)
    cpg = size[1] // groups
    x[0, 0, 0, 0] = float("nan")                     # group 0 of batch 0
    x[size[0] - 1, 3 * cpg, size[2] - 1, size[3] - 1] = float("inf")   # group 3 of the last batch
    x[0, size[1] - 1, size[2] // 2, 0] = float("-inf")  # the last group of batch 0
    check(x, *affine_for(size[1], "x", dtype, DEVICE), groups, 1e-5, "silu", layout, "NaN/Inf")


# SiLU is taken two values at a time with one reciprocal between them (siluPair in
# group_norm_common.cuh): 1/a and 1/b as b/(ab) and a/(ab), with 2^(-v log2 e) capped at 2^62. So
# a NaN, or a pre-activation below -43 (capped) or -88 (where the uncapped power is inf, and ab with
# it), must not disturb its partner. With one channel a group, the partners in NHWC are neighbouring
# groups: beta puts channels 0, 1, 2 mod 4 at pre-activations near +1000, -50 and -1000 next to
# ordinary ones (channel 3 mod 4), and group 3 is NaN. (Beta, not gamma: a large gamma would scale
# the normalised values' own rounding past the fp32 tolerance.) Every kernel family: clusters, the
# grid (4 MB and more) and the streaming grid (past ~29 MB).
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
@pytest.mark.parametrize("size", [(2, 16, 24, 24), (1, 64, 200, 200), (1, 64, 640, 640)])
def test_silu_pairs_at_extreme_pre_activations(dtype, layout, size):
    torch.manual_seed(15)
    c = size[1]
    x = torch.randn(size, device=DEVICE).to(dtype)
    ch = torch.arange(c, device=DEVICE)
    weight = torch.ones(c, device=DEVICE)
    bias = torch.tensor([1000.0, -50.0, -1000.0, 0.0], device=DEVICE)[ch % 4]
    x[0, 3, 0, 0] = float("nan")  # group 3; its NHWC partners (channel 2) stay finite
    check(x, weight, bias, c, 1e-5, "silu", layout, "SiLU pairs at extremes")


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("c,groups,stride,h,w", [(20, 5, 24, 9, 11), (12, 4, 16, 32, 32), (3, 1, 8, 17, 5),
                                                 (320, 32, 328, 16, 16), (40, 8, 48, 64, 64), (32, 8, 40, 24, 24),
                                                 (640, 32, 648, 16, 16)])
@pytest.mark.parametrize("activation", ["none", "silu"])
def test_padded_channel_stride(dtype, c, groups, stride, h, w, activation):
    """NHWC with channel_stride > C (TensorRT's HWC8-style padding): padding is neither read nor written.
    (32, 8, 40): sets of one vector a pixel, doubled (C/G = 4); (640, 32, 648): groups in 8-byte vectors (16 bits)."""
    torch.manual_seed(14)
    n = 2
    xbuf = torch.randn(n, h, w, stride, device=DEVICE).to(dtype)
    xbuf[..., c:] = float("nan")  # read by mistake, these would poison the statistics
    ybuf = poison_(torch.empty(n, h, w, stride, device=DEVICE, dtype=dtype))
    ybuf[..., c:] = 12.0  # sentinel: must stay
    weight, bias = affine_for(c, "fp32", dtype, DEVICE)
    launch(params_for(xbuf, ybuf, weight, bias, groups, 1e-5, activation, "nhwc", channel_stride=stride,
                      shape=(n, c, h, w)), DEVICE)
    torch.cuda.synchronize()
    assert torch.equal(ybuf[..., c:], torch.full_like(ybuf[..., c:], 12.0)), "padding channels were written"
    assert torch.isnan(xbuf[..., c:]).all(), "x was modified"
    x = xbuf[..., :c].permute(0, 3, 1, 2)
    y = ybuf[..., :c].permute(0, 3, 1, 2)
    assert_close(y, group_norm_act_reference(x, weight, bias, groups, 1e-5, activation), dtype)


@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
@pytest.mark.parametrize("size", [(2, 320, 32, 32), (1, 64, 300, 300), (2, 1280, 8, 8), (1, 512, 96, 96),
                                  (1, 128, 400, 400)])
def test_in_place(layout, size):
    torch.manual_seed(15)
    x = torch.randn(size, device=DEVICE, dtype=torch.float16)
    x = x.contiguous(memory_format=torch.channels_last) if layout == "nhwc" else x.contiguous()
    weight, bias = affine_for(size[1], "fp32", torch.float16, DEVICE)
    ref = group_norm_act_reference(x, weight, bias, 32, 1e-5, "silu")
    launch(params_for(x, x, weight, bias, 32, 1e-5, "silu", layout), DEVICE)
    torch.cuda.synchronize()
    assert_close(x, ref, torch.float16, what="in place")


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_more_than_2_pow_31_elements(layout):
    n, c, h, w, groups = 1, 32, 8192, 8200, 32  # 2.15e9 elements > 2**31
    need = 4 * n * c * h * w + (6 << 30)  # x, y in fp16, the NaN mask, the per-group reference
    skip_unless_free(need)
    torch.manual_seed(16)
    x = torch.empty((n, c, h, w), device=DEVICE, dtype=torch.float16,
                    memory_format=torch.channels_last if layout == "nhwc" else torch.contiguous_format)
    x.normal_(0.25, 2.0)
    y = poison_(torch.empty_like(x))
    launch(params_for(x, y, None, None, groups, 1e-6, "silu", layout), DEVICE)
    torch.cuda.synchronize()
    cpg = c // groups
    for g in (0, 1, groups // 2, groups - 1):  # groups spread over the whole 64-bit range
        sl = slice(g * cpg, (g + 1) * cpg)
        ref = group_norm_act_reference(x[:, sl], None, None, 1, 1e-6, "silu")
        assert_close(y[:, sl], ref, torch.float16, what=f"group {g}")
        del ref
    assert not torch.isnan(y).any(), "elements left unwritten"


@pytest.mark.slow
@pytest.mark.parametrize("n", [8191, 8192])
def test_many_images_near_2_pow_31_elements(n):
    """NHWC groups of whole vectors in many small images: the single-pass kernels address them with
    32-bit offsets, taken under 2**31 elements (8191 images); at 2**31 (8192) another path runs."""
    c, h, w, groups = 256, 32, 32, 16
    need = 4 * n * c * h * w + (1 << 30)
    skip_unless_free(need)
    torch.manual_seed(17)
    x = torch.empty((n, c, h, w), device=DEVICE, dtype=torch.float16, memory_format=torch.channels_last)
    x.normal_(0.25, 2.0)
    weight, bias = affine_for(c, "fp32", torch.float16, DEVICE)
    y = poison_(torch.empty_like(x))
    launch(params_for(x, y, weight, bias, groups, 1e-5, "silu", "nhwc"), DEVICE)
    torch.cuda.synchronize()
    for i in (0, 1, n // 2, n - 2, n - 1):  # the last images hold the largest offsets
        ref = group_norm_act_reference(x[i:i + 1], weight, bias, groups, 1e-5, "silu")
        assert_close(y[i:i + 1], ref, torch.float16, what=f"image {i}")
    assert not torch.isnan(y).any(), "elements left unwritten"
