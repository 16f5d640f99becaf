"""The PyTorch custom ops torch.ops.trt_gn.group_norm_act and group_norm_act_add (registered by
importing this module).

    group_norm_act(Tensor x, Tensor? weight, Tensor? bias, int num_groups, float eps, str activation) -> Tensor

x: 4-D (N, C, H, W), float32/float16/bfloat16, contiguous or channels_last (other strides are made
contiguous first); the output has x's shape, dtype and memory format. weight/bias: 1-D of length C,
x's dtype or float32, or None. activation: one of trt_gn.spec.ACTIVATIONS.

    group_norm_act_add(Tensor x, Tensor? weight, Tensor? bias, int num_groups, float eps, str activation,
                       Tensor? pre_bias, Tensor? residual, bool write_sum) -> (Tensor y, Tensor s)

The pre-add form: s = x + pre_bias[n, c] + residual, computed in fp32 and rounded once to x's dtype,
y = act(GroupNorm(s) * weight + bias), the statistics those of s: the s an unfused model would
normalise, and the one returned. pre_bias: [C] or [N, C] (e.g. a convolution's bias plus a time
embedding), x's dtype or float32; residual: x's shape and dtype, any layout (made to match x's); at
least one of the two. s is returned rounded once to x's dtype, with x's shape and memory format, where
write_sum is True, else as an empty tensor (numel 0). Its own op, so group_norm_act's schema (ONNX
export, the TensorRT plugin, saved graphs) stays as it is.
CUDA: the fused kernels of the kernels library on the current stream. CPU: the float64 reference,
rounded once to x's dtype. A fake (meta) implementation lets torch.compile and torch.export trace it.
Inference only: no autograd formula is registered (backward raises).

Two implementations of the CUDA call, the same results and errors (see implementation()):
  - C++ (trt_gn/csrc/group_norm_act.cpp, built for the running torch by trt_gn._cpp_op): the CUDA
    and AutogradCUDA kernels, no Python per call;
  - Python: the functions below, through ctypes; where torch has no CUDA, where the C++ op cannot be
    built (with a warning saying why), or by choice (TRT_GN_TORCH_OP=python).
The choice is made once per process, at the first CUDA call or the first implementation() call.
"""

import math
import os
import threading
import warnings
from dataclasses import dataclass

import torch

from . import _cpp_op, abi, spec
from .errors import first_line
from .reference import group_norm_act_reference, sum_reference

OP_NAME = f"{spec.TORCH_NAMESPACE}::{spec.TORCH_OP_NAME}"
ADD_OP_NAME = f"{spec.TORCH_NAMESPACE}::{spec.TORCH_ADD_OP_NAME}"

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def check_inputs(x, weight, bias, num_groups, eps, activation, where: str = spec.TORCH_OP_NAME) -> None:
    """Raise ValueError/TypeError with a clear message for arguments the op does not accept (`where`:
    the op named in it)."""
    if x.dim() != 4:
        raise ValueError(f"{where}: x must be 4-D (N, C, H, W), got {x.dim()}-D shape {tuple(x.shape)}")
    if x.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{where}: x dtype {x.dtype} is not supported; expected float32, float16 or bfloat16")
    c = x.shape[1]
    if num_groups <= 0:
        raise ValueError(f"{where}: num_groups must be > 0, got {num_groups}")
    if c % num_groups != 0:
        raise ValueError(f"{where}: C={c} is not divisible by num_groups={num_groups}")
    if not (eps >= 0.0 and math.isfinite(eps)):
        raise ValueError(f"{where}: eps must be finite and >= 0, got {eps}")
    if activation not in spec.ACTIVATIONS:
        raise ValueError(f"{where}: unknown activation {activation!r}; expected one of {spec.ACTIVATIONS}")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is None:
            continue
        if t.dim() != 1 or t.shape[0] != c:
            raise ValueError(f"{where}: {name} must be 1-D of length C={c}, got shape {tuple(t.shape)}")
        _check_per_channel(where, name, t, x)


def _check_per_channel(where: str, name: str, t: torch.Tensor, x: torch.Tensor) -> None:
    if t.dtype != x.dtype and t.dtype != torch.float32:
        raise TypeError(f"{where}: {name} dtype {t.dtype} must be x's dtype {x.dtype} or torch.float32")
    if t.device != x.device:
        raise ValueError(f"{where}: {name} is on {t.device} but x is on {x.device}")


