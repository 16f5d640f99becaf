"""`trt-gn build`: fused ONNX model -> TensorRT engine (plan) with the trt_gn plugin."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

EPILOG = """\
examples:
  # dynamic batch 1..4 (opt 2) and latent size 64..128, fp16, timing cache reused between builds
  trt-gn build vae_decoder.fused.onnx -o vae_decoder.plan \\
      --batch 1:2:4 --height 64:64:128 --width 64:64:128 --timing-cache trt.cache

  # the same profile given per input (NAME:MIN,OPT,MAX)
  trt-gn build unet.fused.onnx -o unet.plan --shape sample:1x4x64x64,2x4x64x64,4x4x128x128 \\
      --shape timestep:1,2,4 --shape encoder_hidden_states:1x77x768,2x77x768,4x77x768

  # a plan that newer TensorRT versions can run, with the plugin library serialized into it
  trt-gn build model.onnx -o model.plan --batch 1:1:8 --version-compatible

  # TensorRT-RTX, ahead of time (no GPU needed): one plan for RTX 30, 40 and 50 GPUs
  trt-gn build vae_decoder.fused.onnx -o vae_decoder.rtx.plan --builder tensorrt-rtx \
      --target-cc 8.0,8.6,8.9,12.0 --batch 1:1:2 --height 32:64:128 --width 32:64:128

dynamic dimensions: --batch fills dimension 0 of every input whose dimension 0 is dynamic;
--height/--width fill dimensions 2/3 of rank-4 (NCHW) inputs; --shape overrides them for one input.
Each takes MIN:OPT:MAX (or one number for a fixed size).

precision: fp16/bf16 let TensorRT choose reduced precision per layer (TensorRT 10 builder flags);
fp32 also disables TF32; strongly-typed keeps the types written in the ONNX model (the only mode of
TensorRT 11, which removed the FP16/BF16 flags, and of TensorRT-RTX). Default: fp16 with TensorRT,
strongly-typed with TensorRT-RTX.

builders: tensorrt (the `tensorrt` Python package, 10 or later; needs a GPU, builds for it) and
tensorrt-rtx (TensorRT-RTX, `pip install tensorrt-rtx-cu13-libs tensorrt-rtx-cu13-bindings`:
builds on any machine, GPU or not, for the compute capabilities of --target-cc, default
8.0,8.6,8.9,12.0; the plan runs on each of them, not on Hopper).

plugin library: --plugin, else $TRT_GN_PLUGIN_LIBRARY, <package>/lib/libtrt_gn_plugin.so,
<repository>/build/plugin/libtrt_gn_plugin.so.

