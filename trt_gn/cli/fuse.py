"""`trt-gn fuse`: replace GroupNorm(+SiLU) subgraphs of an ONNX file with the trt_gn custom node."""

from __future__ import annotations

import argparse

from ._onnx_common import progress_bar

EPILOG = """examples:
  trt-gn fuse unet.onnx unet.fused.onnx
  trt-gn fuse vae_decoder.onnx vae_decoder.fused.onnx --bare      # TensorRT < 10.7: no local function
  trt-gn fuse big/unet.onnx out/unet.onnx                         # external data -> out/unet.onnx.data

The input is never modified; the output is written atomically, as a regular file (an existing
folder, FIFO, device or socket is refused before any work); concurrent runs to one output leave
one run's model and its data file. --bare writes the custom node without its model-local
function: TensorRT 9.0-10.6 would otherwise import the function's standard-op body instead of
the plugin, but onnxruntime cannot run a bare node.

exit codes: 0 written; 1 a write failed; 2 bad arguments or input (an unreadable or corrupt model,
an output that cannot be a regular file); 130 interrupted by Ctrl-C (SIGINT) or SIGTERM (nothing
written, no staging files left)."""


def register(subparsers) -> None:
    p = subparsers.add_parser("fuse", help="fuse GroupNorm(+SiLU) in an ONNX file into the plugin's node",
                              description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input", help="ONNX model to read (never modified)")
    p.add_argument("output", help="ONNX model to write")
    p.add_argument("--bare", action="store_true", help="write bare custom nodes, no model-local function")
    p.add_argument("--quiet", action="store_true", help="print one line: the summary and the file written")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..onnx import fusion

    with progress_bar(not args.quiet) as progress:
        report = fusion.fuse_file(args.input, args.output, function=not args.bare, progress=progress)
    wrote = (f"nothing to fuse: wrote an unchanged copy to {args.output}" if report.copied_unchanged
             else f"wrote {args.output}")
    summary = report.summary()
    print(f"{summary.splitlines()[0]}; {wrote}" if args.quiet else f"{summary}\n{wrote}")
    return 0
