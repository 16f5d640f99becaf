"""ONNX tools of trt_gn: export with the custom node, fusion of existing files, validation.

- node:     the custom node's attributes, its onnx schema and its model-local function
- export:   torch.onnx (dynamo) export of models using torch.ops.trt_gn.group_norm_act
- fusion:   GroupNorm(+SiLU) subgraphs of an ONNX file -> the custom node
- validate: original vs fused model in onnxruntime (and TensorRT via polygraphy where present)
- recipes:  diffusers UNet / VAE-decoder configurations (SD 1.5, SDXL, tiny) for export
"""

from .fusion import FusionReport, fuse_file, fuse_model  # noqa: F401
from .io import OnnxInputError, OutputPathError  # noqa: F401
