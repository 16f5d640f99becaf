"""The built kernels library through its C ABI (ctypes): argument validation, messages, no-ops.

Buffers here are host memory: every bad call must return before touching them or launching
anything, and the y buffer is checked unchanged. The GPU suite repeats the bad calls on device
buffers (tests/gpu/test_gpu_abi.py).
"""

from __future__ import annotations

import ctypes
import math
import re
import shutil
import subprocess
import threading
from pathlib import Path

import pytest
import torch

from trt_gn import abi
from trt_gn.abi import Activation, DType, Layout, Params, Status

HEADER = Path(__file__).resolve().parents[1] / "plugin_src" / "include" / "trt_gn" / "group_norm.h"

C, G = 32, 8
# The activation-sized tensors are carved from one arena, each in a slot four times its size, so
# that what lies next to a tensor (which the overlap checks see) is fixed, not the allocator's
# choice: a tensor, or one read with channel_stride 2c, never reaches the next slot.
_ACT = ctypes.c_uint16 * (2 * C * 4 * 4)
_arena = (ctypes.c_uint8 * (4 * 4 * ctypes.sizeof(_ACT)))()
_y_host, _x_host, _residual_host, _sum_host = (_ACT.from_buffer(_arena, 4 * i * ctypes.sizeof(_ACT)) for i in range(4))
_pre_bias_host = (ctypes.c_float * (2 * C))()
_gamma_host = (ctypes.c_float * C)()
_beta_host = (ctypes.c_float * C)()
_ws_raw = ctypes.create_string_buffer(8 << 20)
WS_ALIGNED = (ctypes.addressof(_ws_raw) + 255) // 256 * 256  # 256-byte aligned, 8 MiB - 256 usable
WS_BYTES = (8 << 20) - 256


def valid_params(**overrides) -> Params:
    fields = dict(
        x=ctypes.addressof(_x_host), y=ctypes.addressof(_y_host), n=2, c=C, h=4, w=4, num_groups=G,
        channel_stride=C, layout=Layout.NHWC, dtype=DType.FLOAT16, activation=Activation.SILU, epsilon=1e-5,
        gamma=ctypes.addressof(_gamma_host), beta=ctypes.addressof(_beta_host), affine_dtype=DType.FLOAT32,
    )
    fields.update(overrides)
    return Params(**fields)


def call(lib, params, workspace=WS_ALIGNED, nbytes=WS_BYTES) -> tuple[int, str]:
    before = bytes(_y_host)
    status = lib.trtgn_group_norm(ctypes.byref(params) if params is not None else None, workspace, nbytes, None)
    message = lib.trtgn_last_error_message().decode()
    assert bytes(_y_host) == before, "a failed call wrote to y"
    return status, message


def query(lib, params) -> tuple[int, str, int]:
    size = ctypes.c_size_t(12345)
    status = lib.trtgn_workspace_size(ctypes.byref(params), ctypes.byref(size))
    return status, lib.trtgn_last_error_message().decode(), size.value


