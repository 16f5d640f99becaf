"""`trt-gn export`: export a diffusers model (SD 1.5 / SDXL / tiny UNet or VAE decoder) to ONNX
with every GroupNorm(+SiLU) as the trt_gn custom node."""

from __future__ import annotations

import argparse

from ._onnx_common import fail

EPILOG = """examples:
  trt-gn export sd15-vae-decoder vae_decoder.onnx --dtype fp16
  trt-gn export sdxl-unet unet.onnx --dtype fp16 --weights /models/sdxl/unet
  trt-gn export tiny-unet tiny.onnx --no-swap          # plain export, to try `trt-gn fuse` on

Weights are random and seeded unless --weights names a local diffusers folder or a state-dict file
(no download). Batch, height and width are dynamic inputs. The file carries the op's model-local
function (onnxruntime runs it; TensorRT >= 10.7 uses the plugin); --bare leaves it out."""


def register(subparsers) -> None:
    from ..onnx.recipes import RECIPES

    p = subparsers.add_parser("export", help="export a diffusers UNet / VAE decoder with the fused node",
                              description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", choices=sorted(RECIPES), help="model recipe")
    p.add_argument("output", help="ONNX file to write")
    p.add_argument("--dtype", choices=("fp32", "fp16"), default="fp32")
    p.add_argument("--weights", help="local diffusers model folder or .safetensors/.bin state dict")
    p.add_argument("--opset", type=int, default=18)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--bare", action="store_true", help="no model-local function (TensorRT < 10.7)")
    p.add_argument("--no-swap", action="store_true", help="keep nn.GroupNorm (plain export, for `trt-gn fuse`)")
    p.set_defaults(func=run)


def run(args) -> int:
    import torch

    from ..onnx import export, recipes
    from ..onnx.io import OutputPathError, check_output_path
    from ..swap import swap_group_norms

    try:
        check_output_path(args.output)
    except OutputPathError as exc:
        return fail("trt-gn export", str(exc), "choose an output file in an existing, writable folder")
    try:
        import diffusers  # noqa: F401
    except ImportError:
        return fail("trt-gn export", "diffusers is not installed", "pip install diffusers (it brings no torch of its own)")
    dtype = torch.float16 if args.dtype == "fp16" else torch.float32
    from rich.console import Console

    console = Console(stderr=True)
    try:
        with console.status(f"building {args.model} ({args.dtype})"):
            model = recipes.build(args.model, dtype=dtype, seed=args.seed, weights=args.weights)
        if not args.no_swap:
            report = swap_group_norms(model)
            print(report.summary().splitlines()[0])
        inputs, names, shapes = recipes.example_inputs(args.model, dtype=dtype)
        with console.status(f"exporting to {args.output} (torch.onnx dynamo, opset {args.opset})"):
            if args.no_swap:
                program = torch.onnx.export(model, inputs, dynamo=True, opset_version=args.opset,
                                            dynamic_shapes=shapes, input_names=names, verbose=False)
                from ..onnx import io as onnx_io

                onnx_io.save_model(program.model, args.output)
                count = 0
            else:
                count = export.export_model(model, inputs, args.output, dynamic_shapes=shapes, input_names=names,
                                            opset=args.opset, function=not args.bare)
    except FileNotFoundError as exc:
        return fail("trt-gn export", str(exc), "--weights must be a local folder or file")
    except ValueError as exc:
        return fail("trt-gn export", str(exc), "see `trt-gn export --help`")
    print(f"wrote {args.output} ({count} {'fused nodes' if not args.no_swap else 'GroupNorms left for trt-gn fuse'})")
    return 0
