"""`trt-gn validate`: run the original and the fused ONNX model and compare every output."""

from __future__ import annotations

import argparse

from ._onnx_common import fail

EPILOG = """examples:
  trt-gn validate unet.onnx unet.fused.onnx
  trt-gn validate vae.onnx vae.fused.onnx --dims batch=1,height=64,width=64 --dims batch=2,height=32,width=48
  trt-gn validate vae.onnx vae.fused.onnx --tensorrt --plugin build/plugin/libtrt_gn_plugin.so

Symbolic input dims take values from --dims (name=value; `*` sets the default for unnamed ones).
onnxruntime runs on the CPU, and on CUDA where its CUDA execution provider exists. --tensorrt adds
`polygraphy run --trt --onnxrt` on the fused model where TensorRT and a GPU exist (else: SKIP)."""


def _dims(text: str) -> dict[str, int]:
    out = {}
    for item in text.split(","):
        name, _, value = item.partition("=")
        if not value.strip().isdigit() or int(value) <= 0:
            raise argparse.ArgumentTypeError(f"bad --dims entry {item!r}; expected name=positive-integer")
        out[name.strip()] = int(value)
    return out


def register(subparsers) -> None:
    p = subparsers.add_parser("validate", help="compare a fused ONNX model against the original in onnxruntime",
                              description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("original", help="the model before fusion")
    p.add_argument("fused", help="the model after `trt-gn fuse` (with its local function)")
    p.add_argument("--dims", type=_dims, action="append", help="one shape case: name=value,... (repeatable)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tensorrt", action="store_true", help="also compare TensorRT vs onnxruntime with polygraphy")
    p.add_argument("--plugin", help="plugin library for --tensorrt (default: the trt_gn lookup)")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..onnx import validate
    from ..onnx.io import load_model, OnnxInputError

    try:
        for path in (args.original, args.fused):
            load_model(path)
        cases = args.dims or [{"*": 1}, {"*": 2}]
        report = validate.validate_onnxruntime(args.original, args.fused, shape_cases=cases, seed=args.seed)
    except OnnxInputError as exc:
        return fail("trt-gn validate", str(exc), "pass two .onnx files: the original and the fused model")
    except Exception as exc:  # onnxruntime refusing a model is a user-facing error here
        return fail("trt-gn validate", f"onnxruntime could not run the models: {str(exc).splitlines()[0]}",
                    "a fused model needs its local function (do not use --bare); check --dims")
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
