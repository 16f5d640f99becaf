"""Build a TensorRT engine (plan) from a fused ONNX model with the trt_gn plugin.

TensorRT 10 Python API: the plugin library is loaded into the builder's plugin
registry, the ONNX parser maps every ``trt_gn::GroupNormAct`` node onto the
plugin, the builder config carries the precision flags, one optimisation profile
for the dynamic input dimensions, a timing cache, and optionally the
version-compatible flag with the plugin library serialized into the plan.
The plan is written atomically (trt_gn.fileio).

Two builders: TensorRT (``builder="tensorrt"``, needs a GPU) and TensorRT-RTX
(``builder="tensorrt-rtx"``, the TensorRT of RTX GPUs), which builds plans ahead of
time, on a machine without a GPU, for the compute capabilities in ``target_cc``
(8.0, 8.6, 8.9, 12.0). Both load the same plugin library: its interfaces are
TensorRT 10/11's, which TensorRT-RTX shares.

Everything that can be checked without TensorRT (paths, the ONNX inputs, the
shape ranges) is checked before TensorRT is imported, so bad arguments fail the
same way on every machine and nothing is written.

TensorRT 11 builds strongly typed networks only (it removed the FP16/BF16
builder flags): use ``precision="strongly-typed"`` with an ONNX model exported
in the precision wanted.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import os
import re
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from . import fileio, spec
from .errors import EXIT_FAILED, EXIT_MISSING, Error, first_line

PRECISIONS = ("fp32", "fp16", "bf16", "strongly-typed")
BUILDERS = ("tensorrt", "tensorrt-rtx")
# The compute capabilities TensorRT-RTX 1.7 builds plans for (RTX 30, RTX 40, RTX 50 / RTX PRO);
# a plan built for several runs on each of them.
RTX_DEFAULT_TARGETS = ("8.0", "8.6", "8.9", "12.0")
PLAN_SUFFIXES = (".plan", ".engine")
DEFAULT_WORKSPACE_BYTES = 4 << 30

TENSORRT_INSTALL_HINT = (
    "install TensorRT 10 or later with its Python bindings: `pip install tensorrt-cu12` "
    "(or tensorrt-cu13 for CUDA 13) from NVIDIA's package index, or run inside an NGC "
    "container (nvcr.io/nvidia/tensorrt or nvcr.io/nvidia/tritonserver)"
)


TENSORRT_RTX_INSTALL_HINT = (
    "install TensorRT-RTX from PyPI: `pip install tensorrt-rtx-cu13-libs tensorrt-rtx-cu13-bindings` "
    "(1.7, CPython 3.11 or 3.12, Linux x86_64)"
)


class EngineBuildError(Error, RuntimeError):
    """A build could not be done; ``hint`` says what to do about it. Bad input by default (exit 2);
    TensorRT's own failures carry exit_code EXIT_FAILED."""


class TensorRTNotInstalledError(EngineBuildError):
    """``import tensorrt`` (or TensorRT-RTX's bindings) failed."""

    exit_code = EXIT_MISSING


class UnsupportedTargetError(EngineBuildError):
    """A --target-cc that the installed TensorRT-RTX builds no plans for (a bad argument)."""


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


# ---------------------------------------------------------------------------
# shapes and profiles (no TensorRT needed)
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class ShapeRange:
    """min/opt/max shape of one network input for an optimisation profile."""

    name: str
    min: tuple[int, ...]
    opt: tuple[int, ...]
    max: tuple[int, ...]

    def __post_init__(self):
        ranks = {len(self.min), len(self.opt), len(self.max)}
        if len(ranks) != 1:
            raise ValueError(f"input '{self.name}': min/opt/max have different ranks "
                             f"({len(self.min)}, {len(self.opt)}, {len(self.max)})")
        for lo, mid, hi in zip(self.min, self.opt, self.max):
            if lo < 1:
                raise ValueError(f"input '{self.name}': dimensions must be >= 1, got {self.min}")
            if not lo <= mid <= hi:
                raise ValueError(f"input '{self.name}': need min <= opt <= max in every dimension, "
                                 f"got min {_fmt(self.min)}, opt {_fmt(self.opt)}, max {_fmt(self.max)}")


