"""Building a plan: the build options, every check made before TensorRT is imported, the
progress monitor, and ``build_engine`` for TensorRT and TensorRT-RTX."""

from __future__ import annotations

import os
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from .. import spec
from ..errors import EXIT_FAILED
from .files import PLAN_SUFFIXES, check_writable_file, plugin_path, write_atomic
from .tensors import read_onnx_io
from .loader import (TENSORRT_RTX_PIP, EngineBuildError, TensorRTNotInstalledError, UnsupportedTargetError,
                     import_tensorrt, import_tensorrt_rtx, last_error, make_logger)
from .profiles import DimRange, ShapeRange, resolve_profile

PRECISIONS = ("fp32", "fp16", "bf16", "strongly-typed")
BUILDERS = ("tensorrt", "tensorrt-rtx")
# The compute capabilities TensorRT-RTX 1.7 builds plans for (RTX 30, RTX 40, RTX 50 / RTX PRO);
# a plan built for several runs on each of them.
RTX_DEFAULT_TARGETS = ("8.0", "8.6", "8.9", "12.0")
DEFAULT_WORKSPACE_BYTES = 4 << 30


def parse_target_cc(text: str) -> tuple[str, ...]:
    """``8.0,8.6,8.9,12.0`` -> ('8.0', '8.6', '8.9', '12.0'); the builder checks each exists."""
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise ValueError(f"'{text}' names no compute capability (give e.g. 8.0,8.6,8.9,12.0)")
    for t in items:
        if not re.fullmatch(r"\d{1,2}\.\d", t):
            raise ValueError(f"'{t}' is not a compute capability like 8.6 or 12.0")
    if len(set(items)) != len(items):
        raise ValueError(f"'{text}' names a compute capability twice")
    return tuple(items)


def rtx_compute_capability(trt, target: str):
    """The bindings' ComputeCapability for '8.6' (SM86), or EngineBuildError listing those that exist."""
    member = getattr(trt.ComputeCapability, "SM" + target.replace(".", ""), None)
    if member is None:
        known = [n[2:-1] + "." + n[-1] for n in trt.ComputeCapability.__members__ if n.startswith("SM")]
        raise UnsupportedTargetError(f"TensorRT-RTX {trt.__version__} builds no plans for compute capability {target}",
                               f"choose from {', '.join(known)} (--target-cc)")
    return member


def count_plugin_nodes(onnx_path) -> int:
    """Nodes of the main graph that TensorRT imports through the plugin library: trt_gn's
    GroupNormAct and TensorRT 8.5's GroupNorm (the legacy creator)."""
    import onnx

    model = onnx.load(str(onnx_path), load_external_data=False)
    ours = (spec.ONNX_DOMAIN, spec.PLUGIN_NAME)
    legacy = {("", spec.LEGACY_PLUGIN_NAME), ("ai.onnx", spec.LEGACY_PLUGIN_NAME)}
    return sum(1 for n in model.graph.node if (n.domain, n.op_type) == ours or (n.domain, n.op_type) in legacy)


def count_plugin_layers(trt, network) -> int:
    """Plugin layers of a parsed network (what the ONNX parser made of the custom nodes)."""
    kinds = {getattr(trt.LayerType, k) for k in ("PLUGIN_V3", "PLUGIN_V2", "PLUGIN") if hasattr(trt.LayerType, k)}
    return sum(1 for i in range(network.num_layers) if network.get_layer(i).type in kinds)


@dataclass
class BuildOptions:
    """Everything ``build_engine`` needs besides the input and output paths."""

    plugin_library: str | os.PathLike | None = None  # default: trt_gn.abi.find_plugin_library()
    precision: str = "fp16"
    shapes: Sequence[ShapeRange] = ()
    batch: DimRange | None = None
    height: DimRange | None = None
    width: DimRange | None = None
    workspace_bytes: int = DEFAULT_WORKSPACE_BYTES
    timing_cache: str | os.PathLike | None = None
    version_compatible: bool = False
    exclude_lean_runtime: bool = False
    optimization_level: int | None = None  # TensorRT's builder_optimization_level, 0..5 (default 3)
    progress: bool = True
    builder: str = "tensorrt"  # or "tensorrt-rtx"
    target_cc: Sequence[str] = ()  # TensorRT-RTX: compute capabilities (default RTX_DEFAULT_TARGETS)


@dataclass
class BuildResult:
    plan: Path
    plan_bytes: int
    seconds: float
    tensorrt_version: str
    profile: list[ShapeRange]
    plugin_library: Path
    timing_cache: Path | None
    warnings: list[str] = field(default_factory=list)
    builder: str = "tensorrt"
    targets: tuple[str, ...] = ()  # TensorRT-RTX: the compute capabilities the plan runs on
    plugin_nodes: int = 0  # custom nodes in the ONNX graph
    plugin_layers: int = 0  # plugin layers the parser made of them


