#include "groupNormActPlugin.h"

#include "pluginLog.h"
#include "trtGnPluginNames.h"

#include <cmath>
#include <cstring>
#include <exception>
#include <set>
#include <sstream>

using namespace nvinfer1;

namespace trt_gn
{
namespace plugin
{
namespace
{
constexpr int32_t kNB_INPUTS = 3; // x, gamma, beta
constexpr int32_t kNB_OUTPUTS = 1;
constexpr float kLEGACY_DEFAULT_EPSILON = 1e-5F; // the defaults of TensorRT 8.5's GroupNorm creator
constexpr int32_t kLEGACY_DEFAULT_SWISH = 0;

char const* dataTypeName(DataType type)
{
    switch (type)
    {
    case DataType::kFLOAT: return "FLOAT";
    case DataType::kHALF: return "HALF";
    case DataType::kINT8: return "INT8";
    case DataType::kINT32: return "INT32";
    case DataType::kBOOL: return "BOOL";
    case DataType::kUINT8: return "UINT8";
    case DataType::kFP8: return "FP8";
    case DataType::kBF16: return "BF16";
    case DataType::kINT64: return "INT64";
    case DataType::kINT4: return "INT4";
    case DataType::kFP4: return "FP4";
    default: return "UNKNOWN";
    }
}

char const* formatName(TensorFormat format)
{
    switch (format)
    {
    case TensorFormat::kLINEAR: return "LINEAR";
    case TensorFormat::kCHW2: return "CHW2";
    case TensorFormat::kHWC8: return "HWC8";
    case TensorFormat::kCHW4: return "CHW4";
    case TensorFormat::kCHW16: return "CHW16";
    case TensorFormat::kCHW32: return "CHW32";
    case TensorFormat::kDHWC8: return "DHWC8";
    case TensorFormat::kCDHW32: return "CDHW32";
    case TensorFormat::kHWC: return "HWC";
    case TensorFormat::kDLA_LINEAR: return "DLA_LINEAR";
    case TensorFormat::kDLA_HWC4: return "DLA_HWC4";
    case TensorFormat::kHWC16: return "HWC16";
    case TensorFormat::kDHWC: return "DHWC";
    default: return "UNKNOWN";
    }
}

char const* fieldTypeName(PluginFieldType type)
{
    switch (type)
    {
    case PluginFieldType::kFLOAT16: return "kFLOAT16";
    case PluginFieldType::kFLOAT32: return "kFLOAT32";
    case PluginFieldType::kFLOAT64: return "kFLOAT64";
    case PluginFieldType::kINT8: return "kINT8";
    case PluginFieldType::kINT16: return "kINT16";
    case PluginFieldType::kINT32: return "kINT32";
    case PluginFieldType::kCHAR: return "kCHAR";
    case PluginFieldType::kDIMS: return "kDIMS";
    case PluginFieldType::kUNKNOWN: return "kUNKNOWN";
    case PluginFieldType::kBF16: return "kBF16";
    case PluginFieldType::kINT64: return "kINT64";
    case PluginFieldType::kFP8: return "kFP8";
    case PluginFieldType::kINT4: return "kINT4";
    case PluginFieldType::kFP4: return "kFP4";
    }
    return "unknown type";
}

bool toKernelDtype(DataType type, trtgn_dtype_t& out)
{
    switch (type)
    {
    case DataType::kFLOAT: out = TRTGN_DTYPE_FLOAT32; return true;
    case DataType::kHALF: out = TRTGN_DTYPE_FLOAT16; return true;
    case DataType::kBF16: out = TRTGN_DTYPE_BFLOAT16; return true;
    default: return false;
    }
}

// The formats of x/y, per type: linear NCHW everywhere, and the channel-last
// formats TensorRT picks around convolutions (NvInferRuntime.h: HWC8 is FP16/BF16,
// HWC16 is FP16 (and INT8/FP8), HWC is FP32). Vector-major formats (CHW2/4/16/32)
// are not channel-last rows and are not offered.
bool isSupportedTypeFormat(DataType type, TensorFormat format)
{
    switch (format)
    {
    case TensorFormat::kLINEAR: return type == DataType::kFLOAT || type == DataType::kHALF || type == DataType::kBF16;
    case TensorFormat::kHWC8: return type == DataType::kHALF || type == DataType::kBF16;
    case TensorFormat::kHWC16: return type == DataType::kHALF;
    case TensorFormat::kHWC: return type == DataType::kFLOAT;
    default: return false;
    }
}

// Channel vector of a channel-last format: the pixel stride is C rounded up to it.
int64_t channelVector(TensorFormat format)
{
    switch (format)
    {
    case TensorFormat::kHWC8: return 8;
    case TensorFormat::kHWC16: return 16;
    default: return 1;
    }
}

size_t elementSize(DataType type)
{
    return type == DataType::kFLOAT ? 4 : 2;
}

// Kernel parameters for x of `dims` (N, C, H, W) in `xDesc`'s type/format,
// with gamma/beta of `affineType`. Pointers are left null.
trtgn_params_t makeParams(GroupNormActConfig const& config, Dims const& dims, DataType xType, TensorFormat xFormat,
    DataType affineType)
{
    trtgn_params_t p{};
    p.n = dims.d[0];
    p.c = dims.d[1];
    p.h = dims.d[2];
    p.w = dims.d[3];
    p.num_groups = config.numGroups;
    if (xFormat == TensorFormat::kLINEAR)
    {
        p.layout = TRTGN_LAYOUT_NCHW;
        p.channel_stride = p.c;
    }
    else
    {
        int64_t const v = channelVector(xFormat);
        p.layout = TRTGN_LAYOUT_NHWC;
        p.channel_stride = (p.c + v - 1) / v * v;
    }
    toKernelDtype(xType, p.dtype);
    toKernelDtype(affineType, p.affine_dtype);
    p.activation = config.activation;
    p.epsilon = config.epsilon;
    return p;
}

std::string dimsString(Dims const& d)
{
    std::ostringstream s;
    s << "[";
    for (int32_t i = 0; i < d.nbDims; ++i)
    {
        s << (i ? ", " : "") << d.d[i];
    }
    s << "]";
    return s.str();
}

std::string kernelError(char const* what, trtgn_status_t status)
{
    std::string message = std::string(what) + " failed: " + trtgn_status_name(status);
    char const* detail = trtgn_last_error_message();
    if (detail != nullptr && detail[0] != '\0')
    {
        message += ": ";
        message += detail;
    }
    return message;
}

// ---- field parsing -------------------------------------------------------------

// One scalar of either of two field types (the ONNX parser and hand-built
// collections differ in width), converted to Out.
template <typename Narrow, typename Wide, typename Out>
bool readScalar(PluginField const& f, PluginFieldType narrow, PluginFieldType wide, char const* expected, Out& value,
    std::string& error)
{
    if (f.data != nullptr && f.length == 1 && (f.type == narrow || f.type == wide))
    {
        value = f.type == narrow ? static_cast<Out>(*static_cast<Narrow const*>(f.data))
                                 : static_cast<Out>(*static_cast<Wide const*>(f.data));
        return true;
    }
    std::ostringstream s;
    s << "field '" << f.name << "' has type " << fieldTypeName(f.type) << " with " << f.length
      << (f.data == nullptr ? " element(s) and no data" : " element(s)") << "; expected " << expected;
    error = s.str();
    return false;
}

bool readInt(PluginField const& f, int64_t& value, std::string& error)
{
    return readScalar<int32_t, int64_t>(
        f, PluginFieldType::kINT32, PluginFieldType::kINT64, "one kINT32 or kINT64", value, error);
}

bool readFloat(PluginField const& f, double& value, std::string& error)
{
    return readScalar<float, double>(
        f, PluginFieldType::kFLOAT32, PluginFieldType::kFLOAT64, "one kFLOAT32 or kFLOAT64", value, error);
}

// kCHAR: the ONNX parser passes the string with its terminating NUL counted in length.
bool readString(PluginField const& f, std::string& value, std::string& error)
{
    if (f.data != nullptr && f.length >= 0 && f.type == PluginFieldType::kCHAR)
    {
        char const* chars = static_cast<char const*>(f.data);
        value.assign(chars, strnlen(chars, static_cast<size_t>(f.length)));
        return true;
    }
    std::ostringstream s;
    s << "field '" << f.name << "' has type " << fieldTypeName(f.type) << " with " << f.length
      << (f.data == nullptr ? " element(s) and no data" : " element(s)") << "; expected a kCHAR string";
    error = s.str();
    return false;
}

bool checkEpsilon(double eps, char const* field, float& out, std::string& error)
{
    if (!std::isfinite(eps) || eps < 0.0 || eps > 3.4e38)
    {
        std::ostringstream s;
        s << "field '" << field << "' must be a finite number >= 0, got " << eps;
        error = s.str();
        return false;
    }
    out = static_cast<float>(eps);
    return true;
}
} // namespace

std::string messagePrefix(bool legacy, std::string const& layerName)
{
    std::string prefix = legacy ? std::string(names::kLEGACY_PLUGIN_NAME) + " (legacy plugin, layer '"
                                : std::string(names::kPLUGIN_NAME) + " (layer '";
    return prefix + layerName + "'): ";
}

bool parseFields(PluginFieldCollection const* fc, bool legacy, GroupNormActConfig& config, std::string& error,
    std::vector<std::string>& warnings)
{
    config = GroupNormActConfig{};
    config.legacy = legacy;
    if (fc == nullptr || (fc->nbFields > 0 && fc->fields == nullptr) || fc->nbFields < 0)
    {
        error = "no field collection given";
        return false;
    }
    bool haveGroups = false, haveEpsilon = false, haveActivation = false, haveSwish = false;
    std::set<std::string> seen;
    for (int32_t i = 0; i < fc->nbFields; ++i)
    {
        PluginField const& f = fc->fields[i];
        if (f.name == nullptr)
        {
            error = "field " + std::to_string(i) + " has no name";
            return false;
        }
        std::string const name = f.name;
        if (!seen.insert(name).second)
        {
            error = "field '" + name + "' is given twice";
            return false;
        }
        if (!legacy && name == names::kFIELD_NUM_GROUPS)
        {
            int64_t g = 0;
            if (!readInt(f, g, error))
            {
                return false;
            }
            if (g <= 0 || g > INT32_MAX)
            {
                error = "field '" + name + "' must be > 0, got " + std::to_string(g);
                return false;
            }
            config.numGroups = static_cast<int32_t>(g);
            haveGroups = true;
        }
        else if ((!legacy && name == names::kFIELD_EPSILON) || (legacy && name == names::kLEGACY_FIELD_EPSILON))
        {
            double eps = 0.0;
            if (!readFloat(f, eps, error) || !checkEpsilon(eps, f.name, config.epsilon, error))
            {
                return false;
            }
            haveEpsilon = true;
        }
        else if (!legacy && name == names::kFIELD_ACTIVATION)
        {
            std::string act;
            if (!readString(f, act, error))
            {
                return false;
            }
            if (act == names::kACTIVATION_NONE)
            {
                config.activation = TRTGN_ACTIVATION_NONE;
            }
            else if (act == names::kACTIVATION_SILU)
            {
                config.activation = TRTGN_ACTIVATION_SILU;
            }
            else
            {
                error = "field '" + name + "' must be one of '" + names::kACTIVATION_NONE + "', '"
                    + names::kACTIVATION_SILU + "', got '" + act + "'";
                return false;
            }
            haveActivation = true;
        }
        else if (legacy && name == names::kLEGACY_FIELD_SWISH)
        {
            int64_t swish = 0;
            if (!readInt(f, swish, error))
            {
                return false;
            }
            if (swish != 0 && swish != 1)
            {
                error = "field '" + name + "' must be 0 or 1, got " + std::to_string(swish);
                return false;
            }
            config.activation = swish ? TRTGN_ACTIVATION_SILU : TRTGN_ACTIVATION_NONE;
            haveSwish = true;
        }
        else
        {
            error = "unknown field '" + name + "'; expected "
                + (legacy ? std::string("'") + names::kLEGACY_FIELD_EPSILON + "', '" + names::kLEGACY_FIELD_SWISH + "'"
                          : std::string("'") + names::kFIELD_NUM_GROUPS + "', '" + names::kFIELD_EPSILON + "', '"
                              + names::kFIELD_ACTIVATION + "'");
            return false;
        }
    }
    if (legacy)
    {
        // TensorRT 8.5's creator had these defaults; files made for it may rely on them.
        config.numGroups = names::kLEGACY_NUM_GROUPS;
        if (!haveEpsilon)
        {
            config.epsilon = kLEGACY_DEFAULT_EPSILON;
            warnings.push_back(std::string("field '") + names::kLEGACY_FIELD_EPSILON + "' is missing; using 1e-05");
        }
        if (!haveSwish)
        {
            config.activation = kLEGACY_DEFAULT_SWISH ? TRTGN_ACTIVATION_SILU : TRTGN_ACTIVATION_NONE;
            warnings.push_back(std::string("field '") + names::kLEGACY_FIELD_SWISH + "' is missing; using 0");
        }
        return true;
    }
    char const* missing = !haveGroups ? names::kFIELD_NUM_GROUPS
        : !haveEpsilon                ? names::kFIELD_EPSILON
        : !haveActivation             ? names::kFIELD_ACTIVATION
                                      : nullptr;
    if (missing != nullptr)
    {
        error = std::string("field '") + missing + "' is missing";
        return false;
    }
    return true;
}

// ---- plugin ------------------------------------------------------------------------

GroupNormActPlugin::GroupNormActPlugin(std::string layerName, GroupNormActConfig const& config)
    : mLayerName(std::move(layerName))
    , mConfig(config)
    , mPrefix(messagePrefix(config.legacy, mLayerName))
{
    std::ostringstream s;
    s << names::kFIELD_NUM_GROUPS << "=" << mConfig.numGroups << ";" << names::kFIELD_EPSILON << "="
      << std::hexfloat << mConfig.epsilon << std::defaultfloat << ";" << names::kFIELD_ACTIVATION << "="
      << (mConfig.activation == TRTGN_ACTIVATION_SILU ? names::kACTIVATION_SILU : names::kACTIVATION_NONE);
    mDescription = s.str();
    buildSerialFields();
}

GroupNormActPlugin::GroupNormActPlugin(GroupNormActPlugin const& other)
    : IPluginV3(other)
    , IPluginV3OneCore(other)
    , IPluginV3OneBuild(other)
    , IPluginV3OneRuntime(other)
    , mLayerName(other.mLayerName)
    , mConfig(other.mConfig)
    , mPrefix(other.mPrefix)
    , mDescription(other.mDescription)
    , mErrorRecorder(other.mErrorRecorder)
{
    buildSerialFields(); // fresh storage: the field pointers must point into this object
}

void GroupNormActPlugin::buildSerialFields()
{
    mSerialFields.clear();
    mSerialEpsilon = mConfig.epsilon;
    if (mConfig.legacy)
    {
        mSerialSwish = mConfig.activation == TRTGN_ACTIVATION_SILU ? 1 : 0;
        mSerialFields.emplace_back(names::kLEGACY_FIELD_EPSILON, &mSerialEpsilon, PluginFieldType::kFLOAT32, 1);
        mSerialFields.emplace_back(names::kLEGACY_FIELD_SWISH, &mSerialSwish, PluginFieldType::kINT32, 1);
    }
    else
    {
        mSerialNumGroups = mConfig.numGroups;
        mSerialActivation
            = mConfig.activation == TRTGN_ACTIVATION_SILU ? names::kACTIVATION_SILU : names::kACTIVATION_NONE;
        mSerialFields.emplace_back(names::kFIELD_NUM_GROUPS, &mSerialNumGroups, PluginFieldType::kINT32, 1);
        mSerialFields.emplace_back(names::kFIELD_EPSILON, &mSerialEpsilon, PluginFieldType::kFLOAT32, 1);
        // Like the ONNX parser: the terminating NUL is counted.
        mSerialFields.emplace_back(names::kFIELD_ACTIVATION, mSerialActivation.c_str(), PluginFieldType::kCHAR,
            static_cast<int32_t>(mSerialActivation.size() + 1));
    }
    mSerialCollection.nbFields = static_cast<int32_t>(mSerialFields.size());
    mSerialCollection.fields = mSerialFields.data();
}

void GroupNormActPlugin::error(std::string const& message) const noexcept
{
    try
    {
        logError(mPrefix + message, mErrorRecorder);
    }
    catch (...)
    {
    }
}

IPluginCapability* GroupNormActPlugin::getCapabilityInterface(PluginCapabilityType type) noexcept
{
    switch (type)
    {
    case PluginCapabilityType::kCORE: return static_cast<IPluginV3OneCore*>(this);
    case PluginCapabilityType::kBUILD: return static_cast<IPluginV3OneBuild*>(this);
    case PluginCapabilityType::kRUNTIME: return static_cast<IPluginV3OneRuntime*>(this);
    }
    return nullptr;
}

IPluginV3* GroupNormActPlugin::clone() noexcept
{
    try
    {
        return new GroupNormActPlugin(*this);
    }
    catch (std::exception const& e)
    {
        error(std::string("clone failed: ") + e.what());
    }
    return nullptr;
}

char const* GroupNormActPlugin::getPluginName() const noexcept
{
    return mConfig.legacy ? names::kLEGACY_PLUGIN_NAME : names::kPLUGIN_NAME;
}

char const* GroupNormActPlugin::getPluginVersion() const noexcept
{
    return mConfig.legacy ? names::kLEGACY_PLUGIN_VERSION : names::kPLUGIN_VERSION;
}

char const* GroupNormActPlugin::getPluginNamespace() const noexcept
{
    return mConfig.legacy ? names::kLEGACY_PLUGIN_NAMESPACE : names::kPLUGIN_NAMESPACE;
}

int32_t GroupNormActPlugin::getNbOutputs() const noexcept
{
    return kNB_OUTPUTS;
}

int32_t GroupNormActPlugin::getOutputDataTypes(
    DataType* outputTypes, int32_t nbOutputs, DataType const* inputTypes, int32_t nbInputs) const noexcept
{
    try
    {
        if (nbInputs != kNB_INPUTS || nbOutputs != kNB_OUTPUTS || outputTypes == nullptr || inputTypes == nullptr)
        {
            error("expected 3 inputs (x, gamma, beta) and 1 output, got " + std::to_string(nbInputs) + " inputs and "
                + std::to_string(nbOutputs) + " outputs");
            return -1;
        }
        trtgn_dtype_t unused;
        if (!toKernelDtype(inputTypes[0], unused))
        {
            error(std::string("input x has data type ") + dataTypeName(inputTypes[0])
                + "; supported: FLOAT, HALF, BF16");
            return -1;
        }
        outputTypes[0] = inputTypes[0];
        return 0;
    }
    catch (std::exception const& e)
    {
        error(e.what());
    }
    return -1;
}

int32_t GroupNormActPlugin::getOutputShapes(DimsExprs const* inputs, int32_t nbInputs, DimsExprs const* /*shapeInputs*/,
    int32_t nbShapeInputs, DimsExprs* outputs, int32_t nbOutputs, IExprBuilder& /*exprBuilder*/) noexcept
{
    try
    {
        if (nbInputs != kNB_INPUTS || nbOutputs != kNB_OUTPUTS || nbShapeInputs != 0 || inputs == nullptr
            || outputs == nullptr)
        {
            error("expected 3 inputs (x, gamma, beta), no shape inputs and 1 output, got " + std::to_string(nbInputs)
                + " inputs, " + std::to_string(nbShapeInputs) + " shape inputs and " + std::to_string(nbOutputs)
                + " outputs");
            return -1;
        }
        if (inputs[0].nbDims != 4)
        {
            error("input x must have rank 4 (N, C, H, W), got rank " + std::to_string(inputs[0].nbDims));
            return -1;
        }
        for (int32_t i = 1; i < 3; ++i)
        {
            char const* what = i == 1 ? "gamma" : "beta";
            if (inputs[i].nbDims != 1)
            {
                error(std::string("input ") + what + " must have rank 1 (C), got rank "
                    + std::to_string(inputs[i].nbDims));
                return -1;
            }
        }
        // Early, clear errors where C and the weights' length are already known.
        IDimensionExpr const* c = inputs[0].d[1];
        if (c != nullptr && c->isConstant())
        {
            int64_t const channels = c->getConstantValue();
            if (channels % mConfig.numGroups != 0)
            {
                error("num_groups=" + std::to_string(mConfig.numGroups) + " does not divide the channel count C="
                    + std::to_string(channels) + " of input x");
                return -1;
            }
            for (int32_t i = 1; i < 3; ++i)
            {
                IDimensionExpr const* len = inputs[i].d[0];
                if (len != nullptr && len->isConstant() && len->getConstantValue() != channels)
                {
                    error(std::string("input ") + (i == 1 ? "gamma" : "beta") + " has "
                        + std::to_string(len->getConstantValue()) + " elements; expected C="
                        + std::to_string(channels));
                    return -1;
                }
            }
        }
        // y has x's shape: the same expressions, dynamic dimensions included.
        outputs[0] = inputs[0];
        return 0;
    }
    catch (std::exception const& e)
    {
        error(e.what());
    }
    return -1;
}

bool GroupNormActPlugin::supportsFormatCombination(
    int32_t pos, DynamicPluginTensorDesc const* inOut, int32_t nbInputs, int32_t nbOutputs) noexcept
{
    if (inOut == nullptr || nbInputs != kNB_INPUTS || nbOutputs != kNB_OUTPUTS || pos < 0
        || pos >= kNB_INPUTS + kNB_OUTPUTS)
    {
        return false;
    }
    PluginTensorDesc const& desc = inOut[pos].desc;
    PluginTensorDesc const& x = inOut[0].desc;
    switch (pos)
    {
    case 0: return desc.dims.nbDims == 4 && isSupportedTypeFormat(desc.type, desc.format);
    // gamma/beta: linear, in x's type or FP32 (the legacy plugin's FP32 weights), both the same
    case 1: return desc.format == TensorFormat::kLINEAR && (desc.type == x.type || desc.type == DataType::kFLOAT);
    case 2: return desc.format == TensorFormat::kLINEAR && desc.type == inOut[1].desc.type;
    default: return desc.type == x.type && desc.format == x.format;
    }
}

std::string GroupNormActPlugin::checkIo(PluginTensorDesc const* in, int32_t nbInputs, PluginTensorDesc const* out,
    int32_t nbOutputs, Dims const* xMin, Dims const* xMax) const
{
    if (in == nullptr || out == nullptr || nbInputs != kNB_INPUTS || nbOutputs != kNB_OUTPUTS)
    {
        return "expected 3 inputs (x, gamma, beta) and 1 output, got " + std::to_string(nbInputs) + " inputs and "
            + std::to_string(nbOutputs) + " outputs";
    }
    PluginTensorDesc const& x = in[0];
    if (x.dims.nbDims != 4)
    {
        return "input x must have rank 4 (N, C, H, W), got rank " + std::to_string(x.dims.nbDims);
    }
    if (!isSupportedTypeFormat(x.type, x.format))
    {
        return std::string("input x has type ") + dataTypeName(x.type) + " in format " + formatName(x.format)
            + "; supported: FLOAT (LINEAR, HWC), HALF (LINEAR, HWC8, HWC16), BF16 (LINEAR, HWC8)";
    }
    int64_t const channels = x.dims.d[1];
    if (channels < 0 || (xMin != nullptr && xMax != nullptr && xMin->d[1] != xMax->d[1]))
    {
        std::string range = xMin != nullptr && xMax != nullptr
            ? " (profile min " + dimsString(*xMin) + ", max " + dimsString(*xMax) + ")"
            : "";
        return "the channel dimension C of input x must be static; it is dynamic" + range;
    }
    if (channels == 0 || channels % mConfig.numGroups != 0)
    {
        return "num_groups=" + std::to_string(mConfig.numGroups) + " does not divide the channel count C="
            + std::to_string(channels) + " of input x";
    }
    for (int32_t i = 1; i < 3; ++i)
    {
        char const* what = i == 1 ? "gamma" : "beta";
        PluginTensorDesc const& w = in[i];
        if (w.dims.nbDims != 1)
        {
            return std::string("input ") + what + " must have rank 1 (C), got rank " + std::to_string(w.dims.nbDims);
        }
        if (w.dims.d[0] != channels)
        {
            return std::string("input ") + what + " has " + std::to_string(w.dims.d[0]) + " elements; expected C="
                + std::to_string(channels);
        }
        if (w.format != TensorFormat::kLINEAR || (w.type != x.type && w.type != DataType::kFLOAT)
            || w.type != in[1].type)
        {
            return std::string("input ") + what + " has type " + dataTypeName(w.type) + " in format "
                + formatName(w.format) + "; expected LINEAR FLOAT or LINEAR " + dataTypeName(x.type)
                + ", the same for gamma and beta";
        }
    }
    PluginTensorDesc const& y = out[0];
    if (y.type != x.type || y.format != x.format || y.dims.nbDims != 4)
    {
        return std::string("output y must have x's type and format (") + dataTypeName(x.type) + ", "
            + formatName(x.format) + "), got " + dataTypeName(y.type) + ", " + formatName(y.format);
    }
    return {};
}

int32_t GroupNormActPlugin::configurePlugin(
    DynamicPluginTensorDesc const* in, int32_t nbInputs, DynamicPluginTensorDesc const* out, int32_t nbOutputs) noexcept
{
    try
    {
        if (in == nullptr || out == nullptr || nbInputs != kNB_INPUTS || nbOutputs != kNB_OUTPUTS)
        {
            error("expected 3 inputs (x, gamma, beta) and 1 output, got " + std::to_string(nbInputs) + " inputs and "
                + std::to_string(nbOutputs) + " outputs");
            return -1;
        }
        PluginTensorDesc inDesc[kNB_INPUTS] = {in[0].desc, in[1].desc, in[2].desc};
        PluginTensorDesc outDesc[kNB_OUTPUTS] = {out[0].desc};
        std::string const problem = checkIo(inDesc, nbInputs, outDesc, nbOutputs, &in[0].min, &in[0].max);
        if (!problem.empty())
        {
            error(problem);
            return -1;
        }
        return 0;
    }
    catch (std::exception const& e)
    {
        error(e.what());
    }
    return -1;
}

size_t GroupNormActPlugin::getWorkspaceSize(DynamicPluginTensorDesc const* inputs, int32_t nbInputs,
    DynamicPluginTensorDesc const* /*outputs*/, int32_t /*nbOutputs*/) const noexcept
{
    try
    {
        if (inputs == nullptr || nbInputs != kNB_INPUTS || inputs[0].max.nbDims != 4)
        {
            error("getWorkspaceSize: expected 3 inputs with x of rank 4");
            return 0;
        }
        // One size for the whole profile: the kernels' bound over every shape up to max.
        Dims dims = inputs[0].max;
        dims.d[1] = inputs[0].desc.dims.d[1];
        trtgn_params_t const params
            = makeParams(mConfig, dims, inputs[0].desc.type, inputs[0].desc.format, inputs[1].desc.type);
        size_t bytes = 0;
        trtgn_status_t const status = trtgn_workspace_size_max(&params, &bytes);
        if (status != TRTGN_STATUS_SUCCESS)
        {
            error(kernelError("trtgn_workspace_size_max", status) + " (x max dims " + dimsString(dims) + ")");
            return 0;
        }
        return bytes;
    }
    catch (std::exception const& e)
    {
        error(e.what());
    }
    return 0;
}

char const* GroupNormActPlugin::getTimingCacheID() noexcept
{
    // Timing depends on shapes/formats (added by TensorRT) and on these fields only.
    return mDescription.c_str();
}

char const* GroupNormActPlugin::getMetadataString() noexcept
{
    return mDescription.c_str();
}

int32_t GroupNormActPlugin::onShapeChange(
    PluginTensorDesc const* in, int32_t nbInputs, PluginTensorDesc const* out, int32_t nbOutputs) noexcept
{
    try
    {
        std::string const problem = checkIo(in, nbInputs, out, nbOutputs, nullptr, nullptr);
        if (!problem.empty())
        {
            error(problem);
            return -1;
        }
        return 0;
    }
    catch (std::exception const& e)
    {
        error(e.what());
    }
    return -1;
}

int32_t GroupNormActPlugin::enqueue(PluginTensorDesc const* inputDesc, PluginTensorDesc const* outputDesc,
    void const* const* inputs, void* const* outputs, void* workspace, cudaStream_t stream) noexcept
{
    // Everything comes from the arguments: no state is read or written, so one
    // plugin object may run in several execution contexts (streams) at once.
    if (inputDesc == nullptr || outputDesc == nullptr || inputs == nullptr || outputs == nullptr)
    {
        error("enqueue: null descriptors or buffers");
        return -1;
    }
    PluginTensorDesc const& x = inputDesc[0];
    trtgn_params_t params = makeParams(mConfig, x.dims, x.type, x.format, inputDesc[1].type);
    params.x = inputs[0];
    params.gamma = inputs[1];
    params.beta = inputs[2];
    params.y = outputs[0];
    // TensorRT provides at least getWorkspaceSize(), the bound over the profile,
    // which covers this shape's need.
    size_t workspaceBytes = 0;
    trtgn_status_t status = trtgn_workspace_size(&params, &workspaceBytes);
    if (status == TRTGN_STATUS_SUCCESS)
    {
        status = trtgn_group_norm(&params, workspace, workspaceBytes, stream);
    }
    if (status != TRTGN_STATUS_SUCCESS)
    {
        try
        {
            error(kernelError("enqueue: trtgn_group_norm", status) + " (x dims " + dimsString(x.dims) + ", "
                + dataTypeName(x.type) + ", " + formatName(x.format) + ")");
        }
        catch (...)
        {
        }
        return -1;
    }
    // Padded channel-last formats: the kernels leave the pad channels alone;
    // TensorRT's next layer (a convolution) reads them, so they are set to zero.
    int64_t const pad = params.channel_stride - params.c;
    int64_t const pixels = params.n * params.h * params.w;
    if (params.layout == TRTGN_LAYOUT_NHWC && pad > 0 && pixels > 0)
    {
        size_t const es = elementSize(x.type);
        cudaError_t const e = cudaMemset2DAsync(static_cast<char*>(outputs[0]) + params.c * es,
            params.channel_stride * es, 0, pad * es, static_cast<size_t>(pixels), stream);
        if (e != cudaSuccess)
        {
            error(std::string("enqueue: zeroing the pad channels of y failed: ") + cudaGetErrorString(e));
            return -1;
        }
    }
    return 0;
}

IPluginV3* GroupNormActPlugin::attachToContext(IPluginResourceContext* context) noexcept
{
    try
    {
        auto* plugin = new GroupNormActPlugin(*this);
        plugin->mErrorRecorder = context != nullptr ? context->getErrorRecorder() : nullptr;
        return plugin;
    }
    catch (std::exception const& e)
    {
        error(std::string("attachToContext failed: ") + e.what());
    }
    return nullptr;
}

PluginFieldCollection const* GroupNormActPlugin::getFieldsToSerialize() noexcept
{
    return &mSerialCollection;
}

} // namespace plugin
} // namespace trt_gn
