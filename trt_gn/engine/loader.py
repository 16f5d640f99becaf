"""TensorRT and TensorRT-RTX, imported: the engine errors and install hints, the TensorRT-RTX
loader folder, and the process's one logger per TensorRT module.

TensorRT-RTX's PyPI wheel lacks the unversioned library name its ONNX parser dlopen()s;
``prepare_tensorrt_rtx_loader`` arranges for it and must run before anything in the process
imports TensorRT-RTX, which ``import_tensorrt_rtx`` guarantees for trt_gn's own imports.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import os
import sys
import tempfile
from pathlib import Path

from ..errors import EXIT_FAILED, EXIT_MISSING, Error

TENSORRT_INSTALL_HINT = (
    "install TensorRT 10 or later with its Python bindings: `pip install tensorrt-cu12` "
    "(or tensorrt-cu13 for CUDA 13) from NVIDIA's package index, or run inside an NGC "
    "container (nvcr.io/nvidia/tensorrt or nvcr.io/nvidia/tritonserver)"
)


TENSORRT_RTX_PIP = "pip install tensorrt-rtx-cu13-libs tensorrt-rtx-cu13-bindings"
TENSORRT_RTX_INSTALL_HINT = f"install TensorRT-RTX from PyPI: `{TENSORRT_RTX_PIP}` (1.7, CPython 3.11 or 3.12, Linux x86_64)"


class EngineBuildError(Error, RuntimeError):
    """A build could not be done; ``hint`` says what to do about it. Bad input by default (exit 2);
    TensorRT's own failures carry exit_code EXIT_FAILED."""


class TensorRTNotInstalledError(EngineBuildError):
    """``import tensorrt`` (or TensorRT-RTX's bindings) failed."""

    exit_code = EXIT_MISSING


class UnsupportedTargetError(EngineBuildError):
    """A --target-cc that the installed TensorRT-RTX builds no plans for (a bad argument)."""


def import_tensorrt():
    """Import TensorRT (>= 10) or raise TensorRTNotInstalledError with the install hint."""
    try:
        import tensorrt as trt
    except ImportError as exc:
        raise TensorRTNotInstalledError(f"TensorRT is not installed (import tensorrt failed: {exc})",
                                        TENSORRT_INSTALL_HINT) from exc
    major = int(str(trt.__version__).split(".")[0])
    if major < 10:
        raise TensorRTNotInstalledError(
            f"TensorRT {trt.__version__} is too old: the trt_gn plugin is an IPluginV3, which needs TensorRT 10 or later",
            TENSORRT_INSTALL_HINT)
    return trt


# TensorRT-RTX's Python packages: the bindings module (the name differs between packagings) and
# the wheel that carries its shared libraries.
_RTX_MODULES = ("tensorrt_rtx", "tensorrt_rtx_bindings")
_RTX_LIBS_MODULE = "tensorrt_rtx_libs"
_RTX_LIBRARY = "libtensorrt_rtx.so.1"
_RTX_LIBRARY_UNVERSIONED = "libtensorrt_rtx.so"
_RTX_PARSER_LIBRARY = "libtensorrt_onnxparser_rtx.so.1"
CACHE_DIR_ENV = "TRT_GN_CACHE_DIR"
_rtx_loader_folder: Path | None = None


