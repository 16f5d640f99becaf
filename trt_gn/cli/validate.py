"""`trt-gn validate`: run the original and the fused ONNX model and compare every output."""

from __future__ import annotations

import argparse

from ._types import non_negative_int

EPILOG = """examples:
  trt-gn validate unet.onnx unet.fused.onnx
  trt-gn validate vae.onnx vae.fused.onnx --dims batch=1,height=64,width=64 --dims batch=2,height=32,width=48
  trt-gn validate vae.onnx vae.fused.onnx --tensorrt --plugin build/plugin/libtrt_gn_plugin.so

Symbolic input dims take values from --dims: name=value, where name is one of the model's dim names
(as torch.onnx wrote them, e.g. s81), batch (dim 0 of every input), height or width (dims 2 and 3 of
4-D inputs), or * (every dim not named otherwise); a name the model does not have is an error.
Without --dims: batch 1 with 16x16 latents, then batch 2 with 32x32 (other dims 8).
onnxruntime runs on the CPU, and on CUDA where its CUDA execution provider exists. --tensorrt adds
`polygraphy run --trt --onnxrt` on the fused model where TensorRT and a GPU exist (else: SKIP).

exit codes: 0 every comparison passed; 1 one failed; 2 bad arguments or input; 130 interrupted."""


def _dims(text: str) -> dict[str, int]:
    out = {}
    for item in text.split(","):
        name, _, value = item.partition("=")
        if not name.strip() or not value.strip().isdigit() or int(value) <= 0:
            raise argparse.ArgumentTypeError(f"bad --dims entry {item!r}; expected name=positive-integer")
        out[name.strip()] = int(value)
    return out


def register(subparsers) -> None:
    p = subparsers.add_parser("validate", help="compare a fused ONNX model against the original in onnxruntime",
                              description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("original", help="the model before fusion")
    p.add_argument("fused", help="the model after `trt-gn fuse` (with its local function)")
    p.add_argument("--dims", type=_dims, action="append", help="one shape case: name=value,... (repeatable)")
    p.add_argument("--seed", type=non_negative_int, default=0, help="seed of the random inputs (>= 0; default: 0)")
    p.add_argument("--tensorrt", action="store_true", help="also compare TensorRT vs onnxruntime with polygraphy")
    p.add_argument("--plugin", help="plugin library for --tensorrt (default: the trt_gn lookup)")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..errors import Error
    from ..onnx import validate
    from ..onnx.io import load_model

    for path in (args.original, args.fused):
        load_model(path)
    cases = [validate.resolve_dims(args.original, case) for case in args.dims or []]
    try:
        report = validate.validate_onnxruntime(args.original, args.fused, shape_cases=cases or None, seed=args.seed)
    except Error:
        raise
    except Exception as exc:  # onnxruntime refusing a model is a user-facing error here
        raise Error(f"onnxruntime could not run {args.original} and {args.fused}: {str(exc).strip().splitlines()[0]}",
                    "a fused model needs its local function (do not use --bare); check --dims") from None
    if args.tensorrt:
        ok, text = validate.validate_tensorrt(args.fused, plugin_library=args.plugin)
        if ok is None:
            report.skipped.append(text)
        else:
            report.notes.append(f"{'PASS' if ok else 'FAIL'} [TensorRT vs onnxruntime, polygraphy]\n{text}")
            if not ok:
                print(report.summary())
                return 1
    print(report.summary())
    return 0 if report.passed else 1
