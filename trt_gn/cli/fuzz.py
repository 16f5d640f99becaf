"""`trt-gn fuzz`: random cases over the whole accepted input space, each checked against the float64
reference on a CUDA GPU (trt_gn.lab.fuzz)."""

from __future__ import annotations

import argparse


def register(subparsers) -> None:
    from ..lab import fuzz

    p = subparsers.add_parser("fuzz", help="check the kernels on random cases against the float64 reference (needs a GPU)",
                              description=fuzz.DESCRIPTION, epilog=fuzz.EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    fuzz.add_arguments(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from ..lab import fuzz

    return fuzz.run(args, "trt-gn fuzz")
