"""The ABI binding: ctypes over the kernels library's C ABI (plugin_src/include/trt_gn/group_norm.h).

The library is looked up, in order, at:
  1. the file named by the environment variable TRT_GN_KERNELS_LIBRARY;
  2. <package>/lib/libtrt_gn_kernels.so (installed there by pip through scikit-build-core);
  3. <repository>/build/libtrt_gn_kernels.so (a developer's `cmake --build build`).
The TensorRT plugin library is found the same way (TRT_GN_PLUGIN_LIBRARY,
<package>/lib/libtrt_gn_plugin.so, <repository>/build/plugin/libtrt_gn_plugin.so); its
load-time registration shim libtrt_gn_plugin_autoload.so is only ever taken from the plugin's
own folder, because that is where the shim loads the plugin from.
"""

from __future__ import annotations

import ctypes
import enum
import os
import threading
from pathlib import Path

from . import errors, spec

ABI_VERSION = 5  # TRTGN_ABI_VERSION this binding mirrors
# Versions only add functions, and fields at the end of trtgn_params_t: a library of an older one back
# to this loads, without the newer calls, and reads only the prefix of Params it knows, which is
# right while the newer fields are NULL (trt_gn/lab/ab.py times earlier revisions through this
# binding). A call that fills them checks the library first (require_pre_add).
MIN_ABI_VERSION = 2
PRE_ADD_ABI_VERSION = 4  # pre_bias, pre_bias_n_stride, residual, sum_out
PRE_BIAS_FLOAT32_ABI_VERSION = 5  # pre_bias_float32: a float32 pre_bias beside gamma/beta of x's dtype

KERNELS_LIBRARY_ENV = "TRT_GN_KERNELS_LIBRARY"
PLUGIN_LIBRARY_ENV = "TRT_GN_PLUGIN_LIBRARY"

_PACKAGE_DIR = Path(__file__).resolve().parent
_REPO_DIR = _PACKAGE_DIR.parent


class Status(enum.IntEnum):
    SUCCESS = 0
    INVALID_ARGUMENT = 1
    WORKSPACE_TOO_SMALL = 2
    CUDA_ERROR = 3
    NOT_SUPPORTED = 4


class DType(enum.IntEnum):
    FLOAT32 = 0
    FLOAT16 = 1
    BFLOAT16 = 2


class Layout(enum.IntEnum):
    NHWC = 0
    NCHW = 1


class Activation(enum.IntEnum):
    NONE = 0
    SILU = 1


# spec.ACTIVATIONS name -> ABI value
ACTIVATION_BY_NAME = {"none": Activation.NONE, "silu": Activation.SILU}
assert set(ACTIVATION_BY_NAME) == set(spec.ACTIVATIONS), "spec.ACTIVATIONS and the ABI disagree"


class Params(ctypes.Structure):
    """Mirror of trtgn_params_t (C enums are int-sized on every supported ABI)."""

    _fields_ = [
        ("x", ctypes.c_void_p),
        ("y", ctypes.c_void_p),
        ("n", ctypes.c_int64),
        ("c", ctypes.c_int64),
        ("h", ctypes.c_int64),
        ("w", ctypes.c_int64),
        ("num_groups", ctypes.c_int64),
        ("channel_stride", ctypes.c_int64),
        ("layout", ctypes.c_int),
        ("dtype", ctypes.c_int),
        ("activation", ctypes.c_int),
        ("epsilon", ctypes.c_float),
        ("gamma", ctypes.c_void_p),
        ("beta", ctypes.c_void_p),
        ("affine_dtype", ctypes.c_int),
        ("pre_bias", ctypes.c_void_p),
        ("pre_bias_n_stride", ctypes.c_int64),
        ("residual", ctypes.c_void_p),
        ("sum_out", ctypes.c_void_p),
        ("pre_bias_float32", ctypes.c_int32),
    ]

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name, _ in self._fields_)
        return f"Params({fields})"


