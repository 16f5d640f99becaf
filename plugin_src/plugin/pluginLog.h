/*
 * Logging of the plugin library through TensorRT's logger.
 *
 * The library links no TensorRT library (it must also load under the lean
 * runtime and inside version-compatible plans), so it cannot call the global
 * getLogger(): TensorRT hands it an ILoggerFinder through the exported
 * setLoggerFinder() entry point instead.
 */
#ifndef TRT_GN_PLUGIN_LOG_H
#define TRT_GN_PLUGIN_LOG_H

#include "NvInferRuntime.h"

#include <string>

namespace trt_gn
{
namespace plugin
{

void setLoggerFinder(nvinfer1::ILoggerFinder* finder) noexcept;

// Logs through the logger TensorRT uses for the calling thread's builder/runtime;
// on stderr where the library was loaded without a logger finder (plain dlopen).
void log(nvinfer1::ILogger::Severity severity, std::string const& message) noexcept;

// An error: logged at kERROR and, where the plugin runs in an execution context
// with an error recorder, reported there too (TensorRT's recorder keeps
// IErrorRecorder::kMAX_DESC_LENGTH characters, the log keeps the whole message).
void logError(std::string const& message, nvinfer1::IErrorRecorder* recorder = nullptr,
    nvinfer1::ErrorCode code = nvinfer1::ErrorCode::kINVALID_ARGUMENT) noexcept;

} // namespace plugin
} // namespace trt_gn

#endif // TRT_GN_PLUGIN_LOG_H