@dataclass
class _Checked:
    onnx: Path
    plan: Path
    plugin: Path
    timing_cache: Path | None
    profile: list[ShapeRange]
    targets: tuple[str, ...] = ()


def check_build_arguments(onnx_path, plan_path, options: BuildOptions) -> _Checked:
    """Every check that needs no TensorRT; raises EngineBuildError/ValueError before anything is written."""
    onnx_file = Path(onnx_path)
    plan = Path(plan_path)
    if options.precision not in PRECISIONS:
        raise EngineBuildError(f"unknown precision '{options.precision}'", f"choose one of {', '.join(PRECISIONS)}")
    if options.builder not in BUILDERS:
        raise EngineBuildError(f"unknown builder '{options.builder}'", f"choose one of {', '.join(BUILDERS)}")
    rtx = options.builder == "tensorrt-rtx"
    if options.target_cc and not rtx:
        raise EngineBuildError("--target-cc applies to TensorRT-RTX plans only",
                               "add --builder tensorrt-rtx, or drop --target-cc (TensorRT builds for this GPU)")
    targets = tuple(options.target_cc) or (RTX_DEFAULT_TARGETS if rtx else ())
    for t in targets:
        try:
            parse_target_cc(t)
        except ValueError as exc:
            raise EngineBuildError(str(exc), "give --target-cc like 8.0,8.6,8.9,12.0") from None
    if rtx and options.precision in ("fp16", "bf16"):
        raise EngineBuildError(f"TensorRT-RTX builds strongly typed networks only: --precision {options.precision} "
                               f"does not exist there",
                               f"export the ONNX model in {options.precision} and use --precision strongly-typed")
    if rtx and options.version_compatible:
        raise EngineBuildError("--version-compatible is a TensorRT option; TensorRT-RTX plans are not "
                               "version-compatible plans", "drop --version-compatible")
    if not onnx_file.is_file():
        raise EngineBuildError(f"ONNX model {onnx_file} does not exist", "pass the fused model written by `trt-gn fuse`")
    if onnx_file.suffix.lower() != ".onnx":
        raise EngineBuildError(f"{onnx_file} does not end in .onnx", "pass an ONNX model file (*.onnx)")
    if plan.suffix.lower() not in PLAN_SUFFIXES:
        raise EngineBuildError(f"engine file {plan} must end in {' or '.join(PLAN_SUFFIXES)}",
                               f"for example {plan.with_suffix('.plan')}")
    check_writable_file(plan, "engine")
    cache = Path(options.timing_cache) if options.timing_cache is not None else None
    if cache is not None:
        check_writable_file(cache, "timing cache")
    if options.exclude_lean_runtime and not options.version_compatible:
        raise EngineBuildError("--exclude-lean-runtime only applies to version-compatible plans",
                               "add --version-compatible or drop --exclude-lean-runtime")
    if options.workspace_bytes <= 0:
        raise EngineBuildError(f"workspace must be positive, got {options.workspace_bytes} bytes")
    if options.optimization_level is not None and not 0 <= options.optimization_level <= 5:
        raise EngineBuildError(f"optimization level must be 0..5, got {options.optimization_level}")
    # The inputs first: a bad model is reported as such on every machine, plugin or not.
    inputs, _ = read_onnx_io(onnx_file)
    try:
        profile = resolve_profile(inputs, options.shapes, options.batch, options.height, options.width)
    except ValueError as exc:
        raise EngineBuildError(str(exc), "see `trt-gn build --help` for the shape flags") from exc
    plugin = plugin_path(options.plugin_library)
    return _Checked(onnx_file, plan, plugin, cache, profile, targets)


class PhaseProgress:
    """Bookkeeping behind the TensorRT progress monitor: one rich progress bar per builder phase.

    TensorRT calls the monitor from several threads, so every call takes the lock.
    ``cancel()`` makes the next step_complete return False, which asks TensorRT to stop the build.
    """

    def __init__(self, progress):
        self._progress = progress  # a started rich.progress.Progress
        self._tasks: dict[str, tuple[int, int]] = {}  # phase name -> (rich task id, nesting depth)
        self._lock = threading.Lock()
        self._cancelled = threading.Event()

    def phase_start(self, phase_name: str, parent_phase: str | None, num_steps: int) -> None:
        with self._lock:
            depth = self._tasks[parent_phase][1] + 1 if parent_phase in self._tasks else 0
            task = self._progress.add_task("  " * depth + phase_name, total=max(int(num_steps), 1))
            self._tasks[phase_name] = (task, depth)

    def step_complete(self, phase_name: str, step: int) -> bool:
        with self._lock:
            if phase_name in self._tasks:
                self._progress.update(self._tasks[phase_name][0], completed=int(step) + 1)
        return not self._cancelled.is_set()

    def phase_finish(self, phase_name: str) -> None:
        with self._lock:
            entry = self._tasks.pop(phase_name, None)
            if entry is not None:
                self._progress.remove_task(entry[0])

    @property
    def open_phases(self) -> list[str]:
        with self._lock:
            return list(self._tasks)

    def cancel(self) -> None:
        self._cancelled.set()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()


