"""Runs trt_gn's kernels a few times on the benchmark shapes, for Nsight Compute:

    ncu --clock-control none --metrics gpu__time_duration.sum,... python3 -m trt_gn.lab.profile [shape ...]
"""

from __future__ import annotations

import sys


def main(names: list[str]) -> int:
    import torch

    from .. import ops  # noqa: F401  (registers torch.ops.trt_gn)
    from ..errors import EXIT_MISSING
    from .shapes import SHAPES

    if not torch.cuda.is_available():
        print("python -m trt_gn.lab.profile: error: no CUDA device (torch.cuda.is_available() is False)",
              file=sys.stderr)
        return EXIT_MISSING

    names = names or [s.name for s in SHAPES]
    for s in SHAPES:
        if s.name not in names:
            continue
        for layout in ("nhwc", "nchw"):
            x = torch.randn(s.size, device="cuda", dtype=torch.float16)
            if layout == "nhwc":
                x = x.contiguous(memory_format=torch.channels_last)
            w = torch.randn(s.c, device="cuda", dtype=torch.float16)
            b = torch.randn(s.c, device="cuda", dtype=torch.float16)
            for _ in range(2):
                torch.ops.trt_gn.group_norm_act(x, w, b, s.groups, s.eps, "silu")
            torch.cuda.synchronize()
            print(s.name, layout, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
