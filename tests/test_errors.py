"""One error contract: every error trt_gn raises for a user derives from trt_gn.errors.Error, and the
exit code of a kernels library error follows from its status."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import trt_gn
from trt_gn import abi, errors

# Modules whose import needs what a CPU machine may lack, or that run inside another program:
# the Triton models run inside Triton's Python backend, where their errors become Triton's answers.
NOT_HERE = {"trt_gn.triton_models.onnxruntime_model", "trt_gn.triton_models.torch_model", "trt_gn.cli.__main__"}


def _exception_classes():
    for info in pkgutil.walk_packages(trt_gn.__path__, "trt_gn."):
        if info.name in NOT_HERE:
            continue
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            # Private ones (a leading "_") steer control flow inside a module and never reach a user.
            if issubclass(cls, BaseException) and cls.__module__ == info.name and not cls.__name__.startswith("_"):
                yield cls


def test_every_error_class_derives_from_error():
    classes = list(_exception_classes())
    assert abi.TrtGnError in classes and abi.LibraryNotFoundError in classes
    assert [c.__qualname__ for c in classes if not issubclass(c, errors.Error)] == []


@pytest.mark.parametrize("status, code", [
    (abi.Status.INVALID_ARGUMENT, errors.EXIT_BAD_INPUT),
    (abi.Status.NOT_SUPPORTED, errors.EXIT_BAD_INPUT),
    (abi.Status.WORKSPACE_TOO_SMALL, errors.EXIT_BAD_INPUT),
    (abi.Status.CUDA_ERROR, errors.EXIT_FAILED),
    (99, errors.EXIT_FAILED),
])
def test_kernels_error_exit_code_follows_the_status(status, code):
    exc = abi.TrtGnError(status, "what the library said")
    assert exc.exit_code == code and exc.message == "what the library said" and exc.hint == ""
    assert str(exc) == f"{exc.status_name}: what the library said"
    assert isinstance(exc, RuntimeError)  # callers that caught it as one still do


def test_missing_library_is_exit_3(tmp_path, monkeypatch):
    monkeypatch.setenv(abi.KERNELS_LIBRARY_ENV, str(tmp_path / "none.so"))
    with pytest.raises(abi.LibraryNotFoundError) as info:
        abi.find_kernels_library()
    assert info.value.exit_code == errors.EXIT_MISSING and isinstance(info.value, FileNotFoundError)
    assert info.value.message == f"{abi.KERNELS_LIBRARY_ENV}={tmp_path / 'none.so'} is not a file"


def test_cli_ends_a_kernels_error_with_its_exit_code(monkeypatch, capsys):
    from trt_gn import cli
    from trt_gn.cli import fuse

    def failing(args):
        raise abi.TrtGnError(abi.Status.INVALID_ARGUMENT, "num_groups must be > 0, got 0")

    monkeypatch.setattr(fuse, "run", failing)  # registered at each start-up: the parser takes it
    assert cli.main(["fuse", "a.onnx", "b.onnx"]) == errors.EXIT_BAD_INPUT
    assert capsys.readouterr().err == "trt-gn fuse: error: num_groups must be > 0, got 0\n"
