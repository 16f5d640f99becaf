"""The one error type of trt_gn and the one exit-code map of every `trt-gn` subcommand.

Every error a user can see is an :class:`Error` (the kernels library's TrtGnError and
LibraryNotFoundError included): a one-line ``message`` that names the file or
flag, an optional ``hint`` saying what to do, and the ``exit_code`` the CLI ends with. The CLI
prints it as

    trt-gn <command>: error: <message>
      hint: <hint>

Exit codes (README, "Errors and exit codes"):

    0    done; every check that ran passed
    1    failed: a check failed, or the work itself failed (TensorRT, onnxruntime, torch, a write)
    2    bad arguments or input (missing, unreadable or invalid file; unwritable output)
    3    something needed is missing here (TensorRT, a CUDA GPU, a native library, diffusers)
    130  interrupted

An error status of the kernels library maps onto it (trt_gn.abi.EXIT_CODE_BY_STATUS): invalid
argument or not supported 2, a CUDA error 1; a missing or unloadable library is 3.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_MISSING = 3
EXIT_INTERRUPTED = 130


class Error(Exception):
    """An error for the user: ``message`` (one line, naming the file or flag), ``hint`` (what to do,
    may be empty) and ``exit_code`` (the CLI's exit status; a class default, or given per error)."""

    exit_code = EXIT_BAD_INPUT
    default_hint = ""

    def __init__(self, message: str, hint: str = "", *, exit_code: int | None = None):
        message = " ".join(str(message).split("\n")).strip()  # one line, always
        super().__init__(message)
        self.message = message
        self.hint = hint or self.default_hint
        if exit_code is not None:
            self.exit_code = exit_code


def first_line(exc: BaseException) -> str:
    """The first line of an exception's text, or its type name when it has none."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
