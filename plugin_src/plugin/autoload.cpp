// libtrt_gn_plugin_autoload.so: registration at load time, for hosts that only
// dlopen() plugin libraries and expect them to register themselves (Triton's
// TensorRT backend: --backend-config=tensorrt,plugins=...; LD_PRELOAD).
//
// It does what trtexec --dynamicPlugins does: getPluginRegistry()->loadLibrary()
// on libtrt_gn_plugin.so next to this file, so TensorRT calls the entry points
// (getCreators, setLoggerFinder) itself. libtrt_gn_plugin.so stays free of
// load-time side effects: a plugin registered twice makes loadLibrary() fail.
// No TensorRT library is linked: libnvinfer is found in the process (or loaded
// from the library path) at load time.
#include "NvInferRuntime.h"
#include "trtGnPluginNames.h"

#include <cstdio>
#include <dlfcn.h>
#include <string>

namespace
{
#define TRT_GN_STR2(x) #x
#define TRT_GN_STR(x) TRT_GN_STR2(x)

void* openNvinfer()
{
    char const* const candidates[] = {"libnvinfer.so." TRT_GN_STR(NV_TENSORRT_MAJOR), "libnvinfer.so"};
    for (char const* name : candidates)
    {
        if (void* h = dlopen(name, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD))
        {
            return h; // already in the process (Triton's backend, the Python bindings)
        }
    }
    for (char const* name : candidates)
    {
        if (void* h = dlopen(name, RTLD_NOW | RTLD_GLOBAL))
        {
            return h; // LD_PRELOAD: TensorRT is not loaded yet
        }
    }
    return nullptr;
}

__attribute__((constructor)) void registerTrtGnPlugins()
{
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&registerTrtGnPlugins), &info) == 0 || info.dli_fname == nullptr)
    {
        std::fprintf(stderr, "[trt_gn autoload] ERROR: cannot find this library's own path\n");
        return;
    }
    std::string path = info.dli_fname;
    std::string::size_type const slash = path.rfind('/');
    path = (slash == std::string::npos ? std::string(".") : path.substr(0, slash)) + "/" + trt_gn::names::kPLUGIN_LIBRARY;

    void* nvinfer = openNvinfer();
    if (nvinfer == nullptr)
    {
        std::fprintf(stderr, "[trt_gn autoload] ERROR: libnvinfer.so." TRT_GN_STR(NV_TENSORRT_MAJOR)
                             " is not loadable (%s); %s was not registered\n", dlerror(), path.c_str());
        return;
    }
    using GetRegistry = nvinfer1::IPluginRegistry* (*) ();
    auto getRegistry = reinterpret_cast<GetRegistry>(dlsym(nvinfer, "getPluginRegistry"));
    nvinfer1::IPluginRegistry* registry = getRegistry != nullptr ? getRegistry() : nullptr;
    if (registry == nullptr)
    {
        std::fprintf(stderr, "[trt_gn autoload] ERROR: no TensorRT plugin registry; %s was not registered\n",
            path.c_str());
        return;
    }
    if (registry->loadLibrary(path.c_str()) == nullptr)
    {
        std::fprintf(stderr, "[trt_gn autoload] ERROR: IPluginRegistry::loadLibrary(\"%s\") failed (see TensorRT's log)\n",
            path.c_str());
    }
}
} // namespace