# (overrides, status, exact message): each is checked by trtgn_group_norm and, where it is about
# the parameters alone, by trtgn_workspace_size and trtgn_workspace_size_max too.
PARAM_CASES = [
    (dict(n=-1), Status.INVALID_ARGUMENT, "sizes must be >= 0, got n=-1 c=32 h=4 w=4"),
    (dict(h=-3), Status.INVALID_ARGUMENT, "sizes must be >= 0, got n=2 c=32 h=-3 w=4"),
    (dict(num_groups=0), Status.INVALID_ARGUMENT, "num_groups must be > 0, got 0"),
    (dict(num_groups=-8), Status.INVALID_ARGUMENT, "num_groups must be > 0, got -8"),
    (dict(c=30, channel_stride=30), Status.INVALID_ARGUMENT, "c (30) must be divisible by num_groups (8)"),
    (dict(layout=7), Status.INVALID_ARGUMENT, "unknown layout 7"),
    (dict(dtype=9), Status.INVALID_ARGUMENT, "unknown dtype 9"),
    (dict(dtype=-1), Status.INVALID_ARGUMENT, "unknown dtype -1"),
    (dict(activation=2), Status.INVALID_ARGUMENT, "unknown activation 2"),  # 2 is reserved for GELU
    (dict(affine_dtype=DType.BFLOAT16), Status.INVALID_ARGUMENT,
     "affine_dtype 2 must be the input dtype (1) or TRTGN_DTYPE_FLOAT32"),
    (dict(affine_dtype=9, beta=None), Status.INVALID_ARGUMENT,
     "affine_dtype 9 must be the input dtype (1) or TRTGN_DTYPE_FLOAT32"),
    (dict(channel_stride=31), Status.INVALID_ARGUMENT, "channel_stride (31) must be >= c (32) for NHWC"),
    (dict(layout=Layout.NCHW, channel_stride=40), Status.INVALID_ARGUMENT,
     "channel_stride (40) must equal c (32) for NCHW"),
    (dict(epsilon=-1.0), Status.INVALID_ARGUMENT, "epsilon must be finite and >= 0, got -1"),
    (dict(epsilon=math.inf), Status.INVALID_ARGUMENT, "epsilon must be finite and >= 0, got inf"),
    (dict(epsilon=math.nan), Status.INVALID_ARGUMENT, "epsilon must be finite and >= 0, got nan"),
    # the pre-add (ABI 4)
    (dict(pre_bias=ctypes.addressof(_pre_bias_host), pre_bias_n_stride=5), Status.INVALID_ARGUMENT,
     "pre_bias_n_stride (5) must be 0 or c (32)"),
    (dict(pre_bias=ctypes.addressof(_pre_bias_host), pre_bias_n_stride=-32), Status.INVALID_ARGUMENT,
     "pre_bias_n_stride (-32) must be 0 or c (32)"),
    (dict(gamma=None, beta=None, pre_bias=ctypes.addressof(_pre_bias_host), affine_dtype=DType.BFLOAT16),
     Status.INVALID_ARGUMENT, "affine_dtype 2 must be the input dtype (1) or TRTGN_DTYPE_FLOAT32"),
    (dict(pre_bias=ctypes.addressof(_pre_bias_host), pre_bias_float32=1, affine_dtype=DType.BFLOAT16),
     Status.INVALID_ARGUMENT, "affine_dtype 2 must be the input dtype (1) or TRTGN_DTYPE_FLOAT32"),
    (dict(sum_out=ctypes.addressof(_sum_host)), Status.INVALID_ARGUMENT, "sum_out needs pre_bias or residual"),
    (dict(residual=ctypes.addressof(_residual_host), sum_out=ctypes.addressof(_x_host) + 2 * 100),
     Status.INVALID_ARGUMENT, "sum_out must not overlap x"),
    (dict(residual=ctypes.addressof(_residual_host), sum_out=ctypes.addressof(_residual_host) - 2),
     Status.INVALID_ARGUMENT, "sum_out must not overlap residual"),
    (dict(pre_bias=ctypes.addressof(_pre_bias_host), sum_out=ctypes.addressof(_y_host) + 2 * (len(_y_host) - 1)),
     Status.INVALID_ARGUMENT, "sum_out must not overlap y"),
    (dict(residual=ctypes.addressof(_y_host)), Status.INVALID_ARGUMENT, "y must not overlap residual (y may equal x)"),
    (dict(residual=ctypes.addressof(_residual_host), y=ctypes.addressof(_residual_host) + 64), Status.INVALID_ARGUMENT,
     "y must not overlap residual (y may equal x)"),
]


@pytest.mark.parametrize("overrides,status,message", PARAM_CASES, ids=[m for _, _, m in PARAM_CASES])
def test_bad_params(kernels_lib, overrides, status, message):
    params = valid_params(**overrides)
    assert call(kernels_lib, params) == (status, message)
    got_status, got_message, _ = query(kernels_lib, params)
    assert (got_status, got_message) == (status, message)
    size = ctypes.c_size_t(0)
    assert kernels_lib.trtgn_workspace_size_max(ctypes.byref(params), ctypes.byref(size)) == status
    assert kernels_lib.trtgn_last_error_message().decode() == message


def test_bad_params_raise_through_python_wrapper(kernels_lib):
    params = valid_params(c=30, channel_stride=30)
    with pytest.raises(abi.TrtGnError) as info:
        abi.group_norm(params, WS_ALIGNED, WS_BYTES, None)
    assert info.value.status == Status.INVALID_ARGUMENT
    assert info.value.status_name == "TRTGN_STATUS_INVALID_ARGUMENT"
    assert info.value.message == "c (30) must be divisible by num_groups (8)"
    assert str(info.value) == "TRTGN_STATUS_INVALID_ARGUMENT: c (30) must be divisible by num_groups (8)"
    with pytest.raises(abi.TrtGnError, match=r"^TRTGN_STATUS_INVALID_ARGUMENT: num_groups must be > 0, got 0$"):
        abi.workspace_size(valid_params(num_groups=0))


