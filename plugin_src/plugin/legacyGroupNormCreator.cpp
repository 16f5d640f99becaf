// The creator of TensorRT 8.5's Stable Diffusion "GroupNorm" plugin (version 1,
// empty namespace), removed in TensorRT 8.6: ONNX files made for it fail with
// "getPluginCreator could not find plugin: GroupNorm version: 1" (NVIDIA/TensorRT
// issue 3089). This creator accepts that node (fields epsilon, bSwish; 32 groups;
// x with FP32 gamma/beta, originally FP16 HWC8 only) and runs it on our kernels.
#include "groupNormActCreator.h"

#include "trtGnPluginNames.h"

namespace trt_gn
{
namespace plugin
{

LegacyGroupNormCreator::LegacyGroupNormCreator()
    : GroupNormCreatorBase(true)
{
}
char const* LegacyGroupNormCreator::getPluginName() const noexcept
{
    return names::kLEGACY_PLUGIN_NAME;
}
char const* LegacyGroupNormCreator::getPluginVersion() const noexcept
{
    return names::kLEGACY_PLUGIN_VERSION;
}
char const* LegacyGroupNormCreator::getPluginNamespace() const noexcept
{
    return names::kLEGACY_PLUGIN_NAMESPACE;
}

} // namespace plugin
} // namespace trt_gn
