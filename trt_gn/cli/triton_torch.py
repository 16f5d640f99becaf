"""`trt-gn triton RECIPE --backend pytorch`: the options and the run of the PyTorch model served by
Triton's Python backend (trt_gn/triton_torch.py), hooked into `trt-gn triton`'s parser."""

from __future__ import annotations

import argparse

EPILOG = """\
--backend pytorch: serve a model recipe's PyTorch module on the GPU through Triton's Python backend
(the positional argument is the recipe: sd15-vae-decoder, sdxl-vae-decoder, sd15-unet, sdxl-unet,
tiny-vae-decoder, tiny-unet). Both variants can share one server:
  trt-gn triton sd15-vae-decoder --backend pytorch --repository models --model vae_trt_gn --compile
  trt-gn triton sd15-vae-decoder --backend pytorch --repository models --model vae_stock --variant stock --compile
  tritonserver --model-repository=models --disable-auto-complete-config
Written: REPOSITORY/MODEL/config.pbtxt (backend "python", KIND_GPU instances, dynamic batching, the
model's parameters) and REPOSITORY/MODEL/VERSION/model.py. The model imports the trt_gn package that
wrote it, and torch and diffusers from the folders they are found in here (--python-path to change).
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add --backend pytorch and its options to `trt-gn triton`'s parser."""
    from ..onnx.recipe_table import RECIPES
    from ..triton_torch import BACKEND, DEVICES, DTYPES, VARIANTS

    for action in parser._actions:
        if "--backend" in action.option_strings:
            action.choices = (*action.choices, BACKEND)
            action.help += f"; {BACKEND}: a model recipe's PyTorch module on the GPU (Python backend)"
        elif action.dest == "plan":
            action.metavar += "|RECIPE"
            action.help += f"; with --backend {BACKEND}, a model recipe ({', '.join(sorted(RECIPES))})"
    parser.epilog = (parser.epilog or "") + "\n" + EPILOG
    g = parser.add_argument_group(f"--backend {BACKEND}")
    g.add_argument("--variant", choices=VARIANTS, default="trt_gn",
                   help="trt_gn: GroupNorm(+SiLU) swapped for trt_gn's fused op; stock: as diffusers builds it "
                   "(default: trt_gn)")
    g.add_argument("--dtype", choices=tuple(DTYPES), default="fp16", help="model and tensor type (default: fp16)")
    g.add_argument("--channels-last", action=argparse.BooleanOptionalAction, default=True,
                   help="run the model in channels_last (default: on)")
    g.add_argument("--compile", action="store_true",
                   help="torch.compile the model at load and warm it on every batch size (loading takes minutes)")
    g.add_argument("--weights", metavar="PATH", help="a diffusers model folder or a .safetensors/.bin state dict "
                   "(default: seeded random weights)")
    g.add_argument("--seed", type=int, default=0, help="seed of the random weights (default: 0)")
    g.add_argument("--latent-size", type=int, metavar="N", help="latent height and width served (default: the "
                   "recipe's, 64 for SD 1.5: 512x512 images)")
    g.add_argument("--device", choices=DEVICES, default="gpu",
                   help="instance kind: gpu (KIND_GPU, every GPU or --gpus) or cpu (default: gpu)")
    g.add_argument("--gpu-memory-limit", type=float, metavar="GIB",
                   help="cap on each instance's CUDA memory in GiB (default: none)")
    g.add_argument("--queue-timeout-ms", type=int, metavar="MS",
                   help="reject a request that waits longer than MS in Triton's queue (default: no limit)")
    g.add_argument("--python-path", metavar="DIRS",
                   help="folders (':'-separated) holding torch and diffusers where the server runs (default: "
                   "where they are found here)")
    g.add_argument("--kernels-library", metavar="LIB.so", help="libtrt_gn_kernels.so where the server runs "
                   "(default: the one trt_gn finds here)")


def run(args, options) -> int:
    """Write the repository for `trt-gn triton --backend pytorch`; `options` holds the common ones."""
    from ..errors import Error
    from ..triton_torch import TorchModelOptions, write_torch_repository

    if args.onnx is not None or args.plugin is not None:
        raise Error("--onnx and --plugin belong to the TensorRT backend",
                    "with --backend pytorch, the positional argument is a model recipe")
    python_path = None if args.python_path is None else [p for p in args.python_path.split(":") if p]
    torch_options = TorchModelOptions(
        variant=args.variant, dtype=args.dtype, channels_last=args.channels_last, compile=args.compile,
        weights=args.weights, seed=args.seed, latent_size=args.latent_size, device=args.device,
        gpu_memory_limit_gib=args.gpu_memory_limit, python_path=python_path, kernels_library=args.kernels_library,
        queue_timeout_ms=args.queue_timeout_ms)
    model = args.model or args.plan
    result = write_torch_repository(args.repository, model, args.plan, options, torch_options)
    for note in result.notes:
        print(f"note: {note}")
    p = result.parameters
    print(f"wrote {result.model_dir} (PyTorch {p['recipe']}, {p['variant']}, {p['dtype']}, Python backend; "
          f"max_batch_size {result.max_batch_size})")
    from .triton import _print_python_serving

    _print_python_serving(args.repository, "torch, diffusers and trt_gn at the paths of the config")
    return 0