def test_null_params_and_null_size(kernels_lib):
    assert call(kernels_lib, None) == (Status.INVALID_ARGUMENT, "params is NULL")
    params = valid_params()
    assert kernels_lib.trtgn_workspace_size(ctypes.byref(params), None) == Status.INVALID_ARGUMENT
    assert kernels_lib.trtgn_last_error_message().decode() == "workspace_bytes is NULL"
    assert kernels_lib.trtgn_workspace_size_max(ctypes.byref(params), None) == Status.INVALID_ARGUMENT
    assert kernels_lib.trtgn_last_error_message().decode() == "workspace_bytes is NULL"


def test_null_data_pointers(kernels_lib):
    assert call(kernels_lib, valid_params(x=None)) == (Status.INVALID_ARGUMENT, "x is NULL")
    assert call(kernels_lib, valid_params(y=None)) == (Status.INVALID_ARGUMENT, "y is NULL")
    # x and y may be NULL in a workspace query
    status, message, size = query(kernels_lib, valid_params(x=None, y=None))
    assert (status, message) == (Status.SUCCESS, "")


def test_workspace_checks(kernels_lib):
    params = valid_params()
    need = abi.workspace_size(params)
    assert 0 < need <= WS_BYTES, "the test problem needs some workspace"
    assert call(kernels_lib, params, WS_ALIGNED, need - 1) == (
        Status.WORKSPACE_TOO_SMALL, f"workspace_bytes ({need - 1}) is smaller than the {need} bytes needed")
    assert call(kernels_lib, params, WS_ALIGNED, 0) == (
        Status.WORKSPACE_TOO_SMALL, f"workspace_bytes (0) is smaller than the {need} bytes needed")
    assert call(kernels_lib, params, None, need) == (
        Status.INVALID_ARGUMENT, f"workspace is NULL but {need} bytes are needed")
    assert call(kernels_lib, params, WS_ALIGNED + 16, need) == (
        Status.INVALID_ARGUMENT, "workspace must be 256-byte aligned")
    with pytest.raises(abi.TrtGnError) as info:
        abi.group_norm(params, WS_ALIGNED, need - 1, None)
    assert info.value.status_name == "TRTGN_STATUS_WORKSPACE_TOO_SMALL"


def test_workspace_size_max_bounds_smaller_shapes(kernels_lib):
    for layout in (Layout.NHWC, Layout.NCHW):
        big = valid_params(n=4, h=64, w=64, layout=layout)
        bound = abi.workspace_size_max(big)
        for n, h, w in [(1, 1, 1), (4, 64, 64), (3, 7, 64), (4, 1, 1), (2, 33, 17)]:
            assert abi.workspace_size(valid_params(n=n, h=h, w=w, layout=layout)) <= bound


@pytest.mark.parametrize("sizes", [dict(n=0), dict(h=0), dict(w=0), dict(n=0, h=0, w=0), dict(c=0, channel_stride=0)])
def test_zero_size_is_a_noop_success(kernels_lib, sizes):
    params = valid_params(x=None, y=None, **sizes)
    assert query(kernels_lib, params) == (Status.SUCCESS, "", 0)
    # no data, no workspace, no stream needed; also after a failed call the message is cleared
    assert call(kernels_lib, valid_params(num_groups=0))[0] == Status.INVALID_ARGUMENT
    assert call(kernels_lib, params, None, 0) == (Status.SUCCESS, "")
    abi.group_norm(params, None, 0, None)


def test_zero_size_still_validates(kernels_lib):
    assert call(kernels_lib, valid_params(n=0, num_groups=0), None, 0) == (
        Status.INVALID_ARGUMENT, "num_groups must be > 0, got 0")


def test_affine_dtype_ignored_without_affine(kernels_lib):
    status, message, _ = query(kernels_lib, valid_params(gamma=None, beta=None, affine_dtype=9))
    assert (status, message) == (Status.SUCCESS, "")


