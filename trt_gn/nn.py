"""GroupNormAct: a drop-in replacement for nn.GroupNorm followed by an activation (SiLU by default)."""

from __future__ import annotations

import math

import torch
from torch import nn

from . import ops, spec


class GroupNormAct(nn.Module):
    """y = act(GroupNorm(x)) in one fused kernel on CUDA (the float64 reference on the CPU).

    Same constructor arguments, attributes and state_dict keys (weight, bias) as nn.GroupNorm,
    plus `activation` ("silu" or "none"). Takes 4-D (N, C, H, W) input, contiguous or
    channels_last, and returns the memory format it got. Inference only (no backward).
    """

    __constants__ = ["num_groups", "num_channels", "eps", "affine", "activation"]

    def __init__(
        self,
        num_groups: int,
        num_channels: int,
        eps: float = 1e-5,
        affine: bool = True,
        activation: str = "silu",
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        if num_groups <= 0 or num_channels % num_groups != 0:
            raise ValueError(f"num_channels={num_channels} must be divisible by num_groups={num_groups} (> 0)")
        if not (eps >= 0.0 and math.isfinite(eps)):  # as the op checks it (ops.check_inputs)
            raise ValueError(f"eps must be finite and >= 0, got {eps}")
        if activation not in spec.ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; expected one of {spec.ACTIVATIONS}")
        self.num_groups = num_groups
        self.num_channels = num_channels
        self.eps = eps
        self.affine = affine
        self.activation = activation
        factory = {"device": device, "dtype": dtype}
        if affine:
            self.weight = nn.Parameter(torch.empty(num_channels, **factory))
            self.bias = nn.Parameter(torch.empty(num_channels, **factory))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.affine:
            nn.init.ones_(self.weight)
            nn.init.zeros_(self.bias)

    @classmethod
    def from_group_norm(cls, gn: nn.GroupNorm, activation: str = "silu") -> "GroupNormAct":
        """A GroupNormAct with gn's settings and a copy of its parameters (same device and dtype)."""
        if not isinstance(gn, nn.GroupNorm):
            raise TypeError(f"expected nn.GroupNorm, got {type(gn).__name__}")
        factory = {}
        if gn.affine:
            factory = {"device": gn.weight.device, "dtype": gn.weight.dtype}
        module = cls(gn.num_groups, gn.num_channels, gn.eps, gn.affine, activation, **factory)
        module.load_state_dict(gn.state_dict())
        module.train(gn.training)
        return module

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 4 and x.shape[1] != self.num_channels:
            raise ValueError(f"expected {self.num_channels} channels, got input of shape {tuple(x.shape)}")
        return ops.group_norm_act(x, self.weight, self.bias, self.num_groups, self.eps, self.activation)

    def extra_repr(self) -> str:
        return (
            f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}, "
            f"activation={self.activation!r}"
        )
