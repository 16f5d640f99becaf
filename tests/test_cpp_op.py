"""The op's C++ implementation where no GPU is needed: the choice of implementation and how it is
reported, the build's failures and their reasons, and the real build against this torch, its
kernels registered at CUDA/AutogradCUDA and held to the Python implementation's checks, messages
and autograd behaviour (the CUDA kernel is entered by redispatch with CPU tensors: it rejects bad
arguments, and a status of the kernels library, before it touches a device).

Each case runs in a child process: the choice is made once per process, and registering the C++
kernels is for the life of one."""

from __future__ import annotations

import json
import os
import shutil
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from trt_gn import abi

from fresh_python import child, result
from op_bad_inputs import ADD_BAD_INPUTS, BAD_INPUTS

REPORT = """
    import json, warnings
    from trt_gn import ops
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            impl = ops.implementation()
            out = {"kind": impl.kind, "detail": impl.detail, "str": str(impl)}
        except Exception as e:
            out = {"error": type(e).__name__, "message": str(e)}
            try:  # asked again: the same error, not a second attempt
                ops.implementation()
            except Exception as again:
                out["again"] = str(again)
    out["warnings"] = [f"{w.category.__name__}: {w.message}" for w in caught]
    print(json.dumps(out))
"""


def test_python_by_choice(tmp_path):
    out = result(child(REPORT, tmp_path, TRT_GN_TORCH_OP="python"))
    assert out == {"kind": "python", "detail": "TRT_GN_TORCH_OP=python", "str": "Python (TRT_GN_TORCH_OP=python)",
                   "warnings": []}


def test_unknown_choice_is_an_error(tmp_path):
    out = result(child(REPORT, tmp_path, TRT_GN_TORCH_OP="fast"))
    message = "TRT_GN_TORCH_OP='fast': expected one of auto, cpp, python"
    assert out == {"error": "ValueError", "message": message, "again": message, "warnings": []}


@pytest.mark.skipif(torch.version.cuda is not None, reason="this torch has CUDA")
def test_cpu_only_torch_runs_python(tmp_path):
    out = result(child(REPORT, tmp_path))
    detail = f"torch {torch.__version__} is built without CUDA"
    assert out == {"kind": "python", "detail": detail, "str": f"Python ({detail})", "warnings": []}
    assert not (tmp_path / "cache").exists()  # nothing was built


def refusing_compiler(folder: Path) -> Path:
    """A C++ compiler that answers the questions torch.utils.cpp_extension asks it (its version) and
    fails to compile the way a real one does: a message with 'error:' on stderr, status 1."""
    folder.mkdir()
    compiler = folder / "c++"
    compiler.write_text(textwrap.dedent("""\
        #!/bin/sh
        case "$1" in
          -v) echo "gcc version 12.2.0" >&2; exit 0 ;;
          --version) echo "c++ (GCC) 12.2.0"; exit 0 ;;
          -dumpfullversion) echo "12.2.0"; exit 0 ;;
        esac
        echo "c++: error: this compiler refuses to compile" >&2
        exit 1
        """))
    compiler.chmod(0o755)
    return compiler


def needs_ninja():
    if shutil.which("ninja") is None:
        pytest.skip("ninja is not on PATH (torch.utils.cpp_extension builds with it)")


def test_failed_build_says_why(tmp_path, kernels_lib):
    needs_ninja()
    compiler = refusing_compiler(tmp_path / "bin")
    out = result(child(REPORT, tmp_path, TRT_GN_TORCH_OP="cpp", CXX=str(compiler)))
    assert out["error"] == "CppOpError"
    head = "TRT_GN_TORCH_OP=cpp, but the C++ op could not be built: c++: error: this compiler refuses to compile"
    assert out["message"].startswith(head + " (the whole output: ") and out["again"] == out["message"]
    log = Path(out["message"].rsplit("(the whole output: ", 1)[1].rstrip(")"))
    assert log.is_file() and "this compiler refuses to compile" in log.read_text()
    assert not list((tmp_path / "cache").rglob("*.so"))


def test_failed_build_falls_back_with_a_warning(tmp_path, kernels_lib):
    """With a torch that has CUDA (this one's version.cuda set to stand for it), the default choice
    builds; a failed build warns with the reason and leaves the Python implementation, which runs."""
    needs_ninja()
    compiler = refusing_compiler(tmp_path / "bin")
    code = """
        import json, warnings, torch
        torch.version.cuda = "13.0"
        from trt_gn import ops
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            impl = ops.implementation()
        y = torch.ops.trt_gn.group_norm_act(torch.randn(1, 4, 2, 2), None, None, 2, 1e-5, "silu")
        print(json.dumps({"kind": impl.kind, "detail": impl.detail, "shape": list(y.shape),
                          "warnings": [f"{w.category.__name__}: {w.message}" for w in caught]}))
    """
    out = result(child(code, tmp_path, CXX=str(compiler)))
    reason = "the C++ op could not be built: c++: error: this compiler refuses to compile (the whole output: "
    assert out["kind"] == "python" and out["detail"].startswith(reason) and out["shape"] == [1, 4, 2, 2]
    assert len(out["warnings"]) == 1
    assert out["warnings"][0].startswith(f"RuntimeWarning: trt_gn: {reason}")
    assert out["warnings"][0].endswith("runs its Python implementation on CUDA tensors, with more host time per "
                                       "call (TRT_GN_TORCH_OP=python chooses it without this warning)")


