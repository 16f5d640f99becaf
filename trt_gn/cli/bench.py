"""`trt-gn bench`: time the kernels against torch eager, torch.compile and a device copy (needs a GPU)."""

from __future__ import annotations

import argparse


class _Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults in the option help (where an option has one to show), the examples kept as written."""

    def _get_help_string(self, action):
        if action.default is None or isinstance(action, argparse._StoreFalseAction):  # "--shapes", "--no-*"
            return action.help
        return super()._get_help_string(action)


def _csv(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


EPILOG = """examples:
  trt-gn bench                       # all shapes, fp16 and bf16, NHWC and NCHW
  trt-gn bench --shapes vae-dec-256x512,sd15-unet-320x64 --dtypes fp16 --layouts nhwc --replays 50 --out bench-out
  trt-gn bench --no-compile          # without the torch.compile variants (no compile time)

Needs a CUDA GPU. exit codes: 0 done; 2 bad arguments, or a torch.compile variant that failed to compile
or would have run eager; 3 no CUDA GPU or no kernels library; 130 interrupted."""


def register(subparsers) -> None:
    from ..lab.bench import DTYPES, LAYOUTS, MIN_REPLAYS, ROUNDS
    from ..lab.shapes import SHAPES

    p = subparsers.add_parser(
        "bench",
        help="benchmark the kernels vs torch eager and torch.compile GroupNorm+SiLU vs a device copy",
        description="Times each variant as 20 launches in one CUDA graph, median of the replays, in rounds "
        "that alternate the variants (the fastest round counts); the torch.compile variants are compiled once "
        "per shape before timing and checked not to run eager; prints a table with trt_gn's speedup over the "
        "fastest PyTorch variant, writes bench.csv and bench.png.",
        epilog=EPILOG,
        formatter_class=_Formatter,
    )
    p.add_argument("--shapes", type=_csv, default=None,
                   help=f"comma-separated shape names (default: all of them): {', '.join(s.name for s in SHAPES)}")
    p.add_argument("--dtypes", type=_csv, default=",".join(DTYPES), help="comma-separated: fp16, bf16, fp32")
    p.add_argument("--layouts", type=_csv, default=",".join(LAYOUTS), help="comma-separated: nhwc, nchw")
    p.add_argument("--replays", type=int, default=MIN_REPLAYS, help=f"graph replays timed (>= {MIN_REPLAYS})")
    p.add_argument("--rounds", type=int, default=ROUNDS,
                   help="times each variant is timed, in turn with the others; the fastest round counts (>= 1)")
    p.add_argument("--no-compile", dest="compile", action="store_false",
                   help="leave out the torch.compile (Inductor) variants: a quicker run, the best peer then eager only")
    p.add_argument("--out", default="bench-out", help="folder for bench.csv and bench.png")
    p.set_defaults(func=run)


def run(args) -> int:
    from pathlib import Path

    from .. import fileio
    from ..lab.bench import main
    from ..errors import Error

    # The output folder is written after minutes of timing: check first that it can be.
    out = Path(args.out)
    problem = fileio.output_folder_problem(out)
    if problem:
        raise Error(f"--out {out}: {problem}", "choose another, writable --out")
    # BenchError (a trt_gn.errors.Error) ends in trt_gn.cli.main with its exit code
    main(args.shapes, args.dtypes, args.layouts, args.replays, args.out, args.rounds, args.compile)
    return 0
