"""What `trt-gn pipeline` is asked to do: its options and defaults, the step names, the result
types, PipelineError, and the checks made before any work (check_options)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from .. import fileio
from ..errors import EXIT_MISSING, Error

DEFAULT_MODEL = "tiny-vae-decoder"
DEFAULT_OUT = "trt-gn-out"
PRECISIONS = ("fp32", "fp16", "bf16")
# Validation shape cases (batch, latent height = width). Multiples of 8 survive every down/up-sampling
# stage of the SD 1.5 / SDXL UNets; small enough for onnxruntime on a CPU. The engine's profile covers them.
SHAPE_CASES = ((1, 8), (2, 16))
KERNEL_DTYPES = ("fp32", "fp16", "bf16")
KERNEL_LAYOUTS = ("nhwc", "nchw")
# polygraphy's tolerances per engine precision (polygraphy_command's 1e-3 holds for fp32 only).
POLYGRAPHY_TOLERANCE = {"fp32": 1e-3, "fp16": 1e-2, "bf16": 5e-2}

STEP_MODEL = "build model"
STEP_EXPORT = "export ONNX"
STEP_FUSE = "fuse"
STEP_VALIDATE = "validate (onnxruntime)"
STEP_KERNEL = "kernel check (CUDA op vs float64 reference)"
STEP_ENGINE = "engine build (TensorRT + plugin)"
STEP_TRT_COMPARE = "TensorRT vs onnxruntime (polygraphy)"
STEP_TRITON = "Triton model repository"
STEP_REPORT = "report"
# Steps that draw their own progress display (TensorRT's progress monitor).
OWN_PROGRESS_STEPS = (STEP_ENGINE,)


class PipelineError(Error, RuntimeError):
    """The pipeline could not run (bad option, missing input, a step crashed); nothing was written."""


@dataclasses.dataclass
class PipelineOptions:
    model: str = DEFAULT_MODEL  # a name of trt_gn.onnx.recipes.RECIPES
    out: str | os.PathLike = DEFAULT_OUT
    weights: str | os.PathLike | None = None  # local diffusers folder or state-dict file
    precision: str = "fp32"  # engine build and TensorRT comparison; the ONNX model stays fp32
    seed: int = 0
    opset: int = 18
    overwrite: bool = False
    plugin_library: str | os.PathLike | None = None  # default: trt_gn.abi.find_plugin_library()
    progress: bool = True  # TensorRT's build progress bars
    # "auto": TensorRT where it and a GPU are here, else TensorRT-RTX where installed; or one of them
    builder: str = "auto"
    target_cc: tuple = ()  # TensorRT-RTX targets (default trt_gn.engine.RTX_DEFAULT_TARGETS)


@dataclasses.dataclass
class Step:
    name: str
    status: str = "ok"  # "ok", "failed" or "skipped"
    seconds: float = 0.0
    detail: str = ""  # one line: the result, or why it failed / was skipped


@dataclasses.dataclass
class PipelineResult:
    out: Path
    report: dict
    steps: list[Step]

    @property
    def passed(self) -> bool:
        return self.report["passed"]


def check_options(options: PipelineOptions) -> Path:
    """Every check that needs no model: raises PipelineError before anything is built or written.
    Returns the output folder."""
    from ..onnx.recipe_table import RECIPES

    if options.model not in RECIPES:
        raise PipelineError(f"unknown model '{options.model}'", f"choose one of {', '.join(sorted(RECIPES))}")
    if options.precision not in PRECISIONS:
        raise PipelineError(f"unknown precision '{options.precision}'", f"choose one of {', '.join(PRECISIONS)}")
    if options.builder not in ("auto", "tensorrt", "tensorrt-rtx"):
        raise PipelineError(f"unknown builder '{options.builder}'", "choose auto, tensorrt or tensorrt-rtx")
    if options.target_cc and options.builder == "tensorrt":
        raise PipelineError("--target-cc applies to TensorRT-RTX plans only", "drop it, or use --builder tensorrt-rtx")
    if not isinstance(options.seed, int) or options.seed < 0:
        raise PipelineError(f"--seed must be >= 0, got {options.seed}")
    from ..onnx.export import check_opset

    check_opset(options.opset)
    if options.weights is not None:
        from ..onnx.weights import check_weights

        check_weights(options.weights)
    if options.plugin_library is not None and not Path(options.plugin_library).is_file():
        raise PipelineError(f"plugin library {options.plugin_library} does not exist",
                            "build it: cmake -S plugin_src -B build -G Ninja && cmake --build build")
    out = Path(options.out)
    parent = fileio.folder_of(out)
    cwd = Path.cwd().resolve()
    if out.resolve() == cwd or out.resolve() in cwd.parents:
        raise PipelineError(f"output folder {out} holds the current folder; it cannot be replaced",
                            "choose a new or empty --out, such as trt-gn-out")
    # staged beside --out and renamed over it: its parent must exist and take new entries
    problem = fileio.output_folder_problem(out, parents=False, replace=True)
    if problem:
        hint = f"create it first (mkdir -p {parent}) or choose another --out" if "parent" in problem else \
            "choose another, writable --out"
        raise PipelineError(f"output folder {out}: {problem}", hint)
    if out.is_dir() and any(out.iterdir()) and not options.overwrite:
        raise PipelineError(f"output folder {out} is not empty", "pass --overwrite to replace it, or choose another --out")
    try:
        import diffusers  # noqa: F401
    except ImportError:
        raise PipelineError("diffusers is not installed (the model recipes need it)",
                            "pip install diffusers (it brings no torch of its own)", exit_code=EXIT_MISSING) from None
    return out
