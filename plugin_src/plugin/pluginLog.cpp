#include "pluginLog.h"

#include <atomic>
#include <cstdio>

namespace trt_gn
{
namespace plugin
{
namespace
{
// The one piece of process-wide state: set once by TensorRT when it loads the
// library (TensorRT's own plugin libraries keep the finder the same way).
std::atomic<nvinfer1::ILoggerFinder*> gLoggerFinder{nullptr};

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
    nvinfer1::ILoggerFinder* expected = nullptr;
    // The first finder wins: TensorRT may call the entry point again on reload.
    gLoggerFinder.compare_exchange_strong(expected, finder);
}

void log(nvinfer1::ILogger::Severity severity, std::string const& message) noexcept
{
    nvinfer1::ILoggerFinder* finder = gLoggerFinder.load();
    nvinfer1::ILogger* logger = finder != nullptr ? finder->findLogger() : nullptr;
    if (logger != nullptr)
    {
        logger->log(severity, message.c_str());
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
