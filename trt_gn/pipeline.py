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
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import os
import shutil
import subprocess
import sys
import time
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

from . import fileio
from .errors import EXIT_FAILED, EXIT_MISSING, Error

DEFAULT_MODEL = "tiny-vae-decoder"
DEFAULT_OUT = "trt-gn-out"
PRECISIONS = ("fp32", "fp16", "bf16")
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
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
    plugin_library: str | os.PathLike | None = None  # default: trt_gn._lib.find_plugin_library()
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


# ---------------------------------------------------------------------------------------------
# checks before any work


def check_options(options: PipelineOptions) -> Path:
    """Every check that needs no model: raises PipelineError before anything is built or written.
    Returns the output folder."""
    from .onnx.recipes import RECIPES

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
    from .onnx.export import check_opset

    check_opset(options.opset)
    if options.weights is not None:
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
    if out.exists() and not out.is_dir():
        raise PipelineError(f"output {out} exists and is not a folder", "choose another --out")
    if out.is_dir() and any(out.iterdir()) and not options.overwrite:
        raise PipelineError(f"output folder {out} is not empty", "pass --overwrite to replace it, or choose another --out")
    if not parent.is_dir():
        raise PipelineError(f"output folder {out}: its parent {parent} does not exist or is not a folder",
                            f"create it first (mkdir -p {parent}) or choose another --out")
    problem = fileio.writable_folder_problem(parent)
    if problem:
        raise PipelineError(f"output folder {out}: {parent} {problem}", "choose a writable --out")
    try:
        import diffusers  # noqa: F401
    except ImportError:
        raise PipelineError("diffusers is not installed (the model recipes need it)",
                            "pip install diffusers (it brings no torch of its own)", exit_code=EXIT_MISSING) from None
    return out


def check_weights(weights: str | os.PathLike) -> Path:
    """A --weights path that can be tried: an existing folder, or a file with a state-dict suffix."""
    weights = Path(weights)
    if not weights.exists():
        raise PipelineError(f"--weights {weights}: no such file or folder",
                            "pass a local diffusers model folder or a state-dict file (nothing is downloaded)")
    if weights.is_file() and weights.suffix.lower() not in WEIGHT_SUFFIXES:
        raise PipelineError(f"--weights {weights}: a weights file must end in {', '.join(WEIGHT_SUFFIXES)}",
                            "pass a state dict (.safetensors, .bin) or a diffusers model folder")
    if weights.is_dir() and not (weights / "config.json").is_file():
        raise PipelineError(f"--weights {weights}: folder has no config.json, so it is no diffusers model folder",
                            "pass the model's own folder (e.g. .../vae or .../unet), or a state-dict file")
    return weights


# ---------------------------------------------------------------------------------------------
# the steps


class _Steps:
    """Runs named steps, times them, and tells `on_step(event, step)` ("start" / "end")."""

    def __init__(self, on_step: Callable[[str, Step], None] | None):
        self.steps: list[Step] = []
        self._on_step = on_step or (lambda event, step: None)

    @contextmanager
    def run(self, name: str):
        step = Step(name)
        self._on_step("start", step)
        started = time.perf_counter()
        try:
            yield step
        except KeyboardInterrupt:
            raise
        except Error:
            raise
        except Exception as exc:  # a crash inside a step: one line naming the step
            raise PipelineError(f"{name} failed: {_first_line(exc)}",
                                "rerun with --debug for the full traceback", exit_code=EXIT_FAILED) from exc
        step.seconds = time.perf_counter() - started
        self.steps.append(step)
        self._on_step("end", step)

    def skip(self, name: str, reason: str) -> Step:
        step = Step(name, "skipped", 0.0, reason)
        self.steps.append(step)
        self._on_step("end", step)
        return step

    def status(self, name: str) -> str | None:
        return next((s.status for s in self.steps if s.name == name), None)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


