"""The steps of `trt-gn pipeline`: build the model, export, fuse, validate, the kernel check, the
engine (TensorRT or TensorRT-RTX), the TensorRT comparison and the Triton model repository, each
run, timed and recorded by a step runner; ``run_steps`` runs them all into a staging folder."""

from __future__ import annotations

import dataclasses
import datetime
import logging
import shutil
import subprocess
import sys
import time
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

from ..errors import EXIT_FAILED, Error, first_line
from .options import (KERNEL_DTYPES, KERNEL_LAYOUTS, POLYGRAPHY_TOLERANCE, SHAPE_CASES, STEP_ENGINE, STEP_EXPORT,
                      STEP_FUSE, STEP_KERNEL, STEP_MODEL, STEP_REPORT, STEP_TRITON, STEP_TRT_COMPARE, STEP_VALIDATE,
                      PipelineError, PipelineOptions, Step)
from .report import write_report


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
    """The exception's type and first line (first_line gives the type alone where there is no text)."""
    text = first_line(exc)
    return text if text == type(exc).__name__ else f"{type(exc).__name__}: {text}"


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

    from .. import abi
    from .. import ops  # noqa: F401  (registers the op)
    from ..reference import assert_close, group_norm_act_reference, max_errors

    abi.load()  # a missing kernels library is the step's error, named once
    dtypes = ops.DTYPE_BY_NAME
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
    from ..engine import TensorRTNotInstalledError, import_tensorrt

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
    from ..onnx.validate import polygraphy_command

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


def run_steps(options: PipelineOptions, stage: Path,
              on_step: Callable[[str, Step], None] | None = None) -> tuple[dict, list[Step]]:
    """Run every step into ``stage``, the report last; returns the report and the steps."""
    import torch

    from .. import __version__
    from ..onnx import fusion, recipes, validate
    from ..onnx import io as onnx_io

    steps = _Steps(on_step)
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
                                    dynamic_shapes=dynamic_shapes, input_names=input_names,
                                    output_names=recipe.output_names, verbose=False)
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
                step.status, step.detail = "failed", f"kernels library: {first_line(exc)}"
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
            why = first_line(exc)
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
        write_report(stage, report, steps.steps, validation.skipped, started)
        step.detail = "report.md, report.json"
    return report, steps.steps


def _find_plugin() -> Path:
    from .. import abi

    return Path(abi.find_plugin_library())


def _tensorrt_rtx_steps(options, steps: _Steps, report: dict, fused: Path, plan: Path, why_not_tensorrt: str) -> None:
    """The engine built by TensorRT-RTX (ahead of time, for options.target_cc); its plan runs on RTX
    GPUs only, so the comparison and Triton's TensorRT backend are skipped with the reason."""
    from .. import engine

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
                                f"found: {first_line(exc)}")
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
    from .. import engine

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
    from .. import engine

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
    from .. import engine, triton

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
