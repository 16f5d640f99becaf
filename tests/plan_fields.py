"""Read the trt_gn plugin records out of a serialized TensorRT(-RTX) plan, without a GPU.

A plan cannot be deserialized on a machine without a GPU (and TensorRT-RTX plans not on Hopper),
so the tests read the fields the plugin's getFieldsToSerialize handed the builder straight from
the plan bytes. The layout is TensorRT's and undocumented; what the tests rely on, as seen in
TensorRT-RTX 1.7 plans: every value is a record ``01 80 <kind> 80 01 00 <u64 length> <bytes>``
(kind 0x0c strings, 0x03 raw data); counts are ``07 80 01 00 <u32>``. A plugin is its name, version
and namespace (strings), the number of fields, then per field: name, element count, type name
(``INT32``, ``FP32``, ``CHAR``) and the data. If a TensorRT release changes this, ``plugin_records``
finds nothing and the tests fail loudly rather than pass.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

_RECORD = re.compile(rb"\x01\x80[\x00-\xff]\x80\x01\x00", re.S)
_COUNT = re.compile(rb"\x07\x80\x01\x00", re.S)
_STRING_HEADER = b"\x01\x80\x0c\x80\x01\x00"
_MAX_GAP = 16  # bytes between one record and the next header


@dataclass(frozen=True)
class PluginRecord:
    name: str
    version: str
    namespace: str
    fields: dict  # field name -> (type name, element count, raw bytes)

    def value(self, field: str):
        """The field decoded: int, float (fp32) or str."""
        kind, count, data = self.fields[field]
        if kind == "INT32":
            return struct.unpack(f"<{count}i", data)[0] if count == 1 else struct.unpack(f"<{count}i", data)
        if kind == "FP32":
            return struct.unpack(f"<{count}f", data)[0] if count == 1 else struct.unpack(f"<{count}f", data)
        if kind == "CHAR":
            return data.split(b"\0", 1)[0].decode()
        raise ValueError(f"field {field}: type {kind} not decoded here")


def _record(data: bytes, pos: int) -> tuple[bytes, int]:
    m = _RECORD.search(data, pos)
    if m is None or m.start() - pos > _MAX_GAP:
        raise ValueError(f"no record at byte {pos}")
    (length,) = struct.unpack_from("<Q", data, m.end())
    start = m.end() + 8
    return data[start:start + length], start + length


def _count(data: bytes, pos: int) -> tuple[int, int]:
    m = _COUNT.search(data, pos)
    if m is None or m.start() - pos > _MAX_GAP:
        raise ValueError(f"no count at byte {pos}")
    return struct.unpack_from("<I", data, m.end())[0], m.end() + 4


def plugin_records(plan: bytes, name: str, namespace: str) -> list[PluginRecord]:
    """Every serialized plugin ``namespace::name`` in ``plan``, in plan order."""
    key = _STRING_HEADER + struct.pack("<Q", len(name)) + name.encode()
    out, pos = [], 0
    while (pos := plan.find(key, pos)) >= 0:
        p = pos + len(key)
        try:
            version, p = _record(plan, p)
            ns, p = _record(plan, p)
            if ns.decode(errors="replace") != namespace:
                pos = p
                continue
            nfields, p = _count(plan, p)
            fields = {}
            for _ in range(nfields):
                fname, p = _record(plan, p)
                count, p = _count(plan, p)
                kind, p = _record(plan, p)
                value, p = _record(plan, p)
                fields[fname.decode()] = (kind.decode(), count, value)
        except ValueError:
            pos += len(key)  # the name appears elsewhere too (layer names, creator lists)
            continue
        out.append(PluginRecord(name, version.decode(), ns.decode(), fields))
        pos = p
    return out