# The exit code of a kernels library status: the caller's input (a bad argument, a case the library
# does not support, a workspace it sized too small) is bad input; a CUDA error is a failure.
EXIT_CODE_BY_STATUS = {
    Status.INVALID_ARGUMENT: errors.EXIT_BAD_INPUT,
    Status.NOT_SUPPORTED: errors.EXIT_BAD_INPUT,
    Status.WORKSPACE_TOO_SMALL: errors.EXIT_BAD_INPUT,
    Status.CUDA_ERROR: errors.EXIT_FAILED,
}


class TrtGnError(errors.Error, RuntimeError):
    """A call of the kernels library returned an error status: ``status`` and ``status_name``, the
    library's own ``message``; its text is ``<status name>: <message>``; the exit code follows from
    the status (EXIT_CODE_BY_STATUS)."""

    def __init__(self, status: int, message: str):
        self.status = int(status)
        try:
            self.status_name = f"TRTGN_STATUS_{Status(self.status).name}"
        except ValueError:
            self.status_name = f"TRTGN_STATUS_<unknown {self.status}>"
        super().__init__(message, exit_code=EXIT_CODE_BY_STATUS.get(self.status, errors.EXIT_FAILED))
        self.args = (f"{self.status_name}: {self.message}",)


class LibraryError(errors.Error, OSError):
    """A native library is missing, does not load, or has an ABI this binding does not know: something
    needed is missing here (exit 3)."""

    exit_code = errors.EXIT_MISSING


class LibraryNotFoundError(LibraryError, FileNotFoundError):
    """The native library is in none of the places looked in."""


def _candidates(env: str, file_name: str, build_subdir: str) -> list[Path]:
    paths = []
    if os.environ.get(env):
        paths.append(Path(os.environ[env]))
    paths.append(_PACKAGE_DIR / "lib" / file_name)
    paths.append(_REPO_DIR / "build" / build_subdir / file_name)
    return paths


def _find(env: str, file_name: str, build_subdir: str, what: str, hint: str) -> Path:
    candidates = _candidates(env, file_name, build_subdir)
    if os.environ.get(env):
        # An explicit choice is never silently replaced by another library.
        if not candidates[0].is_file():
            raise LibraryNotFoundError(f"{env}={os.environ[env]} is not a file")
        return candidates[0]
    for path in candidates:
        if path.is_file():
            return path
    # One line: callers (skip reasons, report.md, the CLI) show the first line of the message.
    error = LibraryNotFoundError(
        f"trt_gn {what} library {file_name} not found; looked in: {', '.join(map(str, candidates))} "
        f"(and {env} is not set); {hint}, or set {env} to its path"
    )
    error.looked_in = candidates  # for messages of their own (trt_gn.engine.plugin_path)
    raise error


# What builds each library into the first place that is looked in after the environment variable.
KERNELS_BUILD_HINT = ("install trt_gn with pip on a machine with nvcc (it builds the kernels into <package>/lib), "
                      "or build them with `cmake -S plugin_src -B build && cmake --build build`")
PLUGIN_BUILD_HINT = ("build it with `bash scripts/build_plugin.sh` from a trt_gn checkout (it installs it into "
                     "<package>/lib), or install trt_gn with pip with TensorRT_ROOT set to TensorRT 10+ headers")


def find_kernels_library() -> Path:
    return _find(KERNELS_LIBRARY_ENV, spec.KERNELS_LIBRARY, "", "kernels", KERNELS_BUILD_HINT)


def find_plugin_library() -> Path:
    return _find(PLUGIN_LIBRARY_ENV, spec.PLUGIN_LIBRARY, "plugin", "TensorRT plugin", PLUGIN_BUILD_HINT)


