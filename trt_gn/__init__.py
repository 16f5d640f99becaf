"""trt_gn: fused GroupNorm(+SiLU) kernels for diffusion models.

Where PyTorch is installed, importing trt_gn registers the PyTorch ops torch.ops.trt_gn.group_norm_act
and group_norm_act_add and exposes trt_gn.nn.GroupNormAct (trt_gn.compile_passes, imported on its
own, adds a torch.compile pass for the latter). Without PyTorch the package still imports, so that the engine
and Triton tools (`trt-gn build`, `trt-gn triton`, trt_gn.engine, trt_gn.triton) run in an
environment without it (the `serve` extra); the PyTorch names then raise an ImportError that says
so. The native kernels library is loaded on first use on a CUDA device (see trt_gn.abi for where it
is looked for); the CPU path needs no native code.
"""

import importlib.util as _importlib_util

__version__ = "0.1.0"

from . import spec  # noqa: F401,E402

# The names that need PyTorch.
_TORCH_NAMES = frozenset({"GroupNormAct", "assert_close", "group_norm_act_reference", "ops", "nn", "reference"})

if _importlib_util.find_spec("torch") is not None:
    # torch is installed: register the op now, as users of the op expect from `import trt_gn`.
    # A torch that fails to import is an error here, never silently skipped.
    from . import ops  # noqa: F401,E402  (registers torch.ops.trt_gn.group_norm_act and _add)
    from .nn import GroupNormAct  # noqa: F401,E402
    from .reference import assert_close, group_norm_act_reference  # noqa: F401,E402
else:
    def __getattr__(name: str):
        if name in _TORCH_NAMES:
            raise ModuleNotFoundError(f"trt_gn.{name} needs PyTorch, which is not installed: pip install torch "
                              f"(the PyTorch op and module; the engine and Triton tools work without it)",
                              name="torch")
        raise AttributeError(f"module 'trt_gn' has no attribute '{name}'")

__all__ = ["GroupNormAct", "assert_close", "group_norm_act_reference", "ops", "spec"]
