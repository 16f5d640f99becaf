/*
 * GroupNormAct: y = act(GroupNorm(x) * gamma + beta) as a TensorRT IPluginV3
 * (core, build and runtime capabilities), on the trt_gn kernels (C ABI only).
 *
 * Inputs: x [N, C, H, W] (N, H, W may be dynamic; C static), gamma [C], beta [C].
 * Output: y, same shape, type and format as x.
 *
 * One class serves both creators: GroupNormAct v1 (namespace trt_gn) and the
 * legacy GroupNorm v1 of TensorRT 8.5's Stable Diffusion demo (32 groups,
 * fields epsilon and bSwish). Only the identity and the serialized fields differ.
 */
#ifndef TRT_GN_GROUP_NORM_ACT_PLUGIN_H
#define TRT_GN_GROUP_NORM_ACT_PLUGIN_H

#include "NvInferRuntime.h"
#include "trt_gn/group_norm.h"

#include <cstdint>
#include <string>
#include <vector>

namespace trt_gn
{
namespace plugin
{

struct GroupNormActConfig
{
    int32_t numGroups{0};
    float epsilon{0.F};
    trtgn_activation_t activation{TRTGN_ACTIVATION_NONE};
    bool legacy{false}; // created by the legacy GroupNorm v1 creator
};

// Field parsing shared by the creators (build and runtime phase alike). On
// failure returns false and `error` names the field and the offending value.
bool parseFields(nvinfer1::PluginFieldCollection const* fc, bool legacy, GroupNormActConfig& config,
    std::string& error, std::vector<std::string>& warnings);

// "GroupNormAct (layer 'name')" / "GroupNorm legacy plugin (layer 'name')": the prefix of every message.
std::string messagePrefix(bool legacy, std::string const& layerName);

class GroupNormActPlugin final : public nvinfer1::IPluginV3,
                                 public nvinfer1::IPluginV3OneCore,
                                 public nvinfer1::IPluginV3OneBuild,
                                 public nvinfer1::IPluginV3OneRuntime
{
public:
    GroupNormActPlugin(std::string layerName, GroupNormActConfig const& config);
    GroupNormActPlugin(GroupNormActPlugin const& other);
    GroupNormActPlugin& operator=(GroupNormActPlugin const&) = delete;
    ~GroupNormActPlugin() noexcept override = default;

    // IPluginV3
    nvinfer1::IPluginCapability* getCapabilityInterface(nvinfer1::PluginCapabilityType type) noexcept override;
    nvinfer1::IPluginV3* clone() noexcept override;

    // IPluginV3OneCore
    char const* getPluginName() const noexcept override;
    char const* getPluginVersion() const noexcept override;
    char const* getPluginNamespace() const noexcept override;

    // IPluginV3OneBuild
    int32_t configurePlugin(nvinfer1::DynamicPluginTensorDesc const* in, int32_t nbInputs,
        nvinfer1::DynamicPluginTensorDesc const* out, int32_t nbOutputs) noexcept override;
    int32_t getOutputDataTypes(nvinfer1::DataType* outputTypes, int32_t nbOutputs,
        nvinfer1::DataType const* inputTypes, int32_t nbInputs) const noexcept override;
    int32_t getOutputShapes(nvinfer1::DimsExprs const* inputs, int32_t nbInputs, nvinfer1::DimsExprs const* shapeInputs,
        int32_t nbShapeInputs, nvinfer1::DimsExprs* outputs, int32_t nbOutputs,
        nvinfer1::IExprBuilder& exprBuilder) noexcept override;
    bool supportsFormatCombination(int32_t pos, nvinfer1::DynamicPluginTensorDesc const* inOut, int32_t nbInputs,
        int32_t nbOutputs) noexcept override;
    int32_t getNbOutputs() const noexcept override;
    size_t getWorkspaceSize(nvinfer1::DynamicPluginTensorDesc const* inputs, int32_t nbInputs,
        nvinfer1::DynamicPluginTensorDesc const* outputs, int32_t nbOutputs) const noexcept override;
    char const* getTimingCacheID() noexcept override;
    char const* getMetadataString() noexcept override;

    // IPluginV3OneRuntime
    int32_t onShapeChange(nvinfer1::PluginTensorDesc const* in, int32_t nbInputs, nvinfer1::PluginTensorDesc const* out,
        int32_t nbOutputs) noexcept override;
    int32_t enqueue(nvinfer1::PluginTensorDesc const* inputDesc, nvinfer1::PluginTensorDesc const* outputDesc,
        void const* const* inputs, void* const* outputs, void* workspace, cudaStream_t stream) noexcept override;
    nvinfer1::IPluginV3* attachToContext(nvinfer1::IPluginResourceContext* context) noexcept override;
    nvinfer1::PluginFieldCollection const* getFieldsToSerialize() noexcept override;

private:
    // Checks x/gamma/beta/y as TensorRT describes them; `xMin`/`xMax` are the
    // profile bounds where known (build phase), else null. Empty string = fine.
    std::string checkIo(nvinfer1::PluginTensorDesc const* in, int32_t nbInputs, nvinfer1::PluginTensorDesc const* out,
        int32_t nbOutputs, nvinfer1::Dims const* xMin, nvinfer1::Dims const* xMax) const;
    void error(std::string const& message) const noexcept;
    void buildSerialFields();

    std::string mLayerName;
    GroupNormActConfig mConfig;
    std::string mPrefix;
    std::string mDescription; // the fields as one string: timing-cache ID and metadata

    // getFieldsToSerialize() storage; the pointers stay valid while the plugin lives
    int32_t mSerialNumGroups{0};
    float mSerialEpsilon{0.F};
    std::string mSerialActivation;
    int32_t mSerialSwish{0};
    std::vector<nvinfer1::PluginField> mSerialFields;
    nvinfer1::PluginFieldCollection mSerialCollection{};

    // The execution context's recorder (set by attachToContext), else null.
    nvinfer1::IErrorRecorder* mErrorRecorder{nullptr};
};

} // namespace plugin
} // namespace trt_gn

#endif // TRT_GN_GROUP_NORM_ACT_PLUGIN_H
