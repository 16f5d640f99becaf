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

The modules, by job (this package re-exports their public names):

- ``profiles``: shape ranges and the optimisation profile (no TensorRT needed)
- ``build``: build options, the checks before a build, the progress monitor, ``build_engine``
- ``tensors``: the inputs and outputs of ONNX models and plans (TensorSpec, EngineIO)
- ``files``: the plan's suffixes, the output-file check, the atomic writer, the plugin library's path
- ``loader``: importing TensorRT / TensorRT-RTX (errors, install hints, the TensorRT-RTX loader
  folder) and the process's one logger
"""

from .build import (BUILDERS, DEFAULT_WORKSPACE_BYTES, PRECISIONS, RTX_DEFAULT_TARGETS, BuildOptions, BuildResult,
                    PhaseProgress, build_engine, check_build_arguments, count_plugin_layers, count_plugin_nodes,
                    parse_target_cc, rtx_compute_capability)
from .files import PLAN_SUFFIXES, check_writable_file, plugin_path, write_atomic
from .tensors import EngineIO, TensorSpec, read_engine_io, read_onnx_io
from .loader import (CACHE_DIR_ENV, TENSORRT_INSTALL_HINT, TENSORRT_RTX_INSTALL_HINT, EngineBuildError,
                     TensorRTNotInstalledError, UnsupportedTargetError, cache_dir, import_tensorrt,
                     import_tensorrt_rtx, last_error, make_logger, prepare_tensorrt_rtx_loader)
from .profiles import DimRange, ShapeRange, parse_dim_range, parse_shape_range, resolve_profile

__all__ = [
    "BUILDERS", "CACHE_DIR_ENV", "DEFAULT_WORKSPACE_BYTES", "PLAN_SUFFIXES", "PRECISIONS", "RTX_DEFAULT_TARGETS",
    "TENSORRT_INSTALL_HINT", "TENSORRT_RTX_INSTALL_HINT",
    "BuildOptions", "BuildResult", "DimRange", "EngineBuildError", "EngineIO", "PhaseProgress", "ShapeRange",
    "TensorRTNotInstalledError", "TensorSpec", "UnsupportedTargetError",
    "build_engine", "cache_dir", "check_build_arguments", "check_writable_file", "count_plugin_layers",
    "count_plugin_nodes", "import_tensorrt", "import_tensorrt_rtx", "last_error", "make_logger", "parse_dim_range",
    "parse_shape_range", "parse_target_cc", "plugin_path", "prepare_tensorrt_rtx_loader", "read_engine_io",
    "read_onnx_io", "resolve_profile", "rtx_compute_capability", "write_atomic",
]
