"""Reading and writing ONNX files: clear errors for bad input, output checked before any work,
atomic writes (trt_gn.fileio), external data for big models.

A model and its external data appear together or not at all: the data goes to a file name that
nothing uses yet (``<output>.data``, else ``<output>.<random>.data``), then the model file is
renamed into place, the one step that publishes both; the data of the model it replaced is
removed after that. A failure at any point leaves the previous output whole.
"""

from __future__ import annotations

import os
import re
import secrets
from pathlib import Path

import onnx
import onnx_ir as ir

from .. import fileio
from ..errors import Error

# Protobuf cannot serialize a message over 2 GiB; stay clear of it with some margin.
EXTERNAL_DATA_THRESHOLD = 1_800_000_000


class OnnxInputError(Error, ValueError):
    """The input file is missing, not ONNX, or truncated (or its external data is)."""

    default_hint = "pass an .onnx model file (with its external data files next to it)"


class OutputPathError(Error, ValueError):
    """The output path cannot be written, or would overwrite an input (checked before any work)."""

    default_hint = "choose an output file in an existing, writable folder, different from every input file"


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
    problem = _external_data_problem(proto, path)
    if problem:
        raise OnnxInputError(f"{path}: {problem}")
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


_DTYPE_BYTES = {onnx.TensorProto.FLOAT: 4, onnx.TensorProto.FLOAT16: 2, onnx.TensorProto.BFLOAT16: 2,
                onnx.TensorProto.DOUBLE: 8, onnx.TensorProto.INT64: 8, onnx.TensorProto.INT32: 4,
                onnx.TensorProto.INT8: 1, onnx.TensorProto.UINT8: 1, onnx.TensorProto.BOOL: 1,
                onnx.TensorProto.INT16: 2, onnx.TensorProto.UINT16: 2}


def _external_entries(proto: onnx.ModelProto):
    """(tensor, {key: value}) for every tensor stored outside the model file."""
    for tensor in onnx.external_data_helper._get_all_tensors(proto):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            yield tensor, {e.key: e.value for e in tensor.external_data}


def _external_data_problem(proto: onnx.ModelProto, path: Path) -> str | None:
    """Every external tensor's file must exist and hold the bytes the tensor points at."""
    sizes: dict[Path, int] = {}
    for tensor, entry in _external_entries(proto):
        location = entry.get("location", "")
        file = path.parent / location
        if file not in sizes:
            if not location or not file.is_file():
                return f"external data file {file} of tensor {tensor.name!r} does not exist"
            sizes[file] = file.stat().st_size
        offset = int(entry.get("offset", 0) or 0)
        length = entry.get("length")
        if length is None and tensor.data_type in _DTYPE_BYTES:
            count = 1
            for d in tensor.dims:
                count *= d
            length = count * _DTYPE_BYTES[tensor.data_type]
        end = offset + int(length or 0)
        if offset < 0 or end > sizes[file]:
            return (f"external data file {file} is truncated: tensor {tensor.name!r} needs bytes "
                    f"{offset}..{end}, the file has {sizes[file]}")
    return None


def external_data_name(output: Path) -> str:
    """The name of an output's external data file when that name is free."""
    return output.name + ".data"


def _data_names_of(output: Path) -> re.Pattern:
    """The names save_model gives `output`'s data files (the only files it ever removes)."""
    return re.compile(re.escape(output.name) + r"(\.[0-9a-f]{8})?\.data")


def model_files(path: str | os.PathLike) -> set[Path]:
    """A model file and every external data file it references (resolved); {} if unreadable."""
    path = Path(path)
    if not path.is_file():
        return set()
    return {path.resolve()} | _referenced_files(path)


def check_output_path(output: str | os.PathLike, *inputs: str | os.PathLike) -> Path:
    """Fail early (before loading or computing anything) if `output` cannot be written, or if it
    or its data file would be any input file or any input's external data file."""
    output = Path(output)
    if output.is_dir():
        raise OutputPathError(f"{output}: is a directory; give a file name such as {output / 'model.onnx'}")
    parent = fileio.folder_of(output)
    if not parent.is_dir():
        raise OutputPathError(f"{output}: folder {parent} does not exist")
    problem = fileio.writable_folder_problem(parent)
    if problem:
        raise OutputPathError(f"{output}: folder {parent} {problem}")
    if output.exists() and not os.access(output, os.W_OK):
        raise OutputPathError(f"{output}: exists and is not writable")
    target = output.resolve()
    data = (parent / external_data_name(output)).resolve()
    for inp in inputs:
        inp = Path(inp)
        if target == inp.resolve():
            raise OutputPathError(f"{output}: is the input file; the input is never modified, choose another output")
        referenced = _referenced_files(inp) if inp.is_file() else set()
        if target in referenced:
            raise OutputPathError(f"{output}: is the external data file of the input {inp}; "
                                  "the input is never modified, choose another output")
        if data == inp.resolve() or data in referenced:
            raise OutputPathError(f"{output}: its external data file {data.name} would overwrite the input's data")
    return output


def _referenced_files(path: Path) -> set[Path]:
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception:
        return set()
    return {(path.parent / entry["location"]).resolve() for _, entry in _external_entries(proto) if entry.get("location")}


def model_nbytes(model: ir.Model) -> int:
    total = 0
    for graph in model.graphs():
        for value in graph.initializers.values():
            if value.const_value is not None:
                total += value.const_value.nbytes
    return total


def save_model(model: ir.Model, output: str | os.PathLike, *, external_data: bool | None = None,
               keep: set[Path] = frozenset()) -> Path:
    """Write `model` to `output`, with its external data, so that both appear together or not at
    all (see the module docstring). External data is used when asked, when the model already had
    external tensors, or when it is too big for one protobuf. Data files of a replaced output are
    removed unless they are in `keep` (resolved paths, e.g. the inputs' files)."""
    output = Path(output)
    parent = fileio.folder_of(output)
    if external_data is None:
        external_data = bool(_external_data_files(model, parent)) or model_nbytes(model) > EXTERNAL_DATA_THRESHOLD
    owned = _data_names_of(output)
    previous = {f for f in _referenced_files(output) if f.parent == parent.resolve() and owned.fullmatch(f.name)} \
        if output.is_file() else set()
    data_name = None
    if external_data:
        data_name = external_data_name(output)
        while (parent / data_name).exists():
            data_name = f"{output.name}.{secrets.token_hex(4)}.data"
    with fileio.staging_folder(parent, output.name) as stage:
        staged = stage / output.name
        if data_name:
            ir.save(model, staged, external_data=data_name)  # tensors under 256 bytes stay inline
            if (stage / data_name).resolve() not in _referenced_files(staged):
                data_name = None  # nothing went to it
        else:
            ir.save(model, staged)
        if data_name:
            # A new name: publishing the data replaces nothing; the model file still points at the old.
            fileio.publish_file(stage / data_name, parent / data_name)
        try:
            fileio.publish_file(staged, output)  # the one step that publishes model and data
        except BaseException:
            if data_name:
                (parent / data_name).unlink(missing_ok=True)
            raise
    for old in previous - set(keep):
        if data_name is None or old != (parent / data_name).resolve():
            old.unlink(missing_ok=True)
    return output


def copy_file(src: str | os.PathLike, output: str | os.PathLike) -> Path:
    """Byte-for-byte copy of a self-contained ONNX file, written atomically."""
    return fileio.copy_file(src, output)


def has_external_data(model: ir.Model) -> bool:
    return any(
        isinstance(v.const_value, ir.ExternalTensor) for g in model.graphs() for v in g.initializers.values()
    )
