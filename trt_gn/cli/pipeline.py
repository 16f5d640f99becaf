"""`trt-gn pipeline`: the whole job on one diffusion model: export -> fuse -> validate in
onnxruntime -> (GPU) kernel check -> (TensorRT) engine build, TensorRT vs onnxruntime, Triton
model repository -> report.md and report.json in the output folder."""

from __future__ import annotations

import argparse

from ..errors import EXIT_FAILED, EXIT_OK
from ._types import non_negative_int

EPILOG = """\
examples:
  # the embedded default: tiny diffusers VAE decoder built from its config, seeded random weights,
  # no download; writes trt-gn-out/report.md and trt-gn-out/report.json (about 30 s on a laptop CPU)
  trt-gn pipeline

  # the SD 1.5 VAE decoder with real weights from a local diffusers folder, fp16 engine
  trt-gn pipeline --model sd15-vae-decoder --weights /models/sd15/vae --precision fp16 --out sd15-vae

  # SDXL UNet (random weights), replacing an earlier run's folder
  trt-gn pipeline --model sdxl-unet --out sdxl-unet --overwrite

steps: build model, export ONNX (torch.onnx dynamo, batch/height/width dynamic), fuse, validate
(onnxruntime: original vs fused at batch 1 latent 8 and batch 2 latent 16), kernel check (needs a
GPU), engine build + TensorRT vs onnxruntime (polygraphy) + Triton model repository (need TensorRT
and a GPU), report. Without them, where TensorRT-RTX and the plugin library are installed, the
engine is built by TensorRT-RTX ahead of time (GPU or not) for --target-cc (default
8.0,8.6,8.9,12.0), and the report names the builder and targets. A step that cannot run here is
reported as skipped, with the reason.

The ONNX models are exported in fp32 so onnxruntime can check them on a CPU; --precision sets the
TensorRT engine's precision (builder flag) and the TensorRT comparison's tolerance. The kernel check
covers fp32, fp16 and bf16.

output: everything is staged in a hidden folder next to --out and renamed into place at the end;
a non-empty --out is refused unless --overwrite. On an error nothing is written.

exit codes: 0 every step that ran passed; 1 a check failed (the report says which; it is written)
or a step failed (nothing written); 2 bad arguments or input; 3 diffusers missing; 130 interrupted
(nothing written).
"""


def register(subparsers) -> None:
    from ..onnx.recipe_table import RECIPES
    from ..pipeline import DEFAULT_MODEL, DEFAULT_OUT, PRECISIONS

    p = subparsers.add_parser(
        "pipeline",
        help="run the whole job on one model: export, fuse, validate, (GPU/TensorRT) check, build, report",
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--model", choices=sorted(RECIPES), default=DEFAULT_MODEL, metavar="NAME",
                   help=f"model recipe: {', '.join(sorted(RECIPES))} (default: {DEFAULT_MODEL})")
    p.add_argument("--out", default=DEFAULT_OUT, metavar="DIR", help=f"output folder (default: {DEFAULT_OUT})")
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty output folder")
    p.add_argument("--weights", metavar="PATH",
                   help="local diffusers model folder or .safetensors/.bin state dict (default: seeded random weights)")
    p.add_argument("--precision", choices=PRECISIONS, default="fp32",
                   help="TensorRT engine precision and comparison tolerance (default: fp32)")
    p.add_argument("--seed", type=non_negative_int, default=0,
                   help="seed of the random weights and inputs (>= 0; default: 0)")
    p.add_argument("--opset", type=int, default=18, help="ai.onnx opset of the export, 17 or later (default: 18)")
    p.add_argument("--plugin", metavar="LIB.so", help="TensorRT plugin library (default: the one trt_gn finds)")
    p.add_argument("--builder", choices=("auto", "tensorrt", "tensorrt-rtx"), default="auto",
                   help="engine builder (auto: TensorRT with a GPU, else TensorRT-RTX where installed)")
    p.add_argument("--target-cc", type=_target_cc, default=(), metavar="CC,...",
                   help="TensorRT-RTX: compute capabilities of the plan (default: 8.0,8.6,8.9,12.0)")
    p.add_argument("--no-progress", action="store_true", help="no progress display")
    p.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    p.set_defaults(func=run)


class _Display:
    """A spinner with the elapsed time for each running step (rich, on stderr, only on a terminal);
    the engine build draws TensorRT's own progress bars instead."""

    def __init__(self, enabled: bool):
        from rich.console import Console

        self.console = Console(stderr=True)
        self.enabled = enabled and self.console.is_terminal
        self.progress = None

    def __call__(self, event: str, step) -> None:
        from ..pipeline import OWN_PROGRESS_STEPS

        if not self.enabled:
            return
        if event == "start" and step.name not in OWN_PROGRESS_STEPS:
            from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

            self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                                     console=self.console, transient=True)
            self.progress.start()
            self.progress.add_task(step.name, total=None)
        elif event == "end":
            self.stop()
            self.console.print(f"[{_COLOURS[step.status]}]{step.status:7s}[/] {step.name}", highlight=False)

    def stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


_COLOURS = {"ok": "green", "failed": "bold red", "skipped": "yellow"}


def _target_cc(text: str):
    from ..engine import parse_target_cc
    try:
        return parse_target_cc(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def run(args) -> int:
    from ..pipeline import STEP_VALIDATE, PipelineOptions, run_pipeline

    options = PipelineOptions(model=args.model, out=args.out, weights=args.weights, precision=args.precision,
                              seed=args.seed, opset=args.opset, overwrite=args.overwrite,
                              plugin_library=args.plugin, progress=not args.no_progress,
                              builder=args.builder, target_cc=tuple(args.target_cc))
    display = _Display(not args.no_progress)
    try:
        result = run_pipeline(options, on_step=display)
    finally:
        display.stop()
    for step in result.steps:
        timing = "" if step.status == "skipped" else f" ({step.seconds:.1f} s)"
        print(f"{step.status:7s} {step.name}{timing}: {step.detail}")
    for skipped in result.report["skipped"]:
        if skipped["step"] == STEP_VALIDATE:  # a part of the validation (e.g. onnxruntime's CUDA provider)
            print(f"skipped {skipped['reason']}")
    verdict = "PASSED" if result.passed else "FAILED"
    print(f"{verdict}: wrote {result.out}/ (report.md, report.json) in {result.report['seconds']:.1f} s")
    return EXIT_OK if result.passed else EXIT_FAILED