@contextmanager
def quiet():
    """Keep torch.onnx / torch / diffusers chatter out of the user's terminal (results go to the report;
    errors end as exceptions, shown as one line, in full with --debug)."""
    previous = logging.root.manager.disable
    logging.disable(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(previous)


def group_norm_calls(model, args) -> list[dict]:
    """Every nn.GroupNorm call of one forward pass at the example inputs, with its input shape.

    The forward runs under FakeTensorMode: shapes only, no arithmetic, so SD-sized models cost
    nothing here. The count is the oracle the fusion is checked against."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    calls: list[dict] = []

    def hook(module, inputs, output):
        calls.append(dict(shape=[int(d) for d in inputs[0].shape], num_groups=module.num_groups,
                          eps=float(module.eps), affine=bool(module.affine)))

    handles = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, torch.nn.GroupNorm)]
    try:
        with FakeTensorMode(allow_non_fake_inputs=True) as mode, torch.no_grad():
            model(*[mode.from_tensor(a) for a in args])
    finally:
        for h in handles:
            h.remove()
    return calls


def kernel_check(calls: list[dict], seed: int) -> list[dict]:
    """The CUDA op against the float64 reference on each distinct GroupNorm shape of the model, for
    fp32/fp16/bf16, NHWC (channels_last) and NCHW, without and with SiLU. Needs a GPU."""
    import torch

    from . import _lib
    from . import ops  # noqa: F401  (registers the op)
    from .reference import assert_close, group_norm_act_reference, max_errors

    _lib.load()  # a missing kernels library is the step's error, named once
    dtypes = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
    distinct = sorted({(tuple(c["shape"]), c["num_groups"], c["eps"]) for c in calls})
    rows = []
    for shape, groups, eps in distinct:
        n, c = shape[0], shape[1]
        hw = 1
        for d in shape[2:]:
            hw *= d
        # Rank-3 inputs (attention's (N, C, L)) go through the op as (N, C, L, 1), as trt_gn.swap does.
        size = (n, c, shape[2], shape[3]) if len(shape) == 4 else (n, c, hw, 1)
        gen = torch.Generator(device="cuda").manual_seed(seed)
        x32 = torch.randn(size, device="cuda", generator=gen) * 2.0 + 0.5
        w32 = torch.randn(c, device="cuda", generator=gen)
        b32 = torch.randn(c, device="cuda", generator=gen)
        for dtype_name in KERNEL_DTYPES:
            dtype = dtypes[dtype_name]
            x, w, b = x32.to(dtype), w32.to(dtype), b32.to(dtype)
            for activation in ("none", "silu"):
                ref = group_norm_act_reference(x, w, b, groups, eps, activation)
                for layout in KERNEL_LAYOUTS:
                    xi = x.contiguous(memory_format=torch.channels_last) if layout == "nhwc" else x.contiguous()
                    y = torch.ops.trt_gn.group_norm_act(xi, w, b, groups, eps, activation)
                    torch.cuda.synchronize()
                    max_abs, max_rel = max_errors(y, ref)
                    try:
                        assert_close(y, ref, dtype)
                        passed, message = True, ""
                    except AssertionError as exc:
                        passed, message = False, str(exc)
                    rows.append(dict(shape=list(size), num_groups=groups, eps=eps, dtype=dtype_name, layout=layout,
                                     activation=activation, max_abs=max_abs, max_rel=max_rel, passed=passed,
                                     message=message))
                del ref
    return rows


def _tensorrt_and_gpu() -> tuple[bool, str]:
    """(True, TensorRT version) where an engine can be built here, else (False, why not)."""
    from .engine import TensorRTNotInstalledError, import_tensorrt

    try:
        trt = import_tensorrt()
    except TensorRTNotInstalledError as exc:
        return False, exc.message
    import torch

    if not torch.cuda.is_available():
        return False, f"TensorRT {trt.__version__} is installed but there is no CUDA GPU"
    return True, str(trt.__version__)


def _polygraphy(fused: Path, input_shapes: dict[str, list[int]], precision: str, plugin: Path,
                log: Path) -> tuple[bool, str]:
    from .onnx.validate import polygraphy_command

    tol = str(POLYGRAPHY_TOLERANCE[precision])
    cmd = polygraphy_command(fused, plugin, fp16=precision == "fp16")
    if precision == "bf16":
        cmd.append("--bf16")
    # Later --atol/--rtol win in polygraphy's argparse; dynamic dims need concrete shapes.
    cmd += ["--atol", tol, "--rtol", tol, "--input-shapes"]
    cmd += [f"{name}:[{','.join(map(str, shape))}]" for name, shape in input_shapes.items()]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    log.write_text(" ".join(cmd) + "\n\n" + proc.stdout + proc.stderr)
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
    verdict = next((ln.strip() for ln in reversed(lines) if "PASSED" in ln or "FAILED" in ln), lines[-1] if lines else "")
    return proc.returncode == 0, f"atol = rtol = {tol}: {verdict[:300]}"


# ---------------------------------------------------------------------------------------------
# the run


def run_pipeline(options: PipelineOptions, on_step: Callable[[str, Step], None] | None = None) -> PipelineResult:
    """Run every step into a staging folder, then rename it to options.out. See the module docstring."""
    out = check_options(options)
    with fileio.staging_folder(fileio.folder_of(out), out.name) as stage:
        report, steps = _run_steps(options, stage, _Steps(on_step))
        publish_folder(stage, out, options.overwrite)
    return PipelineResult(out, report, steps)


def publish_folder(stage: Path, out: Path, overwrite: bool) -> None:
    """Rename the finished staging folder to `out`; an existing `out` is replaced only if it is empty
    or overwrite is set (checked again here: it may have changed during the run)."""
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise PipelineError(f"output folder {out} was filled while the pipeline ran", "rerun with another --out")
    fileio.publish_folder(stage, out, replace=True)


def _run_steps(options: PipelineOptions, stage: Path, steps: _Steps) -> tuple[dict, list[Step]]:
    import torch

    from . import __version__
    from .onnx import fusion, recipes, validate
    from .onnx import io as onnx_io

    started = time.perf_counter()
    name = options.model
    recipe = recipes.RECIPES[name]
    original = stage / f"{name}.onnx"
    fused = stage / f"{name}.fused.onnx"
    report: dict = dict(
        model=name, kind=recipe.kind, weights=str(options.weights) if options.weights else "random (seeded)",
        seed=options.seed, precision=options.precision, opset=options.opset,
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        environment=_environment(), trt_gn_version=__version__,
    )

    with steps.run(STEP_MODEL) as step, quiet():
        model = recipes.build(name, seed=options.seed, weights=options.weights)
        args, input_names, dynamic_shapes = recipes.example_inputs(name)
        calls = group_norm_calls(model, args)
        params = sum(p.numel() for p in model.parameters())
        step.detail = (f"{name}: {params / 1e6:.1f} M parameters, {len(calls)} GroupNorm calls at "
                       f"{'x'.join(map(str, args[0].shape))}")
    report["group_norms"] = dict(count=len(calls), example_input=list(args[0].shape), calls=calls)

    with steps.run(STEP_EXPORT) as step, quiet():
        program = torch.onnx.export(model, args, dynamo=True, opset_version=options.opset,
                                    dynamic_shapes=dynamic_shapes, input_names=input_names, verbose=False)
        onnx_io.save_model(program.model, original)
        del program
        step.detail = f"{original.name} (torch.onnx dynamo, opset {options.opset}; batch, height, width dynamic)"

    with steps.run(STEP_FUSE) as step:
        fusion_report = fusion.fuse_file(original, fused)
        n_fused = len(fusion_report.fused)
        step.detail = f"fused {n_fused} of {len(calls)} GroupNorms ({fusion_report.num_silu} with SiLU), left {len(fusion_report.left)}"
        if n_fused != len(calls) or fusion_report.left:
            step.status = "failed"
    patterns: dict[str, int] = {}
    for f in fusion_report.fused:
        patterns[f.pattern] = patterns.get(f.pattern, 0) + 1
    report["fusion"] = dict(
        fused=n_fused, with_silu=fusion_report.num_silu, group_norms=len(calls), patterns=patterns,
        nodes=[dataclasses.asdict(f) for f in fusion_report.fused],
        left=[dataclasses.asdict(x) for x in fusion_report.left], summary=fusion_report.summary(),
    )

    cases = [validate.shape_case_dims(original, b, lat) for b, lat in SHAPE_CASES]
    with steps.run(STEP_VALIDATE) as step:
        validation = validate.validate_onnxruntime(original, fused, shape_cases=cases, seed=options.seed)
        worst = max((c.max_abs for c in validation.comparisons), default=0.0)
        step.status = "ok" if validation.passed else "failed"
        step.detail = (f"{sum(c.passed for c in validation.comparisons)}/{len(validation.comparisons)} comparisons "
                       f"passed, max abs error {worst:.2e}")
    report["validation"] = dict(passed=validation.passed,
                                comparisons=[dataclasses.asdict(c) for c in validation.comparisons],
                                skipped=list(validation.skipped))

    report["kernel_check"] = None
    if not torch.cuda.is_available():
        steps.skip(STEP_KERNEL, "no CUDA GPU (torch.cuda.is_available() is False)")
    else:
        with steps.run(STEP_KERNEL) as step:
            try:
                rows = kernel_check(calls, options.seed)
            except (FileNotFoundError, OSError, ImportError) as exc:  # the kernels library is missing
                rows = []
                step.status, step.detail = "failed", f"kernels library: {str(exc).splitlines()[0]}"
            else:
                bad = [r for r in rows if not r["passed"]]
                step.status = "failed" if bad else "ok"
                step.detail = (f"{len(rows) - len(bad)}/{len(rows)} cases within tolerance on "
                               f"{len({tuple(r['shape']) + (r['num_groups'], r['eps']) for r in rows})} distinct shapes"
                               f" ({', '.join(KERNEL_DTYPES)} x {', '.join(KERNEL_LAYOUTS)} x none, silu)")
            report["kernel_check"] = dict(device=torch.cuda.get_device_name(), rows=rows)

    can_build, why = _tensorrt_and_gpu()
    plan = stage / f"{name}.plan"
    report["engine"] = report["tensorrt_comparison"] = report["triton"] = None
    plugin = None
    if not can_build and options.builder in ("auto", "tensorrt-rtx"):
        # No TensorRT engine here; TensorRT-RTX builds ahead of time, GPU or not.
        _tensorrt_rtx_steps(options, steps, report, fused, plan, why)
    elif options.builder == "tensorrt-rtx":
        _tensorrt_rtx_steps(options, steps, report, fused, plan, "--builder tensorrt-rtx")
    elif can_build:
        try:
            plugin = Path(options.plugin_library) if options.plugin_library else _find_plugin()
        except FileNotFoundError as exc:
            why = str(exc).splitlines()[0]
    if report["engine"] is not None or any(s.name == STEP_ENGINE for s in steps.steps):
        pass  # the TensorRT-RTX steps ran
    elif not can_build:
        for skipped in (STEP_ENGINE, STEP_TRT_COMPARE, STEP_TRITON):
            steps.skip(skipped, why)
    elif plugin is None:
        steps.skip(STEP_ENGINE, f"TensorRT is installed but the plugin library was not found: {why}")
        for skipped in (STEP_TRT_COMPARE, STEP_TRITON):
            steps.skip(skipped, "needs the plugin library")
    else:
        _tensorrt_steps(options, steps, report, fused, plan, plugin, cases, stage)

    with steps.run(STEP_REPORT) as step:
        report["steps"] = [dataclasses.asdict(s) for s in steps.steps]
        report["skipped"] = [dict(step=s.name, reason=s.detail) for s in steps.steps if s.status == "skipped"]
        report["skipped"] += [dict(step=STEP_VALIDATE, reason=s) for s in validation.skipped]
        report["passed"] = all(s.status != "failed" for s in steps.steps)
        report["seconds"] = round(time.perf_counter() - started, 2)
        report["files"] = sorted(str(p.relative_to(stage)) for p in stage.rglob("*") if p.is_file()) + [
            "report.md", "report.json"]
        (stage / "report.json").write_text(json.dumps(report, indent=2) + "\n")
        (stage / "report.md").write_text(render_markdown(report))
        step.detail = "report.md, report.json"
    return report, steps.steps


def _find_plugin() -> Path:
    from . import _lib

    return Path(_lib.find_plugin_library())


def _tensorrt_rtx_steps(options, steps: _Steps, report: dict, fused: Path, plan: Path, why_not_tensorrt: str) -> None:
    """The engine built by TensorRT-RTX (ahead of time, for options.target_cc); its plan runs on RTX
    GPUs only, so the comparison and Triton's TensorRT backend are skipped with the reason."""
    from . import engine

    no_run = (f"{why_not_tensorrt}; the TensorRT-RTX plan runs on compute capability "
              f"{','.join(options.target_cc or engine.RTX_DEFAULT_TARGETS)} only and is not run here")
    try:
        rtx = engine.import_tensorrt_rtx()
        report["environment"]["tensorrt_rtx"] = str(rtx.__version__)
    except engine.EngineBuildError as exc:
        for skipped in (STEP_ENGINE, STEP_TRT_COMPARE, STEP_TRITON):
            steps.skip(skipped, f"{why_not_tensorrt}; {exc.message}" if skipped == STEP_ENGINE else why_not_tensorrt)
        return
    try:
        plugin = Path(options.plugin_library) if options.plugin_library else _find_plugin()
    except FileNotFoundError as exc:
        steps.skip(STEP_ENGINE, f"{why_not_tensorrt}; TensorRT-RTX is installed but the plugin library was not "
                                f"found: {str(exc).splitlines()[0]}")
        for skipped in (STEP_TRT_COMPARE, STEP_TRITON):
            steps.skip(skipped, f"{why_not_tensorrt}; no plugin library")
        return
    if options.precision != "fp32":
        steps.skip(STEP_ENGINE, f"{why_not_tensorrt}; TensorRT-RTX builds strongly typed networks only, and the "
                                f"pipeline's ONNX model is fp32: --precision {options.precision} has no TensorRT-RTX "
                                f"build (use fp32)")
        for skipped in (STEP_TRT_COMPARE, STEP_TRITON):
            steps.skip(skipped, f"{why_not_tensorrt}; no engine was built (see the engine build step)")
        return
    build_options = _build_options(plugin, options.progress, precision="fp32", builder="tensorrt-rtx",
                                   target_cc=tuple(options.target_cc))
    _engine_step(steps, report, fused, plan, build_options)
    steps.skip(STEP_TRT_COMPARE, no_run)
    steps.skip(STEP_TRITON, f"{why_not_tensorrt}; Triton's TensorRT backend runs TensorRT plans, not "
                            f"TensorRT-RTX plans (`trt-gn triton --backend python` serves the fused ONNX model)")


def _build_options(plugin: Path, progress: bool, **kwargs):
    """The engine step's BuildOptions: one profile spanning the validation's batches and latents."""
    from . import engine

    batches = [b for b, _ in SHAPE_CASES]
    latents = [lat for _, lat in SHAPE_CASES]
    return engine.BuildOptions(
        plugin_library=plugin, progress=progress,
        batch=engine.DimRange(min(batches), max(batches), max(batches)),
        height=engine.DimRange(min(latents), max(latents), max(latents)),
        width=engine.DimRange(min(latents), max(latents), max(latents)),
        **kwargs,
    )


def _engine_step(steps: _Steps, report: dict, fused: Path, plan: Path, build_options):
    """Build the engine as the engine step; the result, or None where the build failed (the step says why)."""
    from . import engine

    with steps.run(STEP_ENGINE) as step:
        try:
            built = engine.build_engine(fused, plan, build_options)
        except engine.EngineBuildError as exc:
            step.status, step.detail = "failed", f"{exc.message} ({exc.hint})" if exc.hint else exc.message
            return None
        name = "TensorRT-RTX" if built.builder == "tensorrt-rtx" else "TensorRT"
        targets = f", compute capability {','.join(built.targets)}" if built.targets else ""
        step.detail = (f"{plan.name}: {built.plan_bytes / 2**20:.1f} MiB, {name} {built.tensorrt_version}, "
                       f"{build_options.precision}{targets}, {built.plugin_layers}/{built.plugin_nodes} trt_gn nodes "
                       f"as plugin layers")
        report["engine"] = dict(plan=plan.name, bytes=built.plan_bytes, seconds=round(built.seconds, 2),
                                builder=built.builder, targets=list(built.targets), tensorrt=built.tensorrt_version,
                                precision=build_options.precision, plugin_nodes=built.plugin_nodes,
                                plugin_layers=built.plugin_layers, plugin_library=str(built.plugin_library),
                                profile=[dataclasses.asdict(s) for s in built.profile])
        return built


def _tensorrt_steps(options, steps: _Steps, report: dict, fused: Path, plan: Path, plugin: Path,
                    cases: list[dict], stage: Path) -> None:
    from . import engine, triton

    build_options = _build_options(plugin, options.progress, precision=options.precision)
    built = _engine_step(steps, report, fused, plan, build_options)

    if shutil.which("polygraphy") is None:
        steps.skip(STEP_TRT_COMPARE, "polygraphy is not installed (pip install polygraphy)")
    else:
        with steps.run(STEP_TRT_COMPARE) as step:
            inputs, _ = engine.read_onnx_io(fused)
            largest = cases[-1]
            batch, latent = SHAPE_CASES[-1]
            shapes = {}
            for spec in inputs:
                dims = [d if d is not None else (batch if axis == 0 else latent) for axis, d in enumerate(spec.shape)]
                shapes[spec.name] = dims
            passed, detail = _polygraphy(fused, shapes, options.precision, plugin, stage / "polygraphy.log")
            step.status, step.detail = ("ok" if passed else "failed"), detail
            report["tensorrt_comparison"] = dict(passed=passed, input_shapes=shapes, detail=detail,
                                                 log="polygraphy.log", dims=largest)

    if built is None:
        steps.skip(STEP_TRITON, "no engine was built (see the engine build step)")
        return
    with steps.run(STEP_TRITON) as step:
        result = triton.write_model_repository(stage / "triton", options.model, plan,
                                               triton.RepositoryOptions(plugin_library=plugin, onnx=fused,
                                                                        io_from="engine"))
        step.detail = f"triton/{options.model} (max_batch_size {result.max_batch_size})"
        report["triton"] = dict(model_dir=f"triton/{options.model}", max_batch_size=result.max_batch_size,
                                server_command=result.server_command)


def _environment() -> dict:
    import onnx
    import onnxruntime
    import torch

    try:
        import tensorrt

        trt_version = str(tensorrt.__version__)
    except ImportError:
        trt_version = None
    cuda = torch.cuda.is_available()
    rtx = sys.modules.get("tensorrt_rtx") or sys.modules.get("tensorrt_rtx_bindings")
    return dict(python=sys.version.split()[0], torch=torch.__version__, onnx=onnx.__version__,
                onnxruntime=onnxruntime.__version__, tensorrt=trt_version,
                tensorrt_rtx=str(rtx.__version__) if rtx is not None else None,
                gpu=torch.cuda.get_device_name() if cuda else None)


# ---------------------------------------------------------------------------------------------
# report.md


def render_markdown(report: dict) -> str:
    env = report["environment"]
    fusion = report["fusion"]
    verdict = "PASSED" if report["passed"] else "FAILED"
    lines = [
        f"# trt-gn pipeline: {report['model']}",
        "",
        f"**{verdict}**: fused {fusion['fused']} of {fusion['group_norms']} GroupNorms "
        f"({fusion['with_silu']} with SiLU); onnxruntime validation "
        f"{'passed' if report['validation']['passed'] else 'FAILED'}; {len(report['skipped'])} step(s) skipped; "
        f"{report['seconds']:.1f} s.",
        "",
        f"- model: `{report['model']}` ({report['kind']}), weights: {report['weights']}, seed {report['seed']}",
        f"- ONNX: fp32, opset {report['opset']}; engine precision: {report['precision']}",
        f"- trt_gn {report['trt_gn_version']}, Python {env['python']}, torch {env['torch']}, onnx {env['onnx']}, "
        f"onnxruntime {env['onnxruntime']}, TensorRT {env['tensorrt'] or 'not installed'}, "
        f"TensorRT-RTX {env.get('tensorrt_rtx') or 'not used'}, GPU {env['gpu'] or 'none'}",
        f"- created {report['created']}",
        "",
        "## Steps",
        "",
        "| step | status | seconds | detail |",
        "|---|---|---:|---|",
    ]
    for s in report["steps"]:
        lines.append(f"| {s['name']} | {s['status']} | {s['seconds']:.2f} | {_cell(s['detail'])} |")
    lines += ["", "## Skipped", ""]
    lines += [f"- {s['step']}: {s['reason']}" for s in report["skipped"]] or ["- nothing"]
    lines += ["", "## Fusion", "", "```", fusion["summary"], "```", ""]
    lines += ["| node | pattern | C | groups | eps | activation |", "|---|---|---:|---:|---:|---|"]
    for f in fusion["nodes"]:
        lines.append(f"| {f['node']} | {f['pattern']} | {f['channels']} | {f['num_groups']} | {f['epsilon']:g} | {f['activation']} |")
    lines += ["", "## Validation: original vs fused model in onnxruntime", "",
              "| provider | input shapes | output | dtype | max abs | max rel | tolerance (atol + rtol*abs(ref)) | result |",
              "|---|---|---|---|---:|---:|---|---|"]
    for c in report["validation"]["comparisons"]:
        lines.append(f"| {c['provider']} | {c['shape_case']} | {c['output']} | {c['dtype']} | {c['max_abs']:.3e} | "
                     f"{c['max_rel']:.3e} | {c['atol']:g} + {c['rtol']:g} | {'PASS' if c['passed'] else 'FAIL'} |")
    kc = report["kernel_check"]
    lines += ["", "## Kernel check: CUDA op vs float64 reference", ""]
    if kc is None:
        lines.append("Not run (see Skipped).")
    else:
        lines += [f"Device: {kc['device']}. Worst case per shape and dtype over NHWC/NCHW x none/silu.", "",
                  "| shape (N,C,H,W) | groups | eps | dtype | max abs | max rel | cases passed |",
                  "|---|---:|---:|---|---:|---:|---|"]
        groups: dict[tuple, list] = {}
        for r in kc["rows"]:
            groups.setdefault((tuple(r["shape"]), r["num_groups"], r["eps"], r["dtype"]), []).append(r)
        for (shape, g, eps, dtype), rows in groups.items():
            lines.append(f"| {'x'.join(map(str, shape))} | {g} | {eps:g} | {dtype} | {max(r['max_abs'] for r in rows):.3e} | "
                         f"{max(r['max_rel'] for r in rows):.3e} | {sum(r['passed'] for r in rows)}/{len(rows)} |")
    lines += ["", "## TensorRT", ""]
    if report["engine"] is None and report["tensorrt_comparison"] is None:
        lines.append("No engine was built (see Steps and Skipped).")
    if report["engine"] is not None:
        e = report["engine"]
        builder = "TensorRT-RTX" if e.get("builder") == "tensorrt-rtx" else "TensorRT"
        targets = f", for compute capability {', '.join(e['targets'])}" if e.get("targets") else ""
        lines.append(f"- engine `{e['plan']}`: {e['bytes'] / 2**20:.1f} MiB, {builder} {e['tensorrt']}, "
                     f"{e['precision']}{targets}, built in {e['seconds']:.1f} s, {e.get('plugin_layers')}/"
                     f"{e.get('plugin_nodes')} trt_gn nodes as plugin layers, plugin {e['plugin_library']}")
    if report["tensorrt_comparison"] is not None:
        t = report["tensorrt_comparison"]
        lines.append(f"- polygraphy (TensorRT vs onnxruntime): {'PASS' if t['passed'] else 'FAIL'}, {t['detail']} "
                     f"(log: `{t['log']}`)")
    if report["triton"] is not None:
        lines.append(f"- Triton model repository `{report['triton']['model_dir']}`; serve it with "
                     f"`{report['triton']['server_command']}`")
    lines += ["", "## Files", ""] + [f"- `{f}`" for f in report["files"]] + [""]
    return "\n".join(lines)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