def test_unusable_cache_folder_says_why(tmp_path, kernels_lib):
    (tmp_path / "file").write_text("not a folder")
    out = result(child(REPORT, tmp_path, TRT_GN_TORCH_OP="cpp", TRT_GN_CACHE_DIR=str(tmp_path / "file")))
    assert out["error"] == "CppOpError"
    assert out["message"].startswith("TRT_GN_TORCH_OP=cpp, but the C++ op could not be built: cannot create the "
                                     f"build folder {tmp_path / 'file' / 'torch-op'}/torch-{torch.__version__}-")
    assert out["message"].endswith(": Not a directory (TRT_GN_CACHE_DIR chooses another place)")


def test_missing_ninja_says_why(tmp_path, kernels_lib):
    (tmp_path / "empty").mkdir()
    out = result(child(REPORT, tmp_path, TRT_GN_TORCH_OP="cpp", PATH=str(tmp_path / "empty")))
    assert out["error"] == "CppOpError"
    assert out["message"].startswith("TRT_GN_TORCH_OP=cpp, but the C++ op could not be built: Ninja is required to "
                                     "load C++ extensions")


CPP_CASES = """
    import json, sys, torch
    from op_bad_inputs import ADD_BAD_INPUTS, BAD_INPUTS
    from trt_gn import abi, ops
    from trt_gn.reference import group_norm_act_reference

    impl = ops.implementation()
    op = torch.ops.trt_gn.group_norm_act.default
    table = {line.split(":")[0]: line for line in torch._C._dispatch_dump_table(ops.OP_NAME).splitlines()}
    key = torch._C.DispatchKey

    def outcome(call):
        try:
            call()
        except Exception as e:
            return [type(e).__name__, str(e)]
        return None

    def cuda_kernel(*args):  # the C++ CUDA kernel itself, on CPU tensors
        return lambda: op.redispatch(torch._C.DispatchKeySet(key.CUDA), *args)

    bad = [outcome(cuda_kernel(*args)) for args, _, _ in BAD_INPUTS]
    good = (torch.randn(2, 8, 3, 3), torch.rand(8) + 0.5, torch.randn(8), 4, 1e-5, "silu")
    # eps passes the checks but is beyond float: the kernels library's own check fails
    library = outcome(cuda_kernel(torch.randn(2, 8, 3, 3), None, None, 4, 1e39, "silu"))
    x = torch.randn(1, 4, 2, 2, requires_grad=True)
    y = op.redispatch(torch._C.DispatchKeySet(key.AutogradCUDA), x, None, None, 2, 1e-5, "silu")
    cpu = op(*good)

    add = torch.ops.trt_gn.group_norm_act_add.default
    add_table = {line.split(":")[0]: line for line in torch._C._dispatch_dump_table(ops.ADD_OP_NAME).splitlines()}

    def add_cuda_kernel(*args):
        return lambda: add.redispatch(torch._C.DispatchKeySet(key.CUDA), *args)

    add_good = (torch.randn(2, 8, 3, 3), None, None, 4, 1e-5, "silu", torch.randn(8), torch.randn(2, 8, 3, 3), True)
    xa = torch.randn(1, 4, 2, 2, requires_grad=True)
    ya, sa = add.redispatch(torch._C.DispatchKeySet(key.AutogradCUDA), torch.empty(0, 4, 2, 2, requires_grad=True),
                            None, None, 2, 1e-5, "silu", torch.zeros(4), None, True)
    yp, sp = add(xa, None, None, 2, 1e-5, "silu", torch.zeros(4), None, True)
    print(json.dumps({
        "add_cuda": add_table.get("CUDA", ""), "add_autograd_cuda": add_table.get("AutogradCUDA", ""),
        "add_bad": [outcome(add_cuda_kernel(*args)) for args, _, _ in ADD_BAD_INPUTS],
        "add_good": outcome(add_cuda_kernel(*add_good)),
        "add_abi": abi.abi_version(),
        "add_empty": [list(ya.shape), list(sa.shape), ya.requires_grad, sa.requires_grad,
                      yp.requires_grad, sp.requires_grad],
        "add_grad": [outcome(lambda: ya.sum().backward()), outcome(lambda: yp.sum().backward())],
    }))
    print(json.dumps({
        "kind": impl.kind, "detail": impl.detail,
        "cuda": table.get("CUDA", ""), "autograd_cuda": table.get("AutogradCUDA", ""),
        "bad": bad, "good": outcome(cuda_kernel(*good)), "library": library,
        "grad": [y.requires_grad, outcome(lambda: y.sum().backward()),
                 outcome(lambda: op(x, None, None, 2, 1e-5, "silu").sum().backward())],
        "no_grad": op.redispatch(torch._C.DispatchKeySet(key.AutogradCUDA), x.detach(), None, None, 2, 1e-5,
                                 "silu").requires_grad,
        "cpu_exact": torch.equal(cpu, group_norm_act_reference(*good).float()),
    }))
"""


