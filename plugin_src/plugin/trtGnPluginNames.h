/*
 * Names that tie the plugin to the ONNX exporter and the Python package.
 *
 * MIRROR of trt_gn/spec.py (the one definition): change both together.
 * tests/test_plugin_conformance.py parses this file and checks every value
 * against trt_gn.spec, so a drift fails the CPU test suite.
 */
#ifndef TRT_GN_PLUGIN_NAMES_H
#define TRT_GN_PLUGIN_NAMES_H

namespace trt_gn
{
namespace names
{
// spec.PLUGIN_NAME, spec.PLUGIN_VERSION, spec.PLUGIN_NAMESPACE
constexpr char const* kPLUGIN_NAME = "GroupNormAct";
constexpr char const* kPLUGIN_VERSION = "1";
constexpr char const* kPLUGIN_NAMESPACE = "trt_gn";

// spec.FIELD_NUM_GROUPS, spec.FIELD_EPSILON, spec.FIELD_ACTIVATION
constexpr char const* kFIELD_NUM_GROUPS = "num_groups";
constexpr char const* kFIELD_EPSILON = "epsilon";
constexpr char const* kFIELD_ACTIVATION = "activation";

// spec.ACTIVATIONS, in the order of trtgn_activation_t (none = 0, silu = 1)
constexpr char const* kACTIVATION_NONE = "none";
constexpr char const* kACTIVATION_SILU = "silu";

// spec.LEGACY_PLUGIN_NAME, LEGACY_PLUGIN_VERSION, LEGACY_PLUGIN_NAMESPACE,
// LEGACY_FIELD_EPSILON, LEGACY_FIELD_SWISH, LEGACY_NUM_GROUPS
constexpr char const* kLEGACY_PLUGIN_NAME = "GroupNorm";
constexpr char const* kLEGACY_PLUGIN_VERSION = "1";
constexpr char const* kLEGACY_PLUGIN_NAMESPACE = "";
constexpr char const* kLEGACY_FIELD_EPSILON = "epsilon";
constexpr char const* kLEGACY_FIELD_SWISH = "bSwish";
constexpr int kLEGACY_NUM_GROUPS = 32;

// spec.PLUGIN_LIBRARY
constexpr char const* kPLUGIN_LIBRARY = "libtrt_gn_plugin.so";
} // namespace names
} // namespace trt_gn

#endif // TRT_GN_PLUGIN_NAMES_H
