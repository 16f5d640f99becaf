"""`trt-gn`: the command-line entry point. Each subcommand is a module trt_gn/cli/<name>.py
exposing register(subparsers), which adds its parser and sets `func` (args -> exit code).
register() imports no third-party package (every subcommand is registered at each start-up); a
subcommand imports what it needs when it runs, so `build` and `triton` run with the `serve` extra
alone (tests/test_serve_extra.py).

Every failure of every subcommand ends here, in one place: one line ``trt-gn <cmd>: error: ...``
(plus an optional hint line) and the exit code of trt_gn.errors, with no traceback unless
``--debug``. A subcommand reports what it can act on by raising trt_gn.errors.Error."""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
import threading
import traceback

from .. import errors
from ._errors import print_error

# Every subcommand module, in --help order; a module listed here that fails to import is an error.
SUBCOMMAND_MODULES = ("pipeline", "bench", "fuzz", "build", "triton", "serve", "export", "fuse", "validate")


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line plus a hint instead of the whole usage text."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n  hint: see `{self.prog} --help`\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="trt-gn", description="fused GroupNorm(+SiLU) kernels, TensorRT plugin and tools",
                     epilog="example: trt-gn pipeline   (the whole job on a tiny model; see trt-gn pipeline --help)")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in SUBCOMMAND_MODULES:
        module = importlib.import_module(f"{__name__}.{name}")
        module.register(subparsers)
    for sub in subparsers.choices.values():
        if not any("--debug" in action.option_strings for action in sub._actions):
            sub.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    return parser


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


def _command(argv: list[str]) -> str:
    return next((a for a in argv if a in SUBCOMMAND_MODULES), "")


class _Interrupts:
    """Ctrl-C (SIGINT) and SIGTERM (what `timeout`, `docker stop` and Kubernetes send) both raise
    KeyboardInterrupt, so that staged files are removed as they unwind, and end with the one exit
    code EXIT_INTERRUPTED. An interrupt is remembered: libraries that catch it and raise something
    else (torch's fake tensors turn it into a TypeError) still end as an interrupt."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self.seen = False

    def __call__(self, signum, frame):
        self.seen = True
        raise KeyboardInterrupt

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():
            for signum in self.SIGNALS:
                signal.signal(signum, self)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    prog = f"trt-gn {_command(argv)}".strip()
    debug = "--debug" in argv
    interrupts = _Interrupts()
    interrupts.install()
    try:
        parser = build_parser()
        args, extra = parser.parse_known_args(argv)
        if extra:  # reported by the subcommand's parser, so the line names the subcommand
            _subparsers(parser)[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
        return int(args.func(args) or 0)
    except errors.Error as exc:
        caught, (code, message, hint) = exc, (exc.exit_code, exc.message, exc.hint)
    except KeyboardInterrupt as exc:
        caught, (code, message, hint) = exc, (errors.EXIT_INTERRUPTED, "interrupted; nothing was written", "")
    except Exception as exc:
        caught = exc
        if not interrupts.seen:
            code, message, hint = _unexpected(exc)
        else:
            code, message, hint = errors.EXIT_INTERRUPTED, "interrupted; nothing was written", ""
    if debug:
        traceback.print_exception(caught)
    print_error(prog, message, hint)
    return code


def _unexpected(exc: Exception) -> tuple[int, str, str]:
    """(exit code, message, hint) of an exception that is no trt_gn.errors.Error."""
    hint = "nothing was written; rerun with --debug for the full traceback"
    missing = getattr(exc, "name", None) if isinstance(exc, ModuleNotFoundError) else None
    if missing and missing.split(".")[0] != "trt_gn":
        # A dependency this command needs is not installed here (e.g. the image's `serve` extra
        # holds only what `build` and `triton` need): a missing program or library, exit 3.
        return (errors.EXIT_MISSING, f"needs the Python module '{missing.split('.')[0]}', which is not installed",
                "install trt_gn with all its dependencies (pip install trt_gn, not only an extra); nothing was written")
    if isinstance(exc, OSError):  # a file the OS refused (read or write): name it
        where = f"{exc.filename}: " if exc.filename else ""
        return errors.EXIT_FAILED, f"{where}{exc.strerror or errors.first_line(exc)}", hint
    # never a bare traceback: one line, the traceback behind --debug
    return errors.EXIT_FAILED, f"{type(exc).__name__}: {errors.first_line(exc)}", hint


if __name__ == "__main__":
    sys.exit(main())