@pytest.fixture(scope="module")
def cpp_build(tmp_path_factory, kernels_lib):
    """A real build of the C++ op against this torch (once for the module), its child's result and
    stderr, and the cache folder."""
    if shutil.which("ninja") is None:
        pytest.skip("ninja is not on PATH (torch.utils.cpp_extension builds with it)")
    if shutil.which(os.environ.get("CXX", "c++")) is None:
        pytest.skip(f"no C++ compiler {os.environ.get('CXX', 'c++')} on PATH")
    tmp = tmp_path_factory.mktemp("cpp-op")
    proc = child(CPP_CASES, tmp, TRT_GN_TORCH_OP="cpp")
    assert proc.returncode == 0, proc.stderr
    add_line, line = proc.stdout.strip().splitlines()[-2:]
    return {**json.loads(line), **json.loads(add_line)}, proc.stderr, tmp


def test_cpp_build_registers_the_cuda_kernels(cpp_build):
    out, stderr, tmp = cpp_build
    assert out["add_cuda"] and out["add_autograd_cuda"]
    for line in (out["add_cuda"], out["add_autograd_cuda"]):
        assert "trt_gn/csrc/group_norm_act.cpp" in line, line
    assert out["kind"] == "cpp"
    so = Path(out["detail"])
    assert so.is_file() and so.parent.parent == tmp / "cache" / "torch-op"
    assert so.parent.name.startswith(f"torch-{torch.__version__}-py{sys.version_info.major}{sys.version_info.minor}-")
    assert f"trt_gn: compiling the C++ op trt_gn::group_norm_act for torch {torch.__version__} into {so.parent}" in stderr
    assert f"trt_gn: compiled the C++ op in " in stderr and stderr.rstrip().endswith(str(so))
    for line in (out["cuda"], out["autograd_cuda"]):
        assert "trt_gn/csrc/group_norm_act.cpp" in line, line


def test_cpp_kernel_raises_the_python_messages(cpp_build):
    out, _, _ = cpp_build
    assert out["bad"] == [[error.__name__, message] for _, error, message in BAD_INPUTS]
    assert out["good"] == ["RuntimeError", "group_norm_act: the CUDA kernel was given a tensor on cpu"]
    assert out["library"] == ["TrtGnError", "TRTGN_STATUS_INVALID_ARGUMENT: epsilon must be finite and >= 0, got inf"]


def test_cpp_autograd_is_inference_only_like_python(cpp_build):
    out, _, _ = cpp_build
    requires_grad, cpp_backward, python_backward = out["grad"]
    assert requires_grad and not out["no_grad"]
    assert cpp_backward == python_backward == [
        "RuntimeError", "Trying to backward through trt_gn.group_norm_act.default but no autograd formula was "
        "registered. Please use register_autograd to add one."]
    assert out["cpu_exact"]  # CPU calls still run the reference


def test_cpp_build_is_reused(cpp_build):
    out, _, tmp = cpp_build
    proc = child(REPORT, tmp, TRT_GN_TORCH_OP="cpp")
    again = result(proc)
    assert again["kind"] == "cpp" and again["detail"] == out["detail"]
    assert "compiling" not in proc.stderr


def test_cpp_add_kernel_raises_the_python_messages(cpp_build):
    out, _, _ = cpp_build
    assert out["add_bad"] == [[error.__name__, message] for _, error, message in ADD_BAD_INPUTS]
    if out["add_abi"] < 4:  # the library predates the pre-add: refused before anything runs
        assert out["add_good"] == [
            "LibraryError", f"{abi.library_path()} has ABI version {out['add_abi']}; a pre-add (pre_bias, residual) "
            "needs 4: rebuild the library"]
    else:
        assert out["add_good"] == ["RuntimeError", "group_norm_act: the CUDA kernel was given a tensor on cpu"]


def test_cpp_add_autograd_is_inference_only_like_python(cpp_build):
    out, _, _ = cpp_build
    # an empty x returns before the library is reached: shapes, and requires_grad as the Python op's
    assert out["add_empty"] == [[0, 4, 2, 2], [0, 4, 2, 2], True, True, True, True]
    no_formula = ("Trying to backward through trt_gn.group_norm_act_add.default but no autograd formula was "
                  "registered. Please use register_autograd to add one.")
    assert out["add_grad"] == [["RuntimeError", no_formula]] * 2
