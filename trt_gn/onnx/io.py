"""Reading and writing ONNX files: clear errors for bad input, output checked before any work,
atomic writes (temp files in the output's folder + os.replace), external data for big models."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import onnx
import onnx_ir as ir

# Protobuf cannot serialize a message over 2 GiB; stay clear of it with some margin.
EXTERNAL_DATA_THRESHOLD = 1_800_000_000


class OnnxInputError(ValueError):
    """The input file is missing, not ONNX, or truncated."""


class OutputPathError(ValueError):
    """The output path cannot be written (checked before any work is done)."""


def _external_data_files(model: ir.Model, model_dir: Path) -> set[Path]:
    files = set()
    for graph in model.graphs():
        for value in graph.initializers.values():
            tensor = value.const_value
            if isinstance(tensor, ir.ExternalTensor):
                files.add((Path(tensor.base_dir or model_dir) / tensor.location).resolve())
    return files


def load_model(path: str | os.PathLike) -> ir.Model:
    """Load an ONNX model (external data stays on disk, memory-mapped) or raise OnnxInputError."""
    path = Path(path)
    if not path.is_file():
        raise OnnxInputError(f"{path}: no such file")
    if path.stat().st_size == 0:
        raise OnnxInputError(f"{path}: empty file, not an ONNX model")
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # protobuf raises DecodeError and friends
        raise OnnxInputError(f"{path}: not a readable ONNX model (truncated or another format): {_first_line(exc)}") from None
    if not proto.graph.node and not proto.graph.input and not proto.opset_import:
        raise OnnxInputError(f"{path}: not an ONNX model (no graph, inputs or opset imports)")
    problem = _structure_problem(proto.graph)
    if problem:
        raise OnnxInputError(f"{path}: invalid ONNX model (truncated or corrupt?): {problem}")
    try:
        model = ir.load(path)
    except Exception as exc:
        raise OnnxInputError(f"{path}: cannot be read as an ONNX model: {_first_line(exc)}") from None
    return model


def _structure_problem(graph: onnx.GraphProto) -> str | None:
    """A cheap integrity check (the full checker also rejects valid models with deprecated ops):
    every node input and graph output must be defined before use."""
    known = {i.name for i in graph.input} | {t.name for t in graph.initializer} | {""}
    known |= {t.name for t in graph.sparse_initializer} if hasattr(graph, "sparse_initializer") else set()
    for node in graph.node:
        for name in node.input:
            if name not in known:
                return f"node {node.name or node.op_type!r} uses undefined value {name!r}"
        known.update(node.output)
    for out in graph.output:
        if out.name not in known:
            return f"graph output {out.name!r} is never computed"
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def external_data_name(output: Path) -> str:
    return output.name + ".data"


def check_output_path(output: str | os.PathLike, *inputs: str | os.PathLike) -> Path:
    """Fail early (before loading or computing anything) if `output` cannot be written or would
    overwrite an input or an input's external data."""
    output = Path(output)
    if output.is_dir():
        raise OutputPathError(f"{output}: is a directory; give a file name such as {output / 'model.onnx'}")
    parent = output.parent if str(output.parent) else Path(".")
    if not parent.is_dir():
        raise OutputPathError(f"{output}: folder {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputPathError(f"{output}: folder {parent} is not writable")
    if output.exists() and not os.access(output, os.W_OK):
        raise OutputPathError(f"{output}: exists and is not writable")
    data = (parent / external_data_name(output)).resolve()
    for inp in inputs:
        inp = Path(inp)
        if output.resolve() == inp.resolve():
            raise OutputPathError(f"{output}: is the input file; the input is never modified, choose another output")
        if data == inp.resolve() or (inp.exists() and data in _referenced_files(inp)):
            raise OutputPathError(f"{output}: its external data file {data.name} would overwrite the input's data")
    return output


def _referenced_files(path: Path) -> set[Path]:
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception:
        return set()
    files = set()
    for tensor in onnx.external_data_helper._get_all_tensors(proto):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            for entry in tensor.external_data:
                if entry.key == "location":
                    files.add((path.parent / entry.value).resolve())
    return files


def model_nbytes(model: ir.Model) -> int:
    total = 0
    for graph in model.graphs():
        for value in graph.initializers.values():
            if value.const_value is not None:
                total += value.const_value.nbytes
    return total


def save_model(model: ir.Model, output: str | os.PathLike, *, external_data: bool | None = None) -> Path:
    """Write `model` to `output` atomically. External data (``<output>.data``) is used when asked,
    when the model already had external tensors, or when it is too big for one protobuf."""
    output = Path(output)
    parent = output.parent if str(output.parent) else Path(".")
    if external_data is None:
        external_data = bool(_external_data_files(model, parent)) or model_nbytes(model) > EXTERNAL_DATA_THRESHOLD
    data_name = external_data_name(output)
    with tempfile.TemporaryDirectory(prefix=f".{output.name}.", dir=parent) as tmp:
        tmp_model = Path(tmp) / output.name
        if external_data:
            ir.save(model, tmp_model, external_data=data_name)
        else:
            ir.save(model, tmp_model)
        tmp_data = Path(tmp) / data_name
        # The data goes in place first, so a model file never points at missing data.
        if tmp_data.exists():
            os.replace(tmp_data, parent / data_name)
        os.replace(tmp_model, output)
    return output


def copy_file(src: str | os.PathLike, output: str | os.PathLike) -> Path:
    """Byte-for-byte copy of a self-contained ONNX file, written atomically."""
    output = Path(output)
    parent = output.parent if str(output.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{output.name}.", dir=parent)
    os.close(fd)
    try:
        shutil.copyfile(src, tmp)
        os.replace(tmp, output)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return output


def has_external_data(model: ir.Model) -> bool:
    return any(
        isinstance(v.const_value, ir.ExternalTensor) for g in model.graphs() for v in g.initializers.values()
    )
