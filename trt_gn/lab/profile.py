"""Runs trt_gn's kernels a few times on the benchmark shapes, for Nsight Compute:

    ncu --clock-control none --metrics gpu__time_duration.sum,... python3 -m trt_gn.lab.profile [shape ...]
"""
import sys

import torch

from .. import ops  # noqa: F401  (registers torch.ops.trt_gn)
from .shapes import SHAPES

names = sys.argv[1:] or [s.name for s in SHAPES]
layouts = ("nhwc", "nchw")
for s in SHAPES:
    if s.name not in names:
        continue
    for layout in layouts:
        x = torch.randn(s.size, device="cuda", dtype=torch.float16)
        if layout == "nhwc":
            x = x.contiguous(memory_format=torch.channels_last)
        w = torch.randn(s.c, device="cuda", dtype=torch.float16)
        b = torch.randn(s.c, device="cuda", dtype=torch.float16)
        for _ in range(2):
            torch.ops.trt_gn.group_norm_act(x, w, b, s.groups, s.eps, "silu")
        torch.cuda.synchronize()
        print(s.name, layout, flush=True)
