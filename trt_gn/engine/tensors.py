"""The tensors of an engine: the inputs and outputs of an ONNX model or a built plan (TensorSpec,
EngineIO), with their names, element types and shapes."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import EXIT_FAILED, first_line
from .files import plugin_path
from .loader import EngineBuildError, import_tensorrt, last_error, make_logger


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
    logger = make_logger(trt)
    runtime = trt.Runtime(logger)
    runtime.engine_host_code_allowed = True  # version-compatible plans carry their lean runtime
    if runtime.get_plugin_registry().load_library(str(plugin)) is None:
        raise EngineBuildError(f"TensorRT could not load the plugin library {plugin}: "
                               f"{last_error(logger, 'no reason given')}", exit_code=EXIT_FAILED)
    engine = runtime.deserialize_cuda_engine(plan.read_bytes())
    if engine is None:
        raise EngineBuildError(f"TensorRT could not load {plan}: {last_error(logger, 'no reason given')}",
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
