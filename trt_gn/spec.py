"""The one definition of the names that tie the pieces of trt_gn together.

The PyTorch custom op, the ONNX node the exporter writes, the TensorRT plugin
creator (plugin_src/plugin) and the docs all use these names. TensorRT's ONNX
parser maps a node onto a plugin creator by op type (= plugin name), the
``plugin_version`` attribute and the ``plugin_namespace`` attribute; the other
attributes become the creator's fields with the same names.
"""

# ONNX node / TensorRT plugin
ONNX_DOMAIN = "trt_gn"          # custom-op domain of the ONNX node
PLUGIN_NAME = "GroupNormAct"    # ONNX op type == TensorRT plugin name
PLUGIN_VERSION = "1"
PLUGIN_NAMESPACE = "trt_gn"     # == ONNX_DOMAIN

# fields (ONNX attributes) of the node / plugin
FIELD_NUM_GROUPS = "num_groups"  # int
FIELD_EPSILON = "epsilon"        # float
FIELD_ACTIVATION = "activation"  # string, one of ACTIVATIONS

ACTIVATIONS = ("none", "silu")

# The removed TensorRT Stable Diffusion plugin (TensorRT <= 8.5), which the
# plugin library also registers so that ONNX files made for it build again.
LEGACY_PLUGIN_NAME = "GroupNorm"
LEGACY_PLUGIN_VERSION = "1"
LEGACY_PLUGIN_NAMESPACE = ""
LEGACY_FIELD_EPSILON = "epsilon"
LEGACY_FIELD_SWISH = "bSwish"
LEGACY_NUM_GROUPS = 32

# PyTorch custom ops: torch.ops.trt_gn.group_norm_act and its pre-add form group_norm_act_add
TORCH_NAMESPACE = "trt_gn"
TORCH_OP_NAME = "group_norm_act"
TORCH_ADD_OP_NAME = "group_norm_act_add"

# Shared-library file names built by plugin_src/
KERNELS_LIBRARY = "libtrt_gn_kernels.so"
PLUGIN_LIBRARY = "libtrt_gn_plugin.so"
# dlopen()-only hosts (Triton, LD_PRELOAD): registers PLUGIN_LIBRARY from its own folder when loaded
PLUGIN_AUTOLOAD_LIBRARY = "libtrt_gn_plugin_autoload.so"
