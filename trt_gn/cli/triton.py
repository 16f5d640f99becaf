"""`trt-gn triton`: write a Triton Inference Server model repository for a trt_gn engine, or for
the fused ONNX model on Triton's Python backend (onnxruntime) where TensorRT is not available."""

from __future__ import annotations

import argparse

from pathlib import Path

EPILOG = """\
examples:
  # engine built here (TensorRT importable): dims, types and max batch are read from the engine
  trt-gn triton vae_decoder.plan --repository models --model vae_decoder --onnx vae_decoder.fused.onnx

  # no TensorRT here: dims and types from the ONNX model, max batch given by hand
  trt-gn triton unet.plan --repository models --model unet --onnx unet.fused.onnx \\
      --io-from onnx --max-batch-size 4 --preferred-batch-size 2 --preferred-batch-size 4

  # then serve it through the self-registering shim copied next to config.pbtxt (Triton only
  # dlopen()s plugins=/LD_PRELOAD libraries; the shim registers libtrt_gn_plugin.so beside it),
  # in NVIDIA's Triton container:
  tritonserver --model-repository=models \\
      --backend-config=tensorrt,plugins=models/vae_decoder/libtrt_gn_plugin_autoload.so

  # no TensorRT at all: serve the fused ONNX model with Triton's Python backend and onnxruntime,
  # here with the tritonserver of scripts/setup_tritonserver.sh (see `trt-gn serve --help`)
  trt-gn triton vae_decoder.fused.onnx --backend python --repository models --model vae_decoder
  trt-gn serve models

A .onnx model is served with --backend python (or built into an engine with `trt-gn build`
first); a TensorRT-RTX plan is refused: Triton's TensorRT backend cannot load it. Under batching,
inputs/outputs shaped [batch] (the UNet's timestep) are written dims: [ 1 ] with
reshape: { shape: [ ] } (requests send them as [batch, 1]).

written (tensorrt): REPOSITORY/MODEL/config.pbtxt, REPOSITORY/MODEL/VERSION/model.plan,
REPOSITORY/MODEL/libtrt_gn_plugin.so, REPOSITORY/MODEL/libtrt_gn_plugin_autoload.so (taken from
the plugin's folder). Written (python): REPOSITORY/MODEL/config.pbtxt (backend "python", KIND_CPU
instances, or KIND_GPU on --gpus: model.py then runs onnxruntime's CUDA provider on each instance's
GPU and refuses to load without it), REPOSITORY/MODEL/VERSION/model.py and model.onnx; the model must
carry the trt_gn node's model-local function (not `--bare`), which onnxruntime runs; the batch stays
a dimension of the tensors unless --max-batch-size > 0. The model folder is assembled aside and
renamed into place: nothing is left half-written.

exit codes: 0 written; 1 could not write the files, or TensorRT could not load the engine; 2 bad
arguments or input; 3 TensorRT (--io-from engine) or the plugin library missing; 130 interrupted.
"""


