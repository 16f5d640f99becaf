"""Check that a fused ONNX model computes what the original did.

onnxruntime runs both models (CPU; also the CUDA execution provider where onnxruntime has it) on
seeded random inputs at several shapes and every output is compared: max abs and max rel error
against a per-dtype tolerance. Where TensorRT and a GPU exist, ``polygraphy run --trt --onnxrt``
compares a TensorRT engine (with the plugin library loaded) against onnxruntime.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np

from ..errors import Error

# max |a - b| <= atol + rtol * |reference|, per output dtype
TOLERANCES = {
    np.dtype(np.float32): (1e-4, 1e-4),
    np.dtype(np.float16): (1e-2, 1e-2),
    np.dtype(np.float64): (1e-9, 1e-9),
}
_ORT_DTYPES = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
}


@dataclasses.dataclass
class OutputComparison:
    provider: str
    shape_case: str
    output: str
    dtype: str
    max_abs: float
    max_rel: float
    atol: float
    rtol: float
    passed: bool

    def line(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        return (
            f"{verdict} [{self.provider} {self.shape_case}] {self.output} ({self.dtype}): max abs {self.max_abs:.3e}, "
            f"max rel {self.max_rel:.3e} (passes where every |error| <= {self.atol:g} + {self.rtol:g}*|ref|)"
        )


@dataclasses.dataclass
class ValidationReport:
    comparisons: list[OutputComparison] = dataclasses.field(default_factory=list)
    skipped: list[str] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.comparisons) and all(c.passed for c in self.comparisons)

    def summary(self) -> str:
        lines = [c.line() for c in self.comparisons]
        lines += [f"SKIP {s}" for s in self.skipped]
        lines += self.notes
        lines.append(f"{'PASSED' if self.passed else 'FAILED'}: {sum(c.passed for c in self.comparisons)}/{len(self.comparisons)} comparisons")
        return "\n".join(lines)


# Default shape cases (batch, latent height = width): realistic latents that survive every down/up-
# sampling stage of the SD 1.5 / SDXL UNets (multiples of 8), small enough for onnxruntime on a CPU.
DEFAULT_SHAPE_CASES = ((1, 16), (2, 32))
OTHER_DIM_DEFAULT = 8  # a symbolic dim that is neither batch nor height/width (e.g. a sequence length)
# --dims names with a fixed meaning: dim 0 of every input; dims 2, 3 of rank-4 (NCHW) inputs.
ROLE_NAMES = ("batch", "height", "width")


def _symbolic_dims(onnx_path: str | os.PathLike) -> list[tuple[str, int, int]]:
    """(dim name, axis, rank) of every named symbolic dim of the graph inputs."""
    import onnx

    model = onnx.load(str(onnx_path), load_external_data=False)
    initializers = {t.name for t in model.graph.initializer}
    out = []
    for value in model.graph.input:
        if value.name in initializers:
            continue
        shape = value.type.tensor_type.shape.dim
        out += [(d.dim_param, axis, len(shape)) for axis, d in enumerate(shape) if d.dim_param]
    return out


def _role(axis: int, rank: int) -> str | None:
    if axis == 0:
        return "batch"
    if rank == 4 and axis in (2, 3):
        return ROLE_NAMES[axis - 1]
    return None


def shape_case_dims(onnx_path: str | os.PathLike, batch: int, latent: int) -> dict[str, int]:
    """Values for the symbolic input dims: dim 0 is the batch, dims 2 and 3 of rank-4 inputs are the
    latent height and width, any other symbolic dim OTHER_DIM_DEFAULT."""
    return resolve_dims(onnx_path, {"batch": batch, "height": latent, "width": latent})


def resolve_dims(onnx_path: str | os.PathLike, given: dict[str, int]) -> dict[str, int]:
    """One shape case from `given` (--dims): names of the model's symbolic dims, the role names
    batch / height / width, or `*` (any dim not named otherwise). A name the model does not have is
    an Error, never silently ignored. Unset dims take the first default case."""
    dims = _symbolic_dims(onnx_path)
    names = sorted({name for name, _, _ in dims})
    unknown = [k for k in given if k not in names and k not in ROLE_NAMES and k != "*"]
    if unknown:
        raise Error(f"--dims {unknown[0]}: {onnx_path} has no input dimension named {unknown[0]!r}",
                    f"name one of its dims ({', '.join(names) or 'it has none'}), batch, height, width or *")
    batch, latent = DEFAULT_SHAPE_CASES[0]
    defaults = {"batch": batch, "height": latent, "width": latent}
    out = {"*": given.get("*", OTHER_DIM_DEFAULT)}
    for name, axis, rank in dims:
        role = _role(axis, rank)
        if name in given:
            out[name] = given[name]
        elif role is not None and role in given:
            out[name] = given[role]
        elif "*" in given:
            out[name] = given["*"]
        else:
            out[name] = defaults.get(role, OTHER_DIM_DEFAULT)
    return out


def _input_specs(session) -> list[tuple[str, list, type]]:
    specs = []
    for inp in session.get_inputs():
        if inp.type not in _ORT_DTYPES:
            raise ValueError(f"input {inp.name!r} has type {inp.type}; only float/int tensors are supported")
        specs.append((inp.name, list(inp.shape), _ORT_DTYPES[inp.type]))
    return specs


def make_inputs(specs, dims: dict[str, int], seed: int) -> dict[str, np.ndarray]:
    """Seeded random inputs; symbolic dims take their value from `dims` (by name, else `*`, else 2)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, shape, dtype in specs:
        concrete = [d if isinstance(d, int) and d > 0 else dims.get(str(d), dims.get("*", 2)) for d in shape]
        if np.issubdtype(dtype, np.integer):
            feeds[name] = rng.integers(0, 1000, size=concrete).astype(dtype)
        else:
            feeds[name] = rng.standard_normal(concrete).astype(dtype)
    return feeds


