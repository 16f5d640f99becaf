// The C entry points IPluginRegistry::loadLibrary() looks up in a plugin
// library (trtexec --dynamicPlugins, polygraphy --plugins,
// tensorrt.get_plugin_registry().load_library(), plans made with
// IBuilderConfig::setPluginsToSerialize). They are the only exported symbols
// (exports.map).
#include "groupNormActCreator.h"
#include "pluginLog.h"

#include "NvInferRuntime.h"

using nvinfer1::IPluginCreatorInterface;

extern "C" __attribute__((visibility("default"))) IPluginCreatorInterface* const* getCreators(int32_t& nbCreators)
{
    // Stateless once built; constructed on first use, never destroyed before unload.
    static trt_gn::plugin::GroupNormActCreator sGroupNormAct;
    static trt_gn::plugin::LegacyGroupNormCreator sLegacyGroupNorm;
    static IPluginCreatorInterface* const sCreators[] = {&sGroupNormAct, &sLegacyGroupNorm};
    nbCreators = static_cast<int32_t>(sizeof(sCreators) / sizeof(sCreators[0]));
    return sCreators;
}

extern "C" __attribute__((visibility("default"))) void setLoggerFinder(nvinfer1::ILoggerFinder* finder)
{
    trt_gn::plugin::setLoggerFinder(finder);
}