def check_add_inputs(x, weight, bias, num_groups, eps, activation, pre_bias, residual, write_sum) -> None:
    """check_inputs for group_norm_act_add, then its own arguments."""
    where = spec.TORCH_ADD_OP_NAME
    check_inputs(x, weight, bias, num_groups, eps, activation, where)
    if pre_bias is None and residual is None:
        raise ValueError(f"{where}: give pre_bias or residual; without them use {spec.TORCH_OP_NAME}")
    n, c = x.shape[:2]
    if pre_bias is not None:
        if tuple(pre_bias.shape) not in ((c,), (n, c)):
            raise ValueError(f"{where}: pre_bias must have shape (C,) = ({c},) or (N, C) = ({n}, {c}), "
                             f"got {tuple(pre_bias.shape)}")
        _check_per_channel(where, "pre_bias", pre_bias, x)
    if residual is not None:
        if residual.shape != x.shape:
            raise ValueError(f"{where}: residual must have x's shape {tuple(x.shape)}, got {tuple(residual.shape)}")
        if residual.dtype != x.dtype:
            raise TypeError(f"{where}: residual dtype {residual.dtype} must be x's dtype {x.dtype}")
        if residual.device != x.device:
            raise ValueError(f"{where}: residual is on {residual.device} but x is on {x.device}")


def _supported_layout(x: torch.Tensor) -> torch.Tensor:
    """x itself when it is contiguous NCHW or channels_last, else a contiguous copy."""
    if x.is_contiguous() or x.is_contiguous(memory_format=torch.channels_last):
        return x
    return x.contiguous()


