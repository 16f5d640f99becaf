"""Helpers shared by the tests in tests/onnx (imported by name: pytest puts this folder on sys.path)."""

from __future__ import annotations

import copy
import warnings

import numpy as np
import torch

from trt_gn.onnx import recipes


def group_norm_counts(model: torch.nn.Module, args) -> tuple[int, int]:
    """(GroupNorms, GroupNorms whose only user is SiLU), read off torch.export's graph of the
    unmodified model: an oracle independent of trt_gn's swap and fusion code."""
    graph = torch.export.export(model, args).graph
    gns = [n for n in graph.nodes if n.target is torch.ops.aten.group_norm.default]
    silu = sum(1 for n in gns if len(n.users) == 1 and next(iter(n.users)).target is torch.ops.aten.silu.default)
    return len(gns), silu


def plain_export(model, name, path, *, opset: int, dynamo: bool = True):
    args, names, shapes = recipes.example_inputs(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            program = torch.onnx.export(model, args, dynamo=True, opset_version=opset, dynamic_shapes=shapes,
                                        input_names=names, verbose=False)
            program.save(str(path))
        else:
            axes = {n: ({0: "batch", 2: "height", 3: "width"} if i == 0 else {0: "batch"}) for i, n in enumerate(names)}
            torch.onnx.export(model, args, str(path), dynamo=False, opset_version=opset, input_names=names,
                              output_names=["out"], dynamic_axes=axes)
    return args, names


def run_ort(path, feeds: dict) -> list[np.ndarray]:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"]).run(None, feeds)


def rel_err(a, b) -> float:
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-12))


def swapped(model):
    from trt_gn.swap import swap_group_norms

    m = copy.deepcopy(model)
    return m, swap_group_norms(m)
