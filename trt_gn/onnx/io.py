"""Reading and writing ONNX files: clear errors for bad input, output checked before any work,
atomic writes (trt_gn.fileio), external data for big models.

A model and its external data appear together or not at all: the data goes to a file name that
nothing uses yet (``<output>.data``, else ``<output>.<random>.data``), then the model file is
renamed into place, the one step that publishes both; the data of the model it replaced is
removed after that. A failure at any point leaves the previous output whole. Runs that publish
into one folder do so one at a time (trt_gn.fileio.publish_lock), so that of concurrent runs to
one output the last one's model and data remain, and no data file that no model references.

Every tensor of an input is checked against its storage before anything is read from it: a tensor
whose bytes (inline or external) cannot hold the values it declares is an error, found from the
sizes alone.
"""

from __future__ import annotations

import math
import os
import re
import secrets
import shutil
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


def check_input_file(path: str | os.PathLike) -> Path:
    """`path` is an existing regular file (a FIFO would block the read), or OnnxInputError."""
    path = Path(path)
    kind = fileio.file_kind(path)
    if kind is None:
        raise OnnxInputError(f"{path}: no such file")
    if kind == "folder":
        raise OnnxInputError(f"{path}: is a folder, not an ONNX model file")
    if kind != "file":
        raise OnnxInputError(f"{path}: is a {kind}, not a regular file")
    return path


def load_model(path: str | os.PathLike) -> ir.Model:
    """Load an ONNX model (external data stays on disk, memory-mapped) or raise OnnxInputError."""
    path = check_input_file(path)
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
    problem = _storage_problem(proto, path)
    if problem:
        raise OnnxInputError(f"{path}: {problem}")
    try:
        model = ir.load(path)
    except Exception as exc:
        raise OnnxInputError(f"{path}: cannot be read as an ONNX model: {_first_line(exc)}") from None
    return model


def _structure_problem(graph: onnx.GraphProto) -> str | None:
    """A cheap integrity check (the full checker also rejects valid models with deprecated ops):
    every node input and graph output is defined before use, and every value is written once."""
    writer = {i.name: "the graph input" for i in graph.input}
    writer.update({t.name: "an initializer" for t in graph.initializer if t.name not in writer})
    writer.update({t.values.name: "an initializer" for t in graph.sparse_initializer})
    for node in graph.node:
        here = f"node {node.name or node.op_type!r}"
        for name in node.input:
            if name and name not in writer:
                return f"{here} uses undefined value {name!r}"
        for name in node.output:
            if name in writer:
                return f"value {name!r} is written twice: by {writer[name]} and by {here}"
            if name:
                writer[name] = here
    for out in graph.output:
        if out.name not in writer:
            return f"graph output {out.name!r} is never computed"
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


_TP = onnx.TensorProto
_SUB_BYTE_BITS = {getattr(_TP, name): bits for name, bits in (("INT4", 4), ("UINT4", 4), ("FLOAT4E2M1", 4),
                                                           ("INT2", 2), ("UINT2", 2)) if hasattr(_TP, name)}
# The typed field that holds a tensor's values when it has no raw_data, and its entries per value.
_TYPED_FIELD = {_TP.FLOAT: ("float_data", 1), _TP.COMPLEX64: ("float_data", 2), _TP.DOUBLE: ("double_data", 1),
                _TP.COMPLEX128: ("double_data", 2), _TP.INT64: ("int64_data", 1), _TP.UINT32: ("uint64_data", 1),
                _TP.UINT64: ("uint64_data", 1), _TP.STRING: ("string_data", 1)}


def _declared_bytes(tensor: onnx.TensorProto) -> tuple[int, int | None]:
    """(number of values, bytes they take; None for strings) from dims and type alone."""
    count = math.prod(tensor.dims)
    if tensor.data_type == _TP.STRING:
        return count, None
    bits = _SUB_BYTE_BITS.get(tensor.data_type)
    if bits is not None:
        return count, (count * bits + 7) // 8
    return count, count * onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize


