#include "pluginLog.h"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <cxxabi.h>
#include <typeinfo>

namespace trt_gn
{
namespace plugin
{
namespace
{
// The one piece of process-wide state: set once by TensorRT when it loads the
// library (TensorRT's own plugin libraries keep the finder the same way).
std::atomic<nvinfer1::ILoggerFinder*> gLoggerFinder{nullptr};

// TensorRT 11 (and TensorRT-RTX 1.7) made ILogger and ILoggerFinder versioned interfaces
// (nvinfer1::v_1_0, derived from IVersionedInterface), which moves findLogger() and log() from
// vtable slot 0 to slot 4 (after getAPILanguage, getInterfaceInfo and the two destructor entries).
// The library may be compiled against the headers of one and loaded by the other, so the finder
// and the logger are called through the slot of the TensorRT that made them: the one whose base
// class their RTTI names, else the layout of the headers compiled against. The calls go through
// the vtable entry itself (Itanium C++ ABI: `this` is the first argument), not through classes
// declared here, which the compiler could devirtualize.
namespace abi
{
constexpr int kPLAIN_SLOT = 0;
constexpr int kVERSIONED_SLOT = 4;

template <typename Function>
Function slot(void* object, int index) noexcept
{
    return reinterpret_cast<Function>((*static_cast<void* const* const*>(object))[index]);
}
using FindLogger = void* (*) (void* finder);
using Log = void (*)(void* logger, nvinfer1::ILogger::Severity severity, char const* message);

// Mangled names of the two generations of each interface (nvinfer1::X and nvinfer1::v_1_0::X).
constexpr char const* kPLAIN_FINDER = "N8nvinfer113ILoggerFinderE";
constexpr char const* kVERSIONED_FINDER = "N8nvinfer15v_1_013ILoggerFinderE";
constexpr char const* kPLAIN_LOGGER = "N8nvinfer17ILoggerE";
constexpr char const* kVERSIONED_LOGGER = "N8nvinfer15v_1_07ILoggerE";

bool hasBase(std::type_info const* type, char const* name, int depth = 0) noexcept
{
    if (type == nullptr || depth > 32)
    {
        return false;
    }
    char const* own = type->name();
    if (std::strcmp(own[0] == '*' ? own + 1 : own, name) == 0)
    {
        return true;
    }
    if (auto const* single = dynamic_cast<__cxxabiv1::__si_class_type_info const*>(type))
    {
        return hasBase(single->__base_type, name, depth + 1);
    }
    if (auto const* multiple = dynamic_cast<__cxxabiv1::__vmi_class_type_info const*>(type))
    {
        for (unsigned i = 0; i < multiple->__base_count; ++i)
        {
            if (hasBase(multiple->__base_info[i].__base_type, name, depth + 1))
            {
                return true;
            }
        }
    }
    return false;
}

// True for the TensorRT 11 layout. `object` is polymorphic: its vtable's RTTI slot (null where
// the maker had no RTTI) precedes the address point in the Itanium C++ ABI.
bool isVersioned(void const* object, char const* plainName, char const* versionedName, bool otherwise) noexcept
{
    auto const* vtable = *static_cast<void const* const* const*>(object);
    auto const* type = static_cast<std::type_info const*>(vtable[-1]);
    if (hasBase(type, versionedName))
    {
        return true;
    }
    return hasBase(type, plainName) ? false : otherwise;
}

// The layout of the headers compiled against.
bool compiledVersioned() noexcept
{
    return std::strcmp(typeid(nvinfer1::ILoggerFinder).name(), kVERSIONED_FINDER) == 0;
}

std::atomic<bool> gFinderVersioned{false}; // gLoggerFinder's layout, stored before it

// Logs through the calling thread's TensorRT logger; false where there is none.
bool logThroughTensorRT(nvinfer1::ILogger::Severity severity, char const* message) noexcept
{
    void* finder = gLoggerFinder.load();
    if (finder == nullptr)
    {
        return false;
    }
    bool const finderVersioned = gFinderVersioned.load();
    void* logger = slot<FindLogger>(finder, finderVersioned ? kVERSIONED_SLOT : kPLAIN_SLOT)(finder);
    if (logger == nullptr)
    {
        return false;
    }
    bool const loggerVersioned = isVersioned(logger, kPLAIN_LOGGER, kVERSIONED_LOGGER, finderVersioned);
    slot<Log>(logger, loggerVersioned ? kVERSIONED_SLOT : kPLAIN_SLOT)(logger, severity, message);
    return true;
}
} // namespace abi

char const* severityName(nvinfer1::ILogger::Severity severity) noexcept
{
    switch (severity)
    {
    case nvinfer1::ILogger::Severity::kINTERNAL_ERROR: return "INTERNAL_ERROR";
    case nvinfer1::ILogger::Severity::kERROR: return "ERROR";
    case nvinfer1::ILogger::Severity::kWARNING: return "WARNING";
    case nvinfer1::ILogger::Severity::kINFO: return "INFO";
    case nvinfer1::ILogger::Severity::kVERBOSE: return "VERBOSE";
    }
    return "?";
}
} // namespace

void setLoggerFinder(nvinfer1::ILoggerFinder* finder) noexcept
{
    // The first finder wins: TensorRT may call the entry point again on reload.
    if (finder == nullptr || gLoggerFinder.load() != nullptr)
    {
        return;
    }
    abi::gFinderVersioned.store(
        abi::isVersioned(finder, abi::kPLAIN_FINDER, abi::kVERSIONED_FINDER, abi::compiledVersioned()));
    nvinfer1::ILoggerFinder* expected = nullptr;
    gLoggerFinder.compare_exchange_strong(expected, finder);
}

void log(nvinfer1::ILogger::Severity severity, std::string const& message) noexcept
{
    if (abi::logThroughTensorRT(severity, message.c_str()))
    {
        return;
    }
    if (severity <= nvinfer1::ILogger::Severity::kWARNING)
    {
        std::fprintf(stderr, "[trt_gn plugin] %s: %s\n", severityName(severity), message.c_str());
    }
}

void logError(std::string const& message, nvinfer1::IErrorRecorder* recorder, nvinfer1::ErrorCode code) noexcept
{
    log(nvinfer1::ILogger::Severity::kERROR, message);
    if (recorder != nullptr)
    {
        recorder->reportError(code, message.c_str());
    }
}

} // namespace plugin
} // namespace trt_gn
