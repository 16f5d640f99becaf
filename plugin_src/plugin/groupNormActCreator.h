/*
 * The library's two plugin creators (IPluginCreatorV3One):
 *   GroupNormActCreator      GroupNormAct v1, namespace trt_gn (fields num_groups, epsilon, activation)
 *   LegacyGroupNormCreator   GroupNorm v1, empty namespace: the node of TensorRT 8.5's removed
 *                            Stable Diffusion plugin (fields epsilon, bSwish; 32 groups)
 */
#ifndef TRT_GN_GROUP_NORM_ACT_CREATOR_H
#define TRT_GN_GROUP_NORM_ACT_CREATOR_H

#include "NvInferRuntime.h"

#include <vector>

namespace trt_gn
{
namespace plugin
{

// Shared body: both creators parse fields the same way and build the same plugin class.
class GroupNormCreatorBase : public nvinfer1::IPluginCreatorV3One
{
public:
    nvinfer1::IPluginV3* createPlugin(
        char const* name, nvinfer1::PluginFieldCollection const* fc, nvinfer1::TensorRTPhase phase) noexcept override;
    nvinfer1::PluginFieldCollection const* getFieldNames() noexcept override;

protected:
    explicit GroupNormCreatorBase(bool legacy);
    bool mLegacy;
    std::vector<nvinfer1::PluginField> mFieldNames;
    nvinfer1::PluginFieldCollection mFieldCollection{};
};

class GroupNormActCreator final : public GroupNormCreatorBase
{
public:
    GroupNormActCreator();
    char const* getPluginName() const noexcept override;
    char const* getPluginVersion() const noexcept override;
    char const* getPluginNamespace() const noexcept override;
};

class LegacyGroupNormCreator final : public GroupNormCreatorBase
{
public:
    LegacyGroupNormCreator();
    char const* getPluginName() const noexcept override;
    char const* getPluginVersion() const noexcept override;
    char const* getPluginNamespace() const noexcept override;
};

} // namespace plugin
} // namespace trt_gn

#endif // TRT_GN_GROUP_NORM_ACT_CREATOR_H