def _inline_problem(tensor: onnx.TensorProto) -> str | None:
    """An inline tensor's raw_data (or typed field) must hold exactly the values it declares."""
    count, nbytes = _declared_bytes(tensor)
    type_name = onnx.helper.tensor_dtype_to_string(tensor.data_type).replace("TensorProto.", "")
    declares = f"tensor {tensor.name!r} declares {count} {type_name} values"
    if tensor.raw_data or (nbytes == 0 and tensor.data_type != _TP.STRING):
        if nbytes is not None and len(tensor.raw_data) != nbytes:
            return f"{declares} ({nbytes} bytes) but holds {len(tensor.raw_data)} bytes"
        return None
    field, per_value = _TYPED_FIELD.get(tensor.data_type, ("int32_data", 1))
    if tensor.data_type in _SUB_BYTE_BITS:  # packed: int32_data holds one byte each
        expected = nbytes
    else:
        expected = count * per_value
    held = len(getattr(tensor, field))
    if held != expected:
        return f"{declares} but holds {held} entries in {field}, not {expected}"
    return None


def _external_entries(proto: onnx.ModelProto):
    """(tensor, {key: value}) for every tensor stored outside the model file."""
    for tensor in onnx.external_data_helper._get_all_tensors(proto):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            yield tensor, {e.key: e.value for e in tensor.external_data}


def _data_file_problem(file: Path, location: str, folder: Path, tensor: str) -> str | None:
    """An external data file must exist where onnx_ir reads it: named inside the model's folder,
    still inside it after following links, with one hard link. onnx_ir refuses any other file (as a
    guard against a model reading files it was not given) when the model's path has a folder;
    these rules hold here however the path is spelled."""
    inside = os.path.normpath(os.path.abspath(file)).startswith(os.path.normpath(os.path.abspath(folder)) + os.sep)
    if location and not inside:
        return f"external data location {location!r} of tensor {tensor!r} is outside the model's folder {folder}"
    if not location or not file.is_file():
        return f"external data file {file} of tensor {tensor!r} does not exist"
    if folder.resolve() not in file.resolve().parents:
        return (f"external data file {file} is a link to {file.resolve()}, outside the model's folder {folder}; "
                "onnx_ir reads no data from there (copy the file in)")
    links = file.stat().st_nlink
    if links > 1:
        return f"external data file {file} has {links} hard links; onnx_ir reads only files with one (copy it)"
    return None


def _storage_problem(proto: onnx.ModelProto, path: Path) -> str | None:
    """Every tensor's storage must hold the values it declares (read from sizes, nothing loaded):
    inline bytes or typed fields, or bytes of an existing external data file inside the model's
    folder."""
    sizes: dict[Path, int] = {}
    for tensor in onnx.external_data_helper._get_all_tensors(proto):
        if any(d < 0 for d in tensor.dims):
            return f"tensor {tensor.name!r} has a negative dimension {list(tensor.dims)}"
        if tensor.data_location != _TP.EXTERNAL:
            problem = _inline_problem(tensor)
            if problem:
                return problem
            continue
        entry = {e.key: e.value for e in tensor.external_data}
        location = entry.get("location", "")
        file = path.parent / location
        if file not in sizes:
            problem = _data_file_problem(file, location, path.parent, tensor.name)
            if problem:
                return problem
            sizes[file] = file.stat().st_size
        try:
            offset, length = int(entry.get("offset") or 0), entry.get("length")
            length = None if length is None else int(length)
        except ValueError:
            return f"tensor {tensor.name!r} has a non-numeric external data offset or length"
        count, nbytes = _declared_bytes(tensor)
        if length is not None and nbytes is not None and length != nbytes:
            return (f"tensor {tensor.name!r} declares {count} values ({nbytes} bytes) but its external data "
                    f"length is {length} bytes")
        end = offset + ((nbytes or 0) if length is None else length)
        if offset < 0 or end > sizes[file]:
            return (f"external data file {file} is truncated: tensor {tensor.name!r} needs bytes "
                    f"{offset}..{end}, the file has {sizes[file]}")
    return None


_RANDOM_DATA_SUFFIX = ".00000000.data"  # the longest ending save_model gives a data file name
_IR_TEMP_EXTRA = len("..00000000")  # onnx_ir writes a data file <name> in a folder .<name>.<random>


def _data_stem(output: Path) -> str:
    """`output`'s name, cut where <name>.<random>.data, or onnx_ir's temporary folder named after
    it, would not fit the file system's limit."""
    parent = fileio.folder_of(output)
    return fileio.shorten(output.name, fileio.name_max(parent) - len(_RANDOM_DATA_SUFFIX) - _IR_TEMP_EXTRA)