def compare_outputs(ref: np.ndarray, out: np.ndarray) -> tuple[float, float, float, float, bool]:
    atol, rtol = TOLERANCES.get(np.dtype(ref.dtype), (1e-4, 1e-4))
    if ref.shape != out.shape:
        return float("inf"), float("inf"), atol, rtol, False
    r = ref.astype(np.float64)
    o = out.astype(np.float64)
    diff = np.abs(r - o)
    if diff.size == 0:
        return 0.0, 0.0, atol, rtol, True
    both_nan = np.isnan(r) & np.isnan(o)
    diff = np.where(both_nan, 0.0, diff)
    max_abs = float(np.nanmax(np.where(np.isnan(diff), np.inf, diff)))
    max_rel = float(np.max(diff / np.maximum(np.abs(r), 1e-12)))
    passed = bool(np.all(diff <= atol + rtol * np.abs(r)))
    return max_abs, max_rel, atol, rtol, passed


def available_providers() -> list[str]:
    import onnxruntime as ort

    have = ort.get_available_providers()
    return [p for p in ("CPUExecutionProvider", "CUDAExecutionProvider") if p in have]


def validate_onnxruntime(
    original: str | os.PathLike,
    fused: str | os.PathLike,
    *,
    shape_cases: list[dict[str, int]] | None = None,
    seed: int = 0,
    providers: list[str] | None = None,
) -> ValidationReport:
    """Run both models in onnxruntime on the same seeded inputs and compare every output."""
    import onnxruntime as ort

    report = ValidationReport()
    providers = providers or available_providers()
    if "CUDAExecutionProvider" not in providers:
        report.skipped.append("onnxruntime CUDA execution provider: not available in this onnxruntime build")
    if shape_cases:
        shape_cases = [resolve_dims(original, case) for case in shape_cases]
    else:
        shape_cases = [shape_case_dims(original, b, lat) for b, lat in DEFAULT_SHAPE_CASES]
    options = ort.SessionOptions()
    options.log_severity_level = 3
    for provider in providers:
        a = ort.InferenceSession(str(original), options, providers=[provider])
        b = ort.InferenceSession(str(fused), options, providers=[provider])
        specs = _input_specs(a)
        names_a, names_b = [s[0] for s in specs], [s[0] for s in _input_specs(b)]
        if names_a != names_b:
            raise Error(f"{original} and {fused} have different inputs ({', '.join(names_a)} vs {', '.join(names_b)}): "
                        "they are not a model and its fused copy",
                        "validate a model against the file trt-gn fuse wrote from it")
        names = [o.name for o in a.get_outputs()]
        for case_index, dims in enumerate(shape_cases):
            feeds = make_inputs(specs, dims, seed + case_index)
            case = "x".join(str(v.shape) for v in feeds.values()).replace(" ", "")
            ref = a.run(names, feeds)
            out = b.run(names, feeds)
            for name, r, o in zip(names, ref, out):
                max_abs, max_rel, atol, rtol, passed = compare_outputs(r, o)
                report.comparisons.append(
                    OutputComparison(provider.replace("ExecutionProvider", ""), case, name, str(r.dtype),
                                     max_abs, max_rel, atol, rtol, passed)
                )
    return report


def polygraphy_command(fused: str | os.PathLike, plugin_library: str | os.PathLike, *, fp16: bool = False) -> list[str]:
    cmd = ["polygraphy", "run", str(fused), "--trt", "--onnxrt", "--plugins", str(plugin_library),
           "--atol", "1e-3", "--rtol", "1e-3"]
    if fp16:
        cmd.append("--fp16")
    return cmd


def validate_tensorrt(fused: str | os.PathLike, *, plugin_library: str | os.PathLike | None = None, fp16: bool = False):
    """TensorRT engine (with the plugin) vs onnxruntime via `polygraphy run --trt --onnxrt`.

    Returns (passed, output) or (None, reason) when TensorRT, a GPU or polygraphy is missing."""
    try:
        import tensorrt  # noqa: F401
    except ImportError:
        return None, "TensorRT comparison: the tensorrt Python package is not installed"
    try:
        import torch

        if not torch.cuda.is_available():
            return None, "TensorRT comparison: no CUDA GPU"
    except ImportError:
        pass
    if shutil.which("polygraphy") is None:
        return None, "TensorRT comparison: polygraphy is not installed"
    if plugin_library is None:
        from .. import abi

        try:
            plugin_library = abi.find_plugin_library()
        except Exception as exc:  # a clear "not found" message naming the places looked in
            return None, f"TensorRT comparison: {exc}"
    if not Path(plugin_library).is_file():
        return None, f"TensorRT comparison: plugin library not found ({plugin_library})"
    proc = subprocess.run(polygraphy_command(fused, plugin_library, fp16=fp16), capture_output=True, text=True)
    return proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