def _make_monitor(trt, phases: PhaseProgress):
    class _Monitor(trt.IProgressMonitor):
        def __init__(self):
            trt.IProgressMonitor.__init__(self)

        # Exceptions must not escape into TensorRT; Ctrl+C arrives here (the only Python
        # code that runs during a build) and cancels the build cleanly.
        def phase_start(self, phase_name, parent_phase, num_steps):
            try:
                phases.phase_start(phase_name, parent_phase, num_steps)
            except KeyboardInterrupt:
                phases.cancel()

        def step_complete(self, phase_name, step):
            try:
                return phases.step_complete(phase_name, step)
            except KeyboardInterrupt:
                phases.cancel()
                return False

        def phase_finish(self, phase_name):
            try:
                phases.phase_finish(phase_name)
            except KeyboardInterrupt:
                phases.cancel()

    return _Monitor()


# How the plugin's messages begin (plugin_src/plugin: messagePrefix, the creators' errors).
_PLUGIN_LOG_PREFIXES = ("trt_gn", "GroupNormAct", "GroupNorm")


def _import_tensorrt_for_build():
    """import_tensorrt(), whose hint also names the builder that needs neither TensorRT nor a GPU."""
    try:
        return import_tensorrt()
    except TensorRTNotInstalledError as exc:
        raise TensorRTNotInstalledError(
            exc.message, f"{exc.hint}; or build for RTX GPUs with --builder tensorrt-rtx, which needs neither "
            f"TensorRT nor a GPU: `{TENSORRT_RTX_PIP}`") from exc


