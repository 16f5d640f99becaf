"""A few kernel launches for compute-sanitizer (not a pytest module):

    compute-sanitizer --tool memcheck  python tests/gpu/sanitize_cases.py
    compute-sanitizer --tool racecheck python tests/gpu/sanitize_cases.py
    (likewise synccheck and initcheck; --no-fuzz leaves out the per-path sample below, --no-large
the SDXL VAE decoder's shape, for racecheck's time)

Then one random case of trt_gn.lab.fuzz for every path x dtype x layout and every pre-add path x
pre-add kind (pre_bias [C] or [N, C], residual, sum_out; the first of a fixed seed's draws that the
plan puts there, at most 2^24 elements), and padded NHWC channel strides with C not a multiple of
the vector width through the raw ABI.

Covers both layouts, the three dtypes, the single-block and multi-block paths (small and large
H*W, the on-chip path for tensors of 4 MB and more, in channel slices in 16 bits (3x320x48x48),
and its streaming form above ~29 MB (up to the SDXL VAE decoder's 1x128x1024x1024, near the NHWC
streaming limit of 256 rows a thread: fp16 NHWC only, the sanitizers being slow), the rolling NCHW
grid (1x256x512x512 fp16, 1x16384x32x32 fp32), clusters of
8 on a 4 MB tensor, NHWC sets doubled to two vectors a pixel, NHWC groups read in 8- and 4-byte
vectors), odd channels per group and a padded channel stride; checks each result too."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_helpers import affine_for, launch, params_for, poison_, run_raw  # noqa: E402

from trt_gn.lab import fuzz  # noqa: E402
from trt_gn.reference import assert_close, group_norm_act_reference  # noqa: E402

CASES = [((2, 320, 16, 16), 32), ((1, 96, 9, 7), 32), ((2, 1280, 8, 8), 32), ((1, 64, 160, 160), 32),
         ((3, 15, 5, 1), 5), ((1, 8, 1, 1), 8), ((1, 96, 160, 160), 32), ((1, 128, 352, 352), 32),
         ((1, 512, 64, 64), 32), ((2, 128, 32, 32), 32), ((2, 640, 16, 16), 32), ((2, 960, 16, 16), 32),
         ((1, 324, 16, 16), 1), ((1, 1028, 4, 4), 4),  # two passes, group partials merged / per channel
         ((3, 320, 48, 48), 32)]
ALL_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
LAYOUTS = ("nhwc", "nchw")
# (size, groups, dtypes, layouts): cases run in some dtypes and layouts only
LARGE_CASES = [((1, 128, 1024, 1024), 32, (torch.float16,), ("nhwc",)),
               ((1, 256, 512, 512), 32, (torch.float16,), ("nchw",)),  # the rolling grid, 2 groups a batch
               ((1, 16384, 32, 32), 8, (torch.float32,), ("nchw",))]  # rolling, slices across 17 channels


def main() -> int:
    torch.manual_seed(0)
    count = 0
    large = [] if "--no-large" in sys.argv else LARGE_CASES
    for size, groups, dtypes, layouts in [(size, groups, ALL_DTYPES, LAYOUTS) for size, groups in CASES] + large:
        for dtype in dtypes:
            for layout in layouts:
                x = torch.randn(size, device="cuda").to(dtype)
                weight, bias = affine_for(size[1], "fp32", dtype, "cuda")
                y = run_raw(x, weight, bias, groups, 1e-5, "silu", layout)
                torch.cuda.synchronize()
                assert_close(y, group_norm_act_reference(x, weight, bias, groups, 1e-5, "silu"), dtype,
                             what=f"{size} {dtype} {layout}")
                count += 1
                # The large cases' float64 references leave blocks the next one cannot reuse; under
                # initcheck's shadow memory the process ran out of the GPU's 80 GB without this.
                del x, y, weight, bias
                torch.cuda.empty_cache()
    # padded NHWC: C=20 stored with stride 24
    xbuf = torch.randn(2, 9, 11, 24, device="cuda", dtype=torch.float16)
    ybuf = poison_(torch.empty_like(xbuf))
    launch(params_for(xbuf, ybuf, None, None, 5, 1e-5, "silu", "nhwc", channel_stride=24, shape=(2, 20, 9, 11)), "cuda")
    torch.cuda.synchronize()
    assert_close(ybuf[..., :20].permute(0, 3, 1, 2),
                 group_norm_act_reference(xbuf[..., :20].permute(0, 3, 1, 2), None, None, 5, 1e-5, "silu"))
    count += 1
    # padded NHWC with C not a multiple of the vector width (HWC8/HWC16 of TensorRT): two passes
    for c, stride, groups, dtype in ((27, 32, 9, torch.float16), (87, 88, 29, torch.bfloat16), (21, 24, 3, torch.float32)):
        xbuf = torch.randn(2, 7, 13, stride, device="cuda").to(dtype)
        ybuf = poison_(torch.empty_like(xbuf))
        weight, bias = affine_for(c, "fp32", dtype, "cuda")
        launch(params_for(xbuf, ybuf, weight, bias, groups, 1e-5, "silu", "nhwc", channel_stride=stride,
                          shape=(2, c, 7, 13)), "cuda")
        torch.cuda.synchronize()
        assert_close(ybuf[..., :c].permute(0, 3, 1, 2),
                     group_norm_act_reference(xbuf[..., :c].permute(0, 3, 1, 2), weight, bias, groups, 1e-5, "silu"),
                     dtype, what=f"padded C={c} stride {stride}")
        assert torch.isnan(ybuf[..., c:]).all(), "padding channels written"
        count += 1
    if "--no-fuzz" not in sys.argv:
        for case, plan in fuzz_sample():
            _, message = fuzz.run_case(case)
            if message is not None:
                raise AssertionError(f"{case.spec()} [{plan['path']}]: {message}")
            print(f"  {plan['path']:15s} {case.dtype} {case.layout} pre-add {case.pre_add.kind}: {case.spec()}",
                  flush=True)
            count += 1
    print(f"sanitize_cases: {count} launches checked")
    return 0


def fuzz_sample(seed: int = 0, draws: int = 4000):
    """One fuzz case per path x dtype x layout, and per pre-add path x pre-add kind: the first of
    the seed's draws with that plan."""
    import random

    from trt_gn import abi

    rng = random.Random(seed)
    chosen = {}
    for _ in range(draws):
        case = fuzz.draw_case(fuzz.RandomPick(rng), max_elements=1 << 24)
        if case.special != "-":
            continue
        plan = fuzz.plan_of(case)
        for key in ((plan["path"], case.dtype, case.layout), (plan["path"], case.pre_add.kind)):
            if key not in chosen:
                chosen[key] = (case, plan)
    missing = [f"{p} {d} {l}" for p in fuzz.PATHS for d in fuzz.DTYPES for l in fuzz.LAYOUTS
               if (p, d, l) not in chosen]
    missing += [f"{p} pre-add {k}" for p in abi.PRE_ADD_PATHS for k in fuzz.PRE_ADD_KINDS if (p, k) not in chosen]
    if missing:
        raise AssertionError(f"no case of {draws} draws reached: {'; '.join(missing)}")
    return list({case.spec(): (case, plan) for case, plan in chosen.values()}.values())


if __name__ == "__main__":
    sys.exit(main())
