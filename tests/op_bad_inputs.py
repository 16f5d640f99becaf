"""The op's bad arguments and what each must raise: the table the Python implementation
(tests/test_ops.py), the C++ kernels on the CPU (tests/test_cpp_op.py) and the C++ op on a GPU
(tests/gpu/test_gpu_cpp_op.py) are all held to, and how to collect what the op raised; the same
for group_norm_act_add (tests/test_ops_add.py, tests/gpu/test_gpu_pre_add.py)."""

from __future__ import annotations

import torch

import trt_gn.ops  # noqa: F401  (registers the op)

# Bad arguments, the exception type and the exact message.
BAD_INPUTS = [
    ((torch.zeros(2, 8, 4), None, None, 4, 1e-5, "silu"), ValueError,
     "group_norm_act: x must be 4-D (N, C, H, W), got 3-D shape (2, 8, 4)"),
    ((torch.zeros(1, 2, 8, 4, 4), None, None, 4, 1e-5, "silu"), ValueError,
     "group_norm_act: x must be 4-D (N, C, H, W), got 5-D shape (1, 2, 8, 4, 4)"),
    ((torch.zeros(2, 10, 4, 4), None, None, 4, 1e-5, "silu"), ValueError,
     "group_norm_act: C=10 is not divisible by num_groups=4"),
    ((torch.zeros(2, 8, 4, 4), None, None, 0, 1e-5, "silu"), ValueError,
     "group_norm_act: num_groups must be > 0, got 0"),
    ((torch.zeros(2, 8, 4, 4), torch.ones(7), None, 4, 1e-5, "silu"), ValueError,
     "group_norm_act: weight must be 1-D of length C=8, got shape (7,)"),
    ((torch.zeros(2, 8, 4, 4), None, torch.ones(2, 4), 4, 1e-5, "silu"), ValueError,
     "group_norm_act: bias must be 1-D of length C=8, got shape (2, 4)"),
    ((torch.zeros(2, 8, 4, 4, dtype=torch.float64), None, None, 4, 1e-5, "silu"), TypeError,
     "group_norm_act: x dtype torch.float64 is not supported; expected float32, float16 or bfloat16"),
    ((torch.zeros(2, 8, 4, 4, dtype=torch.float16), torch.ones(8, dtype=torch.bfloat16), None, 4, 1e-5, "silu"),
     TypeError, "group_norm_act: weight dtype torch.bfloat16 must be x's dtype torch.float16 or torch.float32"),
    ((torch.zeros(2, 8, 4, 4), None, None, 4, 1e-5, "gelu"), ValueError,
     "group_norm_act: unknown activation 'gelu'; expected one of ('none', 'silu')"),
    ((torch.zeros(2, 8, 4, 4), None, None, 4, -1.0, "silu"), ValueError,
     "group_norm_act: eps must be finite and >= 0, got -1.0"),
    ((torch.zeros(2, 8, 4, 4), None, None, 4, float("nan"), "silu"), ValueError,
     "group_norm_act: eps must be finite and >= 0, got nan"),
    ((torch.zeros(2, 8, 4, 4), None, None, 4, float("inf"), "silu"), ValueError,
     "group_norm_act: eps must be finite and >= 0, got inf"),
    ((torch.zeros(2, 8, 4, 4), None, None, -2, 1e-5, "silu"), ValueError,
     "group_norm_act: num_groups must be > 0, got -2"),
    ((torch.zeros(()), None, None, 4, 1e-5, "silu"), ValueError,
     "group_norm_act: x must be 4-D (N, C, H, W), got 0-D shape ()"),
    ((torch.zeros(2, 8, 4, 4, dtype=torch.int32), None, None, 4, 1e-5, "silu"), TypeError,
     "group_norm_act: x dtype torch.int32 is not supported; expected float32, float16 or bfloat16"),
    ((torch.zeros(2, 8, 4, 4), None, torch.ones(8, dtype=torch.float64), 4, 1e-5, "silu"), TypeError,
     "group_norm_act: bias dtype torch.float64 must be x's dtype torch.float32 or torch.float32"),
    ((torch.zeros(2, 8, 4, 4), torch.ones(8), None, 4, 1e-5, "Silu"), ValueError,
     "group_norm_act: unknown activation 'Silu'; expected one of ('none', 'silu')"),
]


def bad_cases(device: str) -> list[tuple]:
    """The table's bad arguments on `device`, arguments on two devices, and an eps that passes the
    op's checks but not the kernels library's (beyond float: TrtGnError)."""
    cases = [tuple(a.to(device) if isinstance(a, torch.Tensor) else a for a in args) for args, _, _ in BAD_INPUTS]
    x = torch.zeros(2, 8, 4, 4, device=device)
    cases += [(x, torch.ones(8), None, 4, 1e-5, "silu"), (x, None, torch.ones(8, dtype=torch.float16), 4, 1e-5, "none"),
              (x, None, None, 4, 1e39, "silu")]
    return cases


