"""GroupNormAct: a drop-in replacement for nn.GroupNorm followed by an activation (SiLU by default),
which can also absorb the additions in front of it (a convolution's bias, a time embedding, a
residual): torch.ops.trt_gn.group_norm_act_add."""

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

    forward(x, pre_bias=None, residual=None, write_sum=False, addends=()) normalises
    s = x + pre_bias + addends... + residual instead, in one kernel (group_norm_act_add): pre_bias
    is a per-channel bias, [C] or [N, C] (such as the bias of the convolution that made x, run
    without it); addends are tensors as `x + t` would broadcast them (None skipped), each of
    per-channel shape ([N or 1, C, 1, 1]) joins pre_bias (summed in float32), one of x's shape and
    dtype becomes the residual where none is given; residual has x's shape and dtype. With write_sum it returns (y, s), else y. Where the additions are not of these
    forms (another shape, a dtype that `x + t` would promote x's to, x not 4-D), it computes them
    as written, x + pre_bias, + each addend, + residual, then normalises: the same values as the
    code it replaces, unfused. A pre_bias the op refuses raises the op's error.
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

    def forward(self, x: torch.Tensor, pre_bias: torch.Tensor | None = None, residual: torch.Tensor | None = None,
                write_sum: bool = False, addends=()):
        addends = tuple(t for t in addends if t is not None)
        if pre_bias is None and residual is None and not addends:
            y = self._norm(x)
            return (y, x) if write_sum else y
        fused = self._fused(x, pre_bias, addends, residual)
        if fused is None:
            s = x
            if pre_bias is not None:
                s = s + pre_bias.reshape(*pre_bias.shape, 1, 1)
            for t in addends:
                s = s + t
            if residual is not None:
                s = s + residual
            y = self._norm(s)
            return (y, s) if write_sum else y
        y, s = ops.group_norm_act_add(x, self.weight, self.bias, self.num_groups, self.eps, self.activation, *fused,
                                      write_sum)
        return (y, s) if write_sum else y

    def _norm(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 4 and x.shape[1] != self.num_channels:
            raise ValueError(f"expected {self.num_channels} channels, got input of shape {tuple(x.shape)}")
        return ops.group_norm_act(x, self.weight, self.bias, self.num_groups, self.eps, self.activation)

    def _fused(self, x, pre_bias, addends, residual):
        """(pre_bias, residual) of group_norm_act_add for these additions, or None where it does not
        compute them as written (see the class docstring)."""
        if x.dim() != 4 or x.shape[1] != self.num_channels:
            return None

        def like_x(t):
            return t.shape == x.shape and t.dtype == x.dtype and t.device == x.device

        if residual is not None and not like_x(residual):
            return None
        n, c = x.shape[:2]
        if pre_bias is not None:  # the op's argument, its errors
            ops.check_add_inputs(x, self.weight, self.bias, self.num_groups, self.eps, self.activation, pre_bias,
                                 None, False)
        rows = []
        for t in addends:
            if like_x(t) and residual is None:
                residual = t
                continue
            shape = (1,) * (4 - t.dim()) + tuple(t.shape)
            if (t.dim() > 4 or shape[0] not in (1, n) or shape[1:] != (c, 1, 1) or t.device != x.device
                    or torch.promote_types(x.dtype, t.dtype) != x.dtype):
                return None
            rows.append(t.reshape(-1, c))
        if not rows:
            return pre_bias, residual
        if pre_bias is not None:
            rows.append(pre_bias.reshape(-1, c))
        total = rows[0].float()
        for row in rows[1:]:
            total = total + row.float()  # float32: exact for every supported dtype's values, one rounding per term
        return total.reshape(c) if total.shape[0] == 1 else total, residual

    def extra_repr(self) -> str:
        return (
            f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}, "
            f"activation={self.activation!r}"
        )