@dataclass(frozen=True)
class DimRange:
    """min/opt/max of one dimension (batch, height or width)."""

    min: int
    opt: int
    max: int

    def __post_init__(self):
        if self.min < 1 or not self.min <= self.opt <= self.max:
            raise ValueError(f"need 1 <= min <= opt <= max, got {self.min}:{self.opt}:{self.max}")


def _fmt(shape: Sequence[int]) -> str:
    return "x".join(str(d) for d in shape)


_DIMS_RE = re.compile(r"^\d+(x\d+)*$")


def _parse_dims(text: str, what: str) -> tuple[int, ...]:
    text = text.strip()
    if not _DIMS_RE.match(text):
        raise ValueError(f"{what}: '{text}' is not a shape like 2x4x64x64")
    return tuple(int(d) for d in text.split("x"))


def parse_shape_range(text: str) -> ShapeRange:
    """Parse ``NAME:MIN,OPT,MAX`` (each a shape like 1x4x64x64) or ``NAME:SHAPE`` (fixed).

    >>> parse_shape_range("x:1x4x64x64,2x4x64x64,4x4x128x128").max
    (4, 4, 128, 128)
    """
    name, sep, shapes = text.rpartition(":")
    if not sep or not name:
        raise ValueError(f"'{text}' is not NAME:MIN,OPT,MAX (for example x:1x4x64x64,2x4x64x64,4x4x128x128)")
    parts = shapes.split(",")
    if len(parts) == 1:
        fixed = _parse_dims(parts[0], f"input '{name}'")
        return ShapeRange(name, fixed, fixed, fixed)
    if len(parts) != 3:
        raise ValueError(f"input '{name}': give one shape or three (min,opt,max), got {len(parts)}")
    lo, mid, hi = (_parse_dims(p, f"input '{name}'") for p in parts)
    return ShapeRange(name, lo, mid, hi)


def parse_dim_range(text: str) -> DimRange:
    """Parse ``MIN:OPT:MAX`` or a single ``N`` (fixed), e.g. ``1:2:4``."""
    parts = text.strip().split(":")
    if len(parts) not in (1, 3) or not all(p.isdigit() for p in parts):
        raise ValueError(f"'{text}' is not MIN:OPT:MAX (for example 1:2:4) or a single number")
    values = [int(p) for p in parts]
    if len(values) == 1:
        values *= 3
    return DimRange(*values)


@dataclass(frozen=True)
class TensorSpec:
    """Name, element type and shape of a network input or output.

    ``shape`` holds ints for static dimensions and None for dynamic ones.
    ``dtype`` is the ONNX TensorProto element type name (FLOAT, FLOAT16, BFLOAT16, ...).
    """

    name: str
    dtype: str
    shape: tuple[int | None, ...]


def read_onnx_io(onnx_path: str | os.PathLike) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """Inputs and outputs of an ONNX model, without loading its (possibly external) weights."""
    import onnx

    path = Path(onnx_path)
    if path.is_file() and path.stat().st_size == 0:
        raise EngineBuildError(f"{path} is empty, not an ONNX model",
                               "pass the .onnx file written by `trt-gn export` or `trt-gn fuse`")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # onnx raises DecodeError, ValueError, ... for a bad file
        raise EngineBuildError(f"{path} is not a readable ONNX model ({type(exc).__name__}: {first_line(exc)})",
                               "pass the .onnx file written by `trt-gn export` or `trt-gn fuse`") from exc
    initializers = {init.name for init in model.graph.initializer}

    def spec_of(value) -> TensorSpec:
        tensor_type = value.type.tensor_type
        dims = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None
                     for d in tensor_type.shape.dim)
        dtype = onnx.TensorProto.DataType.Name(tensor_type.elem_type)
        return TensorSpec(value.name, dtype, dims)

    inputs = [spec_of(v) for v in model.graph.input if v.name not in initializers]
    outputs = [spec_of(v) for v in model.graph.output]
    if not inputs or not outputs:
        raise EngineBuildError(f"{path} has no graph inputs or no graph outputs",
                               "pass a complete model, not a fragment")
    return inputs, outputs


# Position of batch/height/width in a rank-4 NCHW input; batch is dim 0 at any rank.
_NCHW_DIM_FLAGS = {0: "batch", 2: "height", 3: "width"}