def outcomes(cases, op=None) -> list:
    """[exception type name, message] of each call of `op` (default group_norm_act; None where it
    returned)."""
    op = op or torch.ops.trt_gn.group_norm_act
    results = []
    for args in cases:
        try:
            op(*args)
            results.append(None)
        except Exception as e:  # noqa: BLE001 - every exception is compared by type and message
            results.append([type(e).__name__, str(e)])
    return results


X = torch.zeros(2, 8, 4, 4)
# Bad arguments, the exception type and the exact message (tests/test_cpp_op.py holds the C++ kernels
# to the same table). group_norm_act's own checks come first, named after this op.
ADD_BAD_INPUTS = [
    ((X, None, None, 4, 1e-5, "silu", None, None, True), ValueError,
     "group_norm_act_add: give pre_bias or residual; without them use group_norm_act"),
    ((X, None, None, 4, 1e-5, "silu", None, None, False), ValueError,
     "group_norm_act_add: give pre_bias or residual; without them use group_norm_act"),
    ((torch.zeros(2, 8, 4), None, None, 4, 1e-5, "silu", torch.zeros(8), None, False), ValueError,
     "group_norm_act_add: x must be 4-D (N, C, H, W), got 3-D shape (2, 8, 4)"),
    ((X, None, None, 3, 1e-5, "silu", torch.zeros(8), None, False), ValueError,
     "group_norm_act_add: C=8 is not divisible by num_groups=3"),
    ((X, torch.ones(7), None, 4, 1e-5, "silu", torch.zeros(8), None, False), ValueError,
     "group_norm_act_add: weight must be 1-D of length C=8, got shape (7,)"),
    ((X, None, None, 4, -1.0, "silu", None, X, False), ValueError,
     "group_norm_act_add: eps must be finite and >= 0, got -1.0"),
    ((X, None, None, 4, 1e-5, "relu", None, X, False), ValueError,
     "group_norm_act_add: unknown activation 'relu'; expected one of ('none', 'silu')"),
    ((X.double(), None, None, 4, 1e-5, "silu", None, X.double(), False), TypeError,
     "group_norm_act_add: x dtype torch.float64 is not supported; expected float32, float16 or bfloat16"),
    ((X, None, None, 4, 1e-5, "silu", torch.zeros(7), None, False), ValueError,
     "group_norm_act_add: pre_bias must have shape (C,) = (8,) or (N, C) = (2, 8), got (7,)"),
    ((X, None, None, 4, 1e-5, "silu", torch.zeros(3, 8), None, False), ValueError,
     "group_norm_act_add: pre_bias must have shape (C,) = (8,) or (N, C) = (2, 8), got (3, 8)"),
    ((X, None, None, 4, 1e-5, "silu", torch.zeros(2, 8, 1, 1), None, False), ValueError,
     "group_norm_act_add: pre_bias must have shape (C,) = (8,) or (N, C) = (2, 8), got (2, 8, 1, 1)"),
    ((X, None, None, 4, 1e-5, "silu", torch.zeros(()), None, False), ValueError,
     "group_norm_act_add: pre_bias must have shape (C,) = (8,) or (N, C) = (2, 8), got ()"),
    ((X.half(), None, None, 4, 1e-5, "silu", torch.zeros(8, dtype=torch.bfloat16), None, False), TypeError,
     "group_norm_act_add: pre_bias dtype torch.bfloat16 must be x's dtype torch.float16 or torch.float32"),
    ((X, None, None, 4, 1e-5, "silu", torch.zeros(8, dtype=torch.float64), None, False), TypeError,
     "group_norm_act_add: pre_bias dtype torch.float64 must be x's dtype torch.float32 or torch.float32"),
    ((X, None, None, 4, 1e-5, "silu", None, torch.zeros(2, 8, 4, 1), True), ValueError,
     "group_norm_act_add: residual must have x's shape (2, 8, 4, 4), got (2, 8, 4, 1)"),
    ((X, None, None, 4, 1e-5, "silu", torch.zeros(8), torch.zeros(8, 4, 4), False), ValueError,
     "group_norm_act_add: residual must have x's shape (2, 8, 4, 4), got (8, 4, 4)"),
    ((X, None, None, 4, 1e-5, "silu", None, X.half(), True), TypeError,
     "group_norm_act_add: residual dtype torch.float16 must be x's dtype torch.float32"),
    ((X.bfloat16(), None, None, 4, 1e-5, "silu", None, X, True), TypeError,
     "group_norm_act_add: residual dtype torch.float32 must be x's dtype torch.bfloat16"),
]


def bad_add_cases(device: str) -> list[tuple]:
    """The CPU tests' bad arguments on `device`, and arguments on two devices."""
    cases = [tuple(a.to(device) if isinstance(a, torch.Tensor) else a for a in args) for args, _, _ in ADD_BAD_INPUTS]
    x = torch.zeros(2, 8, 4, 4, device=device)
    cases += [(x, None, None, 4, 1e-5, "silu", torch.zeros(8), None, False),
              (x, None, None, 4, 1e-5, "silu", None, torch.zeros(2, 8, 4, 4), True)]
    return cases


def add_outcomes(cases) -> list:
    """outcomes() of group_norm_act_add."""
    return outcomes(cases, torch.ops.trt_gn.group_norm_act_add)
