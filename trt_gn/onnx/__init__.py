"""ONNX tools of trt_gn: export with the custom node, fusion of existing files, validation.

- node:     the custom node's attributes, its onnx schema and its model-local function
- export:   torch.onnx (dynamo) export of models using torch.ops.trt_gn.group_norm_act
- fusion:   GroupNorm(+SiLU) subgraphs of an ONNX file -> the custom node
- validate: original vs fused model in onnxruntime (and TensorRT via polygraphy where present)
- recipes:  diffusers UNet / VAE-decoder configurations (SD 1.5, SDXL, tiny) for export
- weights:  the check of a --weights path and its error (no third-party import)

Importing this package imports none of them: each module brings its own dependencies (onnx-ir,
torch, onnxruntime) when it is imported, so `trt-gn build` and `trt-gn triton` run without them.
"""

# name -> the module that defines it, imported on first access
_LAZY = {
    "FusionReport": "fusion", "fuse_file": "fusion", "fuse_model": "fusion",
    "OnnxInputError": "io", "OutputPathError": "io",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module '{__name__}' has no attribute '{name}'")


__all__ = sorted(_LAZY)
