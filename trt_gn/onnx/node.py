"""The ONNX form of the fused op: one custom node, plus its optional model-local function.

How TensorRT's ONNX parser (onnx-tensorrt, ``FallbackPluginImporter`` / ``loadFields``) turns a node
into our plugin, and therefore what the node carries:

* creator lookup: plugin name = the node's ``op_type`` (``spec.PLUGIN_NAME``), version = the string
  attribute ``plugin_version`` (default "1"), namespace = the string attribute ``plugin_namespace``
  (default ""). Only from TensorRT 10.10 does the parser fall back to the node's *domain* as the
  namespace, so every node we write carries ``plugin_namespace`` = ``spec.PLUGIN_NAMESPACE`` and
  ``plugin_version`` = ``spec.PLUGIN_VERSION`` explicitly; its domain is ``spec.ONNX_DOMAIN`` (the
  same string) for ONNX tools and onnxruntime.
* fields: for each field the creator lists in getFieldNames() the parser reads the attribute of the
  same name and converts it by attribute type: INT -> kINT32 (length 1, narrowed to int32),
  FLOAT -> kFLOAT32 (length 1), STRING -> kCHAR (length = len + 1, NUL-terminated). Hence
  ``num_groups`` is an INT, ``epsilon`` a FLOAT and ``activation`` a STRING attribute. Attributes the
  creator does not list (plugin_version, plugin_namespace) are not passed as fields.
* inputs: x, gamma, beta become the plugin's three inputs in order; gamma/beta stay plugin inputs
  (initializers -> constant tensors), which keeps them refittable.
* local function vs plugin: TensorRT 10.7 ("Now prioritizes using plugins over local functions when
  a corresponding plugin is available in the registry", TensorRT 10.7.0 changelog) imports a node
  as a plugin before looking at a local function of the same name, but only for nodes that have a
  ``plugin_namespace`` attribute (parser: ``isPluginNode = attrs.count("plugin_namespace")``) whose
  creator is registered. Older parsers (9.0-10.6) pick the local function first: for them write the
  bare node (``function=False``), which the fallback plugin importer maps onto the plugin.

The model-local function (``function=True``) gives the node a body of standard ONNX ops, so
onnxruntime and other ONNX tools run the fused model unchanged. Its body computes in float32
(Cast, then CastLike back to x's type; needs opset >= 15); the activation string becomes a flag
through ai.onnx.ml LabelEncoder ("silu" -> 1, anything else -> 0) and SiLU is applied with Where.
The body's ops are those of the model's own ai.onnx opset (a function must use the model's
version), so it is built per opset.
"""

from __future__ import annotations

import onnx
from onnx import helper
from onnx import TensorProto

from .. import spec

MIN_FUNCTION_OPSET = 15  # CastLike
ML_DOMAIN = "ai.onnx.ml"
ML_VERSION = 2  # LabelEncoder with keys_strings / values_int64s

FIELD_PLUGIN_VERSION = "plugin_version"
FIELD_PLUGIN_NAMESPACE = "plugin_namespace"
FUNCTION_ATTRIBUTES = (
    spec.FIELD_NUM_GROUPS,
    spec.FIELD_EPSILON,
    spec.FIELD_ACTIVATION,
    FIELD_PLUGIN_VERSION,
    FIELD_PLUGIN_NAMESPACE,
)


def node_attributes(num_groups: int, epsilon: float, activation: str) -> dict:
    """The attributes every fused node carries (plain Python values, by name)."""
    if activation not in spec.ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; expected one of {spec.ACTIVATIONS}")
    return {
        spec.FIELD_NUM_GROUPS: int(num_groups),
        spec.FIELD_EPSILON: float(epsilon),
        spec.FIELD_ACTIVATION: activation,
        FIELD_PLUGIN_VERSION: spec.PLUGIN_VERSION,
        FIELD_PLUGIN_NAMESPACE: spec.PLUGIN_NAMESPACE,
    }


def register_schema() -> None:
    """Register the node's schema with onnx (once per process) so the torch exporter and onnx's
    checker know its inputs, outputs and attributes."""
    if onnx.defs.has(spec.PLUGIN_NAME, spec.ONNX_DOMAIN):
        return
    S = onnx.defs.OpSchema
    schema = S(
        spec.PLUGIN_NAME,
        spec.ONNX_DOMAIN,
        1,
        doc="y = activation(GroupNorm(x; num_groups, epsilon) * gamma + beta); the trt_gn TensorRT plugin.",
        inputs=[
            S.FormalParameter("x", "T", "(N, C, H, W)"),
            S.FormalParameter("gamma", "U", "(C), x's type or float32"),
            S.FormalParameter("beta", "U", "(C), gamma's type"),
        ],
        outputs=[S.FormalParameter("y", "T", "same shape and type as x")],
        # U is x's type or float32 (what the plugin takes); a type constraint cannot say so.
        type_constraints=[("T", ["tensor(float)", "tensor(float16)", "tensor(bfloat16)"], ""),
                          ("U", ["tensor(float)", "tensor(float16)", "tensor(bfloat16)"], "")],
        attributes=[
            S.Attribute(spec.FIELD_NUM_GROUPS, S.AttrType.INT, "number of groups, divides C"),
            S.Attribute(spec.FIELD_EPSILON, S.AttrType.FLOAT, "added to the variance"),
            S.Attribute(spec.FIELD_ACTIVATION, S.AttrType.STRING, "none | silu"),
            S.Attribute(FIELD_PLUGIN_VERSION, S.AttrType.STRING, "TensorRT plugin version"),
            S.Attribute(FIELD_PLUGIN_NAMESPACE, S.AttrType.STRING, "TensorRT plugin namespace"),
        ],
    )
    onnx.defs.register_schema(schema)


