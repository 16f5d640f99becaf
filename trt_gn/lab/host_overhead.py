"""Host time per call of torch.ops.trt_gn.group_norm_act next to stock F.silu(F.group_norm(...)),
eager and inside torch.compile, on a launch-bound tensor (the GPU waits for the host), one GPU, one run:

    python3 -m trt_gn.lab.host_overhead [--shape 1,32,8,8] [--dtype fp16] [--layout nhwc]
        [--calls 2000] [--rounds 7] [--implementation auto|cpp|python] [--out host.csv]

Each variant is called --calls times back to back per round (the GPU drained before and after), every
variant once a round in turn; the table gives the median of --rounds rounds and their range. The
compiled variants are one function of 10 calls (each call's output the next one's input) compiled by
Inductor, checked to be one graph without breaks that compiles nothing while timed; their time per
call is the function's / 10. --implementation chooses the op's implementation for this process
(TRT_GN_TORCH_OP): run it twice, cpp and python, to compare the two on the same GPU.

Exit codes: 0 measured, 2 bad option, 3 no GPU / no kernels library, 1 a compile that fell back.
"""

from __future__ import annotations

import argparse
import os
import sys

# The op's eager time next to stock's must be at most this (eager) and this (compiled).
EAGER_TARGET = 0.70
COMPILED_TARGET = 1.00


def parse_shape(text: str) -> tuple[int, int, int, int]:
    try:
        shape = tuple(int(v) for v in text.split(","))
    except ValueError:
        shape = ()
    if len(shape) != 4 or min(shape) < 1 or shape[1] % 32:
        raise argparse.ArgumentTypeError(f"{text!r}: expected N,C,H,W, positive, C a multiple of 32 (32 groups)")
    return shape


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m trt_gn.lab.host_overhead",
        description="Host time per call of torch.ops.trt_gn.group_norm_act next to stock F.silu(F.group_norm(...)), "
                    "eager and inside torch.compile, on a launch-bound tensor (the GPU waits for the host).",
        epilog="example: python3 -m trt_gn.lab.host_overhead --implementation cpp --out host-cpp.csv")
    parser.add_argument("--shape", type=parse_shape, default=(1, 32, 8, 8), help="N,C,H,W (default 1,32,8,8)")
    parser.add_argument("--dtype", default="fp16", choices=("fp16", "bf16", "fp32"))
    parser.add_argument("--layout", default="nhwc", choices=("nhwc", "nchw"), help="nhwc: channels_last")
    parser.add_argument("--calls", type=int, default=2000, help="calls of each variant a round (default 2000)")
    parser.add_argument("--rounds", type=int, default=7, help="rounds, the median kept (default 7)")
    parser.add_argument("--implementation", choices=("auto", "cpp", "python"),
                        help="the op's implementation (sets TRT_GN_TORCH_OP; default: as the environment says)")
    parser.add_argument("--out", help="also write the rows to this CSV file")
    args = parser.parse_args(argv)
    if args.implementation:
        os.environ["TRT_GN_TORCH_OP"] = args.implementation  # read at the op's first CUDA call

    import torch

    from .. import fileio, ops
    from . import bench
    from ..errors import Error

    prog = parser.prog
    try:
        times = bench.run_host_overhead(tuple(args.shape), args.dtype, args.layout, args.calls, args.rounds,
                                        log=lambda line: print(f"{prog}: {line}", file=sys.stderr, flush=True))
    except Error as e:  # a bad option, no GPU, the kernels library missing (at the first call), a fallback
        print(f"{prog}: error: {e.message}", file=sys.stderr)
        return e.exit_code
    shape = "x".join(str(v) for v in args.shape)
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(f"op on CUDA tensors: {ops.implementation()}")
    print(f"tensor {shape} {args.dtype} {args.layout}; {args.calls} calls a round, median of {args.rounds} rounds; "
          f"compiled: {bench.HOST_CHAIN} calls in one Inductor function")
    print("| variant | us per call | rounds (min-max) |\n|---|---:|---|")
    for t in times.values():
        print(f"| {t.variant} | {t.us_per_call:.1f} | {min(t.rounds_us):.1f}-{max(t.rounds_us):.1f} |")
    eager, compiled = bench.host_ratios(times)
    print(f"trt_gn eager / stock eager: {eager:.2f} (target <= {EAGER_TARGET:.2f}); "
          f"trt_gn compiled / stock compiled: {compiled:.2f} (target <= {COMPILED_TARGET:.2f})")
    if args.out:
        rows = ["variant,us_per_call,rounds_us,implementation,device,shape,dtype,layout"]
        for t in times.values():
            rows.append(f"{t.variant},{t.us_per_call:.3f},{' '.join(f'{v:.3f}' for v in t.rounds_us)},"
                        f"{ops.implementation().kind},{torch.cuda.get_device_name()},{shape},{args.dtype},{args.layout}")
        fileio.write_text(args.out, "\n".join(rows) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
