"""The one error format of every `trt-gn` subcommand: one line, then an optional hint line.

    trt-gn fuse: error: model.onnx: no such file
      hint: give the path of an existing .onnx file
"""

from __future__ import annotations

import sys


def print_error(prog: str, message: str, hint: str = "") -> None:
    print(f"{prog}: error: {message}", file=sys.stderr)
    if hint:
        print(f"  hint: {hint}", file=sys.stderr)