def test_valid_call_without_gpu_is_a_cuda_error(kernels_lib):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: a launch on host buffers would be invalid")
    params = valid_params()
    need = abi.workspace_size(params)
    status, message = call(kernels_lib, params, WS_ALIGNED, need)
    assert status == Status.CUDA_ERROR
    assert message.startswith("CUDA error: ") and len(message) > len("CUDA error: ")
    with pytest.raises(abi.TrtGnError, match=r"^TRTGN_STATUS_CUDA_ERROR: CUDA error: .+"):
        abi.group_norm(params, WS_ALIGNED, need, None)


def test_kernels_ptx_arch_bad_pointer_and_without_gpu(kernels_lib):
    assert kernels_lib.trtgn_kernels_ptx_arch(None) == Status.INVALID_ARGUMENT
    assert kernels_lib.trtgn_last_error_message().decode() == "arch is NULL"
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: tests/gpu checks the architecture it reports")
    arch = ctypes.c_int(12345)
    assert kernels_lib.trtgn_kernels_ptx_arch(ctypes.byref(arch)) == Status.CUDA_ERROR
    message = kernels_lib.trtgn_last_error_message().decode()
    assert message.startswith("CUDA error: ") and len(message) > len("CUDA error: ")
    assert arch.value == 12345, "a failed call wrote its output"
    with pytest.raises(abi.TrtGnError, match=r"^TRTGN_STATUS_CUDA_ERROR: CUDA error: .+"):
        abi.kernels_ptx_arch()


def test_messages_are_per_thread(kernels_lib):
    assert call(kernels_lib, valid_params(num_groups=0))[1] == "num_groups must be > 0, got 0"
    seen = {}

    def other():
        seen["before"] = kernels_lib.trtgn_last_error_message().decode()
        call(kernels_lib, valid_params(layout=5))
        seen["after"] = kernels_lib.trtgn_last_error_message().decode()

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert seen == {"before": "", "after": "unknown layout 5"}
    assert kernels_lib.trtgn_last_error_message().decode() == "num_groups must be > 0, got 0"


def test_status_names_and_version(kernels_lib):
    for status in Status:
        assert abi.status_name(status) == f"TRTGN_STATUS_{status.name}"
    assert abi.status_name(99) == "TRTGN_STATUS_UNKNOWN"
    assert abi.abi_version() == abi.ABI_VERSION


def test_python_enums_match_header():
    text = HEADER.read_text()
    values = {name: int(v) for name, v in re.findall(r"\b(TRTGN_[A-Z0-9_]+)\s*=\s*(\d+)", text)}
    mirrored = {f"TRTGN_STATUS_{e.name}": int(e) for e in Status}
    mirrored |= {f"TRTGN_DTYPE_{e.name}": int(e) for e in DType}
    mirrored |= {f"TRTGN_LAYOUT_{e.name}": int(e) for e in Layout}
    mirrored |= {f"TRTGN_ACTIVATION_{e.name}": int(e) for e in Activation}
    assert values == mirrored
    assert f"#define TRTGN_ABI_VERSION {abi.ABI_VERSION}" in text


