#include "groupNormActCreator.h"

#include "groupNormActPlugin.h"
#include "pluginLog.h"
#include "trtGnPluginNames.h"

#include <exception>
#include <string>

using namespace nvinfer1;

namespace trt_gn
{
namespace plugin
{

GroupNormCreatorBase::GroupNormCreatorBase(bool legacy)
    : mLegacy(legacy)
{
    // The names the ONNX parser looks up among the node's attributes. INT
    // attributes arrive as kINT32, FLOAT as kFLOAT32, STRING as kCHAR (NUL counted).
    if (legacy)
    {
        mFieldNames.emplace_back(names::kLEGACY_FIELD_EPSILON, nullptr, PluginFieldType::kFLOAT32, 1);
        mFieldNames.emplace_back(names::kLEGACY_FIELD_SWISH, nullptr, PluginFieldType::kINT32, 1);
    }
    else
    {
        mFieldNames.emplace_back(names::kFIELD_NUM_GROUPS, nullptr, PluginFieldType::kINT32, 1);
        mFieldNames.emplace_back(names::kFIELD_EPSILON, nullptr, PluginFieldType::kFLOAT32, 1);
        mFieldNames.emplace_back(names::kFIELD_ACTIVATION, nullptr, PluginFieldType::kCHAR, 1);
    }
    mFieldCollection.nbFields = static_cast<int32_t>(mFieldNames.size());
    mFieldCollection.fields = mFieldNames.data();
}

PluginFieldCollection const* GroupNormCreatorBase::getFieldNames() noexcept
{
    return &mFieldCollection;
}

IPluginV3* GroupNormCreatorBase::createPlugin(char const* name, PluginFieldCollection const* fc, TensorRTPhase phase) noexcept
{
    try
    {
        std::string const layer = name != nullptr ? name : "";
        GroupNormActConfig config;
        std::string problem;
        std::vector<std::string> warnings;
        if (!parseFields(fc, mLegacy, config, problem, warnings))
        {
            logError(messagePrefix(mLegacy, layer) + problem
                + (phase == TensorRTPhase::kRUNTIME ? " (runtime phase: deserializing an engine)" : ""));
            return nullptr;
        }
        for (std::string const& w : warnings)
        {
            log(ILogger::Severity::kWARNING, messagePrefix(mLegacy, layer) + w);
        }
        return new GroupNormActPlugin(layer, config);
    }
    catch (std::exception const& e)
    {
        logError(messagePrefix(mLegacy, name != nullptr ? name : "") + "createPlugin failed: " + e.what());
    }
    return nullptr;
}

GroupNormActCreator::GroupNormActCreator()
    : GroupNormCreatorBase(false)
{
}
char const* GroupNormActCreator::getPluginName() const noexcept
{
    return names::kPLUGIN_NAME;
}
char const* GroupNormActCreator::getPluginVersion() const noexcept
{
    return names::kPLUGIN_VERSION;
}
char const* GroupNormActCreator::getPluginNamespace() const noexcept
{
    return names::kPLUGIN_NAMESPACE;
}

} // namespace plugin
} // namespace trt_gn