def resolve_profile(inputs: Sequence[TensorSpec], shapes: Iterable[ShapeRange] = (),
                    batch: DimRange | None = None, height: DimRange | None = None,
                    width: DimRange | None = None) -> list[ShapeRange]:
    """The optimisation profile: one ShapeRange per input with dynamic dimensions.

    Explicit ``shapes`` win; otherwise dynamic dimensions are filled from ``batch``
    (dim 0), ``height`` (dim 2) and ``width`` (dim 3) of rank-4 inputs. Any dynamic
    dimension that neither covers is an error naming the flag to use.
    """
    by_name = {i.name: i for i in inputs}
    explicit = {}
    for s in shapes:
        if s.name not in by_name:
            raise ValueError(f"--shape names '{s.name}', which is not an input of the model "
                             f"(inputs: {', '.join(by_name)})")
        if s.name in explicit:
            raise ValueError(f"--shape given twice for input '{s.name}'")
        explicit[s.name] = s
    ranges = {"batch": batch, "height": height, "width": width}
    profile = []
    for inp in inputs:
        if inp.name in explicit:
            s = explicit[inp.name]
            if len(s.min) != len(inp.shape):
                raise ValueError(f"--shape {inp.name}: rank {len(s.min)}, but the model's input has rank "
                                 f"{len(inp.shape)} ({_fmt_model_shape(inp.shape)})")
            for axis, static in enumerate(inp.shape):
                if static is not None and {s.min[axis], s.opt[axis], s.max[axis]} != {static}:
                    raise ValueError(f"--shape {inp.name}: dimension {axis} is fixed to {static} in the model "
                                     f"({_fmt_model_shape(inp.shape)})")
            profile.append(s)
            continue
        if all(d is not None for d in inp.shape):
            continue  # static input: no profile entry needed
        lo, mid, hi = [], [], []
        for axis, static in enumerate(inp.shape):
            if static is not None:
                lo.append(static), mid.append(static), hi.append(static)
                continue
            flag = _NCHW_DIM_FLAGS.get(axis) if len(inp.shape) == 4 else ("batch" if axis == 0 else None)
            if flag is None or ranges[flag] is None:
                how = f"--{flag} MIN:OPT:MAX or " if flag else ""
                raise ValueError(f"input '{inp.name}' ({_fmt_model_shape(inp.shape)}) has a dynamic dimension "
                                 f"{axis}: give {how}--shape {inp.name}:MIN,OPT,MAX")
            r = ranges[flag]
            lo.append(r.min), mid.append(r.opt), hi.append(r.max)
        profile.append(ShapeRange(inp.name, tuple(lo), tuple(mid), tuple(hi)))
    return profile


def _fmt_model_shape(shape: Sequence[int | None]) -> str:
    return "x".join("?" if d is None else str(d) for d in shape)


# ---------------------------------------------------------------------------
# file helpers
# ---------------------------------------------------------------------------

def check_writable_file(path: Path, what: str) -> None:
    """Fail before any work when ``path`` cannot be created or replaced."""
    parent = fileio.folder_of(path)
    if path.is_dir():
        raise EngineBuildError(f"{what} {path} is a directory", "give a file name")
    if not parent.is_dir():
        raise EngineBuildError(f"{what} folder {parent} does not exist", f"create it: mkdir -p {parent}")
    problem = fileio.writable_folder_problem(parent)
    if problem:
        raise EngineBuildError(f"{what} folder {parent} {problem}", "choose a writable location")


# The plan and the timing cache are written with trt_gn's one atomic writer.
write_atomic = fileio.write_bytes


# ---------------------------------------------------------------------------
# TensorRT
# ---------------------------------------------------------------------------

def import_tensorrt():
    """Import TensorRT (>= 10) or raise TensorRTNotInstalledError with the install hint."""
    try:
        import tensorrt as trt
    except ImportError as exc:
        raise TensorRTNotInstalledError(f"TensorRT is not installed (import tensorrt failed: {exc})",
                                        TENSORRT_INSTALL_HINT) from exc
    major = int(str(trt.__version__).split(".")[0])
    if major < 10:
        raise TensorRTNotInstalledError(
            f"TensorRT {trt.__version__} is too old: the trt_gn plugin is an IPluginV3, which needs TensorRT 10 or later",
            TENSORRT_INSTALL_HINT)
    return trt