exit codes: 0 built; 1 TensorRT failed to parse/build; 2 bad arguments or input; 3 TensorRT (or
TensorRT-RTX) or the plugin library missing; 130 interrupted. The plan (and timing cache) are written
atomically: nothing is
written on failure.
"""

_SIZE_RE = re.compile(r"^(\d+)\s*(B|KiB|MiB|GiB|TiB)?$", re.IGNORECASE)
_UNITS = {"b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}


def parse_size(text: str) -> int:
    """'4GiB', '512MiB', '1048576' -> bytes."""
    m = _SIZE_RE.match(text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"'{text}' is not a size like 4GiB, 512MiB or a number of bytes")
    return int(m.group(1)) * _UNITS[(m.group(2) or "b").lower()]


def _shape_range(text: str):
    from ..engine import parse_shape_range
    try:
        return parse_shape_range(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _dim_range(text: str):
    from ..engine import parse_dim_range
    try:
        return parse_dim_range(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _target_cc(text: str):
    from ..engine import parse_target_cc
    try:
        return parse_target_cc(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def register(subparsers) -> None:
    from ..engine import BUILDERS, DEFAULT_WORKSPACE_BYTES, PRECISIONS

    p = subparsers.add_parser(
        "build",
        help="build a TensorRT engine from a fused ONNX model (TensorRT on a GPU, or --builder tensorrt-rtx: "
             "no GPU needed)",
        description="Parse a fused ONNX model with TensorRT's ONNX parser, the trt_gn plugin loaded, "
        "and build a serialized engine (plan) with an optimisation profile for the dynamic dimensions.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("onnx", metavar="MODEL.onnx", help="fused ONNX model (external-data weights are found next to it)")
    p.add_argument("-o", "--output", metavar="ENGINE.plan",
                   help="engine file to write (.plan or .engine; default: MODEL.plan next to the model)")
    p.add_argument("--plugin", metavar="LIB.so", help="plugin library (default: the one trt_gn finds)")
    p.add_argument("--builder", choices=BUILDERS, default="tensorrt",
                   help="tensorrt (default; GPU) or tensorrt-rtx (ahead of time, no GPU needed)")
    p.add_argument("--target-cc", type=_target_cc, metavar="CC,...",
                   help="TensorRT-RTX: compute capabilities the plan runs on (default: 8.0,8.6,8.9,12.0)")
    p.add_argument("--precision", choices=PRECISIONS, default=None,
                   help="default: fp16 (tensorrt), strongly-typed (tensorrt-rtx)")
    p.add_argument("--shape", dest="shapes", action="append", default=[], type=_shape_range,
                   metavar="NAME:MIN,OPT,MAX", help="profile of one input, e.g. x:1x4x64x64,2x4x64x64,4x4x128x128")
    p.add_argument("--batch", type=_dim_range, metavar="MIN:OPT:MAX", help="range of dynamic dimension 0")
    p.add_argument("--height", type=_dim_range, metavar="MIN:OPT:MAX", help="range of dynamic dimension 2 (NCHW)")
    p.add_argument("--width", type=_dim_range, metavar="MIN:OPT:MAX", help="range of dynamic dimension 3 (NCHW)")
    p.add_argument("--workspace", type=parse_size, default=DEFAULT_WORKSPACE_BYTES, metavar="SIZE",
                   help=f"builder workspace limit, e.g. 4GiB (default: {DEFAULT_WORKSPACE_BYTES >> 30}GiB)")
    p.add_argument("--timing-cache", metavar="FILE",
                   help="timing cache to read (if it exists) and update: later builds are much faster")
    p.add_argument("--version-compatible", action="store_true",
                   help="build a version-compatible plan and serialize the plugin library into it")
    p.add_argument("--exclude-lean-runtime", action="store_true",
                   help="with --version-compatible: leave TensorRT's lean runtime out of the plan")
    p.add_argument("--optimization-level", type=int, choices=range(6), metavar="0..5",
                   help="TensorRT builder optimisation level (TensorRT's default: 3)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..engine import BuildOptions, build_engine

    output = Path(args.output) if args.output else Path(args.onnx).with_suffix(".plan")
    precision = args.precision or ("strongly-typed" if args.builder == "tensorrt-rtx" else "fp16")
    options = BuildOptions(plugin_library=args.plugin, precision=precision, shapes=args.shapes,
                           batch=args.batch, height=args.height, width=args.width,
                           workspace_bytes=args.workspace, timing_cache=args.timing_cache,
                           version_compatible=args.version_compatible,
                           exclude_lean_runtime=args.exclude_lean_runtime,
                           optimization_level=args.optimization_level, progress=not args.no_progress,
                           builder=args.builder, target_cc=args.target_cc or ())
    # build_engine checks every argument and input before TensorRT is imported; its errors carry
    # their exit code (trt_gn.errors) and end in trt_gn.cli.main.
    result = build_engine(args.onnx, output, options)
    builder = "TensorRT-RTX" if result.builder == "tensorrt-rtx" else "TensorRT"
    print(f"wrote {result.plan} ({result.plan_bytes / 2**20:.1f} MiB) in {result.seconds:.1f} s "
          f"with {builder} {result.tensorrt_version}, plugin {result.plugin_library}")
    print(f"  {result.plugin_layers} of {result.plugin_nodes} trt_gn node(s) became plugin layers")
    if result.targets:
        print(f"  runs on compute capability {', '.join(result.targets)}")
    for s in result.profile:
        print(f"  profile {s.name}: min {'x'.join(map(str, s.min))}, opt {'x'.join(map(str, s.opt))}, "
              f"max {'x'.join(map(str, s.max))}")
    if result.timing_cache is not None:
        print(f"  timing cache: {result.timing_cache}")
    return 0
