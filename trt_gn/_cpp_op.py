"""The C++ kernels of torch.ops.trt_gn.group_norm_act and group_norm_act_add
(trt_gn/csrc/group_norm_act.cpp): built against the running torch, loaded, registered.

A C++ extension only loads into the torch it was compiled against, so no wheel can carry one for
every torch trt_gn accepts. It is compiled here instead, once per torch version, by
torch.utils.cpp_extension (a C++ compiler and ninja are needed; no CUDA toolkit: the file uses
only device-generic torch APIs), into

    $TRT_GN_CACHE_DIR/torch-op/torch-<version>-py<X><Y>-<hash>/trt_gn_torch_op.so

(default ~/.cache/trt_gn), where <hash> covers the source, the kernels ABI header, the flags and
torch's exact build. A later process finds the file there and only loads it. Concurrent builds
wait for each other (cpp_extension's lock file).
"""

from __future__ import annotations

import ctypes
import hashlib
import sys
import time
from pathlib import Path

from . import errors, spec

NAME = "trt_gn_torch_op"
CFLAGS = ("-O2", "-DNDEBUG")
# torch.utils.cpp_extension waits as long as its lock file exists: one left behind by a build that was
# killed would hold every later build forever. No build of this one file takes this long.
STALE_LOCK_S = 600

_PACKAGE_DIR = Path(__file__).resolve().parent
SOURCE = _PACKAGE_DIR / "csrc" / "group_norm_act.cpp"
# The kernels ABI header: installed into the package by `pip install .`; in a source checkout,
# plugin_src's.
HEADER_DIRS = (_PACKAGE_DIR / "include", _PACKAGE_DIR.parent / "plugin_src" / "include")
HEADER = Path("trt_gn") / "group_norm.h"


class CppOpError(errors.Error, RuntimeError):
    """The C++ op could not be built, loaded or registered; the message says why (exit 1)."""

    exit_code = errors.EXIT_FAILED


def header_dir() -> Path:
    for folder in HEADER_DIRS:
        if (folder / HEADER).is_file():
            return folder
    looked = ", ".join(str(d / HEADER) for d in HEADER_DIRS)
    raise CppOpError(f"the kernels ABI header is in none of: {looked}")


def build_dir() -> Path:
    """The folder of this torch's build: keyed by torch's version and build, Python's version, the
    source, the header and the flags, so that no build is ever loaded into a torch it was not made for."""
    import torch

    from .engine.loader import cache_dir

    if not SOURCE.is_file():
        raise CppOpError(f"the C++ source {SOURCE} is missing from this installation")
    digest = hashlib.sha256()
    for part in (SOURCE.read_bytes(), (header_dir() / HEADER).read_bytes(), torch.__version__.encode(),
                 str(torch.version.git_version).encode(), str(torch.version.cuda).encode(),
                 sys.version.encode(), " ".join(CFLAGS).encode()):
        digest.update(hashlib.sha256(part).digest())
    tag = f"torch-{torch.__version__}-py{sys.version_info.major}{sys.version_info.minor}-{digest.hexdigest()[:16]}"
    return cache_dir() / "torch-op" / tag


def library_file(folder: Path) -> Path:
    return folder / f"{NAME}.so"


def _first_error_line(output: str) -> str:
    """The line of a failed build's output that says what went wrong: the first that mentions an error
    (or a program not found), else the first that is not ninja's own."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    own = [line for line in lines if not line.startswith(("[", "FAILED:", "ninja: "))]
    for line in own:
        if "error" in line.lower() or "not found" in line.lower():
            return line
    return (own or lines or ["no output"])[0]


def build(log=None) -> Path:
    """The built library for the running torch: found in the cache, or compiled there now.

    `log(line)` receives a line as a build starts and ends (default: stderr), so a first call that
    compiles for tens of seconds says so. Raises CppOpError with the compiler's reason (the whole
    output kept in build.log in the build folder)."""
    folder = build_dir()
    target = library_file(folder)
    if target.is_file():
        return target
    if log is None:
        def log(line):
            print(line, file=sys.stderr, flush=True)
    import torch

    log(f"trt_gn: compiling the C++ op {spec.TORCH_NAMESPACE}::{spec.TORCH_OP_NAME} for torch {torch.__version__} "
        f"into {folder} (once per torch version, under a minute)")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CppOpError(f"cannot create the build folder {folder}: {e.strerror or e} "
                         "(TRT_GN_CACHE_DIR chooses another place)") from e
    lock = folder / "lock"
    try:
        if time.time() - lock.stat().st_mtime > STALE_LOCK_S:
            lock.unlink()
    except FileNotFoundError:
        pass
    started = time.perf_counter()
    try:
        from torch.utils import cpp_extension

        cpp_extension.load(name=NAME, sources=[str(SOURCE)], extra_include_paths=[str(header_dir())],
                           extra_cflags=list(CFLAGS), build_directory=str(folder), with_cuda=False,
                           is_python_module=False, verbose=False)
    except Exception as e:  # noqa: BLE001 - every build failure is reported the same way, with its reason
        text = str(e).strip() or type(e).__name__
        log_file = folder / "build.log"
        log_file.write_text(text + "\n")
        # cpp_extension's "Error building extension '<name>': <the compiler's output>"
        head, _, output = text.partition(": ")
        reason = _first_error_line(output) if head.startswith("Error building extension") else text.splitlines()[0]
        raise CppOpError(f"{reason} (the whole output: {log_file})") from e
    if not target.is_file():
        raise CppOpError(f"torch.utils.cpp_extension reported no error but wrote no {target}")
    log(f"trt_gn: compiled the C++ op in {time.perf_counter() - started:.0f} s: {target}")
    return target


def register(path: Path, kernels) -> None:
    """Load the built library and register its CUDA and AutogradCUDA kernels, bound to the functions
    of `kernels` (the ctypes.CDLL trt_gn.abi.load() returns). Raises CppOpError."""
    try:
        # PyDLL: the registration runs holding the GIL, as any other registration of the op does.
        library = ctypes.PyDLL(str(path))
        entry = library.trt_gn_torch_register
    except (OSError, AttributeError) as e:
        raise CppOpError(f"{path} does not load: {e}") from e
    entry.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
    entry.restype = ctypes.c_int

    def address(function) -> int:
        return ctypes.cast(function, ctypes.c_void_p).value

    error = ctypes.create_string_buffer(1024)
    if entry(address(kernels.trtgn_workspace_size), address(kernels.trtgn_group_norm),
             address(kernels.trtgn_last_error_message), kernels.trtgn_abi_version(), error, len(error)) != 0:
        raise CppOpError(f"{path}: {error.value.decode('utf-8', 'replace')}")
