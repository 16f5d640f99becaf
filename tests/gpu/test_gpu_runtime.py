"""The CUDA op and the kernels library at run time: the op's CUDA path, memory formats, CUDA graphs,
streams, threads, and bad input on device buffers (nothing launched, nothing written)."""

from __future__ import annotations

import ctypes
import os
import threading

import pytest
import torch
from gpu_helpers import GPU, affine_for, params_for, poison_

from trt_gn import abi
from trt_gn.nn import GroupNormAct
from trt_gn.reference import assert_close, group_norm_act_reference

pytestmark = GPU

DEVICE = "cuda"
op = torch.ops.trt_gn.group_norm_act


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last])
def test_op_cuda(dtype, memory_format):
    torch.manual_seed(20)
    x = torch.randn(2, 320, 24, 24, device=DEVICE).to(dtype).contiguous(memory_format=memory_format)
    for kind in ("x", "fp32", "none"):
        weight, bias = affine_for(320, kind, dtype, DEVICE)
        y = op(x, weight, bias, 32, 1e-5, "silu")
        assert y.dtype == dtype and y.is_contiguous(memory_format=memory_format)
        assert_close(y, group_norm_act_reference(x, weight, bias, 32, 1e-5, "silu"), dtype, what=kind)


def test_op_cuda_mixed_affine_dtypes_and_strides():
    torch.manual_seed(21)
    x = torch.randn(2, 64, 10, 12, device=DEVICE, dtype=torch.float16)
    weight = torch.rand(64, device=DEVICE, dtype=torch.float16) + 0.5
    bias = torch.randn(64, device=DEVICE, dtype=torch.float32)
    assert_close(op(x, weight, bias, 8, 1e-5, "none"), group_norm_act_reference(x, weight, bias, 8, 1e-5, "none"))
    strided = x.transpose(2, 3).contiguous().transpose(2, 3)
    y = op(strided, weight, bias, 8, 1e-5, "silu")
    assert y.is_contiguous()
    assert_close(y, group_norm_act_reference(x, weight, bias, 8, 1e-5, "silu"))
    assert op(torch.empty(0, 64, 4, 4, device=DEVICE), None, None, 8, 1e-5, "silu").shape == (0, 64, 4, 4)


