"""`trt-gn`: the command-line entry point. Each subcommand is a module trt_gn/cli/<name>.py
exposing register(subparsers), which adds its parser and sets `func` (args -> exit code)."""

from __future__ import annotations

import argparse
import importlib
import sys

# Every subcommand module, in --help order; a module listed here that fails to import is an error.
SUBCOMMAND_MODULES = ("pipeline", "bench", "build", "triton", "export", "fuse", "validate")


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line plus a hint instead of the whole usage text."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n  hint: see `{self.prog} --help`\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="trt-gn", description="fused GroupNorm(+SiLU) kernels, TensorRT plugin and tools",
                     epilog="example: trt-gn pipeline   (the whole job on a tiny model; see trt-gn pipeline --help)")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in SUBCOMMAND_MODULES:
        module = importlib.import_module(f"{__name__}.{name}")
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