def _layout_like(t: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """t in x's memory format (x as _supported_layout returns it: NCHW-contiguous wins a tie, as the
    kernels' layout does)."""
    return t.contiguous() if x.is_contiguous() else t.contiguous(memory_format=torch.channels_last)


ARGUMENTS = "(Tensor x, Tensor? weight, Tensor? bias, int num_groups, float eps, str activation)"
SCHEMA = f"{ARGUMENTS} -> Tensor"
ADD_ARGUMENTS = ("(Tensor x, Tensor? weight, Tensor? bias, int num_groups, float eps, str activation, "
                 "Tensor? pre_bias, Tensor? residual, bool write_sum)")
ADD_SCHEMA = f"{ADD_ARGUMENTS} -> (Tensor y, Tensor s)"

IMPLEMENTATION_ENV = "TRT_GN_TORCH_OP"
IMPLEMENTATION_MODES = ("auto", "cpp", "python")


@dataclass(frozen=True)
class Implementation:
    """What runs the op on CUDA tensors in this process: kind "cpp" (detail: the built library) or
    "python" (detail: why)."""

    kind: str
    detail: str

    def __str__(self) -> str:
        return f"C++ ({self.detail})" if self.kind == "cpp" else f"Python ({self.detail})"


_choice_lock = threading.Lock()
_choice: Implementation | None = None
_choice_error: Exception | None = None


def implementation() -> Implementation:
    """The implementation of the op's CUDA call in this process, chosen on the first call of this
    function or of the op on a CUDA tensor (a C++ op not yet built for this torch is compiled then,
    saying so on stderr):

    TRT_GN_TORCH_OP=auto (default): C++ where torch has CUDA and the kernels library loads; Python,
      with a RuntimeWarning giving the reason, where the C++ op cannot be built.
    TRT_GN_TORCH_OP=cpp: C++ or an error (_cpp_op.CppOpError); also with a CPU-only torch, where the
      kernels are registered and only CUDA tensors reach them.
    TRT_GN_TORCH_OP=python: the Python implementation.
    """
    global _choice, _choice_error
    if _choice is not None:
        return _choice
    with _choice_lock:
        if _choice_error is not None:
            raise _choice_error
        if _choice is None:
            try:
                _choice = _choose()
            except Exception as e:
                _choice_error = e  # not retried per call: a failed build takes tens of seconds
                raise
        return _choice


def _choose() -> Implementation:
    raw = os.environ.get(IMPLEMENTATION_ENV, "")
    mode = raw.strip().lower() or "auto"
    if mode not in IMPLEMENTATION_MODES:
        raise ValueError(f"{IMPLEMENTATION_ENV}={raw!r}: expected one of {', '.join(IMPLEMENTATION_MODES)}")
    if mode == "python":
        return Implementation("python", f"{IMPLEMENTATION_ENV}=python")
    if mode == "auto" and torch.version.cuda is None:
        return Implementation("python", f"torch {torch.__version__} is built without CUDA")
    try:
        kernels = abi.load()
    except (FileNotFoundError, OSError, ImportError) as e:
        reason = f"the kernels library does not load: {first_line(e)}"
        if mode == "cpp":
            raise _cpp_op.CppOpError(f"{IMPLEMENTATION_ENV}=cpp, but {reason}") from e
        return Implementation("python", reason)  # a CUDA call raises the library's error, as it says
    try:
        path = _cpp_op.build()
        _cpp_op.register(path, kernels)
    except _cpp_op.CppOpError as e:
        reason = f"the C++ op could not be built: {e}"
        if mode == "cpp":
            raise _cpp_op.CppOpError(f"{IMPLEMENTATION_ENV}=cpp, but {reason}") from e
        warnings.warn(f"trt_gn: {reason}. {OP_NAME} runs its Python implementation on CUDA tensors, with more "
                      f"host time per call ({IMPLEMENTATION_ENV}=python chooses it without this warning)",
                      RuntimeWarning, stacklevel=2)
        return Implementation("python", reason)
    return Implementation("cpp", str(path))


@torch.library.custom_op(OP_NAME, mutates_args=(), device_types=None, schema=SCHEMA)
def _group_norm_act(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    num_groups: int,
    eps: float,
    activation: str,
) -> torch.Tensor:
    # Registered at CompositeExplicitAutograd (and its autograd at Autograd), below the C++ kernels'
    # CUDA and AutogradCUDA keys: once those are registered, no CUDA call comes here.
    check_inputs(x, weight, bias, num_groups, eps, activation)
    if x.device.type == "cuda":
        if _choice is None and implementation().kind == "cpp":
            # This call registered the C++ kernels: they run it (the dispatch is below autograd here).
            return group_norm_act(x, weight, bias, num_groups, eps, activation)
        return _group_norm_act_cuda(x, weight, bias, num_groups, eps, activation)
    if x.device.type != "cpu":
        raise NotImplementedError(f"{spec.TORCH_OP_NAME}: x is on {x.device}; trt_gn runs on CPU and CUDA devices")
    x = _supported_layout(x)
    y = torch.empty_like(x)
    if x.numel() > 0:
        y.copy_(group_norm_act_reference(x, weight, bias, num_groups, eps, activation))
    return y


# The op, to call: the OpOverload, no Python layer of its own.
group_norm_act = torch.ops.trt_gn.group_norm_act.default


@torch.library.custom_op(ADD_OP_NAME, mutates_args=(), device_types=None, schema=ADD_SCHEMA)
def _group_norm_act_add(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    num_groups: int,
    eps: float,
    activation: str,
    pre_bias: torch.Tensor | None,
    residual: torch.Tensor | None,
    write_sum: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    # Registered as group_norm_act is (see there): the C++ kernels take CUDA calls once registered.
    check_add_inputs(x, weight, bias, num_groups, eps, activation, pre_bias, residual, write_sum)
    args = (x, weight, bias, num_groups, eps, activation, pre_bias, residual, write_sum)
    if x.device.type == "cuda":
        if _choice is None and implementation().kind == "cpp":
            return group_norm_act_add(*args)
        return _group_norm_act_add_cuda(*args)
    if x.device.type != "cpu":
        raise NotImplementedError(f"{spec.TORCH_ADD_OP_NAME}: x is on {x.device}; trt_gn runs on CPU and CUDA devices")
    x, y, s = _add_outputs(x, write_sum)
    if x.numel() > 0:
        # s as the kernels form it (of x's dtype), and y of that s rounded once
        s_rounded = sum_reference(x, pre_bias, residual).to(x.dtype)
        y.copy_(group_norm_act_reference(s_rounded, weight, bias, num_groups, eps, activation))
        if write_sum:
            s.copy_(s_rounded)
    return y, s


def _add_outputs(x: torch.Tensor, write_sum: bool):
    """(x in a supported layout, y, s) as group_norm_act_add returns them: y and a written s in x's
    memory format, an unwritten s empty."""
    x = _supported_layout(x)
    return x, torch.empty_like(x), torch.empty_like(x) if write_sum else x.new_empty(0)


group_norm_act_add = torch.ops.trt_gn.group_norm_act_add.default

# Private ops through which the C++ kernels raise what the Python implementation raises, type and
# message: bad arguments (check_inputs) and an error status of the kernels library (TrtGnError).
_private = torch.library.Library(spec.TORCH_NAMESPACE, "FRAGMENT")
_private.define(f"_group_norm_act_check{ARGUMENTS} -> ()")
_private.define("_group_norm_act_failed(Tensor x, int status, str message) -> ()")
_private.define(f"_group_norm_act_add_check{ADD_ARGUMENTS} -> ()")
# A kernels library older than the pre-add fields (it would ignore them): abi.require_pre_add's error.
_private.define("_group_norm_act_add_unsupported(Tensor x) -> ()")


def _check_arguments(x, weight, bias, num_groups, eps, activation) -> None:
    check_inputs(x, weight, bias, num_groups, eps, activation)


def _check_add_arguments(*args) -> None:
    check_add_inputs(*args)


def _raise_kernels_error(x, status, message) -> None:
    raise abi.TrtGnError(status, message)


def _require_pre_add(x) -> None:
    abi.require_pre_add()


_private.impl("_group_norm_act_check", _check_arguments, "CompositeExplicitAutograd")
_private.impl("_group_norm_act_failed", _raise_kernels_error, "CompositeExplicitAutograd")
_private.impl("_group_norm_act_add_check", _check_add_arguments, "CompositeExplicitAutograd")
_private.impl("_group_norm_act_add_unsupported", _require_pre_add, "CompositeExplicitAutograd")


# The dtype names of the tools and options (fp32, fp16, bf16) -> torch dtypes: the one such map.
DTYPE_BY_NAME = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
ABI_DTYPE = {torch.float32: abi.DType.FLOAT32, torch.float16: abi.DType.FLOAT16, torch.bfloat16: abi.DType.BFLOAT16}


def affine_for_abi(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                   pre_bias: torch.Tensor | None = None):
    """(weight, bias, affine dtype) as the ABI takes them: contiguous, one dtype for both (float32
    where they differ from x's: it holds every supported dtype exactly). With a pre_bias: (weight,
    bias, pre_bias, affine dtype), the pre_bias contiguous, of the affine dtype or float32. A float32
    pre_bias (a bias summed in fp32) stays float32 beside gamma/beta of x's dtype where the library
    reads pre_bias_float32 (ABI 5), so neither is converted on every call; with an older library all
    three take one dtype, as that ABI needs."""
    if pre_bias is None:
        given = (weight, bias)
    elif pre_bias.dtype == torch.float32 and abi.abi_version() >= abi.PRE_BIAS_FLOAT32_ABI_VERSION:
        weight, bias, affine_dtype = affine_for_abi(x, weight, bias)
        return weight, bias, pre_bias.contiguous(), affine_dtype
    else:
        given = (weight, bias, pre_bias)
    affine_dtype = x.dtype
    if any(t is not None and t.dtype != x.dtype for t in given):
        affine_dtype = torch.float32
    return (*(t if t is None else t.to(affine_dtype).contiguous() for t in given), affine_dtype)


def abi_params(x, y, weight, bias, num_groups, eps, activation, *, layout=None, channel_stride=None,
               shape=None, pre_bias=None, residual=None, sum_out=None) -> abi.Params:
    """trtgn_params_t for CUDA tensors x and y (contiguous NCHW or channels_last, the same format).

    weight/bias and pre_bias must already be as affine_for_abi() returns them. `layout` ("nchw" or
    "nhwc") defaults to NCHW where x is contiguous, else NHWC. `shape` (N, C, H, W) and
    `channel_stride` describe a padded NHWC buffer (x then holds N*H*W pixels of channel_stride
    elements).

    The pre-add (group_norm_act_add): pre_bias [C] or [N, C], residual with x's dtype, layout and
    strides, sum_out with y's. A library older than the pre-add fields would ignore them, so setting
    any of them first requires one that has them (abi.require_pre_add raises LibraryError); likewise
    a float32 pre_bias beside weight/bias of another dtype (pre_bias_float32, ABI 5).
    """
    n, c, h, w = shape if shape is not None else x.shape
    affine = [t for t in (weight, bias) if t is not None]
    if len({t.dtype for t in affine}) > 1:
        raise TypeError("weight and bias must have one dtype (see affine_for_abi)")
    affine_dtype = affine[0].dtype if affine else (pre_bias.dtype if pre_bias is not None else x.dtype)
    bias_float32 = pre_bias is not None and pre_bias.dtype != affine_dtype
    if bias_float32 and pre_bias.dtype != torch.float32:
        raise TypeError("pre_bias must have the dtype of weight and bias, or float32 (see affine_for_abi)")
    if layout is None:
        layout = "nchw" if shape is None and x.is_contiguous() else "nhwc"
    pre_add = {}
    if pre_bias is not None or residual is not None or sum_out is not None:
        abi.require_pre_add()
        pre_add = {
            "pre_bias": pre_bias.data_ptr() if pre_bias is not None else None,
            "pre_bias_n_stride": c if pre_bias is not None and pre_bias.dim() == 2 else 0,
            "residual": residual.data_ptr() if residual is not None else None,
            "sum_out": sum_out.data_ptr() if sum_out is not None else None,
        }
        if bias_float32:
            abi.require_pre_bias_float32()
            pre_add["pre_bias_float32"] = 1
    return abi.Params(
        x=x.data_ptr(),
        y=y.data_ptr(),
        n=n,
        c=c,
        h=h,
        w=w,
        num_groups=num_groups,
        channel_stride=c if channel_stride is None else channel_stride,
        layout=abi.Layout.NHWC if layout == "nhwc" else abi.Layout.NCHW,
        dtype=ABI_DTYPE[x.dtype],
        activation=abi.ACTIVATION_BY_NAME[activation],
        epsilon=eps,
        gamma=weight.data_ptr() if weight is not None else None,
        beta=bias.data_ptr() if bias is not None else None,
        affine_dtype=ABI_DTYPE[affine_dtype],
        **pre_add,
    )


def _group_norm_act_cuda(x, weight, bias, num_groups, eps, activation):
    """The Python implementation of the CUDA call (arguments already checked)."""
    x = _supported_layout(x)
    y = torch.empty_like(x)  # keeps x's memory format
    if x.numel() == 0:
        return y
    weight, bias, _ = affine_for_abi(x, weight, bias)
    _launch(abi_params(x, y, weight, bias, num_groups, eps, activation), x)
    return y


def _group_norm_act_add_cuda(x, weight, bias, num_groups, eps, activation, pre_bias, residual, write_sum):
    """The Python implementation of group_norm_act_add's CUDA call (arguments already checked)."""
    x, y, s = _add_outputs(x, write_sum)
    if x.numel() == 0:
        return y, s
    if pre_bias is None:
        weight, bias, _ = affine_for_abi(x, weight, bias)
    else:
        weight, bias, pre_bias, _ = affine_for_abi(x, weight, bias, pre_bias)
    residual = _layout_like(residual, x) if residual is not None else None
    _launch(abi_params(x, y, weight, bias, num_groups, eps, activation, pre_bias=pre_bias, residual=residual,
                       sum_out=s if write_sum else None), x)
    return y, s


def _launch(params: abi.Params, x: torch.Tensor) -> None:
    """trtgn_group_norm with a workspace of its size, on x's device and current stream."""
    with torch.cuda.device(x.device):
        nbytes = abi.workspace_size(params)
        # The caching allocator ties the block to the current stream (and to the graph pool
        # while capturing), so the workspace is safe to reuse as soon as this launch is done.
        workspace = torch.empty(nbytes, dtype=torch.uint8, device=x.device) if nbytes else None
        stream = torch.cuda.current_stream(x.device).cuda_stream
        abi.group_norm(params, workspace.data_ptr() if workspace is not None else None, nbytes, stream)


def describe_plan(x, weight=None, bias=None, num_groups=32, eps=1e-5, activation="silu") -> dict:
    """The plan group_norm_act would run for these CUDA arguments (trt_gn.abi.describe_plan), without
    running it: {"path": "clusters" | "on-chip-grid" | "streaming-grid" | "two-pass", "vec": ..., ...}.

    The output's alignment takes part in the choice; a fresh output of x's format is assumed, as the
    op allocates one.
    """
    check_inputs(x, weight, bias, num_groups, eps, activation)
    if x.device.type != "cuda":
        raise ValueError(f"describe_plan: x must be a CUDA tensor, got {x.device}")
    x = _supported_layout(x)
    weight, bias, _ = affine_for_abi(x, weight, bias)
    y = torch.empty_like(x)
    with torch.cuda.device(x.device):
        return abi.describe_plan(abi_params(x, y, weight, bias, num_groups, eps, activation))


@_group_norm_act.register_fake
def _group_norm_act_fake(x, weight, bias, num_groups, eps, activation):
    check_inputs(x, weight, bias, num_groups, eps, activation)
    return torch.empty_like(_supported_layout(x))


@_group_norm_act_add.register_fake
def _group_norm_act_add_fake(x, weight, bias, num_groups, eps, activation, pre_bias, residual, write_sum):
    check_add_inputs(x, weight, bias, num_groups, eps, activation, pre_bias, residual, write_sum)
    _, y, s = _add_outputs(x, write_sum)
    return y, s
