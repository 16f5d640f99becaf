"""The files of a build: the plan's suffixes, the check of an output file before any work, the
atomic writer of the plan and the timing cache, and where the plugin library is."""

from __future__ import annotations

from pathlib import Path

from .. import fileio, spec
from ..errors import EXIT_MISSING, first_line
from .loader import EngineBuildError

PLAN_SUFFIXES = (".plan", ".engine")


def check_writable_file(path: Path, what: str) -> None:
    """Fail before any work when ``path`` cannot be created or replaced (fileio's one output-file
    check: a folder, a missing or unwritable folder, a FIFO or device, a name too long)."""
    problem = fileio.output_file_problem(path, example="model.plan")
    if problem:
        raise EngineBuildError(f"{what} {path}: {problem}",
                               "give the path of a regular file in an existing, writable folder")


# The plan and the timing cache are written with trt_gn's one atomic writer.
write_atomic = fileio.write_bytes


def plugin_path(explicit=None) -> Path:
    """The plugin library: `explicit` (--plugin) if given, else the one trt_gn finds; an
    EngineBuildError naming every place looked in (one line) when there is none."""
    if explicit is not None:
        path = Path(explicit)
        if not path.is_file():
            raise EngineBuildError(f"plugin library {path} (--plugin) does not exist",
                                   "build it with `cmake -S plugin_src -B build && cmake --build build`")
        return path.resolve()
    from .. import abi  # imported here: it is the one place that knows where the libraries live
    try:
        return Path(abi.find_plugin_library()).resolve()
    except FileNotFoundError as exc:
        looked = getattr(exc, "looked_in", None)
        where = f" (looked in: {', '.join(map(str, looked))})" if looked else f" ({first_line(exc)})"
        raise EngineBuildError(f"the TensorRT plugin library {spec.PLUGIN_LIBRARY} was not found{where}",
                               f"{abi.PLUGIN_BUILD_HINT}; or pass --plugin / set {abi.PLUGIN_LIBRARY_ENV}",
                               exit_code=EXIT_MISSING) from exc