def _ref(name: str, ref: str, kind: int) -> onnx.AttributeProto:
    attr = onnx.AttributeProto()
    attr.name, attr.ref_attr_name, attr.type = name, ref, kind
    return attr


def _const_from_attr(output: str, attr_name: str, ref: str, kind: int) -> onnx.NodeProto:
    node = helper.make_node("Constant", [], [output])
    node.attribute.append(_ref(attr_name, ref, kind))
    return node


def make_function(opset: int, ml_version: int = ML_VERSION) -> onnx.FunctionProto:
    """The model-local function ``spec.ONNX_DOMAIN::spec.PLUGIN_NAME`` for a model of ai.onnx `opset`."""
    if opset < MIN_FUNCTION_OPSET:
        raise ValueError(
            f"the model-local function needs ai.onnx opset >= {MIN_FUNCTION_OPSET} (CastLike); "
            f"the model has opset {opset}"
        )
    A = onnx.AttributeProto
    n = []

    def ints(name, values):
        n.append(helper.make_node("Constant", [], [name], value=helper.make_tensor(name, TensorProto.INT64, [len(values)], values)))

    def reduce_mean(x, out):
        # ReduceMean took `axes` as an attribute before opset 18 and as an input since.
        if opset >= 18:
            n.append(helper.make_node("ReduceMean", [x, "axis2"], [out], keepdims=1))
        else:
            n.append(helper.make_node("ReduceMean", [x], [out], axes=[2], keepdims=1))

    ints("one", [1])
    ints("zero", [0])
    ints("minus_one", [-1])
    ints("c11", [-1, 1, 1])
    ints("axis2", [2])
    n.append(helper.make_node("Cast", ["x"], ["xf"], to=TensorProto.FLOAT))
    n.append(helper.make_node("Shape", ["x"], ["shape"]))
    n.append(_const_from_attr("groups", "value_int", spec.FIELD_NUM_GROUPS, A.INT))
    n.append(helper.make_node("Reshape", ["groups", "one"], ["groups1"]))
    n.append(helper.make_node("Slice", ["shape", "zero", "one"], ["batch"]))
    n.append(helper.make_node("Concat", ["batch", "groups1", "minus_one"], ["grouped_shape"], axis=0))
    n.append(helper.make_node("Reshape", ["xf", "grouped_shape"], ["xg"]))
    reduce_mean("xg", "mean")
    n.append(helper.make_node("Sub", ["xg", "mean"], ["centered"]))
    n.append(helper.make_node("Mul", ["centered", "centered"], ["squared"]))
    reduce_mean("squared", "var")
    n.append(_const_from_attr("eps", "value_float", spec.FIELD_EPSILON, A.FLOAT))
    n.append(helper.make_node("Add", ["var", "eps"], ["var_eps"]))
    n.append(helper.make_node("Sqrt", ["var_eps"], ["std"]))
    n.append(helper.make_node("Div", ["centered", "std"], ["normed_g"]))
    n.append(helper.make_node("Reshape", ["normed_g", "shape"], ["normed"]))
    n.append(helper.make_node("Cast", ["gamma"], ["gamma_f"], to=TensorProto.FLOAT))
    n.append(helper.make_node("Cast", ["beta"], ["beta_f"], to=TensorProto.FLOAT))
    n.append(helper.make_node("Reshape", ["gamma_f", "c11"], ["gamma_c11"]))
    n.append(helper.make_node("Reshape", ["beta_f", "c11"], ["beta_c11"]))
    n.append(helper.make_node("Mul", ["normed", "gamma_c11"], ["scaled"]))
    n.append(helper.make_node("Add", ["scaled", "beta_c11"], ["affine"]))
    # activation string -> bool flag: only "silu" selects SiLU (the plugin rejects other strings).
    n.append(_const_from_attr("act_name", "value_string", spec.FIELD_ACTIVATION, A.STRING))
    if ml_version >= 2:
        n.append(helper.make_node("LabelEncoder", ["act_name"], ["act_code"], domain=ML_DOMAIN,
                                  keys_strings=["silu"], values_int64s=[1], default_int64=0))
    else:  # ai.onnx.ml 1: the code is the index in classes_strings
        n.append(helper.make_node("LabelEncoder", ["act_name"], ["act_code"], domain=ML_DOMAIN,
                                  classes_strings=["none", "silu"], default_int64=0))
    n.append(helper.make_node("Cast", ["act_code"], ["is_silu"], to=TensorProto.BOOL))
    n.append(helper.make_node("Sigmoid", ["affine"], ["sig"]))
    n.append(helper.make_node("Mul", ["affine", "sig"], ["silu"]))
    n.append(helper.make_node("Where", ["is_silu", "silu", "affine"], ["activated"]))
    n.append(helper.make_node("CastLike", ["activated", "x"], ["y"]))
    return helper.make_function(
        spec.ONNX_DOMAIN,
        spec.PLUGIN_NAME,
        ["x", "gamma", "beta"],
        ["y"],
        n,
        [helper.make_opsetid("", opset), helper.make_opsetid(ML_DOMAIN, max(ml_version, 1))],
        attributes=list(FUNCTION_ATTRIBUTES),
        doc_string="Reference body of the trt_gn GroupNormAct plugin in standard ONNX ops (float32 math).",
    )