def _gpus(text: str) -> list[int]:
    try:
        return [int(g) for g in text.split(",") if g.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a comma-separated list of GPU ids like 0,1") from None


def register(subparsers) -> None:
    from ..triton import BACKENDS, IO_SOURCES

    p = subparsers.add_parser(
        "triton",
        help="write a Triton model repository for an engine (TensorRT backend) or a fused ONNX model (Python backend)",
        description="Write a Triton Inference Server model repository for a TensorRT engine built by "
        "`trt-gn build`: config.pbtxt (platform tensorrt_plan), the version folder with the plan, the "
        "plugin library and its self-registering shim (what Triton loads).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("plan", metavar="ENGINE.plan|MODEL.onnx",
                   help="engine written by `trt-gn build`; with --backend python, the fused ONNX model")
    p.add_argument("--backend", choices=BACKENDS, default="tensorrt",
                   help="tensorrt (default: the engine, platform tensorrt_plan) or python (the ONNX model, "
                   "onnxruntime in Triton's Python backend)")
    p.add_argument("--repository", required=True, metavar="DIR", help="model repository folder (created if missing)")
    p.add_argument("--model", metavar="NAME", help="model name (default: the engine's file stem)")
    p.add_argument("--onnx", metavar="MODEL.onnx", help="the ONNX model the engine was built from")
    p.add_argument("--plugin", metavar="LIB.so", help="plugin library to copy, with libtrt_gn_plugin_autoload.so "
                   "from the same folder (default: the one trt_gn finds)")
    p.add_argument("--io-from", choices=IO_SOURCES, default="auto",
                   help="where input/output dims and types come from (auto: the engine when TensorRT is "
                   "importable, else the ONNX model)")
    p.add_argument("--max-batch-size", type=int, metavar="N",
                   help="Triton max_batch_size (0: no batching; default: the engine profile's max batch)")
    p.add_argument("--instances", type=int, default=1, metavar="N", help="model instances per GPU (default: 1)")
    p.add_argument("--gpus", type=_gpus, default=[], metavar="IDS", help="GPU ids for the instances, e.g. 0,1 "
                   "(default: all)")
    p.add_argument("--dynamic-batching", action=argparse.BooleanOptionalAction, default=None,
                   help="Triton's dynamic batcher (default: on when max batch size > 0)")
    p.add_argument("--preferred-batch-size", dest="preferred_batch_sizes", type=int, action="append", default=[],
                   metavar="N", help="preferred batch size of the dynamic batcher (repeatable)")
    p.add_argument("--max-queue-delay-us", type=int, default=100, metavar="US",
                   help="dynamic batcher max queue delay in microseconds (default: 100)")
    p.add_argument("--version", type=int, default=1, metavar="N", help="model version folder (default: 1)")
    p.add_argument("--overwrite", action="store_true", help="replace REPOSITORY/MODEL if it exists")
    _add_pytorch_backend(p)
    p.set_defaults(func=run)


def _add_pytorch_backend(p) -> None:
    # --backend pytorch (a recipe's PyTorch module in the Python backend) lives in cli/triton_torch.py.
    from .triton_torch import add_arguments

    add_arguments(p)


def run(args) -> int:
    from ..triton import RepositoryOptions, write_model_repository

    model = args.model or Path(args.plan).stem
    options = RepositoryOptions(plugin_library=args.plugin, onnx=args.onnx, io_from=args.io_from,
                                max_batch_size=args.max_batch_size, instance_count=args.instances,
                                gpus=args.gpus, dynamic_batching=args.dynamic_batching,
                                preferred_batch_sizes=args.preferred_batch_sizes,
                                max_queue_delay_us=args.max_queue_delay_us, version=args.version,
                                overwrite=args.overwrite)
    if args.backend == "pytorch":
        from .triton_torch import run as run_pytorch

        return run_pytorch(args, options)
    if args.backend == "python":
        return _run_python(args, model, options)
    # Everything is checked before the folder is written; errors carry their exit code (trt_gn.errors).
    result = write_model_repository(args.repository, model, args.plan, options)
    for note in result.notes:
        print(f"note: {note}")
    print(f"wrote {result.model_dir} (max_batch_size {result.max_batch_size}, inputs/outputs from "
          f"{result.io_source})")
    print(f"serve it in NVIDIA's Triton container (the plugin is loaded through the shim beside the model):\n"
          f"  {result.server_command}\n"
          f"or with `trt-gn serve {args.repository}` where the tritonserver has the TensorRT backend")
    return 0


def _run_python(args, model: str, options) -> int:
    import dataclasses

    from ..errors import Error
    from ..triton import write_python_repository

    if args.onnx is not None or args.plugin is not None or args.io_from != "auto":
        raise Error("--onnx, --plugin and --io-from belong to the TensorRT backend",
                    "with --backend python, the positional argument is the fused ONNX model")
    result = write_python_repository(args.repository, model, args.plan, dataclasses.replace(options, io_from="onnx"))
    print(f"wrote {result.model_dir} (Python backend, onnxruntime; max_batch_size {result.max_batch_size})")
    _print_python_serving(args.repository)
    return 0


def _print_python_serving(repository: str, container_needs: str = "numpy and onnxruntime") -> None:
    """How to serve a Python-backend repository: `trt-gn serve`, the same command by hand with the
    server found here, and the command for NVIDIA's container (whose Python needs `container_needs`)."""
    from .. import tritonserver

    print(f"serve it with:\n  trt-gn serve {repository}")
    try:
        server = tritonserver.find_server()
        models = tritonserver.scan_repository(repository)
        tritonserver.check_backends(server, models)
        by_hand = tritonserver.launch(repository, server, models=models).shell_command()
        print(f"which runs the tritonserver in {server.home}:\n  {by_hand}")
    except tritonserver.ServerError as exc:
        print(f"note: it cannot run here yet: {exc.message}" + (f" ({exc.hint})" if exc.hint else ""))
    print(f"or in NVIDIA's Triton container, whose Python then needs {container_needs}:\n"
          f"  {tritonserver.container_command(repository)}")
