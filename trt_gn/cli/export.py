"""`trt-gn export`: export a diffusers model (SD 1.5 / SDXL / tiny UNet or VAE decoder) to ONNX
with every GroupNorm(+SiLU) as the trt_gn custom node."""

from __future__ import annotations

import argparse

from ._types import non_negative_int

EPILOG = """examples:
  trt-gn export sd15-vae-decoder vae_decoder.onnx --dtype fp16
  trt-gn export sdxl-unet unet.onnx --dtype fp16 --weights /models/sdxl/unet
  trt-gn export tiny-unet tiny.onnx --no-swap          # plain export, to try `trt-gn fuse` on

Weights are random and seeded unless --weights names a local diffusers folder or a state-dict file
(no download). Batch, height and width are dynamic inputs. The file carries the op's model-local
function (onnxruntime runs it; TensorRT >= 10.7 uses the plugin); --bare leaves it out.

exit codes: 0 written; 1 the export failed; 2 bad arguments or input; 3 diffusers missing;
130 interrupted (nothing written)."""


def register(subparsers) -> None:
    from ..onnx.recipe_table import RECIPES

    p = subparsers.add_parser("export", help="export a diffusers UNet / VAE decoder with the fused node",
                              description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", choices=sorted(RECIPES), help="model recipe")
    p.add_argument("output", help="ONNX file to write")
    p.add_argument("--dtype", choices=("fp32", "fp16"), default="fp32")
    p.add_argument("--weights", help="local diffusers model folder or .safetensors/.bin state dict")
    p.add_argument("--opset", type=int, default=18, help="ai.onnx opset, 17 or later (default: 18)")
    p.add_argument("--seed", type=non_negative_int, default=0, help="seed of the random weights (>= 0; default: 0)")
    p.add_argument("--bare", action="store_true", help="no model-local function (TensorRT < 10.7)")
    p.add_argument("--no-swap", action="store_true", help="keep nn.GroupNorm (plain export, for `trt-gn fuse`)")
    p.set_defaults(func=run)


def run(args) -> int:
    import torch

    from ..errors import EXIT_MISSING, Error
    from ..onnx import export, recipes
    from ..onnx.io import check_output_path
    from ..onnx.weights import check_weights
    from ..pipeline import group_norm_calls, quiet
    from ..swap import swap_group_norms

    # Everything that can be checked before the model is built (the export takes minutes on SD models).
    check_output_path(args.output)
    export.check_opset(args.opset)
    if args.weights is not None:
        check_weights(args.weights)
    try:
        import diffusers  # noqa: F401
    except ImportError:
        raise Error("diffusers is not installed", "pip install diffusers (it brings no torch of its own)",
                    exit_code=EXIT_MISSING) from None
    dtype = torch.float16 if args.dtype == "fp16" else torch.float32
    from rich.console import Console

    console = Console(stderr=True)
    with console.status(f"building {args.model} ({args.dtype})"), quiet():
        model = recipes.build(args.model, dtype=dtype, seed=args.seed, weights=args.weights)
    inputs, names, shapes = recipes.example_inputs(args.model, dtype=dtype)
    outputs = recipes.RECIPES[args.model].output_names
    if not args.no_swap:
        report = swap_group_norms(model)
        print(report.summary().splitlines()[0])
    with console.status(f"exporting to {args.output} (torch.onnx dynamo, opset {args.opset})"), quiet():
        if args.no_swap:
            count = len(group_norm_calls(model, inputs))
            export.export_plain(model, inputs, args.output, dynamic_shapes=shapes, input_names=names,
                                output_names=outputs, opset=args.opset)
        else:
            count = export.export_model(model, inputs, args.output, dynamic_shapes=shapes, input_names=names,
                                        output_names=outputs, opset=args.opset, function=not args.bare)
    what = "GroupNorms left for trt-gn fuse" if args.no_swap else "fused nodes"
    print(f"wrote {args.output} ({count} {what})")
    return 0