def cache_dir() -> Path:
    """trt_gn's own cache folder: $TRT_GN_CACHE_DIR, else $XDG_CACHE_HOME/trt_gn or ~/.cache/trt_gn."""
    if os.environ.get(CACHE_DIR_ENV):
        return Path(os.environ[CACHE_DIR_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "trt_gn"


def _symlink_atomic(link: Path, target: Path) -> None:
    if link.is_symlink() and os.readlink(link) == str(target):
        return
    tmp = link.with_name(f".{link.name}.{os.getpid()}.tmp")
    try:
        os.symlink(target, tmp)
        os.replace(tmp, link)
    finally:
        if tmp.is_symlink():
            tmp.unlink()


def prepare_tensorrt_rtx_loader() -> Path | None:
    """Make TensorRT-RTX's unversioned dlopen() work; returns the loader folder used (None: not needed).

    TensorRT-RTX's ONNX parser dlopen()s ``libtensorrt_rtx.so`` when it imports a plugin node, but
    the PyPI wheel ships ``libtensorrt_rtx.so.1`` only: the dlopen fails and the process ends in
    std::terminate. The loader searches the RPATH ($ORIGIN) of the TensorRT-RTX libraries, and
    $ORIGIN is the folder a library was loaded from, symlinks not resolved. So trt_gn keeps a folder
    of symlinks (``<cache>/tensorrt-rtx/<hash>/``: both sonames and the unversioned name, pointing
    at the wheel's files) and loads the libraries from there, RTLD_GLOBAL, before the bindings are
    imported; the bindings then find them loaded (same sonames), and the parser's dlopen finds the
    unversioned name in their $ORIGIN. Nothing is written into the installed package. This has to
    run before anything in the process imports TensorRT-RTX.
    """
    global _rtx_loader_folder
    if _rtx_loader_folder is not None:
        return _rtx_loader_folder
    found = importlib.util.find_spec(_RTX_LIBS_MODULE)
    if found is None or not found.submodule_search_locations:
        return None  # not the PyPI packaging: the libraries come from the loader path as installed
    libs = Path(list(found.submodule_search_locations)[0])
    real = libs / _RTX_LIBRARY
    if not real.is_file() or (libs / _RTX_LIBRARY_UNVERSIONED).exists():
        return None
    if _RTX_LIBS_MODULE in sys.modules:
        raise EngineBuildError(
            f"TensorRT-RTX was imported before trt_gn could arrange for its unversioned library "
            f"{_RTX_LIBRARY_UNVERSIONED}, which its ONNX parser needs for plugin nodes",
            "let trt_gn import it first (trt_gn.engine.import_tensorrt_rtx()), or create the symlink "
            f"{libs / _RTX_LIBRARY_UNVERSIONED} -> {_RTX_LIBRARY}")
    key = hashlib.sha256(str(real.resolve()).encode()).hexdigest()[:16]
    folders = [cache_dir() / "tensorrt-rtx" / key,
               Path(tempfile.gettempdir()) / f"trt_gn-{os.getuid()}" / "tensorrt-rtx" / key]
    errors = []
    for folder in folders:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            _symlink_atomic(folder / _RTX_LIBRARY, real)
            _symlink_atomic(folder / _RTX_LIBRARY_UNVERSIONED, real)
            if (libs / _RTX_PARSER_LIBRARY).is_file():
                _symlink_atomic(folder / _RTX_PARSER_LIBRARY, libs / _RTX_PARSER_LIBRARY)
            break
        except OSError as exc:
            errors.append(f"{folder}: {exc}")
    else:
        raise EngineBuildError(f"could not write the TensorRT-RTX loader folder ({'; '.join(errors)})",
                               f"set {CACHE_DIR_ENV} to a writable folder", exit_code=EXIT_FAILED)
    try:
        ctypes.CDLL(str(folder / _RTX_LIBRARY), mode=ctypes.RTLD_GLOBAL)
        if (folder / _RTX_PARSER_LIBRARY).exists():
            ctypes.CDLL(str(folder / _RTX_PARSER_LIBRARY), mode=ctypes.RTLD_GLOBAL)
    except OSError as exc:
        raise TensorRTNotInstalledError(f"TensorRT-RTX's library {real} does not load: {exc}",
                                        TENSORRT_RTX_INSTALL_HINT) from exc
    _rtx_loader_folder = folder
    return folder


def import_tensorrt_rtx():
    """Import TensorRT-RTX's Python bindings (after prepare_tensorrt_rtx_loader) or raise
    TensorRTNotInstalledError with the install hint."""
    missing = []
    for name in _RTX_MODULES:
        if name in sys.modules:
            return sys.modules[name]
        if importlib.util.find_spec(name) is None:
            missing.append(name)
            continue
        prepare_tensorrt_rtx_loader()
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            raise TensorRTNotInstalledError(f"TensorRT-RTX does not import ({name}: {exc})",
                                            TENSORRT_RTX_INSTALL_HINT) from exc
        if not hasattr(module, "Builder"):
            continue  # a namespace package without the bindings
        return module
    raise TensorRTNotInstalledError(f"TensorRT-RTX is not installed (no module {' or '.join(missing)})",
                                    TENSORRT_RTX_INSTALL_HINT)


_LOGGERS: dict = {}  # TensorRT module -> its one logger


def make_logger(trt):
    """The process's one logger for ``trt``, emptied for the next build.

    TensorRT (and TensorRT-RTX) route messages from plugins (ILoggerFinder) to the logger of the
    first builder or runtime still alive, not to the newest one; one logger object for all
    builds keeps the plugin's reasons where ``build_engine`` reads them. Not for concurrent builds.
    """
    logger = _LOGGERS.get(trt)
    if logger is None:
        class _Logger(trt.ILogger):
            """Keeps errors and warnings so that the final error line can quote TensorRT."""

            def __init__(self):
                trt.ILogger.__init__(self)
                self.errors: list[str] = []
                self.warnings: list[str] = []

            def log(self, severity, msg):
                if severity in (trt.ILogger.Severity.INTERNAL_ERROR, trt.ILogger.Severity.ERROR):
                    self.errors.append(msg)
                elif severity == trt.ILogger.Severity.WARNING:
                    self.warnings.append(msg)

        logger = _LOGGERS[trt] = _Logger()
    logger.errors.clear()
    logger.warnings.clear()
    return logger


def last_error(logger, default: str) -> str:
    """The first line of the last error TensorRT logged, else ``default``."""
    return logger.errors[-1].strip().splitlines()[0] if logger.errors else default
