"""Write a Triton Inference Server model repository for a trt_gn TensorRT engine, or for the
fused ONNX model served by Triton's Python backend with onnxruntime (``write_python_repository``).

Layout written (``<repository>/<model>/``)::

    config.pbtxt                    platform "tensorrt_plan", inputs/outputs, batching, instances
    <version>/model.plan            the engine (default version 1)
    libtrt_gn_plugin.so             the plugin library the engine needs
    libtrt_gn_plugin_autoload.so    the shim that registers it when loaded (from this folder)

Triton's TensorRT backend does not look for plugins in the model folder, and it only dlopen()s
the libraries it is given, which registers nothing for a TensorRT 10 plugin library: start the
server with ``--backend-config=tensorrt,plugins=<repository>/<model>/libtrt_gn_plugin_autoload.so``
(or ``LD_PRELOAD=<repository>/<model>/libtrt_gn_plugin_autoload.so``), whose constructor calls
IPluginRegistry::loadLibrary on the libtrt_gn_plugin.so beside it (plugin_src/plugin/README.md);
``RepositoryResult.server_command`` spells it out, and trt_gn.tritonserver starts a server.

Input/output names, element types and dimensions come from the engine when TensorRT
is importable here (the plan is deserialized, so a GPU is needed too), otherwise from
the ONNX model. Under batching (max_batch_size > 0) a tensor shaped ``[batch]`` (the UNet's
``timestep``) is written ``dims: [ 1 ]`` with ``reshape: { shape: [ ] }``, the form Triton's
model-configuration guide gives: Triton refuses empty ``dims``. A TensorRT-RTX plan is refused
(recognised by its header): Triton's TensorRT backend cannot deserialize it. The model folder is
assembled in a hidden staging folder of the repository and renamed into place, so a failure never
leaves a half-written model.

Python backend (``backend: "python"``), where TensorRT is not available::

    config.pbtxt                    backend "python", inputs/outputs from the ONNX model;
                                    KIND_CPU instances, or KIND_GPU on the given GPUs
    <version>/model.py              onnxruntime session over model.onnx (trt_gn/triton_models/)
    <version>/model.onnx            the fused model (+ model.onnx.data when it has external data)

model.py runs KIND_CPU instances on onnxruntime's CPU provider and KIND_GPU instances on its CUDA
provider on the instance's device, refusing to load where the server's onnxruntime has no CUDA
provider. onnxruntime runs the trt_gn node through its model-local function, so the model must
carry it (the exporter's default; not ``--bare``). The server's Python environment needs numpy
and onnxruntime (onnxruntime-gpu for GPU instances).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from . import fileio, spec
from .engine import (PLAN_SUFFIXES, EngineBuildError, TensorRTNotInstalledError, TensorSpec, import_tensorrt,
                     plugin_path, read_engine_io, read_onnx_io)
from .errors import EXIT_MISSING

PLATFORM = "tensorrt_plan"
PLAN_FILE_NAME = "model.plan"  # Triton's default_model_filename for tensorrt_plan
IO_SOURCES = ("auto", "engine", "onnx")
BACKENDS = ("tensorrt", "python")
PYTHON_MODEL_FILE = "model.py"
PYTHON_ONNX_FILE = "model.onnx"

# The Python backend's model.py, shipped in the package (trt_gn/triton_models/) and copied as is.
PYTHON_MODEL_TEMPLATE = ("triton_models", "onnxruntime_model.py")

# A plan's header (read without TensorRT): bytes 0..3 a magic, bytes 24..27 the major, minor,
# patch and build of the library that built it. TensorRT plans begin "ftrt"; TensorRT-RTX plans
# begin "vtrt" and carry a TensorRT-RTX version (1.x; TensorRT's own are 8 and later).
TENSORRT_RTX_PLAN_MAGIC = b"vtrt"
_PLAN_VERSION_OFFSET = 24

MAX_BATCH_SIZE_LIMIT = 2**31 - 1  # max_batch_size is an int32 in Triton's model config

# ONNX element type name -> Triton model-config DataType
ONNX_TO_TRITON_DTYPE = {
    "FLOAT": "TYPE_FP32", "FLOAT16": "TYPE_FP16", "BFLOAT16": "TYPE_BF16", "DOUBLE": "TYPE_FP64",
    "INT8": "TYPE_INT8", "INT16": "TYPE_INT16", "INT32": "TYPE_INT32", "INT64": "TYPE_INT64",
    "UINT8": "TYPE_UINT8", "UINT16": "TYPE_UINT16", "UINT32": "TYPE_UINT32", "UINT64": "TYPE_UINT64",
    "BOOL": "TYPE_BOOL",
}

_MODEL_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


class RepositoryError(EngineBuildError):
    """The model repository could not be written; ``hint`` says what to do."""


@dataclass
class RepositoryOptions:
    plugin_library: str | os.PathLike | None = None  # default: trt_gn.abi.find_plugin_library()
    onnx: str | os.PathLike | None = None  # the model the engine was built from
    io_from: str = "auto"  # "auto" (engine when TensorRT is importable, else ONNX), "engine", "onnx"
    max_batch_size: int | None = None  # None: the engine profile's max batch (engine) / required (ONNX)
    instance_count: int = 1
    gpus: Sequence[int] = ()
    dynamic_batching: bool | None = None  # None: on when max_batch_size > 0
    preferred_batch_sizes: Sequence[int] = ()
    max_queue_delay_us: int = 100
    version: int = 1
    overwrite: bool = False


@dataclass
class RepositoryResult:
    model_dir: Path
    config: Path
    plan: Path
    plugin_library: Path
    plugin_autoload_library: Path  # what Triton loads (plugins= / LD_PRELOAD)
    io_source: str
    max_batch_size: int
    config_text: str
    notes: list[str] = field(default_factory=list)

    @property
    def server_command(self) -> str:
        return (f"tritonserver --model-repository={self.model_dir.parent} "
                f"--backend-config=tensorrt,plugins={self.plugin_autoload_library}")


def _autoload_path(plugin: Path) -> Path:
    from . import abi  # the one place that knows where the libraries live

    try:
        return abi.find_plugin_autoload_library(plugin)
    except FileNotFoundError:
        raise RepositoryError(
            f"{plugin.parent / spec.PLUGIN_AUTOLOAD_LIBRARY} does not exist: Triton loads the plugin "
            f"through it, so it must sit next to the plugin library {plugin}",
            f"build plugin_src (it writes both libraries to build/plugin/), or copy "
            f"{spec.PLUGIN_AUTOLOAD_LIBRARY} from the plugin's build next to it", exit_code=EXIT_MISSING) from None


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def model_config_text(name: str, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec], *,
                      max_batch_size: int, instance_count: int = 1, gpus: Sequence[int] = (),
                      dynamic_batching: bool = False, preferred_batch_sizes: Sequence[int] = (),
                      max_queue_delay_us: int = 100, backend: str = "tensorrt") -> str:
    """config.pbtxt text (protobuf text format of Triton's inference.ModelConfig).

    ``backend`` "tensorrt": platform tensorrt_plan, GPU instances; "python": the Python backend
    (model.py), CPU instances unless ``gpus`` are given.

    With max_batch_size > 0, Triton owns dimension 0 (the batch): it is left out of ``dims``, and a
    tensor shaped ``[batch]`` becomes ``dims: [ 1 ]`` with ``reshape: { shape: [ ] }`` (requests
    carry ``[batch, 1]``, the model gets ``[batch]``). Dynamic dimensions are -1.
    """

    def tensor_block(t: TensorSpec) -> str:
        if t.dtype not in ONNX_TO_TRITON_DTYPE:
            raise RepositoryError(f"tensor '{t.name}' has type {t.dtype}, which Triton has no type for")
        dims = t.shape[1:] if max_batch_size > 0 else t.shape
        # A [batch] tensor has no dims of its own under batching, and Triton refuses empty dims:
        # it is [1] in the API and reshaped to the model's [] (Triton's model-configuration guide).
        scalar = max_batch_size > 0 and len(t.shape) == 1
        dims_text = "1" if scalar else ", ".join("-1" if d is None else str(d) for d in dims)
        return ("  {\n"
                f"    name: {_quote(t.name)}\n"
                f"    data_type: {ONNX_TO_TRITON_DTYPE[t.dtype]}\n"
                f"    dims: [ {dims_text} ]\n"
                + ("    reshape: { shape: [ ] }\n" if scalar else "")
                + "  }")

    if backend not in BACKENDS:
        raise RepositoryError(f"unknown backend '{backend}'", f"choose one of {', '.join(BACKENDS)}")
    lines = [f"name: {_quote(name)}"]
    if backend == "python":
        lines += [f"backend: {_quote('python')}", f"max_batch_size: {int(max_batch_size)}"]
    else:
        lines += [f"platform: {_quote(PLATFORM)}", f"max_batch_size: {int(max_batch_size)}",
                  f"default_model_filename: {_quote(PLAN_FILE_NAME)}"]
    lines += [
        "input [\n" + ",\n".join(tensor_block(t) for t in inputs) + "\n]",
        "output [\n" + ",\n".join(tensor_block(t) for t in outputs) + "\n]",
    ]
    kind = "KIND_CPU" if backend == "python" and not gpus else "KIND_GPU"
    group = ["  {", f"    count: {int(instance_count)}", f"    kind: {kind}"]
    if gpus:
        group.append(f"    gpus: [ {', '.join(str(int(g)) for g in gpus)} ]")
    group.append("  }")
    lines.append("instance_group [\n" + "\n".join(group) + "\n]")
    if dynamic_batching:
        body = []
        if preferred_batch_sizes:
            body.append(f"  preferred_batch_size: [ {', '.join(str(int(b)) for b in preferred_batch_sizes)} ]")
        body.append(f"  max_queue_delay_microseconds: {int(max_queue_delay_us)}")
        lines.append("dynamic_batching {\n" + "\n".join(body) + "\n}")
    return "\n".join(lines) + "\n"


def _io_specs(plan: Path, options: RepositoryOptions, onnx_path: Path | None, plugin: Path):
    """(inputs, outputs, profile-or-None, source, notes)."""
    notes = []
    source = options.io_from
    if source == "auto":
        try:
            import tensorrt  # noqa: F401
            source = "engine"
        except ImportError:
            source = "onnx"
            notes.append("input/output dims and types read from the ONNX model: TensorRT is not installed here")
    if source == "onnx":
        if onnx_path is None:
            raise RepositoryError("reading inputs/outputs from the ONNX model needs --onnx",
                                  "pass the fused .onnx the engine was built from")
        inputs, outputs = read_onnx_io(onnx_path)
        return inputs, outputs, None, source, notes
    io = read_engine_io(plan, plugin)
    if onnx_path is not None:
        onnx_in, onnx_out = read_onnx_io(onnx_path)
        for kind, engine_side, onnx_side in (("inputs", io.inputs, onnx_in), ("outputs", io.outputs, onnx_out)):
            a = sorted((t.name, t.dtype) for t in engine_side)
            b = sorted((t.name, t.dtype) for t in onnx_side)
            if a != b:
                raise RepositoryError(f"the engine's {kind} {a} differ from the ONNX model's {b}",
                                      "pass the ONNX model this engine was built from, or rebuild the engine")
    return io.inputs, io.outputs, io.profile, source, notes


def _resolve_batching(inputs, outputs, profile, source: str, options: RepositoryOptions) -> tuple[int, bool]:
    batchable = all(t.shape and t.shape[0] is None for t in list(inputs) + list(outputs))
    max_batch = options.max_batch_size
    if max_batch is not None and not 0 <= max_batch <= MAX_BATCH_SIZE_LIMIT:
        raise RepositoryError(f"--max-batch-size must be in 0..{MAX_BATCH_SIZE_LIMIT} (Triton's int32), got {max_batch}")
    profile_max = None
    if profile:
        batch_ranges = [(lo[0], hi[0]) for lo, _, hi in profile.values()]
        profile_max = min(hi for _, hi in batch_ranges)
        if batchable and any(lo != 1 for lo, _ in batch_ranges):
            raise RepositoryError("the engine's optimisation profile does not start at batch 1, but Triton "
                                  "sends batches of any size from 1", "rebuild with --batch 1:OPT:MAX")
    if max_batch is None:
        if not batchable:
            max_batch = 0
        elif profile_max is not None:
            max_batch = profile_max
        else:
            raise RepositoryError("the model's batch dimension is dynamic: give --max-batch-size",
                                  "use the MAX of --batch given to `trt-gn build` (TensorRT is not importable "
                                  "here to read it from the engine)")
    if max_batch > 0:
        if not batchable:
            fixed = [t.name for t in list(inputs) + list(outputs) if not t.shape or t.shape[0] is not None]
            raise RepositoryError(f"--max-batch-size {max_batch} needs a dynamic first dimension on every input "
                                  f"and output; fixed in: {', '.join(fixed)}",
                                  "use --max-batch-size 0, or export with a dynamic batch")
        if profile_max is not None and max_batch > profile_max:
            raise RepositoryError(f"--max-batch-size {max_batch} exceeds the engine's profile maximum batch "
                                  f"{profile_max}", f"use at most {profile_max}, or rebuild with a larger --batch")
    dynamic = options.dynamic_batching if options.dynamic_batching is not None else max_batch > 0
    if dynamic and max_batch == 0:
        raise RepositoryError("dynamic batching needs --max-batch-size > 0",
                              "drop --dynamic-batching or give --max-batch-size")
    for b in options.preferred_batch_sizes:
        if not 1 <= b <= max_batch:
            raise RepositoryError(f"preferred batch size {b} is outside 1..{max_batch} (--max-batch-size)")
    if options.preferred_batch_sizes and not dynamic:
        raise RepositoryError("--preferred-batch-size needs dynamic batching")
    return max_batch, dynamic


def write_model_repository(repository, model_name: str, plan, options: RepositoryOptions | None = None
                           ) -> RepositoryResult:
    """Write ``<repository>/<model_name>`` for the engine ``plan``; see the module docstring."""
    options = options or RepositoryOptions()
    repo = Path(repository)
    plan = Path(plan)
    # -- every check before anything is written --------------------------------------------
    if plan.suffix.lower() == ".onnx":
        raise RepositoryError(
            f"{plan} is an ONNX model: Triton's TensorRT backend serves an engine built from it; an ONNX "
            f"model is served with --backend python (onnxruntime)",
            f"`trt-gn triton {plan} --backend python --repository {repo}`, or build an engine first: "
            f"`trt-gn build {plan}` and pass the .plan")
    if not plan.is_file():
        raise RepositoryError(f"engine {plan} does not exist", "build it with `trt-gn build`")
    if plan.suffix.lower() not in PLAN_SUFFIXES:
        raise RepositoryError(f"engine {plan} must end in {' or '.join(PLAN_SUFFIXES)}")
    if plan.stat().st_size == 0:
        raise RepositoryError(f"engine {plan} is empty", "build it with `trt-gn build`")
    rtx_version = tensorrt_rtx_plan_version(plan)
    if rtx_version is not None:
        raise RepositoryError(
            f"engine {plan} is a TensorRT-RTX plan (TensorRT-RTX {rtx_version}): Triton's TensorRT backend "
            f"deserializes TensorRT plans only, so it cannot load this model",
            "serve the fused ONNX model with `trt-gn triton MODEL.onnx --backend python`, or build a TensorRT "
            "engine with `trt-gn build --builder tensorrt` on a GPU")
    _check_common(repo, model_name, options)
    onnx_path = Path(options.onnx) if options.onnx is not None else None
    if onnx_path is not None:
        _check_onnx_path(onnx_path)
        read_onnx_io(onnx_path)  # a broken model is bad input, named before the plugin is looked for
    if options.io_from == "engine":
        try:
            import_tensorrt()
        except TensorRTNotInstalledError as exc:
            raise TensorRTNotInstalledError(exc.message, exc.hint + "; or pass --io-from onnx --onnx MODEL.onnx") from None
    plugin = plugin_path(options.plugin_library)
    autoload = _autoload_path(plugin)

    inputs, outputs, profile, source, notes = _io_specs(plan, options, onnx_path, plugin)
    max_batch, dynamic = _resolve_batching(inputs, outputs, profile, source, options)
    text = model_config_text(model_name, inputs, outputs, max_batch_size=max_batch,
                             instance_count=options.instance_count, gpus=options.gpus,
                             dynamic_batching=dynamic, preferred_batch_sizes=options.preferred_batch_sizes,
                             max_queue_delay_us=options.max_queue_delay_us)

    def fill(stage: Path) -> None:
        (stage / "config.pbtxt").write_text(text)
        version_dir = stage / str(options.version)
        version_dir.mkdir()
        shutil.copyfile(plan, version_dir / PLAN_FILE_NAME)
        shutil.copyfile(plugin, stage / spec.PLUGIN_LIBRARY)
        shutil.copyfile(autoload, stage / spec.PLUGIN_AUTOLOAD_LIBRARY)  # loads the plugin from its own folder

    target = _publish(repo, model_name, fill, options.overwrite)
    return RepositoryResult(model_dir=target, config=target / "config.pbtxt",
                            plan=target / str(options.version) / PLAN_FILE_NAME,
                            plugin_library=target / spec.PLUGIN_LIBRARY,
                            plugin_autoload_library=target / spec.PLUGIN_AUTOLOAD_LIBRARY, io_source=source,
                            max_batch_size=max_batch, config_text=text, notes=notes)


def tensorrt_rtx_plan_version(plan) -> str | None:
    """The TensorRT-RTX version ("1.7.1.116") that built the plan file ``plan``, from its header;
    None when it is no TensorRT-RTX plan (a TensorRT plan, or not a plan at all)."""
    with open(plan, "rb") as f:
        header = f.read(_PLAN_VERSION_OFFSET + 4)
    if len(header) < _PLAN_VERSION_OFFSET + 4 or header[:4] != TENSORRT_RTX_PLAN_MAGIC:
        return None
    version = header[_PLAN_VERSION_OFFSET:]
    return ".".join(str(b) for b in version) if version[0] < 8 else None


def _check_onnx_path(onnx_path: Path) -> None:
    if not onnx_path.is_file():
        raise RepositoryError(f"ONNX model {onnx_path} does not exist")
    if onnx_path.suffix.lower() != ".onnx":
        raise RepositoryError(f"{onnx_path} does not end in .onnx", "pass an ONNX model file (*.onnx)")


def _check_common(repo: Path, model_name: str, options: RepositoryOptions) -> None:
    """The checks every repository kind makes before anything is written."""
    if not _MODEL_NAME_RE.match(model_name):
        raise RepositoryError(f"model name '{model_name}' is not a valid folder name",
                              "use letters, digits, '_', '-' and '.', not starting with '.' or '-'")
    if options.io_from not in IO_SOURCES:
        raise RepositoryError(f"unknown --io-from '{options.io_from}'", f"choose one of {', '.join(IO_SOURCES)}")
    if options.instance_count < 1:
        raise RepositoryError(f"--instances must be >= 1, got {options.instance_count}")
    if any(g < 0 for g in options.gpus):
        raise RepositoryError(f"GPU ids must be >= 0, got {list(options.gpus)}")
    if options.version < 1:
        raise RepositoryError(f"model version must be >= 1, got {options.version}")
    if options.max_queue_delay_us < 0:
        raise RepositoryError(f"max queue delay must be >= 0, got {options.max_queue_delay_us}")
    if options.max_batch_size is not None and not 0 <= options.max_batch_size <= MAX_BATCH_SIZE_LIMIT:
        raise RepositoryError(f"--max-batch-size must be in 0..{MAX_BATCH_SIZE_LIMIT} (Triton's int32), "
                              f"got {options.max_batch_size}")
    problem = fileio.output_folder_problem(repo, parents=False)  # the model folder is staged inside it
    if problem:
        hint = f"create it: mkdir -p {fileio.folder_of(repo)}" if "parent" in problem else \
            "choose a writable model repository"
        raise RepositoryError(f"model repository {repo}: {problem}", hint)
    target = repo / model_name
    if target.exists() and not options.overwrite:
        raise RepositoryError(f"{target} already exists", "pass --overwrite to replace it")


def _publish(repo: Path, model_name: str, fill, overwrite: bool) -> Path:
    """Stage the whole model folder (``fill(stage)``), then rename it into place (replacing the one
    there only with ``overwrite``); returns it."""
    target = repo / model_name
    created_repo = not repo.exists()
    repo.mkdir(exist_ok=True)
    try:
        with fileio.staging_folder(repo, model_name) as stage:
            fill(stage)
            fileio.publish_folder(stage, target, replace=overwrite)
    except BaseException:
        if created_repo:
            shutil.rmtree(repo, ignore_errors=True)
        raise
    return target


@dataclass
class PythonRepositoryResult:
    model_dir: Path
    config: Path
    model_py: Path
    onnx: Path
    max_batch_size: int
    config_text: str


def python_model_source() -> str:
    """The text of the Python backend's model.py (trt_gn/triton_models/onnxruntime_model.py)."""
    from importlib import resources

    return resources.files(__package__).joinpath(*PYTHON_MODEL_TEMPLATE).read_text()


def _onnxruntime_can_run(onnx_path: Path) -> None:
    """onnxruntime runs trt_gn nodes through their model-local function only; refuse models without it."""
    import onnx

    model = onnx.load(str(onnx_path), load_external_data=False)
    functions = {(f.domain, f.name) for f in model.functions}
    for node in model.graph.node:
        if node.domain == spec.ONNX_DOMAIN and (node.domain, node.op_type) not in functions:
            raise RepositoryError(
                f"{onnx_path} has a {node.domain}::{node.op_type} node ('{node.name}') without its model-local "
                f"function, which onnxruntime needs to run it",
                "export without --bare, or fuse with `trt-gn fuse` (both write the function)")
        if node.op_type == spec.LEGACY_PLUGIN_NAME and node.domain in ("", "ai.onnx"):
            raise RepositoryError(f"{onnx_path} has TensorRT 8.5's GroupNorm node ('{node.name}'), which "
                                  f"onnxruntime cannot run", "serve it with the TensorRT backend")


def write_python_repository(repository, model_name: str, onnx_model, options: RepositoryOptions | None = None
                            ) -> PythonRepositoryResult:
    """Write ``<repository>/<model_name>`` serving ``onnx_model`` with Triton's Python backend and
    onnxruntime (see the module docstring). With ``max_batch_size`` None or 0 the batch stays a
    dimension of the tensors (Triton does no batching); > 0 lets Triton batch (dynamic batching on)."""
    from .onnx import io as onnx_io

    options = options or RepositoryOptions()
    repo = Path(repository)
    onnx_path = Path(onnx_model)
    _check_common(repo, model_name, options)
    _check_onnx_path(onnx_path)
    if options.io_from == "engine":
        raise RepositoryError("the Python backend serves the ONNX model: there is no engine to read", "drop --io-from")
    _onnxruntime_can_run(onnx_path)
    inputs, outputs = read_onnx_io(onnx_path)
    if options.max_batch_size is None:
        options = dataclasses.replace(options, max_batch_size=0)
    max_batch, dynamic = _resolve_batching(inputs, outputs, None, "onnx", options)
    text = model_config_text(model_name, inputs, outputs, max_batch_size=max_batch,
                             instance_count=options.instance_count, gpus=options.gpus,
                             dynamic_batching=dynamic, preferred_batch_sizes=options.preferred_batch_sizes,
                             max_queue_delay_us=options.max_queue_delay_us, backend="python")
    model = onnx_io.load_model(onnx_path)
    model_source = python_model_source()

    def fill(stage: Path) -> None:
        (stage / "config.pbtxt").write_text(text)
        version_dir = stage / str(options.version)
        version_dir.mkdir()
        (version_dir / PYTHON_MODEL_FILE).write_text(model_source)
        onnx_io.save_model(model, version_dir / PYTHON_ONNX_FILE)

    target = _publish(repo, model_name, fill, options.overwrite)
    version_dir = target / str(options.version)
    return PythonRepositoryResult(model_dir=target, config=target / "config.pbtxt",
                                  model_py=version_dir / PYTHON_MODEL_FILE, onnx=version_dir / PYTHON_ONNX_FILE,
                                  max_batch_size=max_batch, config_text=text)
