"""The op's C++ implementation on a GPU: active, the Python implementation's results to the bit and
the float64 reference's within tolerance, the Python implementation's errors (type and message),
torch.compile with fullgraph through it, and its host time per call against stock PyTorch's."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch
from gpu_helpers import DTYPES, GPU, affine_for

from trt_gn import ops
from trt_gn.lab import bench
from trt_gn.compile_check import CheckedCompile, raised_recompile_limits
from trt_gn.reference import assert_close, group_norm_act_reference

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: helpers shared with the CPU tests
from fresh_python import child, result  # noqa: E402
from op_bad_inputs import BAD_INPUTS, bad_cases, outcomes  # noqa: E402

pytestmark = GPU

DEVICE = "cuda"
op = torch.ops.trt_gn.group_norm_act


@pytest.fixture(scope="module", autouse=True)
def cpp_active():
    if os.environ.get(ops.IMPLEMENTATION_ENV, "").strip().lower() == "python":
        pytest.skip("TRT_GN_TORCH_OP=python chooses the Python implementation")
    impl = ops.implementation()
    assert impl.kind == "cpp", f"the C++ op is not active here: {impl}"
    return impl


def test_cuda_calls_dispatch_to_cpp():
    table = {line.split(":")[0]: line for line in torch._C._dispatch_dump_table(ops.OP_NAME).splitlines()}
    for key in ("CUDA", "AutogradCUDA"):
        assert "trt_gn/csrc/group_norm_act.cpp" in table[key], table[key]


def test_first_cuda_call_chooses_and_runs_cpp(tmp_path):
    """In a fresh process, by default, the op's first CUDA call makes the choice, registers the C++
    kernels and has them run that very call (the Python implementation is made to fail there)."""
    code = """
        import json, torch
        from trt_gn import ops
        from trt_gn.reference import assert_close, group_norm_act_reference

        def python_ran(*args):
            raise AssertionError("the Python implementation ran the CUDA call")

        ops._group_norm_act_cuda = python_ran
        before = "trt_gn/csrc/group_norm_act.cpp" in torch._C._dispatch_dump_table(ops.OP_NAME)
        chosen_before = ops._choice is not None
        x = torch.randn(2, 64, 8, 8, device="cuda", dtype=torch.float16).contiguous(memory_format=torch.channels_last)
        y = torch.ops.trt_gn.group_norm_act(x, None, None, 8, 1e-5, "silu")
        assert_close(y, group_norm_act_reference(x, None, None, 8, 1e-5, "silu"), torch.float16)
        z = torch.ops.trt_gn.group_norm_act(y, None, None, 8, 1e-5, "none")
        print(json.dumps([before, chosen_before, ops.implementation().kind,
                          y.is_contiguous(memory_format=torch.channels_last), z.shape == x.shape]))
    """
    # the default choice, with this process's cache (the C++ op is built already)
    assert result(child(code, tmp_path, own_cache=False)) == [False, False, "cpp", True, True]


def _inputs(shape, dtype, layout, generator):
    x = (torch.randn(shape, device=DEVICE, generator=generator) * 2 + 0.5).to(dtype)
    if layout == "channels_last":
        return x.contiguous(memory_format=torch.channels_last)
    if layout == "strided":  # neither NCHW- nor NHWC-contiguous: copied to contiguous first
        return x.transpose(2, 3).contiguous().transpose(2, 3)
    return x


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[1])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "strided"])
def test_cpp_matches_python_and_reference(dtype, layout):
    """Every affine kind and activation on shapes of each path's size class, odd sizes and 1x1 images
    (contiguous and channels_last at once); the same bits as the Python implementation (the same
    kernels, so the same parameters must reach them), and the reference's tolerance."""
    gen = torch.Generator(device=DEVICE).manual_seed(52)
    for shape, groups in (((1, 32, 8, 8), 32), ((2, 320, 24, 24), 32), ((3, 96, 7, 5), 32), ((2, 64, 1, 1), 8),
                          ((1, 512, 64, 64), 32)):
        x = _inputs(shape, dtype, layout, gen)
        for kind in ("x", "fp32", "none", "mixed"):
            weight, bias = affine_for(shape[1], "x" if kind == "mixed" else kind, dtype, DEVICE, gen)
            if kind == "mixed":
                bias = bias.float()
            for activation in ("silu", "none"):
                what = f"{shape} {layout} {kind} {activation}"
                y = op(x, weight, bias, groups, 1e-5, activation)
                python = ops._group_norm_act_cuda(x, weight, bias, groups, 1e-5, activation)
                assert y.dtype == dtype and y.shape == x.shape and y.stride() == python.stride(), what
                if layout == "channels_last":
                    assert y.is_contiguous(memory_format=torch.channels_last), what
                else:
                    assert y.is_contiguous(), what
                assert torch.equal(y, python), what
                assert_close(y, group_norm_act_reference(x, weight, bias, groups, 1e-5, activation), dtype,
                             what=what)