def test_params_struct_layout_matches_header(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to read the struct layout off the header")
    fields = [name for name, _ in Params._fields_]
    prints = "\n".join(f'  printf("{f} %zu\\n", offsetof(trtgn_params_t, {f}));' for f in fields)
    src = tmp_path / "layout.c"
    src.write_text(
        "#include <stdio.h>\n#include <stddef.h>\n#include \"trt_gn/group_norm.h\"\n"
        f"int main(void) {{\n  printf(\"sizeof %zu\\n\", sizeof(trtgn_params_t));\n{prints}\n  return 0;\n}}\n"
    )
    exe = tmp_path / "layout"
    subprocess.run([cc, "-I", str(HEADER.parents[1]), str(src), "-o", str(exe)], check=True)
    out = dict(line.split() for line in subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.splitlines())
    assert int(out.pop("sizeof")) == ctypes.sizeof(Params)
    assert {k: int(v) for k, v in out.items()} == {f: getattr(Params, f).offset for f in fields}


def describe(lib, params, size=512) -> tuple[int, str, str]:
    buf = ctypes.create_string_buffer(size) if size else None
    status = lib.trtgn_describe_plan(ctypes.byref(params) if params is not None else None, buf, size)
    return status, lib.trtgn_last_error_message().decode(), buf.value.decode() if buf else ""


@pytest.mark.parametrize("overrides,status,message", PARAM_CASES, ids=[m for _, _, m in PARAM_CASES])
def test_describe_plan_validates_like_the_launch(kernels_lib, overrides, status, message):
    assert describe(kernels_lib, valid_params(**overrides)) == (status, message, "")


def test_describe_plan_arguments_and_empty_tensor(kernels_lib):
    assert describe(kernels_lib, valid_params(), size=0)[:2] == (Status.INVALID_ARGUMENT, "buffer is NULL or size is 0")
    assert describe(kernels_lib, None)[:2] == (Status.INVALID_ARGUMENT, "params is NULL")
    assert describe(kernels_lib, valid_params(x=None))[:2] == (Status.INVALID_ARGUMENT, "x is NULL")
    assert describe(kernels_lib, valid_params(y=None))[:2] == (Status.INVALID_ARGUMENT, "y is NULL")
    # An empty tensor has no plan and needs no device; a short buffer is an error, left empty.
    assert describe(kernels_lib, valid_params(h=0)) == (Status.SUCCESS, "", "path=none")
    assert describe(kernels_lib, valid_params(h=0), size=9) == (
        Status.INVALID_ARGUMENT, "buffer of 9 bytes is too small: 10 needed", "")
    assert abi.describe_plan(valid_params(n=0)) == {"path": "none"}


def test_describe_plan_without_gpu_is_a_cuda_error(kernels_lib):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: tests/gpu checks the plans")
    status, message, text = describe(kernels_lib, valid_params())
    assert status == Status.CUDA_ERROR and message.startswith("CUDA error: ") and text == ""
    with pytest.raises(abi.TrtGnError, match=r"^TRTGN_STATUS_CUDA_ERROR: CUDA error: .+"):
        abi.describe_plan(valid_params())


def pre_add_params(**overrides) -> Params:
    fields = dict(pre_bias=ctypes.addressof(_pre_bias_host), pre_bias_n_stride=C, residual=ctypes.addressof(_residual_host),
                  sum_out=ctypes.addressof(_sum_host))
    fields.update(overrides)
    return valid_params(**fields)


def test_pre_add_validates_and_sizes_without_a_gpu(kernels_lib):
    # Every valid pre-add: the workspace query validates it and needs no GPU; the pre-add needs no
    # workspace of its own.
    for overrides in (dict(), dict(pre_bias_n_stride=0), dict(pre_bias=None, pre_bias_n_stride=7), dict(residual=None),
                      dict(sum_out=None), dict(pre_bias=None, sum_out=None), dict(x=None, y=None),
                      dict(layout=Layout.NCHW), dict(y=ctypes.addressof(_x_host)),
                      # a float32 bias beside gamma/beta of x's dtype (ABI 5), or of no affine at all
                      dict(pre_bias_float32=1, affine_dtype=DType.FLOAT16),
                      dict(pre_bias_float32=1, gamma=None, beta=None, affine_dtype=DType.BFLOAT16)):
        plain = abi.workspace_size(valid_params(layout=overrides.get("layout", Layout.NHWC)))
        assert query(kernels_lib, pre_add_params(**overrides)) == (Status.SUCCESS, "", plain), overrides
    # Adjacent buffers touch but do not overlap; a NHWC channel stride extends every tensor.
    end = ctypes.addressof(_x_host) + ctypes.sizeof(_x_host)
    assert query(kernels_lib, pre_add_params(sum_out=end))[:2] == (Status.SUCCESS, "")
    assert query(kernels_lib, pre_add_params(sum_out=end - 2))[:2] == (Status.INVALID_ARGUMENT, "sum_out must not overlap x")
    assert query(kernels_lib, pre_add_params(sum_out=ctypes.addressof(_x_host) + 2 * 2 * C * 16, channel_stride=2 * C))[:2] == (
        Status.INVALID_ARGUMENT, "sum_out must not overlap x")


@pytest.mark.parametrize("require,old,message", [
    ("require_pre_add", 3, "has ABI version 3; a pre-add (pre_bias, residual) needs 4: rebuild the library"),
    ("require_pre_bias_float32", 4,
     "has ABI version 4; a float32 pre_bias beside weight and bias of another dtype needs 5: rebuild the library"),
])
def test_new_fields_on_an_old_library_are_refused(kernels_lib, monkeypatch, require, old, message):
    getattr(abi, require)()  # this library reads the fields
    monkeypatch.setattr(kernels_lib, "trtgn_abi_version", lambda: old)
    with pytest.raises(abi.LibraryError) as info:
        getattr(abi, require)()
    assert info.value.message == f"{kernels_lib.trtgn_path} {message}"
    assert info.value.exit_code == 3
