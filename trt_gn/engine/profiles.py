"""Shapes and optimisation profiles (no TensorRT needed): the min/opt/max ranges of the
network inputs, parsed from the command line and resolved against the model's inputs."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Sequence

from .tensors import TensorSpec

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