def test_cpp_zero_size_and_non_default_stream():
    for shape in ((0, 64, 4, 4), (2, 64, 0, 4)):
        x = torch.empty(shape, device=DEVICE, dtype=torch.float16).contiguous(memory_format=torch.channels_last)
        y = op(x, None, None, 8, 1e-5, "silu")
        assert y.shape == shape and y.stride() == ops._group_norm_act_cuda(x, None, None, 8, 1e-5, "silu").stride()
    x = torch.randn(2, 320, 16, 16, device=DEVICE, dtype=torch.bfloat16)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        y = op(x, None, None, 32, 1e-6, "silu")
    stream.synchronize()
    assert_close(y, group_norm_act_reference(x, None, None, 32, 1e-6, "silu"), torch.bfloat16)


def test_cpp_raises_what_the_python_implementation_raises(tmp_path):
    cpp = outcomes(bad_cases(DEVICE))
    code = """
        import json
        from op_bad_inputs import bad_cases, outcomes
        from trt_gn import ops
        print(json.dumps([str(ops.implementation()), outcomes(bad_cases("cuda"))]))
    """
    python_impl, python = result(child(code, tmp_path, own_cache=False, TRT_GN_TORCH_OP="python"))
    assert python_impl == "Python (TRT_GN_TORCH_OP=python)"
    assert cpp == python
    assert cpp[:len(BAD_INPUTS)] == [[error.__name__, message] for _, error, message in BAD_INPUTS]
    assert cpp[len(BAD_INPUTS):] == [
        ["ValueError", "group_norm_act: weight is on cpu but x is on cuda:0"],
        ["TypeError", "group_norm_act: bias dtype torch.float16 must be x's dtype torch.float32 or torch.float32"],
        ["TrtGnError", "TRTGN_STATUS_INVALID_ARGUMENT: epsilon must be finite and >= 0, got inf"]]


def test_cpp_is_inference_only():
    x = torch.randn(1, 64, 4, 4, device=DEVICE, requires_grad=True)
    y = op(x, None, None, 8, 1e-5, "silu")
    assert y.requires_grad
    with pytest.raises(RuntimeError) as info:
        y.sum().backward()
    assert str(info.value) == ("Trying to backward through trt_gn.group_norm_act.default but no autograd formula "
                               "was registered. Please use register_autograd to add one.")
    with torch.no_grad():
        assert not op(x, None, None, 8, 1e-5, "silu").requires_grad


@pytest.mark.parametrize("layout", ["channels_last", "contiguous"])
def test_torch_compile_fullgraph_through_the_op(layout):
    """Inductor compiles a function around the op as one graph without breaks, calls the op from it
    (no eager fallback, nothing compiled again), and gives the eager results."""
    gen = torch.Generator(device=DEVICE).manual_seed(53)
    x = _inputs((2, 320, 16, 16), torch.float16, layout, gen)
    weight, bias = affine_for(320, "fp32", torch.float16, DEVICE, gen)

    def f(x, weight, bias):
        h = op(x * 2, weight, bias, 32, 1e-5, "silu")
        return op(h + 1, None, None, 16, 1e-6, "none")

    with raised_recompile_limits():
        compiled = CheckedCompile(f, f"compile through the op ({layout})", backend="inductor", fullgraph=True)
        out = compiled.first_call(x, weight, bias)
        again = compiled(x, weight, bias)
        compiled.check_settled()
    assert compiled.graphs == 1 and compiled.graph_breaks == 0
    expected = f(x, weight, bias)
    assert out.stride() == expected.stride()
    assert torch.equal(out, expected) and torch.equal(again, expected)


def test_host_time_per_call_against_stock():
    """On a launch-bound tensor, with stock and ours in the same run: ours eager at most 0.7x stock's
    eager time per call, and inside a compiled function at most stock's compiled time per call."""
    times = bench.run_host_overhead(calls=500, rounds=5)
    eager, compiled = bench.host_ratios(times)
    table = ", ".join(f"{t.variant} {t.us_per_call:.1f} us" for t in times.values())
    assert eager <= 0.70, f"eager ratio {eager:.2f} > 0.70 ({table})"
    assert compiled <= 1.00, f"compiled ratio {compiled:.2f} > 1.00 ({table})"
