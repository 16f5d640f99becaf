"""The PyTorch custom op torch.ops.trt_gn.group_norm_act (registered by importing this module).

    group_norm_act(Tensor x, Tensor? weight, Tensor? bias, int num_groups, float eps, str activation) -> Tensor

x: 4-D (N, C, H, W), float32/float16/bfloat16, contiguous or channels_last (other strides are made
contiguous first); the output has x's shape, dtype and memory format. weight/bias: 1-D of length C,
x's dtype or float32, or None. activation: one of trt_gn.spec.ACTIVATIONS.
CUDA: the fused kernels of the kernels library on the current stream. CPU: the float64 reference,
rounded once to x's dtype. A fake (meta) implementation lets torch.compile and torch.export trace it.
Inference only: no autograd formula is registered (backward raises).
"""

import math

import torch

from . import _lib, spec
from .reference import group_norm_act_reference

OP_NAME = f"{spec.TORCH_NAMESPACE}::{spec.TORCH_OP_NAME}"

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_ABI_DTYPE = {torch.float32: _lib.DType.FLOAT32, torch.float16: _lib.DType.FLOAT16, torch.bfloat16: _lib.DType.BFLOAT16}
ABI_DTYPE = _ABI_DTYPE  # the public name (trt_gn.bench, the GPU tests)


def check_inputs(x, weight, bias, num_groups, eps, activation) -> None:
    """Raise ValueError/TypeError with a clear message for arguments the op does not accept."""
    where = spec.TORCH_OP_NAME
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
        if t.dtype != x.dtype and t.dtype != torch.float32:
            raise TypeError(f"{where}: {name} dtype {t.dtype} must be x's dtype {x.dtype} or torch.float32")
        if t.device != x.device:
            raise ValueError(f"{where}: {name} is on {t.device} but x is on {x.device}")


def _supported_layout(x: torch.Tensor) -> torch.Tensor:
    """x itself when it is contiguous NCHW or channels_last, else a contiguous copy."""
    if x.is_contiguous() or x.is_contiguous(memory_format=torch.channels_last):
        return x
    return x.contiguous()


SCHEMA = "(Tensor x, Tensor? weight, Tensor? bias, int num_groups, float eps, str activation) -> Tensor"


@torch.library.custom_op(OP_NAME, mutates_args=(), device_types="cpu", schema=SCHEMA)
def group_norm_act(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    num_groups: int,
    eps: float,
    activation: str,
) -> torch.Tensor:
    check_inputs(x, weight, bias, num_groups, eps, activation)
    x = _supported_layout(x)
    y = torch.empty_like(x)
    if x.numel() > 0:
        y.copy_(group_norm_act_reference(x, weight, bias, num_groups, eps, activation))
    return y


@group_norm_act.register_kernel("cuda")
def _group_norm_act_cuda(x, weight, bias, num_groups, eps, activation):
    check_inputs(x, weight, bias, num_groups, eps, activation)
    x = _supported_layout(x)
    y = torch.empty_like(x)  # keeps x's memory format
    if x.numel() == 0:
        return y
    n, c, h, w = x.shape
    layout = _lib.Layout.NCHW if x.is_contiguous() else _lib.Layout.NHWC

    affine = [t for t in (weight, bias) if t is not None]
    affine_dtype = x.dtype
    if affine and any(t.dtype != x.dtype for t in affine):
        # One affine dtype per call: float32 holds every supported dtype exactly.
        affine_dtype = torch.float32
    if weight is not None:
        weight = weight.to(affine_dtype).contiguous()
    if bias is not None:
        bias = bias.to(affine_dtype).contiguous()

    params = _lib.Params(
        x=x.data_ptr(),
        y=y.data_ptr(),
        n=n,
        c=c,
        h=h,
        w=w,
        num_groups=num_groups,
        channel_stride=c,
        layout=layout,
        dtype=_ABI_DTYPE[x.dtype],
        activation=_lib.ACTIVATION_BY_NAME[activation],
        epsilon=eps,
        gamma=weight.data_ptr() if weight is not None else None,
        beta=bias.data_ptr() if bias is not None else None,
        affine_dtype=_ABI_DTYPE[affine_dtype],
    )
    with torch.cuda.device(x.device):
        nbytes = _lib.workspace_size(params)
        # The caching allocator ties the block to the current stream (and to the graph pool
        # while capturing), so the workspace is safe to reuse as soon as this launch is done.
        workspace = torch.empty(nbytes, dtype=torch.uint8, device=x.device) if nbytes else None
        stream = torch.cuda.current_stream(x.device).cuda_stream
        _lib.group_norm(params, workspace.data_ptr() if workspace is not None else None, nbytes, stream)
    return y


@group_norm_act.register_fake
def _group_norm_act_fake(x, weight, bias, num_groups, eps, activation):
    check_inputs(x, weight, bias, num_groups, eps, activation)
    return torch.empty_like(_supported_layout(x))