def test_module_cuda_matches_torch():
    torch.manual_seed(22)
    gn = torch.nn.GroupNorm(32, 640).to(DEVICE, torch.float16)
    with torch.no_grad():
        gn.weight.uniform_(0.5, 1.5)
        gn.bias.normal_()
    m = GroupNormAct.from_group_norm(gn)
    x = torch.randn(2, 640, 16, 16, device=DEVICE, dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        y = m(x)
    assert y.is_contiguous(memory_format=torch.channels_last)
    assert_close(y, group_norm_act_reference(x, gn.weight, gn.bias, 32, 1e-5, "silu"))


def test_cuda_graph_capture_and_replay():
    torch.manual_seed(23)
    x = torch.randn(2, 320, 32, 32, device=DEVICE, dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    weight, bias = affine_for(320, "fp32", torch.float16, DEVICE)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        op(x, weight, bias, 32, 1e-5, "silu")  # warm-up outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = op(x, weight, bias, 32, 1e-5, "silu")
        y2 = op(y, None, None, 16, 1e-6, "none")
    for _ in range(3):
        x.copy_(torch.randn_like(x))  # new data, same buffers
        poison_(y)
        graph.replay()
        torch.cuda.synchronize()
        ref = group_norm_act_reference(x, weight, bias, 32, 1e-5, "silu")
        assert_close(y, ref, torch.float16)
        assert_close(y2, group_norm_act_reference(y, None, None, 16, 1e-6, "none"), torch.float16)


def test_runs_on_the_current_stream_only():
    """Data made on a busy side stream is read correctly: the kernels follow that stream, not the default one."""
    torch.manual_seed(24)
    stream = torch.cuda.Stream()
    x = torch.zeros(2, 320, 64, 64, device=DEVICE, dtype=torch.float16)
    new = torch.randn_like(x)
    torch.cuda.synchronize()
    with torch.cuda.stream(stream):
        torch.cuda._sleep(50_000_000)  # keep the stream busy (~tens of ms) so a wrong stream would race
        x.copy_(new)
        y = op(x, None, None, 32, 1e-5, "silu")
    stream.synchronize()
    assert_close(y, group_norm_act_reference(new, None, None, 32, 1e-5, "silu"), torch.float16)


def _in_two_threads(work):
    """work(0) and work(1) in two threads, each on its own CUDA stream, started together; their results,
    once both streams are done (an exception in either fails the test here)."""
    results, errors = [None, None], []
    barrier = threading.Barrier(2)

    def run(i):
        try:
            stream = torch.cuda.Stream()
            with torch.cuda.stream(stream):
                barrier.wait()
                results[i] = work(i)
            stream.synchronize()
        except BaseException as e:  # reported from the main thread
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    return results


def test_two_threads_two_streams():
    torch.manual_seed(25)
    inputs = [torch.randn(2, 640, 32, 32, device=DEVICE, dtype=dt) for dt in (torch.float16, torch.bfloat16)]
    inputs[1] = inputs[1].contiguous(memory_format=torch.channels_last)
    refs = [group_norm_act_reference(x, None, None, 32, 1e-5, "silu") for x in inputs]
    results = _in_two_threads(lambda i: [op(inputs[i], None, None, 32, 1e-5, "silu") for _ in range(50)])
    for outs, ref, x in zip(results, refs, inputs):
        for y in (outs[0], outs[-1]):
            assert_close(y, ref, x.dtype)
        assert all(torch.equal(outs[0], y) for y in outs), "results differ between launches"


def test_kernels_ptx_arch():
    """The PTX architecture the kernels run from: the one scripts/gpu_check.sh built the library for,
    where it says so (TRT_GN_EXPECT_PTX_ARCH: 90, or 80 for its sm_80 build), and never newer than the GPU."""
    arch = abi.kernels_ptx_arch()
    major, minor = torch.cuda.get_device_capability()
    assert 50 <= arch <= 10 * major + minor
    expected = os.environ.get("TRT_GN_EXPECT_PTX_ARCH")
    if expected:
        assert arch == int(expected)


def test_threads_with_different_shared_memory_sizes():
    """Two threads run the on-chip grid's fp16 NHWC kernel at once, with tiles of about 130 KB and 23 KB
    a block. Its shared-memory limit is an attribute of the function, for every thread: when each call
    set it to its own size, the other thread's smaller setting could land between a call's setting and
    its launch, and the launch failed."""
    torch.manual_seed(26)
    inputs = [
        torch.randn(n, c, h, w, device=DEVICE, dtype=torch.float16).contiguous(memory_format=torch.channels_last)
        for n, c, h, w in ((1, 512, 128, 128), (2, 320, 48, 48))
    ]
    refs = [group_norm_act_reference(x, None, None, 32, 1e-6, "silu") for x in inputs]

    def work(i):
        for _ in range(2000):  # outputs not kept: each is up to 16 MB
            y = op(inputs[i], None, None, 32, 1e-6, "silu")
        return y

    for y, ref in zip(_in_two_threads(work), refs):
        assert_close(y, ref, torch.float16)


BAD = [
    (dict(num_groups=0), abi.Status.INVALID_ARGUMENT),
    (dict(c=30), abi.Status.INVALID_ARGUMENT),
    (dict(channel_stride=16), abi.Status.INVALID_ARGUMENT),
    (dict(layout=9), abi.Status.INVALID_ARGUMENT),
    (dict(dtype=7), abi.Status.INVALID_ARGUMENT),
    (dict(activation=2), abi.Status.INVALID_ARGUMENT),
    (dict(x=None), abi.Status.INVALID_ARGUMENT),
]


@pytest.mark.parametrize("overrides,status", BAD, ids=[str(o) for o, _ in BAD])
def test_bad_input_on_device_buffers_writes_nothing(overrides, status):
    x = torch.randn(2, 32, 8, 8, device=DEVICE, dtype=torch.float16)
    y = poison_(torch.empty_like(x))
    params = params_for(x, y, None, None, 8, 1e-5, "silu", "nchw")
    for key, value in overrides.items():
        setattr(params, key, value)
    workspace = torch.empty(1 << 22, dtype=torch.uint8, device=DEVICE)
    with pytest.raises(abi.TrtGnError) as info:
        abi.group_norm(params, workspace.data_ptr(), workspace.numel(), torch.cuda.current_stream().cuda_stream)
    assert info.value.status == status and info.value.message
    torch.cuda.synchronize()
    assert torch.isnan(y).all(), "a rejected call wrote to y"


def test_workspace_too_small_on_device_writes_nothing():
    x = torch.randn(2, 320, 16, 16, device=DEVICE, dtype=torch.float16)
    y = poison_(torch.empty_like(x))
    params = params_for(x, y, None, None, 32, 1e-5, "silu", "nchw")
    need = abi.workspace_size(params)
    if need == 0:
        pytest.skip("this problem needs no workspace")
    workspace = torch.empty(need, dtype=torch.uint8, device=DEVICE)
    with pytest.raises(abi.TrtGnError) as info:
        abi.group_norm(params, workspace.data_ptr(), need - 1, 0)
    assert info.value.status == abi.Status.WORKSPACE_TOO_SMALL
    torch.cuda.synchronize()
    assert torch.isnan(y).all()


def test_zero_size_on_device():
    x = torch.empty(0, 32, 8, 8, device=DEVICE, dtype=torch.float16)
    params = params_for(x, x, None, None, 8, 1e-5, "silu", "nhwc")
    assert abi.workspace_size(params) == 0
    abi.group_norm(params, None, 0, torch.cuda.current_stream().cuda_stream)


def test_workspace_size_max_covers_the_sizes_used():
    x = torch.empty(4, 320, 64, 64, device=DEVICE, dtype=torch.float16)
    for layout in ("nhwc", "nchw"):
        bound = abi.workspace_size_max(params_for(x, x, None, None, 32, 1e-5, "silu", layout))
        for n, h, w in [(1, 1, 1), (4, 64, 64), (2, 64, 1), (3, 17, 64), (4, 8, 8)]:
            p = params_for(x, x, None, None, 32, 1e-5, "silu", layout, shape=(n, 320, h, w))
            assert abi.workspace_size(p) <= bound


def test_library_reports_its_path_and_version():
    assert abi.abi_version() == abi.ABI_VERSION
    assert isinstance(ctypes.CDLL(abi.library_path()), ctypes.CDLL)
