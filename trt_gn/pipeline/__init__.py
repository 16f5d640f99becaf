"""The whole trt_gn job on one diffusion model, as `trt-gn pipeline` runs it.

build the model (diffusers recipe, seeded random weights or local weights)
  -> export it to ONNX as torch emits it (trt_gn.onnx recipes, torch.onnx dynamo)
  -> fuse every GroupNorm(+SiLU) into the plugin's node (trt_gn.onnx.fusion)
  -> validate original vs fused in onnxruntime (trt_gn.onnx.validate)
  -> on a GPU: the CUDA op vs the float64 reference on the model's GroupNorm shapes
  -> with TensorRT: engine build with the plugin (trt_gn.engine), TensorRT vs onnxruntime through
     polygraphy, and a Triton model repository for the engine (trt_gn.triton)
  -> report.md and report.json

Everything is written into a staging folder next to the output folder and renamed into place at
the end, so the output folder holds a complete run or nothing new. A step that cannot run here
(no GPU, no TensorRT) is recorded as skipped with the reason; a check that runs and fails is
recorded as failed and the report is still written. Errors (bad options, a crash inside a step)
raise PipelineError and leave nothing behind.

The modules, by job (this package re-exports their public names):

- ``options``: the options, step names, result types, PipelineError and the checks before any work
- ``steps``: each step and ``run_steps``, which runs them all into a staging folder
- ``report``: report.json and report.md
- ``staging``: ``run_pipeline``: the staging folder, published as the output folder at the end
"""

from .options import (DEFAULT_MODEL, DEFAULT_OUT, KERNEL_DTYPES, KERNEL_LAYOUTS, OWN_PROGRESS_STEPS,
                      POLYGRAPHY_TOLERANCE, PRECISIONS, SHAPE_CASES, STEP_ENGINE, STEP_EXPORT, STEP_FUSE, STEP_KERNEL,
                      STEP_MODEL, STEP_REPORT, STEP_TRITON, STEP_TRT_COMPARE, STEP_VALIDATE,
                      PipelineError, PipelineOptions, PipelineResult, Step, check_options)
from ..onnx.weights import WEIGHT_SUFFIXES, check_weights
from .report import render_markdown, write_report
from .staging import publish_folder, run_pipeline
from .steps import group_norm_calls, kernel_check, quiet, run_steps

__all__ = [
    "DEFAULT_MODEL", "DEFAULT_OUT", "KERNEL_DTYPES", "KERNEL_LAYOUTS", "OWN_PROGRESS_STEPS", "POLYGRAPHY_TOLERANCE",
    "PRECISIONS", "SHAPE_CASES", "STEP_ENGINE", "STEP_EXPORT", "STEP_FUSE", "STEP_KERNEL", "STEP_MODEL",
    "STEP_REPORT", "STEP_TRITON", "STEP_TRT_COMPARE", "STEP_VALIDATE", "WEIGHT_SUFFIXES",
    "PipelineError", "PipelineOptions", "PipelineResult", "Step",
    "check_options", "check_weights", "group_norm_calls", "kernel_check", "publish_folder", "quiet",
    "render_markdown", "run_pipeline", "run_steps", "write_report",
]
