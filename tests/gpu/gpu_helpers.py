"""Helpers of the GPU tests: drive the kernels library through its raw C ABI on torch buffers."""

from __future__ import annotations

import pytest
import torch

from trt_gn import abi
from trt_gn.ops import abi_params

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device (torch.cuda.is_available() is False)")
GPU = [pytest.mark.gpu, requires_cuda]

DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def skip_unless_free(need: int) -> None:
    """Skip the test unless `need` bytes of device memory are free, counted with this process's
    cached blocks given back first: the caching allocator keeps what earlier tests freed, and
    counted as used it skipped tests that fit."""
    torch.cuda.empty_cache()
    free = torch.cuda.mem_get_info()[0]
    if free < need:
        pytest.skip(f"needs {need / 2**30:.1f} GiB of free device memory, {free / 2**30:.1f} GiB free")


def poison_(t: torch.Tensor) -> torch.Tensor:
    """Fill with NaN, so an element the kernel forgets to write fails the comparison."""
    return t.fill_(float("nan"))


def params_for(x, y, weight, bias, groups, eps, activation, layout, channel_stride=None, shape=None):
    """trtgn_params_t for x/y (torch tensors); `shape` (N, C, H, W) overrides x.shape for padded buffers."""
    return abi_params(x, y, weight, bias, groups, eps, activation, layout=layout, channel_stride=channel_stride,
                      shape=shape)


def launch(params, device, stream=None) -> None:
    """Allocate a workspace filled with garbage (its content on entry must not matter) and launch."""
    nbytes = abi.workspace_size(params)
    workspace = torch.randint(0, 256, (max(nbytes, 1),), dtype=torch.uint8, device=device)
    stream = torch.cuda.current_stream(device) if stream is None else stream
    abi.group_norm(params, workspace.data_ptr() if nbytes else None, nbytes, stream.cuda_stream)
    workspace.record_stream(stream)


def run_raw(x, weight, bias, groups, eps, activation, layout, y=None):
    """y = act(GroupNorm(x)) through the raw ABI into a NaN-poisoned output of x's memory format.

    `layout` "nhwc" takes x as channels_last, "nchw" as contiguous (x is converted as needed).
    """
    x = x.contiguous(memory_format=torch.channels_last) if layout == "nhwc" else x.contiguous()
    if y is None:
        y = poison_(torch.empty_like(x))
    launch(params_for(x, y, weight, bias, groups, eps, activation, layout), x.device)
    return y


def affine_for(c, kind, dtype, device, generator=None):
    """(weight, bias) as `kind`: "x" (x's dtype), "fp32" or "none"."""
    if kind == "none":
        return None, None
    wd = dtype if kind == "x" else torch.float32
    weight = (1 + 0.25 * torch.randn(c, device=device, generator=generator)).to(wd)
    bias = (0.5 * torch.randn(c, device=device, generator=generator)).to(wd)
    return weight, bias
