"""trt_gn: fused GroupNorm(+SiLU) CUDA kernels for diffusion models.

Importing trt_gn registers the PyTorch op torch.ops.trt_gn.group_norm_act and exposes
trt_gn.nn.GroupNormAct. The native kernels library is loaded on first use on a CUDA
device (see trt_gn._lib for where it is looked for); the CPU path needs no native code.
"""

__version__ = "0.1.0"

from . import spec  # noqa: F401
from . import ops  # noqa: F401  (registers torch.ops.trt_gn.group_norm_act)
from .nn import GroupNormAct  # noqa: F401
from .reference import assert_close, group_norm_act_reference  # noqa: F401

__all__ = ["GroupNormAct", "assert_close", "group_norm_act_reference", "ops", "spec"]