# TensorRT-RTX's Python packages: the bindings module (the name differs between packagings) and
# the wheel that carries its shared libraries.
_RTX_MODULES = ("tensorrt_rtx", "tensorrt_rtx_bindings")
_RTX_LIBS_MODULE = "tensorrt_rtx_libs"
_RTX_LIBRARY = "libtensorrt_rtx.so.1"
_RTX_LIBRARY_UNVERSIONED = "libtensorrt_rtx.so"
_RTX_PARSER_LIBRARY = "libtensorrt_onnxparser_rtx.so.1"
CACHE_DIR_ENV = "TRT_GN_CACHE_DIR"
_rtx_loader_folder: Path | None = None


def cache_dir() -> Path:
    """trt_gn's own cache folder: $TRT_GN_CACHE_DIR, else $XDG_CACHE_HOME/trt_gn or ~/.cache/trt_gn."""
    if os.environ.get(CACHE_DIR_ENV):
        return Path(os.environ[CACHE_DIR_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "trt_gn"


def _symlink_atomic(link: Path, target: Path) -> None:
    if link.is_symlink() and os.readlink(link) == str(target):
        return
    tmp = link.with_name(f".{link.name}.{os.getpid()}.tmp")
    try:
        os.symlink(target, tmp)
        os.replace(tmp, link)
    finally:
        if tmp.is_symlink():
            tmp.unlink()


def prepare_tensorrt_rtx_loader() -> Path | None:
    """Make TensorRT-RTX's unversioned dlopen() work; returns the loader folder used (None: not needed).

    TensorRT-RTX's ONNX parser dlopen()s ``libtensorrt_rtx.so`` when it imports a plugin node, but
    the PyPI wheel ships ``libtensorrt_rtx.so.1`` only: the dlopen fails and the process ends in
    std::terminate. The loader searches the RPATH ($ORIGIN) of the TensorRT-RTX libraries, and
    $ORIGIN is the folder a library was loaded from, symlinks not resolved. So trt_gn keeps a folder
    of symlinks (``<cache>/tensorrt-rtx/<hash>/``: both sonames and the unversioned name, pointing
    at the wheel's files) and loads the libraries from there, RTLD_GLOBAL, before the bindings are
    imported; the bindings then find them loaded (same sonames), and the parser's dlopen finds the
    unversioned name in their $ORIGIN. Nothing is written into the installed package. This has to
    run before anything in the process imports TensorRT-RTX.
    """
    global _rtx_loader_folder
    if _rtx_loader_folder is not None:
        return _rtx_loader_folder
    found = importlib.util.find_spec(_RTX_LIBS_MODULE)
    if found is None or not found.submodule_search_locations:
        return None  # not the PyPI packaging: the libraries come from the loader path as installed
    libs = Path(list(found.submodule_search_locations)[0])
    real = libs / _RTX_LIBRARY
    if not real.is_file() or (libs / _RTX_LIBRARY_UNVERSIONED).exists():
        return None
    if _RTX_LIBS_MODULE in sys.modules:
        raise EngineBuildError(
            f"TensorRT-RTX was imported before trt_gn could arrange for its unversioned library "
            f"{_RTX_LIBRARY_UNVERSIONED}, which its ONNX parser needs for plugin nodes",
            "let trt_gn import it first (trt_gn.engine.import_tensorrt_rtx()), or create the symlink "
            f"{libs / _RTX_LIBRARY_UNVERSIONED} -> {_RTX_LIBRARY}")
    key = hashlib.sha256(str(real.resolve()).encode()).hexdigest()[:16]
    folders = [cache_dir() / "tensorrt-rtx" / key,
               Path(tempfile.gettempdir()) / f"trt_gn-{os.getuid()}" / "tensorrt-rtx" / key]
    errors = []
    for folder in folders:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            _symlink_atomic(folder / _RTX_LIBRARY, real)
            _symlink_atomic(folder / _RTX_LIBRARY_UNVERSIONED, real)
            if (libs / _RTX_PARSER_LIBRARY).is_file():
                _symlink_atomic(folder / _RTX_PARSER_LIBRARY, libs / _RTX_PARSER_LIBRARY)
            break
        except OSError as exc:
            errors.append(f"{folder}: {exc}")
    else:
        raise EngineBuildError(f"could not write the TensorRT-RTX loader folder ({'; '.join(errors)})",
                               f"set {CACHE_DIR_ENV} to a writable folder", exit_code=EXIT_FAILED)
    try:
        ctypes.CDLL(str(folder / _RTX_LIBRARY), mode=ctypes.RTLD_GLOBAL)
        if (folder / _RTX_PARSER_LIBRARY).exists():
            ctypes.CDLL(str(folder / _RTX_PARSER_LIBRARY), mode=ctypes.RTLD_GLOBAL)
    except OSError as exc:
        raise TensorRTNotInstalledError(f"TensorRT-RTX's library {real} does not load: {exc}",
                                        TENSORRT_RTX_INSTALL_HINT) from exc
    _rtx_loader_folder = folder
    return folder


def import_tensorrt_rtx():
    """Import TensorRT-RTX's Python bindings (after prepare_tensorrt_rtx_loader) or raise
    TensorRTNotInstalledError with the install hint."""
    missing = []
    for name in _RTX_MODULES:
        if name in sys.modules:
            return sys.modules[name]
        if importlib.util.find_spec(name) is None:
            missing.append(name)
            continue
        prepare_tensorrt_rtx_loader()
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            raise TensorRTNotInstalledError(f"TensorRT-RTX does not import ({name}: {exc})",
                                            TENSORRT_RTX_INSTALL_HINT) from exc
        if not hasattr(module, "Builder"):
            continue  # a namespace package without the bindings
        return module
    raise TensorRTNotInstalledError(f"TensorRT-RTX is not installed (no module {' or '.join(missing)})",
                                    TENSORRT_RTX_INSTALL_HINT)


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

    plugin_library: str | os.PathLike | None = None  # default: trt_gn._lib.find_plugin_library()
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


def plugin_path(explicit=None) -> Path:
    """The plugin library: `explicit` (--plugin) if given, else the one trt_gn finds; an
    EngineBuildError naming every place looked in (one line) when there is none."""
    if explicit is not None:
        path = Path(explicit)
        if not path.is_file():
            raise EngineBuildError(f"plugin library {path} (--plugin) does not exist",
                                   "build it with `cmake -S plugin_src -B build && cmake --build build`")
        return path.resolve()
    from . import _lib  # imported here: it is the one place that knows where the libraries live
    try:
        return Path(_lib.find_plugin_library()).resolve()
    except FileNotFoundError as exc:
        looked = getattr(exc, "looked_in", None)
        where = f" (looked in: {', '.join(map(str, looked))})" if looked else f" ({first_line(exc)})"
        raise EngineBuildError(f"the TensorRT plugin library {spec.PLUGIN_LIBRARY} was not found{where}",
                               f"build plugin_src with TensorRT headers, or pass --plugin / set "
                               f"{_lib.PLUGIN_LIBRARY_ENV}", exit_code=EXIT_MISSING) from exc


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


_LOGGERS: dict = {}  # TensorRT module -> its one logger


def _make_logger(trt):
    """The process's one logger for ``trt``, emptied for the next build.

    TensorRT (and TensorRT-RTX) route messages from plugins (ILoggerFinder) to the logger of the
    first builder or runtime still alive, not to the newest one; one logger object for all
    builds keeps the plugin's reasons where ``build_engine`` reads them. Not for concurrent builds.
    """
    logger = _LOGGERS.get(trt)
    if logger is None:
        class _Logger(trt.ILogger):
            """Keeps errors and warnings so that the final error line can quote TensorRT."""

            def __init__(self):
                trt.ILogger.__init__(self)
                self.errors: list[str] = []
                self.warnings: list[str] = []

            def log(self, severity, msg):
                if severity in (trt.ILogger.Severity.INTERNAL_ERROR, trt.ILogger.Severity.ERROR):
                    self.errors.append(msg)
                elif severity == trt.ILogger.Severity.WARNING:
                    self.warnings.append(msg)

        logger = _LOGGERS[trt] = _Logger()
    logger.errors.clear()
    logger.warnings.clear()
    return logger


# How the plugin's messages begin (plugin_src/plugin: messagePrefix, the creators' errors).
_PLUGIN_LOG_PREFIXES = ("trt_gn", "GroupNormAct", "GroupNorm")


def _last_error(logger, default: str) -> str:
    return logger.errors[-1].strip().splitlines()[0] if logger.errors else default


def build_engine(onnx_path, plan_path, options: BuildOptions | None = None) -> BuildResult:
    """Parse ``onnx_path`` with the plugin loaded, build and write the plan to ``plan_path``.

    Raises EngineBuildError (TensorRTNotInstalledError when TensorRT is missing);
    on any failure ``plan_path`` and the timing cache are left as they were.
    """
    options = options or BuildOptions()
    checked = check_build_arguments(onnx_path, plan_path, options)
    rtx = options.builder == "tensorrt-rtx"
    trt = import_tensorrt_rtx() if rtx else import_tensorrt()
    name = "TensorRT-RTX" if rtx else "TensorRT"
    # Every target must exist in these bindings before anything is parsed or built.
    capabilities = [rtx_compute_capability(trt, t) for t in checked.targets] if rtx else []
    plugin_nodes = count_plugin_nodes(checked.onnx)
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    started = time.perf_counter()
    logger = _make_logger(trt)
    builder = trt.Builder(logger)
    registry = builder.get_plugin_registry()
    if registry.load_library(str(checked.plugin)) is None:
        raise EngineBuildError(f"{name} could not load the plugin library {checked.plugin}: "
                               f"{_last_error(logger, 'no reason given')}",
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
            desc = first.desc() if first is not None else _last_error(logger, "no reason given")
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
                                   f"{_last_error(logger, 'no reason given')}",
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


# TensorRT DataType name -> ONNX element type name (the names TensorSpec uses).
_TRT_TO_ONNX_DTYPE = {
    "FLOAT": "FLOAT", "HALF": "FLOAT16", "BF16": "BFLOAT16", "INT8": "INT8", "INT32": "INT32",
    "INT64": "INT64", "BOOL": "BOOL", "UINT8": "UINT8",
}


@dataclass(frozen=True)
class EngineIO:
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    # per input: (min, opt, max) of optimisation profile 0, for dynamic inputs
    profile: dict[str, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]


def read_engine_io(plan_path, plugin_library=None) -> EngineIO:
    """Inputs/outputs of a built plan (needs TensorRT and a GPU: the plan is deserialized)."""
    plan = Path(plan_path)
    if not plan.is_file():
        raise EngineBuildError(f"engine {plan} does not exist", "build it with `trt-gn build`")
    trt = import_tensorrt()
    plugin = plugin_path(plugin_library)
    logger = _make_logger(trt)
    runtime = trt.Runtime(logger)
    runtime.engine_host_code_allowed = True  # version-compatible plans carry their lean runtime
    if runtime.get_plugin_registry().load_library(str(plugin)) is None:
        raise EngineBuildError(f"TensorRT could not load the plugin library {plugin}: "
                               f"{_last_error(logger, 'no reason given')}", exit_code=EXIT_FAILED)
    engine = runtime.deserialize_cuda_engine(plan.read_bytes())
    if engine is None:
        raise EngineBuildError(f"TensorRT could not load {plan}: {_last_error(logger, 'no reason given')}",
                               "engines only run on the GPU model and TensorRT version they were built with; "
                               "rebuild it here, or use --io-from onnx", exit_code=EXIT_FAILED)
    inputs, outputs, profile = [], [], {}
    for i in range(engine.num_io_tensors):
        name = engine.get_tensor_name(i)
        dtype_name = engine.get_tensor_dtype(name).name
        if dtype_name not in _TRT_TO_ONNX_DTYPE:
            raise EngineBuildError(f"engine tensor '{name}' has type {dtype_name}, which Triton cannot serve")
        shape = tuple(None if d < 0 else int(d) for d in engine.get_tensor_shape(name))
        tensor = TensorSpec(name, _TRT_TO_ONNX_DTYPE[dtype_name], shape)
        if engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT:
            inputs.append(tensor)
            if any(d is None for d in shape):
                lo, mid, hi = engine.get_tensor_profile_shape(name, 0)
                profile[name] = (tuple(lo), tuple(mid), tuple(hi))
        else:
            outputs.append(tensor)
    return EngineIO(inputs, outputs, profile)