def external_data_name(output: Path) -> str:
    """The name of an output's external data file when that name is free."""
    return _data_stem(output) + ".data"


def _free_data_name(output: Path) -> str:
    """external_data_name(output) if no file has it, else <name>.<random>.data that none has."""
    parent = fileio.folder_of(output)
    name = external_data_name(output)
    while (parent / name).exists():
        name = f"{_data_stem(output)}.{secrets.token_hex(4)}.data"
    return name


def _data_names_of(output: Path) -> re.Pattern:
    """The names save_model gives `output`'s data files (the only files it ever removes)."""
    return re.compile(re.escape(_data_stem(output)) + r"(\.[0-9a-f]{8})?\.data")


def model_files(path: str | os.PathLike) -> set[Path]:
    """A model file and every external data file it references (resolved); {} if unreadable."""
    path = Path(path)
    if not path.is_file():
        return set()
    return {path.resolve()} | _referenced_files(path)


def check_output_path(output: str | os.PathLike, *inputs: str | os.PathLike) -> Path:
    """Fail early (before loading or computing anything) if `output` cannot be written as a regular
    file (trt_gn.fileio.output_file_problem), or if it or its data file would be any input file or
    any input's external data file."""
    problem = fileio.output_file_problem(output)
    if problem:  # the path as given: Path() drops a trailing separator
        raise OutputPathError(f"{os.fspath(output)}: {problem}")
    output = Path(output)
    parent = fileio.folder_of(output)
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
    with fileio.staging_folder(parent, output.name) as stage:
        staged = stage / output.name
        data_name = None
        if external_data:
            data_name = _free_data_name(output)
            ir.save(model, staged, external_data=data_name)  # tensors under 256 bytes stay inline
            if (stage / data_name).resolve() not in _referenced_files(staged):
                data_name = None  # nothing went to it
        else:
            ir.save(model, staged)
        _publish(stage, data_name, output, keep)
    return output


def copy_file(src: str | os.PathLike, output: str | os.PathLike, *, keep: set[Path] = frozenset()) -> Path:
    """Byte-for-byte copy of a self-contained ONNX file, written like save_model writes."""
    output = Path(output)
    with fileio.staging_folder(fileio.folder_of(output), output.name) as stage:
        shutil.copyfile(src, stage / output.name)
        _publish(stage, None, output, keep)
    return output


def _publish(stage: Path, data_name: str | None, output: Path, keep: set[Path]) -> None:
    """Publish the model `stage`/<output's name> (and its data file `stage`/`data_name`) as
    `output`, then remove the data files of the output it replaced (unless in `keep`). One step for
    every trt_gn run publishing into the folder: what the replaced output referenced is read under
    the lock, and a data name another run took since the save chose it is changed first."""
    parent = fileio.folder_of(output)
    staged = stage / output.name
    owned = _data_names_of(output)
    fileio.pause_before_publish()
    with fileio.publish_lock(parent):
        previous = {f for f in _referenced_files(output) if f.parent == parent.resolve() and owned.fullmatch(f.name)}
        if data_name and (parent / data_name).exists():
            free = _free_data_name(output)
            os.rename(stage / data_name, stage / free)
            _relocate(staged, data_name, free)
            data_name = free
        with fileio.interrupts_deferred():  # an interrupt waits for the renames: never a data file alone
            if data_name:
                # A new name: publishing the data replaces nothing; the model file still points at the old.
                fileio.publish_file(stage / data_name, parent / data_name)
            try:
                fileio.publish_file(staged, output)  # the one step that publishes model and data
            except BaseException:
                if data_name:
                    (parent / data_name).unlink(missing_ok=True)
                raise
            new_data = (parent / data_name).resolve() if data_name else None
            for old in previous - set(keep) - {new_data}:
                old.unlink(missing_ok=True)


def _relocate(model_file: Path, old: str, new: str) -> None:
    """Point the external tensors of `model_file` at data file `new` instead of `old`."""
    proto = onnx.load(str(model_file), load_external_data=False)
    for tensor in onnx.external_data_helper._get_all_tensors(proto):
        for entry in tensor.external_data:
            if entry.key == "location" and entry.value == old:
                entry.value = new
    model_file.write_bytes(proto.SerializeToString())


def has_external_data(model: ir.Model) -> bool:
    return any(
        isinstance(v.const_value, ir.ExternalTensor) for g in model.graphs() for v in g.initializers.values()
    )