def find_plugin_autoload_library(plugin_library: str | os.PathLike | None = None) -> Path:
    """The self-registering shim next to `plugin_library` (default: find_plugin_library()).

    The shim calls IPluginRegistry::loadLibrary on libtrt_gn_plugin.so in its own folder, so a
    shim found anywhere else would load a different plugin, or none.
    """
    plugin = Path(plugin_library) if plugin_library is not None else find_plugin_library()
    shim = plugin.parent / spec.PLUGIN_AUTOLOAD_LIBRARY
    if not shim.is_file():
        raise LibraryNotFoundError(
            f"trt_gn plugin autoload library {shim} not found: it must sit next to {plugin}, "
            f"which it loads from its own folder. It is built with the plugin into the same folder "
            f"(cmake --build build -> build/plugin/); copy both files together."
        )
    return shim


_lock = threading.Lock()
_loaded: ctypes.CDLL | None = None


def load() -> ctypes.CDLL:
    """Load the kernels library once (thread-safe) and check its ABI version."""
    global _loaded
    if _loaded is not None:
        return _loaded
    with _lock:
        if _loaded is not None:
            return _loaded
        path = find_kernels_library()
        try:
            lib = ctypes.CDLL(str(path))
        except OSError as exc:
            raise LibraryError(f"{path} does not load: {errors.first_line(exc)}", KERNELS_BUILD_HINT) from exc
        params_p = ctypes.POINTER(Params)
        size_p = ctypes.POINTER(ctypes.c_size_t)
        lib.trtgn_workspace_size.argtypes = [params_p, size_p]
        lib.trtgn_workspace_size.restype = ctypes.c_int
        lib.trtgn_workspace_size_max.argtypes = [params_p, size_p]
        lib.trtgn_workspace_size_max.restype = ctypes.c_int
        lib.trtgn_group_norm.argtypes = [params_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        lib.trtgn_group_norm.restype = ctypes.c_int
        lib.trtgn_last_error_message.argtypes = []
        lib.trtgn_last_error_message.restype = ctypes.c_char_p
        lib.trtgn_status_name.argtypes = [ctypes.c_int]
        lib.trtgn_status_name.restype = ctypes.c_char_p
        lib.trtgn_abi_version.argtypes = []
        lib.trtgn_abi_version.restype = ctypes.c_int
        version = lib.trtgn_abi_version()
        if not MIN_ABI_VERSION <= version <= ABI_VERSION:
            raise LibraryError(
                f"{path} has ABI version {version}, this trt_gn expects {ABI_VERSION}: rebuild the library"
            )
        if version >= 3:
            lib.trtgn_describe_plan.argtypes = [params_p, ctypes.c_char_p, ctypes.c_size_t]
            lib.trtgn_describe_plan.restype = ctypes.c_int
        lib.trtgn_kernels_ptx_arch.argtypes = [ctypes.POINTER(ctypes.c_int)]
        lib.trtgn_kernels_ptx_arch.restype = ctypes.c_int
        lib.trtgn_path = str(path)
        _loaded = lib
        return lib


def library_path() -> str:
    return load().trtgn_path


def is_available() -> bool:
    """True when the kernels library can be found and loaded."""
    try:
        load()
    except LibraryError:
        return False
    return True


def last_error_message() -> str:
    return load().trtgn_last_error_message().decode("utf-8", "replace")


def status_name(status: int) -> str:
    return load().trtgn_status_name(int(status)).decode("utf-8", "replace")


def abi_version() -> int:
    return load().trtgn_abi_version()


def _require_abi(needed: int, what: str) -> None:
    lib = load()
    version = lib.trtgn_abi_version()
    if version < needed:
        raise LibraryError(f"{lib.trtgn_path} has ABI version {version}; {what} needs {needed}: rebuild the library",
                           KERNELS_BUILD_HINT)


def require_pre_bias_float32() -> None:
    """Raise LibraryError unless the loaded kernels library reads pre_bias_float32 (ABI 5): an older
    one would read a float32 pre_bias as the affine dtype."""
    _require_abi(PRE_BIAS_FLOAT32_ABI_VERSION, "a float32 pre_bias beside weight and bias of another dtype")


def require_pre_add() -> None:
    """Raise LibraryError unless the loaded kernels library reads the pre-add fields of Params
    (ABI 4): an older one would silently ignore pre_bias, residual and sum_out."""
    _require_abi(PRE_ADD_ABI_VERSION, "a pre-add (pre_bias, residual)")


def kernels_ptx_arch() -> int:
    """The PTX architecture (major * 10 + minor) the kernels run from on the current CUDA device.

    Below 90 on a GPU of compute capability 9.0 or later, the library was built without a Hopper
    architecture: correct, but without its cluster and on-chip paths (see README). Raises TrtGnError
    where no CUDA device is usable.
    """
    arch = ctypes.c_int(0)
    _check(load().trtgn_kernels_ptx_arch(ctypes.byref(arch)))
    return arch.value


def _check(status: int) -> None:
    if status != Status.SUCCESS:
        # Read on the calling thread: the library keeps the message per thread.
        raise TrtGnError(status, last_error_message())


def workspace_size(params: Params) -> int:
    """Bytes of workspace trtgn_group_norm() needs (raises TrtGnError on bad params)."""
    size = ctypes.c_size_t(0)
    _check(load().trtgn_workspace_size(ctypes.byref(params), ctypes.byref(size)))
    return size.value


def workspace_size_max(params: Params) -> int:
    """Upper bound of workspace_size() over every smaller N, H, W."""
    size = ctypes.c_size_t(0)
    _check(load().trtgn_workspace_size_max(ctypes.byref(params), ctypes.byref(size)))
    return size.value


def group_norm(params: Params, workspace: int | None, workspace_bytes: int, stream: int | None) -> None:
    """Enqueue trtgn_group_norm() on `stream` (a cudaStream_t as int; 0/None: legacy default stream).

    `workspace` is a device pointer (int) of at least workspace_bytes bytes, or None/0 when
    workspace_size() is 0. Raises TrtGnError with the library's status and message.
    """
    _check(load().trtgn_group_norm(ctypes.byref(params), workspace or None, int(workspace_bytes), stream or None))


# Values of trtgn_describe_plan()'s "path" key.
PATHS = ("clusters", "on-chip-grid", "streaming-grid", "two-pass")
# The paths that run a pre-add (pre_bias, residual): all of them (a pre-add takes the plain call's
# path, but where a cluster would need more registers than a thread has).
PRE_ADD_PATHS = PATHS
_PLAN_INTS = ("vec", "blocks", "threads", "cluster", "split", "vpt", "slices", "chunk", "workspace")


def describe_plan(params: Params) -> dict:
    """The plan trtgn_group_norm() would run for `params` on the current device, launching nothing.

    A dict of trtgn_describe_plan()'s keys: "path" (one of PATHS, or "none" for an empty tensor),
    "kernel", "partials" and "why" (each path's verdict, "; "-separated) as strings, the others as
    ints. Raises TrtGnError on bad params or where the library predates ABI 3.
    """
    lib = load()
    if lib.trtgn_abi_version() < 3:
        raise TrtGnError(Status.NOT_SUPPORTED, f"{lib.trtgn_path} predates trtgn_describe_plan (ABI 3)")
    buf = ctypes.create_string_buffer(1024)
    _check(lib.trtgn_describe_plan(ctypes.byref(params), buf, len(buf)))
    return parse_plan(buf.value.decode("ascii"))


def parse_plan(text: str) -> dict:
    """trtgn_describe_plan()'s line as a dict (see describe_plan); "why", the last key, runs to the
    end of the line, spaces and all."""
    text, _, why = text.partition(" why=")
    plan: dict = {}
    for item in text.split():
        key, _, value = item.partition("=")
        plan[key] = int(value) if key in _PLAN_INTS else value
    if why:
        plan["why"] = why
    return plan