def build_engine(onnx_path, plan_path, options: BuildOptions | None = None) -> BuildResult:
    """Parse ``onnx_path`` with the plugin loaded, build and write the plan to ``plan_path``.

    Raises EngineBuildError (TensorRTNotInstalledError when TensorRT is missing);
    on any failure ``plan_path`` and the timing cache are left as they were.
    """
    options = options or BuildOptions()
    checked = check_build_arguments(onnx_path, plan_path, options)
    rtx = options.builder == "tensorrt-rtx"
    trt = import_tensorrt_rtx() if rtx else _import_tensorrt_for_build()
    name = "TensorRT-RTX" if rtx else "TensorRT"
    # Every target must exist in these bindings before anything is parsed or built.
    capabilities = [rtx_compute_capability(trt, t) for t in checked.targets] if rtx else []
    plugin_nodes = count_plugin_nodes(checked.onnx)
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    started = time.perf_counter()
    logger = make_logger(trt)
    builder = trt.Builder(logger)
    registry = builder.get_plugin_registry()
    if registry.load_library(str(checked.plugin)) is None:
        raise EngineBuildError(f"{name} could not load the plugin library {checked.plugin}: "
                               f"{last_error(logger, 'no reason given')}",
                               "check that it was built against TensorRT 10 or later headers",
                               exit_code=EXIT_FAILED)
    if registry.get_creator(spec.PLUGIN_NAME, spec.PLUGIN_VERSION, spec.PLUGIN_NAMESPACE) is None:
        raise EngineBuildError(f"{checked.plugin} registers no plugin {spec.PLUGIN_NAMESPACE}::{spec.PLUGIN_NAME} "
                               f"version {spec.PLUGIN_VERSION}", "rebuild plugin_src/plugin", exit_code=EXIT_FAILED)

    # TensorRT-RTX networks are strongly typed: its fp32 is an fp32 model built as written.
    strongly_typed = options.precision == "strongly-typed" or rtx
    if not strongly_typed and options.precision in ("fp16", "bf16") and not hasattr(trt.BuilderFlag, "FP16"):
        raise EngineBuildError(f"TensorRT {trt.__version__} builds strongly typed networks only: "
                               f"--precision {options.precision} does not exist there",
                               f"export the ONNX model in {options.precision} and use --precision strongly-typed")
    flags = 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED) if strongly_typed else 0
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)

    console = Console(stderr=True)
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, transient=True, disable=not options.progress) as progress:
        parse_task = progress.add_task(f"parsing {checked.onnx.name}", total=None)
        # parse_from_file resolves external-data weights relative to the model file.
        if not parser.parse_from_file(str(checked.onnx)):
            errors = [parser.get_error(i) for i in range(parser.num_errors)]
            first = errors[0] if errors else None
            where = f" (node '{first.node_name()}', op {first.node_operator()})" if first is not None else ""
            desc = first.desc() if first is not None else last_error(logger, "no reason given")
            desc = (desc.strip().splitlines() or ["no reason given"])[0]
            # The plugin's own reason (it names the field) reaches the logger, not the parser's error.
            plugin_says = [e for e in logger.errors if e.lstrip().startswith(_PLUGIN_LOG_PREFIXES)]
            if plugin_says:
                desc = f"{desc}; {plugin_says[0].strip().splitlines()[0]}"
            raise EngineBuildError(f"{name}'s ONNX parser rejected {checked.onnx}{where}: {desc}",
                                   "run `trt-gn validate` on the model; a missing plugin shows up as "
                                   "'could not find plugin'", exit_code=EXIT_FAILED)
        progress.remove_task(parse_task)
        plugin_layers = count_plugin_layers(trt, network)
        if plugin_layers != plugin_nodes:
            raise EngineBuildError(f"{checked.onnx.name} has {plugin_nodes} trt_gn node(s), but {name}'s parser "
                                   f"made {plugin_layers} plugin layer(s) of them",
                                   "a parser that prefers the model-local function needs a bare export "
                                   "(`trt-gn export --bare`, TensorRT < 10.7)", exit_code=EXIT_FAILED)

        config = builder.create_builder_config()
        if options.precision == "fp16":
            config.set_flag(trt.BuilderFlag.FP16)
        elif options.precision == "bf16":
            config.set_flag(trt.BuilderFlag.BF16)
        elif options.precision == "fp32":
            # fp32 means fp32: no TF32 tensor-core math, so results compare with onnxruntime at fp32 tolerance.
            config.clear_flag(trt.BuilderFlag.TF32)
        if rtx:
            # Ahead of time: no GPU is needed; the plan runs on every listed compute capability.
            config.num_compute_capabilities = len(capabilities)
            for index, capability in enumerate(capabilities):
                config.set_compute_capability(capability, index)
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(options.workspace_bytes))
        if options.optimization_level is not None:
            config.builder_optimization_level = int(options.optimization_level)

        if checked.profile:
            profile = builder.create_optimization_profile()
            for s in checked.profile:
                profile.set_shape(s.name, s.min, s.opt, s.max)
            config.add_optimization_profile(profile)

        cache = None
        if checked.timing_cache is not None:
            data = checked.timing_cache.read_bytes() if checked.timing_cache.is_file() else b""
            cache = config.create_timing_cache(data)
            config.set_timing_cache(cache, ignore_mismatch=False)

        if options.version_compatible:
            config.set_flag(trt.BuilderFlag.VERSION_COMPATIBLE)
            if options.exclude_lean_runtime:
                config.set_flag(trt.BuilderFlag.EXCLUDE_LEAN_RUNTIME)
            # The plugin library travels inside the plan; the runtime needs engine_host_code_allowed.
            config.plugins_to_serialize = [str(checked.plugin)]

        phases = PhaseProgress(progress)
        monitor = _make_monitor(trt, phases)  # must outlive the build: keep the reference
        config.progress_monitor = monitor
        serialized = builder.build_serialized_network(network, config)
        if phases.cancelled:
            raise KeyboardInterrupt
        if serialized is None:
            raise EngineBuildError(f"{name} could not build {checked.onnx.name}"
                                   f"{' for compute capability ' + ','.join(checked.targets) if rtx else ''}: "
                                   f"{last_error(logger, 'no reason given')}",
                                   "rerun with a smaller shape range or workspace; see TensorRT's messages above",
                                   exit_code=EXIT_FAILED)
        write_atomic(checked.plan, serialized)
        if cache is not None:
            write_atomic(checked.timing_cache, config.get_timing_cache().serialize())

    return BuildResult(plan=checked.plan, plan_bytes=checked.plan.stat().st_size,
                       seconds=time.perf_counter() - started, tensorrt_version=str(trt.__version__),
                       profile=checked.profile, plugin_library=checked.plugin, timing_cache=checked.timing_cache,
                       warnings=list(logger.warnings), builder=options.builder, targets=checked.targets,
                       plugin_nodes=plugin_nodes, plugin_layers=plugin_layers)
