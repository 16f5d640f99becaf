/*
 * Conformance harness of libtrt_gn_plugin.so.
 *
 * Loads the library with dlopen() and drives its plugins only through the
 * entry points and interfaces TensorRT uses, in TensorRT's order: creator
 * lookup (getCreators/setLoggerFinder), fields built the way the ONNX parser
 * builds them from node attributes, the build phase (output types and shapes
 * through an expression builder, format negotiation, configurePlugin,
 * getWorkspaceSize), serialization and re-creation in the runtime phase,
 * attachToContext/clone, onShapeChange and enqueue on real GPU buffers checked
 * against a float64 reference; every bad input must fail with a message that
 * names the field or tensor and the value, through the logger or error recorder.
 *
 * usage: trt_gn_plugin_conformance [--seed=S] [--random-cases=K] /path/to/libtrt_gn_plugin.so
 *   --seed=S          seed of the random sample of shapes (default 1; env TRT_GN_CONFORMANCE_SEED)
 *   --random-cases=K  random cases per type x format of x (default 60, 0 = none;
 *                     env TRT_GN_CONFORMANCE_RANDOM_CASES)
 *   Options override the environment. A failing random case prints its shape, G, type, format,
 *   gamma/beta type, activation, eps, input offset and scale and the seed; the same binary
 *   run with that --seed repeats it.
 * exit:  0 all passed; 1 a check failed; 77 host-side checks passed but no CUDA GPU
 *        (the GPU part was skipped; CTest SKIP_RETURN_CODE); 2 usage/load error.
 */
#include "NvInferRuntime.h"
#include "trtGnPluginNames.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <functional>
#include <iomanip>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

using namespace nvinfer1;
namespace names = trt_gn::names;

namespace
{
// ---- bookkeeping -----------------------------------------------------------------
int gPassed = 0;
int gFailed = 0;

bool check(bool ok, std::string const& what, std::string const& detail = "")
{
    if (ok)
    {
        ++gPassed;
    }
    else
    {
        ++gFailed;
        std::printf("FAIL: %s%s%s\n", what.c_str(), detail.empty() ? "" : ": ", detail.c_str());
    }
    return ok;
}

// ---- logger, logger finder, error recorder, resource context --------------------------
class CapturingLogger : public ILogger
{
public:
    void log(Severity severity, AsciiChar const* msg) noexcept override
    {
        std::lock_guard<std::mutex> lock(mMutex);
        mMessages.emplace_back(severity, msg != nullptr ? msg : "");
        if (std::getenv("TRT_GN_HARNESS_VERBOSE") != nullptr)
        {
            std::printf("  [plugin log %d] %s\n", static_cast<int>(severity), msg);
        }
    }
    void clear()
    {
        std::lock_guard<std::mutex> lock(mMutex);
        mMessages.clear();
    }
    std::vector<std::string> errors()
    {
        std::lock_guard<std::mutex> lock(mMutex);
        std::vector<std::string> out;
        for (auto const& m : mMessages)
        {
            if (m.first <= Severity::kERROR)
            {
                out.push_back(m.second);
            }
        }
        return out;
    }
    std::vector<std::string> warnings()
    {
        std::lock_guard<std::mutex> lock(mMutex);
        std::vector<std::string> out;
        for (auto const& m : mMessages)
        {
            if (m.first == Severity::kWARNING)
            {
                out.push_back(m.second);
            }
        }
        return out;
    }

private:
    std::mutex mMutex;
    std::vector<std::pair<Severity, std::string>> mMessages;
};

CapturingLogger gLogger;

class HarnessLoggerFinder : public ILoggerFinder
{
public:
    ILogger* findLogger() override
    {
        return &gLogger;
    }
};

class HarnessErrorRecorder : public IErrorRecorder
{
public:
    int32_t getNbErrors() const noexcept override
    {
        std::lock_guard<std::mutex> lock(mMutex);
        return static_cast<int32_t>(mErrors.size());
    }
    ErrorCode getErrorCode(int32_t i) const noexcept override
    {
        std::lock_guard<std::mutex> lock(mMutex);
        return mErrors.at(i).first;
    }
    ErrorDesc getErrorDesc(int32_t i) const noexcept override
    {
        std::lock_guard<std::mutex> lock(mMutex);
        return mErrors.at(i).second.c_str();
    }
    bool hasOverflowed() const noexcept override
    {
        return false;
    }
    void clear() noexcept override
    {
        std::lock_guard<std::mutex> lock(mMutex);
        mErrors.clear();
    }
    bool reportError(ErrorCode val, ErrorDesc desc) noexcept override
    {
        std::lock_guard<std::mutex> lock(mMutex);
        // Like TensorRT's recorder: the description is kept up to kMAX_DESC_LENGTH characters.
        mErrors.emplace_back(val, std::string(desc != nullptr ? desc : "").substr(0, kMAX_DESC_LENGTH));
        return true;
    }
    RefCount incRefCount() noexcept override
    {
        return ++mRefs;
    }
    RefCount decRefCount() noexcept override
    {
        return --mRefs;
    }

private:
    mutable std::mutex mMutex;
    std::vector<std::pair<ErrorCode, std::string>> mErrors;
    RefCount mRefs{0};
};

class HarnessResourceContext : public IPluginResourceContext
{
public:
    explicit HarnessResourceContext(IErrorRecorder* recorder)
        : mRecorder(recorder)
    {
    }
    IGpuAllocator* getGpuAllocator() const noexcept override
    {
        return nullptr;
    }
    IErrorRecorder* getErrorRecorder() const noexcept override
    {
        return mRecorder;
    }

private:
    IErrorRecorder* mRecorder;
};

// Runs `call` and checks it logged an error containing every one of `needles`.
bool expectLoggedError(std::string const& what, std::vector<std::string> const& needles, std::function<bool()> call)
{
    gLogger.clear();
    bool const failedAsExpected = call();
    auto const errors = gLogger.errors();
    std::string all;
    for (auto const& e : errors)
    {
        all += e + " | ";
    }
    bool found = false;
    for (auto const& e : errors)
    {
        bool allIn = true;
        for (auto const& n : needles)
        {
            allIn = allIn && e.find(n) != std::string::npos;
        }
        found = found || allIn;
    }
    std::string wanted;
    for (auto const& n : needles)
    {
        wanted += "'" + n + "' ";
    }
    return check(failedAsExpected && found, what,
        std::string(failedAsExpected ? "" : "call did not fail; ") + "wanted an error with " + wanted
            + "; logged: " + (all.empty() ? "(nothing)" : all));
}

// ---- a small expression builder that evaluates symbolic dimensions --------------------
class HarnessDimExpr final : public IDimensionExpr, public apiv::VDimensionExpr
{
public:
    enum class Kind
    {
        kCONSTANT,
        kSYMBOL,
        kOPERATION
    };
    HarnessDimExpr(Kind kind, int64_t value, std::string symbol, DimensionOperation op, HarnessDimExpr const* lhs,
        HarnessDimExpr const* rhs)
        : mKind(kind)
        , mValue(value)
        , mSymbol(std::move(symbol))
        , mOp(op)
        , mLhs(lhs)
        , mRhs(rhs)
    {
        mImpl = this;
    }
    ~HarnessDimExpr() noexcept override = default;

    bool isConstant() const override
    {
        return mKind == Kind::kCONSTANT || (mKind == Kind::kOPERATION && mLhs->isConstant() && mRhs->isConstant());
    }
    int64_t getConstantValue() const override
    {
        return isConstant() ? evaluate({}) : std::numeric_limits<int64_t>::min();
    }
    bool isSizeTensor() const override
    {
        return false;
    }

    int64_t evaluate(std::map<std::string, int64_t> const& symbols) const
    {
        switch (mKind)
        {
        case Kind::kCONSTANT: return mValue;
        case Kind::kSYMBOL: return symbols.at(mSymbol);
        case Kind::kOPERATION: break;
        }
        int64_t const a = mLhs->evaluate(symbols), b = mRhs->evaluate(symbols);
        switch (mOp)
        {
        case DimensionOperation::kSUM: return a + b;
        case DimensionOperation::kPROD: return a * b;
        case DimensionOperation::kMAX: return std::max(a, b);
        case DimensionOperation::kMIN: return std::min(a, b);
        case DimensionOperation::kSUB: return a - b;
        case DimensionOperation::kEQUAL: return a == b;
        case DimensionOperation::kLESS: return a < b;
        case DimensionOperation::kFLOOR_DIV: return a / b - ((a % b != 0) && ((a < 0) != (b < 0)));
        case DimensionOperation::kCEIL_DIV: return (a + b - 1) / b;
        }
        return 0;
    }

private:
    Kind mKind;
    int64_t mValue;
    std::string mSymbol;
    DimensionOperation mOp;
    HarnessDimExpr const* mLhs;
    HarnessDimExpr const* mRhs;
};

class HarnessExprBuilder final : public IExprBuilder, public apiv::VExprBuilder
{
public:
    HarnessExprBuilder()
    {
        mImpl = this;
    }
    ~HarnessExprBuilder() noexcept override = default;

    IDimensionExpr const* constant(int64_t value) override
    {
        return add(HarnessDimExpr::Kind::kCONSTANT, value, "", DimensionOperation::kSUM, nullptr, nullptr);
    }
    IDimensionExpr const* operation(DimensionOperation op, IDimensionExpr const& first, IDimensionExpr const& second) override
    {
        auto const* a = dynamic_cast<HarnessDimExpr const*>(&first);
        auto const* b = dynamic_cast<HarnessDimExpr const*>(&second);
        if (a == nullptr || b == nullptr)
        {
            return nullptr;
        }
        return add(HarnessDimExpr::Kind::kOPERATION, 0, "", op, a, b);
    }
    IDimensionExpr const* declareSizeTensor(int32_t, IDimensionExpr const&, IDimensionExpr const&) override
    {
        mSizeTensorDeclared = true; // GroupNorm has no data-dependent shapes
        return nullptr;
    }
    HarnessDimExpr const* symbol(std::string const& name)
    {
        return add(HarnessDimExpr::Kind::kSYMBOL, 0, name, DimensionOperation::kSUM, nullptr, nullptr);
    }
    HarnessDimExpr const* constantExpr(int64_t v)
    {
        return static_cast<HarnessDimExpr const*>(constant(v));
    }
    bool mSizeTensorDeclared{false};

private:
    HarnessDimExpr const* add(HarnessDimExpr::Kind kind, int64_t value, std::string const& symbol, DimensionOperation op,
        HarnessDimExpr const* lhs, HarnessDimExpr const* rhs)
    {
        mExprs.push_back(std::make_unique<HarnessDimExpr>(kind, value, symbol, op, lhs, rhs));
        return mExprs.back().get();
    }
    std::vector<std::unique_ptr<HarnessDimExpr>> mExprs;
};

// ---- ONNX node attributes -> PluginFieldCollection, as onnx-tensorrt's importer does ---
// Only attributes named by creator->getFieldNames() become fields; a missing one is
// skipped. INT -> kINT32 (narrowed), FLOAT -> kFLOAT32, STRING -> kCHAR with the
// terminating NUL counted in length. plugin_version/plugin_namespace select the creator.
struct OnnxAttr
{
    enum class Type
    {
        kINT,
        kFLOAT,
        kSTRING
    } type;
    int64_t i{0};
    float f{0.F};
    std::string s;
};
OnnxAttr attrInt(int64_t v)
{
    return OnnxAttr{OnnxAttr::Type::kINT, v, 0.F, ""};
}
OnnxAttr attrFloat(float v)
{
    return OnnxAttr{OnnxAttr::Type::kFLOAT, 0, v, ""};
}
OnnxAttr attrString(std::string v)
{
    return OnnxAttr{OnnxAttr::Type::kSTRING, 0, 0.F, std::move(v)};
}

class ParserFields
{
public:
    ParserFields(IPluginCreatorV3One& creator, std::map<std::string, OnnxAttr> const& attrs)
    {
        PluginFieldCollection const* names = creator.getFieldNames();
        mStorage.reserve(static_cast<size_t>(names->nbFields));
        for (int32_t i = 0; i < names->nbFields; ++i)
        {
            auto it = attrs.find(names->fields[i].name);
            if (it == attrs.end())
            {
                continue;
            }
            mNames.push_back(names->fields[i].name);
            mStorage.emplace_back();
            std::vector<uint8_t>& bytes = mStorage.back();
            OnnxAttr const& a = it->second;
            PluginFieldType type{};
            int32_t length = 1;
            if (a.type == OnnxAttr::Type::kINT)
            {
                int32_t const v = static_cast<int32_t>(a.i);
                bytes.resize(sizeof v);
                std::memcpy(bytes.data(), &v, sizeof v);
                type = PluginFieldType::kINT32;
            }
            else if (a.type == OnnxAttr::Type::kFLOAT)
            {
                bytes.resize(sizeof a.f);
                std::memcpy(bytes.data(), &a.f, sizeof a.f);
                type = PluginFieldType::kFLOAT32;
            }
            else
            {
                bytes.assign(a.s.begin(), a.s.end());
                bytes.push_back('\0');
                type = PluginFieldType::kCHAR;
                length = static_cast<int32_t>(bytes.size());
            }
            mTypes.push_back(type);
            mLengths.push_back(length);
        }
        for (size_t i = 0; i < mNames.size(); ++i)
        {
            mFields.emplace_back(mNames[i].c_str(), mStorage[i].data(), mTypes[i], mLengths[i]);
        }
        mCollection.nbFields = static_cast<int32_t>(mFields.size());
        mCollection.fields = mFields.data();
    }
    PluginFieldCollection const* get() const
    {
        return &mCollection;
    }

private:
    std::vector<std::string> mNames;
    std::vector<std::vector<uint8_t>> mStorage;
    std::vector<PluginFieldType> mTypes;
    std::vector<int32_t> mLengths;
    std::vector<PluginField> mFields;
    PluginFieldCollection mCollection{};
};

// ---- dtype helpers and the float64 reference -------------------------------------------
uint16_t floatToHalf(float value)
{
    uint32_t x;
    std::memcpy(&x, &value, 4);
    uint32_t const sign = (x >> 16) & 0x8000U;
    uint32_t mant = x & 0x7fffffU;
    int32_t const exp = static_cast<int32_t>((x >> 23) & 0xffU);
    if (exp == 0xff)
    {
        return static_cast<uint16_t>(sign | 0x7c00U | (mant ? 0x200U : 0U));
    }
    int32_t const e = exp - 127 + 15;
    if (e >= 0x1f)
    {
        return static_cast<uint16_t>(sign | 0x7c00U);
    }
    if (e <= 0)
    {
        if (e < -10)
        {
            return static_cast<uint16_t>(sign);
        }
        mant |= 0x800000U;
        uint32_t const shift = static_cast<uint32_t>(14 - e);
        uint32_t h = mant >> shift;
        uint32_t const rem = mant & ((1U << shift) - 1U), halfway = 1U << (shift - 1U);
        h += (rem > halfway || (rem == halfway && (h & 1U))) ? 1U : 0U;
        return static_cast<uint16_t>(sign | h);
    }
    uint32_t h = (static_cast<uint32_t>(e) << 10) | (mant >> 13);
    uint32_t const rem = mant & 0x1fffU;
    h += (rem > 0x1000U || (rem == 0x1000U && (h & 1U))) ? 1U : 0U;
    return static_cast<uint16_t>(sign | h);
}

float halfToFloat(uint16_t h)
{
    uint32_t const sign = (h & 0x8000U) << 16;
    uint32_t exp = (h >> 10) & 0x1fU;
    uint32_t mant = h & 0x3ffU;
    uint32_t bits;
    if (exp == 0x1f)
    {
        bits = sign | 0x7f800000U | (mant << 13);
    }
    else if (exp == 0)
    {
        if (mant == 0)
        {
            bits = sign;
        }
        else
        {
            int32_t e = -1;
            do
            {
                ++e;
                mant <<= 1;
            } while ((mant & 0x400U) == 0);
            bits = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((mant & 0x3ffU) << 13);
        }
    }
    else
    {
        bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

uint16_t floatToBf16(float value)
{
    uint32_t x;
    std::memcpy(&x, &value, 4);
    if ((x & 0x7fffffffU) > 0x7f800000U)
    {
        return static_cast<uint16_t>((x >> 16) | 0x40U);
    }
    x += 0x7fffU + ((x >> 16) & 1U);
    return static_cast<uint16_t>(x >> 16);
}

float bf16ToFloat(uint16_t b)
{
    uint32_t const bits = static_cast<uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

size_t elementSize(DataType t)
{
    return t == DataType::kFLOAT ? 4 : 2;
}

// Stores `v` as `t` at element `i` of `buf`; returns the value actually stored.
double storeAs(DataType t, std::vector<uint8_t>& buf, size_t i, float v)
{
    if (t == DataType::kFLOAT)
    {
        std::memcpy(buf.data() + 4 * i, &v, 4);
        return v;
    }
    uint16_t const bits = t == DataType::kHALF ? floatToHalf(v) : floatToBf16(v);
    std::memcpy(buf.data() + 2 * i, &bits, 2);
    return t == DataType::kHALF ? halfToFloat(bits) : bf16ToFloat(bits);
}

double loadAs(DataType t, std::vector<uint8_t> const& buf, size_t i)
{
    if (t == DataType::kFLOAT)
    {
        float v;
        std::memcpy(&v, buf.data() + 4 * i, 4);
        return v;
    }
    uint16_t bits;
    std::memcpy(&bits, buf.data() + 2 * i, 2);
    return t == DataType::kHALF ? halfToFloat(bits) : bf16ToFloat(bits);
}

// The accuracy rule of trt_gn/reference.py (its comment "The accuracy rule" derives it from a
// forward error analysis of the kernels' fp32 arithmetic; _error_terms/tolerance compute it).
// Per element, with u = 2^-24, xh the normalised value, xh_k the normalised first element of
// the group (NCHW order), z = xh * gamma + beta and y = act(z):
//     terms = act' u [(3 + 40 (2 + xh_k^2)) |xh gamma| + 80 (1 + |xh_k|) |gamma| + 3 |beta|]
//             + [SiLU] (4 + |z|) u |y| + |z| 2^-62 + 2^-126,     act' = 1.1 (SiLU) or 1;
//     tol   = terms (fp32),  terms + ulp(|y| + terms) / 2 (fp16, bf16).
// The terms bound the error of magnitudes before cancellation, so they do not vanish with |y|.
struct RefValue
{
    double y;       // act(z)
    double xh;      // (x - mean) * rstd
    double xhFirst; // xh of the group's first element (channel g * C/G, pixel 0)
    double z;       // xh * gamma + beta
};

double errorTerms(RefValue const& r, double gamma, double beta, bool silu)
{
    double const u = std::ldexp(1.0, -24);
    double const cSum = 80.0; // lam * sqrt(R) of the probabilistic bound on sums of R = 256 terms
    double const cRstd = 3.0 + 0.5 * cSum * (2.0 + r.xhFirst * r.xhFirst);
    double err = u
        * (cRstd * std::fabs(r.xh * gamma) + cSum * (1.0 + std::fabs(r.xhFirst)) * std::fabs(gamma)
            + 3.0 * std::fabs(beta));
    if (silu)
    {
        err = 1.1 * err + u * (4.0 + std::fabs(r.z)) * std::fabs(r.y);
    }
    return err + std::fabs(r.z) * std::ldexp(1.0, -62) + std::ldexp(1.0, -126);
}

// Allowed |out - y| for an output of type t, given the element's error terms.
double tolerance(double y, double terms, DataType t)
{
    if (t == DataType::kFLOAT)
    {
        return terms;
    }
    int const mantissa = t == DataType::kHALF ? 10 : 7;
    double const tiny = t == DataType::kHALF ? std::ldexp(1.0, -24) : std::ldexp(1.0, -133);
    double const mag = std::max(std::fabs(y) + terms, tiny);
    double const ulp = std::max(std::ldexp(1.0, std::ilogb(mag) - mantissa), tiny);
    return terms + 0.5 * ulp;
}

// act(GroupNorm(x)) in float64, x given in NCHW; one RefValue per element, NCHW order.
// Two-pass statistics (mean, then the mean of squared deviations), as trt_gn.reference.
std::vector<RefValue> reference(std::vector<double> const& x, std::vector<double> const& gamma,
    std::vector<double> const& beta, int64_t N, int64_t C, int64_t H, int64_t W, int64_t G, double eps, bool silu)
{
    std::vector<RefValue> ref(x.size());
    int64_t const cpg = C / G, hw = H * W;
    for (int64_t n = 0; n < N; ++n)
    {
        for (int64_t g = 0; g < G; ++g)
        {
            size_t const base = static_cast<size_t>((n * C + g * cpg) * hw);
            size_t const count = static_cast<size_t>(cpg * hw);
            if (count == 0)
            {
                continue;
            }
            double mean = 0.0;
            for (size_t i = 0; i < count; ++i)
            {
                mean += x[base + i];
            }
            mean /= static_cast<double>(count);
            double var = 0.0;
            for (size_t i = 0; i < count; ++i)
            {
                var += (x[base + i] - mean) * (x[base + i] - mean);
            }
            var /= static_cast<double>(count);
            double const rstd = 1.0 / std::sqrt(var + eps);
            double const xhFirst = (x[base] - mean) * rstd;
            for (int64_t c = g * cpg; c < (g + 1) * cpg; ++c)
            {
                for (int64_t p = 0; p < hw; ++p)
                {
                    size_t const i = static_cast<size_t>((n * C + c) * hw + p);
                    RefValue& r = ref[i];
                    r.xh = (x[i] - mean) * rstd;
                    r.xhFirst = xhFirst;
                    r.z = r.xh * gamma[static_cast<size_t>(c)] + beta[static_cast<size_t>(c)];
                    r.y = silu ? r.z / (1.0 + std::exp(-r.z)) : r.z;
                }
            }
        }
    }
    return ref;
}

// ---- TensorRT-side descriptions ------------------------------------------------------------
Dims dims4(int64_t n, int64_t c, int64_t h, int64_t w)
{
    Dims d{};
    d.nbDims = 4;
    d.d[0] = n;
    d.d[1] = c;
    d.d[2] = h;
    d.d[3] = w;
    return d;
}
Dims dims1(int64_t c)
{
    Dims d{};
    d.nbDims = 1;
    d.d[0] = c;
    return d;
}

PluginTensorDesc tensorDesc(Dims d, DataType t, TensorFormat f)
{
    PluginTensorDesc desc{};
    desc.dims = d;
    desc.type = t;
    desc.format = f;
    desc.scale = -1.F;
    return desc;
}

// The 4 I/O descriptions of one layer: x, gamma, beta, y.
struct Io
{
    PluginTensorDesc in[3];
    PluginTensorDesc out[1];
};
Io makeIo(Dims x, DataType t, TensorFormat f, DataType affine, int64_t gammaLen = -1, int64_t betaLen = -1)
{
    Io io{};
    int64_t const c = x.d[1];
    io.in[0] = tensorDesc(x, t, f);
    io.in[1] = tensorDesc(dims1(gammaLen >= 0 ? gammaLen : c), affine, TensorFormat::kLINEAR);
    io.in[2] = tensorDesc(dims1(betaLen >= 0 ? betaLen : c), affine, TensorFormat::kLINEAR);
    io.out[0] = tensorDesc(x, t, f);
    return io;
}

// Build-phase view: desc.dims with -1 where dynamic, and the profile's min/opt/max.
struct DynIo
{
    DynamicPluginTensorDesc in[3];
    DynamicPluginTensorDesc out[1];
};
DynIo makeDynIo(Io const& io, Dims xMin, Dims xOpt, Dims xMax, Dims xWithWildcards)
{
    DynIo d{};
    for (int i = 0; i < 3; ++i)
    {
        d.in[i].desc = io.in[i];
        d.in[i].min = d.in[i].opt = d.in[i].max = io.in[i].dims;
    }
    d.in[0].desc.dims = xWithWildcards;
    d.in[0].min = xMin;
    d.in[0].opt = xOpt;
    d.in[0].max = xMax;
    d.out[0].desc = io.out[0];
    d.out[0].desc.dims = xWithWildcards;
    d.out[0].min = xMin;
    d.out[0].opt = xOpt;
    d.out[0].max = xMax;
    return d;
}

char const* typeName(DataType t)
{
    switch (t)
    {
    case DataType::kFLOAT: return "FLOAT";
    case DataType::kHALF: return "HALF";
    case DataType::kBF16: return "BF16";
    default: return "other";
    }
}
char const* formatName(TensorFormat f)
{
    switch (f)
    {
    case TensorFormat::kLINEAR: return "LINEAR";
    case TensorFormat::kHWC8: return "HWC8";
    case TensorFormat::kHWC16: return "HWC16";
    case TensorFormat::kHWC: return "HWC";
    default: return "other";
    }
}
int64_t channelVector(TensorFormat f)
{
    return f == TensorFormat::kHWC8 ? 8 : f == TensorFormat::kHWC16 ? 16 : 1;
}

// The (type, format) pairs of x/y the plugin must offer.
std::vector<std::pair<DataType, TensorFormat>> const kXCOMBOS = {
    {DataType::kFLOAT, TensorFormat::kLINEAR},
    {DataType::kFLOAT, TensorFormat::kHWC},
    {DataType::kHALF, TensorFormat::kLINEAR},
    {DataType::kHALF, TensorFormat::kHWC8},
    {DataType::kHALF, TensorFormat::kHWC16},
    {DataType::kBF16, TensorFormat::kLINEAR},
    {DataType::kBF16, TensorFormat::kHWC8},
};

// ---- the plugin under test -----------------------------------------------------------------
struct PluginHandle
{
    IPluginV3* plugin{nullptr};
    IPluginV3OneCore* core{nullptr};
    IPluginV3OneBuild* build{nullptr};
    IPluginV3OneRuntime* runtime{nullptr};
};

PluginHandle open(IPluginV3* plugin)
{
    PluginHandle h;
    h.plugin = plugin;
    if (plugin != nullptr)
    {
        h.core = static_cast<IPluginV3OneCore*>(plugin->getCapabilityInterface(PluginCapabilityType::kCORE));
        h.build = static_cast<IPluginV3OneBuild*>(plugin->getCapabilityInterface(PluginCapabilityType::kBUILD));
        h.runtime = static_cast<IPluginV3OneRuntime*>(plugin->getCapabilityInterface(PluginCapabilityType::kRUNTIME));
    }
    return h;
}

struct Expected
{
    std::string name, version, nameSpace;
    int64_t groups;
    float epsilon;
    bool silu;
    bool legacy;
};

std::string fieldsToString(PluginFieldCollection const* fc)
{
    std::ostringstream s;
    for (int32_t i = 0; fc != nullptr && i < fc->nbFields; ++i)
    {
        PluginField const& f = fc->fields[i];
        s << f.name << ":" << static_cast<int>(f.type) << "x" << f.length << "=";
        if (f.type == PluginFieldType::kINT32)
        {
            s << *static_cast<int32_t const*>(f.data);
        }
        else if (f.type == PluginFieldType::kFLOAT32)
        {
            float v;
            std::memcpy(&v, f.data, 4);
            s << std::hexfloat << v << std::defaultfloat;
        }
        else if (f.type == PluginFieldType::kCHAR)
        {
            s << "'" << std::string(static_cast<char const*>(f.data), strnlen(static_cast<char const*>(f.data), f.length))
              << "'";
        }
        s << ";";
    }
    return s.str();
}

// ---- checks that need no GPU ------------------------------------------------------------
void checkInterfaces(std::string const& tag, PluginHandle const& h, Expected const& e)
{
    check(h.core && h.build && h.runtime, tag + ": getCapabilityInterface returns core, build and runtime");
    if (!(h.core && h.build && h.runtime))
    {
        return;
    }
    check(std::strcmp(h.plugin->getInterfaceInfo().kind, "PLUGIN") == 0, tag + ": IPluginV3 kind");
    check(std::strcmp(h.core->getInterfaceInfo().kind, "PLUGIN_V3ONE_CORE") == 0, tag + ": core kind");
    check(std::strcmp(h.build->getInterfaceInfo().kind, "PLUGIN_V3ONE_BUILD") == 0, tag + ": build kind");
    check(std::strcmp(h.runtime->getInterfaceInfo().kind, "PLUGIN_V3ONE_RUNTIME") == 0, tag + ": runtime kind");
    check(e.name == h.core->getPluginName() && e.version == h.core->getPluginVersion()
            && e.nameSpace == h.core->getPluginNamespace(),
        tag + ": plugin name/version/namespace match the creator",
        std::string(h.core->getPluginName()) + "/" + h.core->getPluginVersion() + "/" + h.core->getPluginNamespace());
}

void checkBuildPhase(std::string const& tag, PluginHandle const& h, Expected const& e)
{
    IPluginV3OneBuild* b = h.build;
    check(b->getNbOutputs() == 1, tag + ": getNbOutputs() == 1");

    // output types: y has x's type
    for (DataType t : {DataType::kFLOAT, DataType::kHALF, DataType::kBF16})
    {
        DataType in[3] = {t, DataType::kFLOAT, DataType::kFLOAT};
        DataType out[1] = {DataType::kINT8};
        check(b->getOutputDataTypes(out, 1, in, 3) == 0 && out[0] == t,
            tag + ": getOutputDataTypes(" + typeName(t) + ") == " + typeName(t));
    }
    expectLoggedError(tag + ": getOutputDataTypes rejects INT8 x", {"input x has data type INT8"}, [&] {
        DataType in[3] = {DataType::kINT8, DataType::kFLOAT, DataType::kFLOAT};
        DataType out[1];
        return b->getOutputDataTypes(out, 1, in, 3) != 0;
    });
    expectLoggedError(tag + ": getOutputDataTypes rejects 2 inputs", {"expected 3 inputs", "got 2 inputs"}, [&] {
        DataType in[2] = {DataType::kHALF, DataType::kFLOAT};
        DataType out[1];
        return b->getOutputDataTypes(out, 1, in, 2) != 0;
    });

    // output shapes, static and dynamic, through the expression builder
    int64_t const C = e.groups * 2;
    {
        HarnessExprBuilder eb;
        DimsExprs in[3];
        in[0].nbDims = 4;
        in[0].d[0] = eb.constantExpr(2);
        in[0].d[1] = eb.constantExpr(C);
        in[0].d[2] = eb.constantExpr(5);
        in[0].d[3] = eb.constantExpr(7);
        in[1].nbDims = in[2].nbDims = 1;
        in[1].d[0] = in[2].d[0] = eb.constantExpr(C);
        DimsExprs out[1];
        int32_t const rc = b->getOutputShapes(in, 3, nullptr, 0, out, 1, eb);
        bool ok = rc == 0 && out[0].nbDims == 4;
        int64_t const want[4] = {2, C, 5, 7};
        for (int i = 0; ok && i < 4; ++i)
        {
            ok = out[0].d[i] != nullptr && out[0].d[i]->isConstant() && out[0].d[i]->getConstantValue() == want[i];
        }
        check(ok && !eb.mSizeTensorDeclared, tag + ": getOutputShapes, static shape");
    }
    {
        HarnessExprBuilder eb;
        DimsExprs in[3];
        in[0].nbDims = 4;
        in[0].d[0] = eb.symbol("N");
        in[0].d[1] = eb.constantExpr(C);
        in[0].d[2] = eb.symbol("H");
        // W as an expression of other symbols, as TensorRT hands over after a Reshape/Concat
        in[0].d[3] = eb.operation(DimensionOperation::kPROD, *eb.symbol("W2"), *eb.constantExpr(2));
        in[1].nbDims = in[2].nbDims = 1;
        in[1].d[0] = in[2].d[0] = eb.constantExpr(C);
        DimsExprs out[1];
        int32_t const rc = b->getOutputShapes(in, 3, nullptr, 0, out, 1, eb);
        bool ok = rc == 0 && out[0].nbDims == 4;
        for (auto const& binding : std::vector<std::map<std::string, int64_t>>{
                 {{"N", 1}, {"H", 8}, {"W2", 3}}, {{"N", 4}, {"H", 64}, {"W2", 32}}})
        {
            int64_t const want[4] = {binding.at("N"), C, binding.at("H"), 2 * binding.at("W2")};
            for (int i = 0; ok && i < 4; ++i)
            {
                auto const* d = dynamic_cast<HarnessDimExpr const*>(out[0].d[i]);
                ok = d != nullptr && d->evaluate(binding) == want[i];
            }
        }
        ok = ok && !out[0].d[0]->isConstant() && !out[0].d[2]->isConstant() && !out[0].d[3]->isConstant()
            && out[0].d[1]->isConstant();
        check(ok, tag + ": getOutputShapes, dynamic N/H/W evaluate like the input's expressions");
    }
    auto shapeCall = [&](int64_t c, int64_t gammaLen, int32_t xRank) {
        HarnessExprBuilder eb;
        DimsExprs in[3];
        in[0].nbDims = xRank;
        for (int i = 0; i < xRank; ++i)
        {
            in[0].d[i] = i == 1 ? static_cast<IDimensionExpr const*>(eb.constantExpr(c)) : eb.symbol("S");
        }
        in[1].nbDims = in[2].nbDims = 1;
        in[1].d[0] = eb.constantExpr(gammaLen);
        in[2].d[0] = eb.constantExpr(c);
        DimsExprs out[1];
        return b->getOutputShapes(in, 3, nullptr, 0, out, 1, eb) != 0;
    };
    expectLoggedError(tag + ": getOutputShapes rejects rank-3 x", {"input x must have rank 4", "got rank 3"},
        [&] { return shapeCall(C, C, 3); });
    expectLoggedError(tag + ": getOutputShapes rejects C not divisible by num_groups",
        {"num_groups=" + std::to_string(e.groups), "C=" + std::to_string(C + 1)},
        [&] { return shapeCall(C + 1, C + 1, 4); });
    expectLoggedError(tag + ": getOutputShapes rejects gamma of the wrong length",
        {"input gamma has " + std::to_string(C / 2) + " elements", "C=" + std::to_string(C)},
        [&] { return shapeCall(C, C / 2, 4); });

    // format negotiation: every type x format at every position, as TensorRT enumerates
    std::set<std::tuple<int, int, int, int, int, int>> accepted; // xType, xFormat, gType, bType, yType, yFormat
    std::vector<DataType> allTypes;
    for (int t = 0; t < 12; ++t)
    {
        allTypes.push_back(static_cast<DataType>(t));
    }
    std::vector<TensorFormat> allFormats;
    for (int f = 0; f < 13; ++f)
    {
        allFormats.push_back(static_cast<TensorFormat>(f));
    }
    DynamicPluginTensorDesc io[4]{};
    io[0].desc = tensorDesc(dims4(-1, C, -1, -1), DataType::kFLOAT, TensorFormat::kLINEAR);
    io[1].desc = tensorDesc(dims1(C), DataType::kFLOAT, TensorFormat::kLINEAR);
    io[2].desc = io[1].desc;
    io[3].desc = io[0].desc;
    int queries = 0;
    for (DataType xt : allTypes)
        for (TensorFormat xf : allFormats)
        {
            io[0].desc.type = xt;
            io[0].desc.format = xf;
            ++queries;
            if (!b->supportsFormatCombination(0, io, 3, 1))
                continue;
            for (DataType gt : allTypes)
                for (TensorFormat gf : allFormats)
                {
                    io[1].desc.type = gt;
                    io[1].desc.format = gf;
                    if (!b->supportsFormatCombination(1, io, 3, 1))
                        continue;
                    for (DataType bt : allTypes)
                        for (TensorFormat bf : allFormats)
                        {
                            io[2].desc.type = bt;
                            io[2].desc.format = bf;
                            if (!b->supportsFormatCombination(2, io, 3, 1))
                                continue;
                            for (DataType yt : allTypes)
                                for (TensorFormat yf : allFormats)
                                {
                                    io[3].desc.type = yt;
                                    io[3].desc.format = yf;
                                    if (b->supportsFormatCombination(3, io, 3, 1))
                                        accepted.emplace(static_cast<int>(xt), static_cast<int>(xf),
                                            static_cast<int>(gt), static_cast<int>(bt), static_cast<int>(yt),
                                            static_cast<int>(yf));
                                }
                        }
                }
        }
    std::set<std::tuple<int, int, int, int, int, int>> expected;
    for (auto const& xc : kXCOMBOS)
    {
        for (DataType affine : {xc.first, DataType::kFLOAT})
        {
            expected.emplace(static_cast<int>(xc.first), static_cast<int>(xc.second), static_cast<int>(affine),
                static_cast<int>(affine), static_cast<int>(xc.first), static_cast<int>(xc.second));
        }
    }
    check(accepted == expected, tag + ": supportsFormatCombination accepts exactly the 12 documented combinations",
        "accepted " + std::to_string(accepted.size()) + ", expected " + std::to_string(expected.size()));
    check(accepted.size() <= static_cast<size_t>(b->getFormatCombinationLimit()),
        tag + ": combinations within getFormatCombinationLimit()");
    {
        DynamicPluginTensorDesc rank3[4]{};
        rank3[0].desc = tensorDesc(Dims{3, {C, 4, 4}}, DataType::kHALF, TensorFormat::kLINEAR);
        check(!b->supportsFormatCombination(0, rank3, 3, 1), tag + ": supportsFormatCombination rejects rank-3 x");
        check(!b->supportsFormatCombination(0, io, 2, 1) && !b->supportsFormatCombination(4, io, 3, 1),
            tag + ": supportsFormatCombination rejects a wrong I/O count or position");
    }

    // configurePlugin: dynamic N/H/W within a profile; C must be static
    for (auto const& xc : kXCOMBOS)
    {
        Io const io0 = makeIo(dims4(2, C, 8, 8), xc.first, xc.second, DataType::kFLOAT);
        DynIo d = makeDynIo(io0, dims4(1, C, 4, 4), dims4(2, C, 8, 8), dims4(4, C, 32, 32), dims4(-1, C, -1, -1));
        gLogger.clear();
        check(b->configurePlugin(d.in, 3, d.out, 1) == 0 && gLogger.errors().empty(),
            tag + ": configurePlugin(" + typeName(xc.first) + " " + formatName(xc.second) + ", dynamic N/H/W)");
    }
    {
        Io const io0 = makeIo(dims4(2, C, 8, 8), DataType::kHALF, TensorFormat::kHWC8, DataType::kFLOAT);
        expectLoggedError(tag + ": configurePlugin rejects a dynamic C",
            {"channel dimension C of input x must be static", "min [1, " + std::to_string(C) + ", 4, 4]"}, [&] {
                DynIo d = makeDynIo(
                    io0, dims4(1, C, 4, 4), dims4(2, C, 8, 8), dims4(4, 2 * C, 32, 32), dims4(-1, -1, -1, -1));
                return b->configurePlugin(d.in, 3, d.out, 1) != 0;
            });
        expectLoggedError(tag + ": configurePlugin rejects C not divisible by num_groups",
            {"num_groups=" + std::to_string(e.groups) + " does not divide the channel count C=" + std::to_string(C + 2)},
            [&] {
                Io io1 = makeIo(dims4(2, C + 2, 8, 8), DataType::kHALF, TensorFormat::kHWC8, DataType::kFLOAT);
                DynIo d = makeDynIo(io1, dims4(1, C + 2, 4, 4), dims4(2, C + 2, 8, 8), dims4(4, C + 2, 32, 32),
                    dims4(-1, C + 2, -1, -1));
                return b->configurePlugin(d.in, 3, d.out, 1) != 0;
            });
        expectLoggedError(tag + ": configurePlugin rejects beta of the wrong length",
            {"input beta has " + std::to_string(C + 1) + " elements; expected C=" + std::to_string(C)}, [&] {
                Io io1 = makeIo(dims4(2, C, 8, 8), DataType::kHALF, TensorFormat::kHWC8, DataType::kFLOAT, C, C + 1);
                DynIo d = makeDynIo(io1, dims4(1, C, 4, 4), dims4(2, C, 8, 8), dims4(4, C, 32, 32), dims4(-1, C, -1, -1));
                return b->configurePlugin(d.in, 3, d.out, 1) != 0;
            });
        expectLoggedError(tag + ": configurePlugin rejects an unsupported format (FLOAT HWC8)",
            {"input x has type FLOAT in format HWC8"}, [&] {
                Io io1 = makeIo(dims4(2, C, 8, 8), DataType::kFLOAT, TensorFormat::kHWC8, DataType::kFLOAT);
                DynIo d = makeDynIo(io1, dims4(2, C, 8, 8), dims4(2, C, 8, 8), dims4(2, C, 8, 8), dims4(2, C, 8, 8));
                return b->configurePlugin(d.in, 3, d.out, 1) != 0;
            });
        expectLoggedError(tag + ": configurePlugin rejects an unsupported type (INT8)", {"input x has type INT8"}, [&] {
            Io io1 = makeIo(dims4(2, C, 8, 8), DataType::kINT8, TensorFormat::kLINEAR, DataType::kFLOAT);
            DynIo d = makeDynIo(io1, dims4(2, C, 8, 8), dims4(2, C, 8, 8), dims4(2, C, 8, 8), dims4(2, C, 8, 8));
            return b->configurePlugin(d.in, 3, d.out, 1) != 0;
        });
        expectLoggedError(tag + ": configurePlugin rejects rank-5 x", {"input x must have rank 4", "got rank 5"}, [&] {
            Io io1 = makeIo(dims4(2, C, 8, 8), DataType::kHALF, TensorFormat::kLINEAR, DataType::kFLOAT);
            io1.in[0].dims.nbDims = 5;
            io1.in[0].dims.d[4] = 2;
            io1.out[0].dims = io1.in[0].dims;
            DynIo d = makeDynIo(io1, io1.in[0].dims, io1.in[0].dims, io1.in[0].dims, io1.in[0].dims);
            return b->configurePlugin(d.in, 3, d.out, 1) != 0;
        });
    }
    check(b->getTimingCacheID() != nullptr && std::string(b->getTimingCacheID()).find("num_groups=") != std::string::npos,
        tag + ": getTimingCacheID names the fields");
}

// ---- GPU part --------------------------------------------------------------------------------
bool cudaOk(cudaError_t e, std::string const& what)
{
    return check(e == cudaSuccess, what, cudaGetErrorString(e));
}

struct DeviceBuffer
{
    void* ptr{nullptr};
    explicit DeviceBuffer(size_t bytes)
    {
        if (cudaMalloc(&ptr, std::max<size_t>(bytes, 256)) != cudaSuccess)
        {
            ptr = nullptr;
        }
    }
    ~DeviceBuffer()
    {
        cudaFree(ptr);
    }
    DeviceBuffer(DeviceBuffer const&) = delete;
    DeviceBuffer& operator=(DeviceBuffer const&) = delete;
};

struct Case
{
    int64_t n, c, h, w;
};

// x ~ normal(offset, scale): the offset makes the mean matter, the scale the variance.
struct InputSpec
{
    float offset{0.5F};
    float scale{2.0F};
};

// One problem on the host: x in the layout of `format` (pad channels NaN), gamma, beta, and
// the values actually stored, in float64 and NCHW order, for the reference.
struct HostProblem
{
    Case cs;
    DataType type;
    TensorFormat format;
    DataType affine;
    int64_t stride; // channel stride of x/y: C (LINEAR, HWC) or C rounded up to the vector
    size_t elems;   // elements of x/y, pad channels included
    std::vector<uint8_t> hx, hg, hb;
    std::vector<double> x64, g64, b64;

    // element (n, c, h, w) of x/y in the buffer's layout
    size_t at(int64_t n, int64_t c, int64_t h, int64_t w) const
    {
        return static_cast<size_t>(format == TensorFormat::kLINEAR ? ((n * cs.c + c) * cs.h + h) * cs.w + w
                                                                   : ((n * cs.h + h) * cs.w + w) * stride + c);
    }
    static size_t nchw(Case const& s, int64_t n, int64_t c, int64_t h, int64_t w)
    {
        return static_cast<size_t>(((n * s.c + c) * s.h + h) * s.w + w);
    }
};

HostProblem makeProblem(
    Case const& cs, DataType type, TensorFormat format, DataType affine, uint32_t seed, InputSpec const& in = {})
{
    HostProblem p{cs, type, format, affine, 0, 0, {}, {}, {}, {}, {}, {}};
    int64_t const N = cs.n, C = cs.c, H = cs.h, W = cs.w;
    int64_t const vec = channelVector(format);
    p.stride = format == TensorFormat::kLINEAR ? C : (C + vec - 1) / vec * vec;
    p.elems = static_cast<size_t>(N * H * W * p.stride);
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(in.offset, in.scale);
    std::uniform_real_distribution<float> uni(-1.5F, 1.5F);
    p.hx.resize(p.elems * elementSize(type));
    p.hg.resize(static_cast<size_t>(C) * elementSize(affine));
    p.hb.resize(static_cast<size_t>(C) * elementSize(affine));
    p.x64.resize(static_cast<size_t>(N * C * H * W));
    p.g64.resize(static_cast<size_t>(C));
    p.b64.resize(static_cast<size_t>(C));
    for (size_t i = 0; i < p.elems; ++i)
    {
        storeAs(type, p.hx, i, std::nanf(""));
    }
    for (int64_t n = 0; n < N; ++n)
        for (int64_t c = 0; c < C; ++c)
            for (int64_t h = 0; h < H; ++h)
                for (int64_t w = 0; w < W; ++w)
                {
                    p.x64[HostProblem::nchw(cs, n, c, h, w)] = storeAs(type, p.hx, p.at(n, c, h, w), normal(rng));
                }
    for (int64_t c = 0; c < C; ++c)
    {
        p.g64[static_cast<size_t>(c)] = storeAs(affine, p.hg, static_cast<size_t>(c), uni(rng));
        p.b64[static_cast<size_t>(c)] = storeAs(affine, p.hb, static_cast<size_t>(c), uni(rng));
    }
    return p;
}

std::vector<RefValue> referenceOf(HostProblem const& p, Expected const& e)
{
    return reference(p.x64, p.g64, p.b64, p.cs.n, p.cs.c, p.cs.h, p.cs.w, e.groups, e.epsilon, e.silu);
}

// Checks y (in the problem's layout, pad channels included) against the reference: every
// element within the rule's tolerance, every pad channel +0.
bool compareWithReference(
    std::string const& what, HostProblem const& p, std::vector<RefValue> const& ref, bool silu, std::vector<uint8_t> const& hy)
{
    Case const& cs = p.cs;
    size_t bad = 0, badPad = 0;
    double worst = 0.0, worstOut = 0.0, worstRef = 0.0, worstTol = 0.0;
    int64_t worstAt[4] = {0, 0, 0, 0};
    for (int64_t n = 0; n < cs.n; ++n)
        for (int64_t h = 0; h < cs.h; ++h)
            for (int64_t w = 0; w < cs.w; ++w)
            {
                for (int64_t c = 0; c < p.stride; ++c)
                {
                    double const out = loadAs(p.type, hy, p.at(n, c, h, w));
                    if (c >= cs.c)
                    {
                        badPad += out != 0.0 || std::signbit(out); // pad channels: +0
                        continue;
                    }
                    RefValue const& r = ref[HostProblem::nchw(cs, n, c, h, w)];
                    size_t const ch = static_cast<size_t>(c);
                    double const tol = tolerance(r.y, errorTerms(r, p.g64[ch], p.b64[ch], silu), p.type);
                    double const err = std::fabs(out - r.y);
                    double const ratio = std::isnan(out) ? 1e30 : err / tol;
                    if (ratio > 1.0)
                    {
                        ++bad;
                    }
                    if (ratio > worst)
                    {
                        worst = ratio;
                        worstOut = out;
                        worstRef = r.y;
                        worstTol = tol;
                        worstAt[0] = n;
                        worstAt[1] = c;
                        worstAt[2] = h;
                        worstAt[3] = w;
                    }
                }
            }
    std::ostringstream detail;
    detail << bad << " elements out of tolerance (worst at [" << worstAt[0] << "," << worstAt[1] << "," << worstAt[2]
           << "," << worstAt[3] << "]: out " << std::setprecision(9) << worstOut << " vs ref " << worstRef << ", tol "
           << std::setprecision(3) << worstTol << ", " << worst << "x the tolerance), " << badPad
           << " pad channels not zero";
    return check(bad == 0 && badPad == 0, what, detail.str());
}

// The build phase for the problem's combination: configurePlugin with a profile around its
// shape (dynamic N/H/W), then the profile's workspace. False (and a failed check) on an error.
bool buildPhase(std::string const& what, IPluginV3OneBuild* build, HostProblem const& p, size_t& workspaceBytes)
{
    int64_t const N = p.cs.n, C = p.cs.c, H = p.cs.h, W = p.cs.w;
    Io const io = makeIo(dims4(N, C, H, W), p.type, p.format, p.affine);
    DynIo dyn = makeDynIo(io, dims4(std::min<int64_t>(N, 1), C, std::min<int64_t>(H, 1), std::min<int64_t>(W, 1)),
        dims4(N, C, H, W), dims4(N + 1, C, H + 3, W + 2), dims4(-1, C, -1, -1));
    gLogger.clear();
    if (!check(build->configurePlugin(dyn.in, 3, dyn.out, 1) == 0, what + ": configurePlugin",
            gLogger.errors().empty() ? "" : gLogger.errors()[0]))
    {
        return false;
    }
    workspaceBytes = build->getWorkspaceSize(dyn.in, 3, dyn.out, 1);
    return check(gLogger.errors().empty(), what + ": getWorkspaceSize", gLogger.errors().empty() ? "" : gLogger.errors()[0]);
}

// One enqueue of `runtime` for the problem, checked against the reference.
// Several plugins (contexts) run the same problem concurrently on their own streams.
void runEnqueue(std::string const& tag, std::vector<PluginHandle> const& contexts, IPluginV3OneBuild* build,
    Expected const& e, HostProblem const& p, bool useGraph)
{
    Case const& cs = p.cs;
    DataType const type = p.type;
    TensorFormat const format = p.format;
    std::string const what = tag + ": enqueue " + typeName(type) + " " + formatName(format) + " gamma/beta "
        + typeName(p.affine) + " x=[" + std::to_string(cs.n) + "," + std::to_string(cs.c) + "," + std::to_string(cs.h)
        + "," + std::to_string(cs.w) + "]" + (useGraph ? " in a CUDA graph" : "")
        + (contexts.size() > 1 ? " on " + std::to_string(contexts.size()) + " contexts at once" : "");
    int64_t const N = cs.n, C = cs.c, H = cs.h, W = cs.w;
    size_t const es = elementSize(type);
    size_t const elems = p.elems;
    std::vector<RefValue> const ref = referenceOf(p, e);

    Io const io = makeIo(dims4(N, C, H, W), type, format, p.affine);
    size_t workspaceBytes = 0;
    if (!buildPhase(what, build, p, workspaceBytes))
    {
        return;
    }

    DeviceBuffer dx(p.hx.size()), dg(p.hg.size()), db(p.hb.size());
    std::vector<std::unique_ptr<DeviceBuffer>> dy, dws;
    std::vector<cudaStream_t> streams(contexts.size());
    bool ok = dx.ptr && dg.ptr && db.ptr;
    ok = ok && cudaMemcpy(dx.ptr, p.hx.data(), p.hx.size(), cudaMemcpyHostToDevice) == cudaSuccess;
    ok = ok && cudaMemcpy(dg.ptr, p.hg.data(), p.hg.size(), cudaMemcpyHostToDevice) == cudaSuccess;
    ok = ok && cudaMemcpy(db.ptr, p.hb.data(), p.hb.size(), cudaMemcpyHostToDevice) == cudaSuccess;
    for (size_t k = 0; k < contexts.size(); ++k)
    {
        dy.push_back(std::make_unique<DeviceBuffer>(elems * es));
        dws.push_back(std::make_unique<DeviceBuffer>(workspaceBytes));
        ok = ok && dy.back()->ptr && dws.back()->ptr;
        // output (pad channels included) starts as garbage: 0xFF bytes are NaN in every type
        ok = ok && cudaMemset(dy.back()->ptr, 0xFF, elems * es) == cudaSuccess;
        ok = ok && cudaStreamCreateWithFlags(&streams[k], cudaStreamNonBlocking) == cudaSuccess;
    }
    if (!check(ok, what + ": device buffers"))
    {
        return;
    }

    for (size_t k = 0; k < contexts.size(); ++k)
    {
        IPluginV3OneRuntime* rt = contexts[k].runtime;
        gLogger.clear();
        if (!check(rt->onShapeChange(io.in, 3, io.out, 1) == 0, what + ": onShapeChange"))
        {
            return;
        }
    }
    std::vector<cudaGraphExec_t> graphs;
    for (size_t k = 0; k < contexts.size(); ++k)
    {
        void const* inputs[3] = {dx.ptr, dg.ptr, db.ptr};
        void* outputs[1] = {dy[k]->ptr};
        cudaGraph_t graph = nullptr;
        if (useGraph
            && !cudaOk(cudaStreamBeginCapture(streams[k], cudaStreamCaptureModeGlobal), what + ": begin capture"))
        {
            return;
        }
        int32_t const rc = contexts[k].runtime->enqueue(io.in, io.out, inputs, outputs, dws[k]->ptr, streams[k]);
        if (useGraph)
        {
            cudaError_t const endErr = cudaStreamEndCapture(streams[k], &graph);
            // a synchronising or allocating call, or work on another stream, breaks the capture
            if (!cudaOk(endErr, what + ": capture of enqueue (no sync/alloc/other stream)"))
            {
                return;
            }
            cudaGraphExec_t exec = nullptr;
            if (!cudaOk(cudaGraphInstantiate(&exec, graph, 0), what + ": instantiate"))
            {
                return;
            }
            cudaGraphDestroy(graph);
            graphs.push_back(exec);
        }
        if (!check(rc == 0, what + ": enqueue returns 0", gLogger.errors().empty() ? "" : gLogger.errors()[0]))
        {
            return;
        }
    }
    for (size_t k = 0; k < graphs.size(); ++k)
    {
        cudaOk(cudaGraphLaunch(graphs[k], streams[k]), what + ": graph launch");
    }
    for (size_t k = 0; k < contexts.size(); ++k)
    {
        if (!cudaOk(cudaStreamSynchronize(streams[k]), what + ": kernel ran"))
        {
            return;
        }
        cudaStreamDestroy(streams[k]);
    }
    for (auto g : graphs)
    {
        cudaGraphExecDestroy(g);
    }

    for (size_t k = 0; k < contexts.size(); ++k)
    {
        std::vector<uint8_t> hy(elems * es);
        if (!cudaOk(cudaMemcpy(hy.data(), dy[k]->ptr, hy.size(), cudaMemcpyDeviceToHost), what + ": copy back"))
        {
            return;
        }
        compareWithReference(
            what + (contexts.size() > 1 ? " [context " + std::to_string(k) + "]" : "") + " matches the float64 reference",
            p, ref, e.silu, hy);
    }
}

void runEnqueue(std::string const& tag, std::vector<PluginHandle> const& contexts, IPluginV3OneBuild* build,
    Expected const& e, Case const& cs, DataType type, TensorFormat format, DataType affine, uint32_t seed,
    bool useGraph)
{
    runEnqueue(tag, contexts, build, e, makeProblem(cs, type, format, affine, seed), useGraph);
}

// ---- host-side check of the accuracy rule against hand-computed values -------------------------
// The values of tests/test_reference.py (test_error_terms_follow_the_analysis,
// test_tolerance_is_half_an_ulp_plus_the_error_terms), so the two implementations agree.
void checkAccuracyRule()
{
    auto near = [](double a, double b) { return std::fabs(a - b) <= 1e-12 * std::fabs(b); };
    double const u = std::ldexp(1.0, -24);
    // one group [3, 5]: xh = -1, 1 (first element -1), gamma 2, beta 0.5, eps 0
    std::vector<double> const x = {3.0, 5.0}, gamma = {2.0}, beta = {0.5};
    std::vector<RefValue> const none = reference(x, gamma, beta, 1, 1, 2, 1, 1, 0.0, false);
    double const expected = u * ((3 + 40 * (2 + 1)) * 2.0 + 80 * 2 * 2.0 + 3 * 0.5) + std::ldexp(1.0, -126);
    check(none[0].y == -1.5 && none[1].y == 2.5 && none[0].xh == -1.0 && none[1].xhFirst == -1.0 && none[1].z == 2.5,
        "reference: y, xh, xh of the first element, z of a hand-computed group");
    check(near(errorTerms(none[0], 2.0, 0.5, false), expected + 1.5 * std::ldexp(1.0, -62)),
        "accuracy rule: error terms without activation");
    std::vector<RefValue> const silu = reference(x, gamma, beta, 1, 1, 2, 1, 1, 0.0, true);
    double const y1 = 2.5 / (1 + std::exp(-2.5));
    check(near(silu[1].y, y1)
            && near(errorTerms(silu[1], 2.0, 0.5, true),
                1.1 * (expected - std::ldexp(1.0, -126)) + u * (4 + 2.5) * y1 + 2.5 * std::ldexp(1.0, -62)
                    + std::ldexp(1.0, -126)),
        "accuracy rule: error terms with SiLU");
    check(tolerance(8.5, 0.0, DataType::kBF16) == 0.5 * 0.0625 && tolerance(1.0, 0.0, DataType::kBF16) == 0.5 * 0x1p-7
            && tolerance(1000.0, 0.0, DataType::kHALF) == 0.5 * 0.5
            && near(tolerance(0.0, 1e-6, DataType::kHALF), 1e-6 + 0.5 * 0x1p-24)
            && tolerance(-3.0, 1e-6, DataType::kFLOAT) == 1e-6,
        "accuracy rule: half an ulp of |y| + terms in 16 bits, the terms alone in fp32");
}

// ---- a random sample of the accepted input space ---------------------------------------------------
// Fixed lists of shapes missed a two-pass NHWC failure on C not a multiple of the vector with
// many groups: the plugin also runs a seeded random sample of shapes, groups, epsilons,
// activations, gamma/beta types and input distributions, for every type x format.
struct RandomOptions
{
    uint32_t seed{1};
    int64_t casesPerCombo{60}; // per (type, format) of x
};

// N * C * H * W of a case at most: the CPU reference of the whole default sample takes seconds.
constexpr int64_t kRandomElementBudget = int64_t{1} << 18;
constexpr int64_t kRandomMaxC = 1024;
constexpr int64_t kRandomMaxHW = 64;

struct RandomCase
{
    Case cs;
    int64_t groups;
    float eps;
    bool silu;
    DataType affine;
    InputSpec input;
    uint32_t dataSeed;
};

// Case `index` of combination `combo`: a function of (seed, combo, index) alone, so a case
// does not depend on how many cases run (the same binary reproduces it from --seed).
RandomCase drawRandomCase(uint32_t seed, size_t combo, int64_t index, DataType type)
{
    std::seed_seq seq{seed, static_cast<uint32_t>(combo), static_cast<uint32_t>(index)};
    std::mt19937 rng(seq);
    auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
    auto unit = [&] { return std::uniform_real_distribution<double>(0.0, 1.0)(rng); };
    RandomCase r{};
    // C uniform in 1..1024 or log-uniform (small C: large groups of pixels); 2 in 3 not a
    // multiple of 8, so that HWC8/HWC16 pad and the NHWC paths leave their 16-byte vectors.
    int64_t c = unit() < 0.5 ? pick(1, kRandomMaxC)
                             : static_cast<int64_t>(std::exp(unit() * std::log(static_cast<double>(kRandomMaxC) + 1.0)));
    c = std::min<int64_t>(std::max<int64_t>(c, 1), kRandomMaxC);
    if (unit() < 1.0 / 3.0)
    {
        c = (c + 7) / 8 * 8;
    }
    else if (c % 8 == 0)
    {
        c -= pick(1, 7);
    }
    std::vector<int64_t> divisors;
    for (int64_t d = 1; d <= c; ++d)
    {
        if (c % d == 0)
        {
            divisors.push_back(d);
        }
    }
    r.groups = divisors[static_cast<size_t>(pick(0, static_cast<int64_t>(divisors.size()) - 1))];
    r.cs.n = pick(1, 4);
    r.cs.c = c;
    int64_t const maxPixels = kRandomElementBudget / (r.cs.n * c); // >= 16
    r.cs.h = pick(1, kRandomMaxHW);
    r.cs.w = pick(1, kRandomMaxHW);
    if (r.cs.h * r.cs.w > maxPixels)
    {
        r.cs.h = pick(1, std::min(kRandomMaxHW, maxPixels));
        r.cs.w = pick(1, std::min(kRandomMaxHW, maxPixels / r.cs.h));
    }
    r.silu = unit() < 0.5;
    r.affine = type == DataType::kFLOAT || unit() < 0.5 ? type : DataType::kFLOAT;
    float const epsilons[] = {0.F, 1e-6F, 1e-5F, 1e-3F, 0.1F};
    r.eps = epsilons[pick(0, 4)];
    r.input.scale = static_cast<float>(0.01 * std::pow(10.0, 4.0 * unit())); // 0.01 .. 100
    r.input.offset = unit() < 0.5 ? 0.F : static_cast<float>(100.0 * unit() - 50.0);
    r.dataSeed = static_cast<uint32_t>(rng());
    return r;
}

// True when some group's stored values are all equal (one element, or inputs narrower than the
// type's spacing): its variance is 0, and with eps = 0 the result is 0 * inf.
bool hasConstantGroup(HostProblem const& p, int64_t groups)
{
    size_t const count = static_cast<size_t>(p.cs.c / groups * p.cs.h * p.cs.w);
    for (size_t base = 0; count > 0 && base < p.x64.size(); base += count)
    {
        if (std::all_of(p.x64.begin() + static_cast<std::ptrdiff_t>(base),
                p.x64.begin() + static_cast<std::ptrdiff_t>(base + count),
                [&](double v) { return v == p.x64[base]; }))
        {
            return true;
        }
    }
    return false;
}

// Each case through a plugin of its own (fields from ONNX attributes, build phase, the
// serialized fields in the runtime phase, attachToContext), checked against the reference.
// Without a GPU: the build phase of every case, and the reference rounded to the output type
// (pad channels +0) checked with the same comparison, so the sample, the reference and the
// rule run host-side too.
void runRandomSample(IPluginCreatorV3One* creator, RandomOptions const& opt, bool haveGpu)
{
    int64_t total = 0, notMultipleOf8 = 0, largest = 0, elements = 0;
    for (size_t combo = 0; combo < kXCOMBOS.size(); ++combo)
    {
        DataType const type = kXCOMBOS[combo].first;
        TensorFormat const format = kXCOMBOS[combo].second;
        for (int64_t k = 0; k < opt.casesPerCombo; ++k)
        {
            RandomCase rc = drawRandomCase(opt.seed, combo, k, type);
            HostProblem const p = makeProblem(rc.cs, type, format, rc.affine, rc.dataSeed, rc.input);
            if (rc.eps == 0.F && hasConstantGroup(p, rc.groups))
            {
                rc.eps = 1e-5F;
            }
            ++total;
            notMultipleOf8 += rc.cs.c % 8 != 0;
            largest = std::max(largest, rc.cs.n * rc.cs.c * rc.cs.h * rc.cs.w);
            elements += rc.cs.n * rc.cs.c * rc.cs.h * rc.cs.w;

            std::ostringstream tag;
            tag << "random case " << k << " of " << typeName(type) << " " << formatName(format) << " (--seed=" << opt.seed
                << "): G=" << rc.groups << " act=" << (rc.silu ? names::kACTIVATION_SILU : names::kACTIVATION_NONE)
                << " eps=" << rc.eps << " x~normal(offset " << rc.input.offset << ", scale " << rc.input.scale << ")";
            Expected const e{names::kPLUGIN_NAME, names::kPLUGIN_VERSION, names::kPLUGIN_NAMESPACE, rc.groups, rc.eps,
                rc.silu, false};
            ParserFields fields(*creator,
                std::map<std::string, OnnxAttr>{{names::kFIELD_NUM_GROUPS, attrInt(rc.groups)},
                    {names::kFIELD_EPSILON, attrFloat(rc.eps)},
                    {names::kFIELD_ACTIVATION,
                        attrString(rc.silu ? names::kACTIVATION_SILU : names::kACTIVATION_NONE)}});
            gLogger.clear();
            std::unique_ptr<IPluginV3> built(creator->createPlugin("gn_random", fields.get(), TensorRTPhase::kBUILD));
            if (!check(built != nullptr, tag.str() + ": createPlugin (build phase)",
                    gLogger.errors().empty() ? "" : gLogger.errors()[0]))
            {
                continue;
            }
            PluginHandle const b = open(built.get());
            if (!haveGpu)
            {
                std::string const what = tag.str() + ": " + typeName(type) + " " + formatName(format) + " gamma/beta "
                    + typeName(rc.affine) + " x=[" + std::to_string(rc.cs.n) + "," + std::to_string(rc.cs.c) + ","
                    + std::to_string(rc.cs.h) + "," + std::to_string(rc.cs.w) + "]";
                size_t workspaceBytes = 0;
                buildPhase(what, b.build, p, workspaceBytes);
                std::vector<RefValue> const ref = referenceOf(p, e);
                std::vector<uint8_t> hy(p.elems * elementSize(type), 0); // all-zero bytes: +0 in every type
                for (int64_t n = 0; n < p.cs.n; ++n)
                    for (int64_t c = 0; c < p.cs.c; ++c)
                        for (int64_t h = 0; h < p.cs.h; ++h)
                            for (int64_t w = 0; w < p.cs.w; ++w)
                            {
                                storeAs(type, hy, p.at(n, c, h, w),
                                    static_cast<float>(ref[HostProblem::nchw(p.cs, n, c, h, w)].y));
                            }
                compareWithReference(
                    what + ": the reference rounded to the output type is within the tolerance", p, ref, rc.silu, hy);
                continue;
            }
            gLogger.clear();
            std::unique_ptr<IPluginV3> runtimePlugin(
                creator->createPlugin("gn_random", b.runtime->getFieldsToSerialize(), TensorRTPhase::kRUNTIME));
            if (!check(runtimePlugin != nullptr, tag.str() + ": createPlugin (runtime phase)",
                    gLogger.errors().empty() ? "" : gLogger.errors()[0]))
            {
                continue;
            }
            HarnessErrorRecorder recorder;
            HarnessResourceContext context(&recorder);
            std::unique_ptr<IPluginV3> attached(open(runtimePlugin.get()).runtime->attachToContext(&context));
            if (!check(attached != nullptr, tag.str() + ": attachToContext"))
            {
                continue;
            }
            runEnqueue(tag.str(), {open(attached.get())}, b.build, e, p, false);
        }
    }
    std::printf("random sample: seed %u, %lld cases per type x format (%zu combinations), C not a multiple of 8 in "
                "%lld of %lld, %lld elements in all, at most %lld a case%s\n",
        opt.seed, static_cast<long long>(opt.casesPerCombo), kXCOMBOS.size(), static_cast<long long>(notMultipleOf8),
        static_cast<long long>(total), static_cast<long long>(elements), static_cast<long long>(largest),
        haveGpu ? "" : " (no GPU: build phase and reference only)");
}

} // namespace

namespace
{
// A decimal integer in [0, max], all of `text`.
bool parseCount(char const* text, uint64_t max, uint64_t& value)
{
    if (text == nullptr || *text < '0' || *text > '9')
    {
        return false;
    }
    errno = 0;
    char* end = nullptr;
    unsigned long long const v = std::strtoull(text, &end, 10);
    if (errno != 0 || *end != '\0' || v > max)
    {
        return false;
    }
    value = v;
    return true;
}

int usage(char const* argv0, std::string const& problem)
{
    if (!problem.empty())
    {
        std::fprintf(stderr, "%s: %s\n", argv0, problem.c_str());
    }
    std::fprintf(stderr,
        "usage: %s [--seed=S] [--random-cases=K] /path/to/%s\n"
        "  --seed=S          seed of the random sample of shapes (default 1; env TRT_GN_CONFORMANCE_SEED)\n"
        "  --random-cases=K  random cases per type x format of x (default 60, 0 = none;\n"
        "                    env TRT_GN_CONFORMANCE_RANDOM_CASES)\n"
        "Options override the environment; a failing random case prints its parameters and seed.\n",
        argv0, names::kPLUGIN_LIBRARY);
    return 2;
}
} // namespace

int main(int argc, char** argv)
{
    RandomOptions randomOptions;
    uint64_t value = 0;
    if (char const* env = std::getenv("TRT_GN_CONFORMANCE_SEED"))
    {
        if (!parseCount(env, UINT32_MAX, value))
        {
            return usage(argv[0], std::string("TRT_GN_CONFORMANCE_SEED must be an integer in [0, 2^32), got '") + env + "'");
        }
        randomOptions.seed = static_cast<uint32_t>(value);
    }
    if (char const* env = std::getenv("TRT_GN_CONFORMANCE_RANDOM_CASES"))
    {
        if (!parseCount(env, 1000000, value))
        {
            return usage(
                argv[0], std::string("TRT_GN_CONFORMANCE_RANDOM_CASES must be an integer in [0, 1e6], got '") + env + "'");
        }
        randomOptions.casesPerCombo = static_cast<int64_t>(value);
    }
    char const* libraryPath = nullptr;
    for (int i = 1; i < argc; ++i)
    {
        std::string const arg = argv[i];
        // --name=value or --name value
        auto option = [&](std::string const& name, char const*& text) {
            if (arg == name && i + 1 < argc)
            {
                text = argv[++i];
                return true;
            }
            if (arg.compare(0, name.size() + 1, name + "=") == 0)
            {
                text = argv[i] + name.size() + 1;
                return true;
            }
            return false;
        };
        char const* text = nullptr;
        if (arg == "-h" || arg == "--help")
        {
            usage(argv[0], "");
            return 0;
        }
        else if (option("--seed", text))
        {
            if (!parseCount(text, UINT32_MAX, value))
            {
                return usage(argv[0], "--seed must be an integer in [0, 2^32), got '" + std::string(text) + "'");
            }
            randomOptions.seed = static_cast<uint32_t>(value);
        }
        else if (option("--random-cases", text))
        {
            if (!parseCount(text, 1000000, value))
            {
                return usage(argv[0], "--random-cases must be an integer in [0, 1e6], got '" + std::string(text) + "'");
            }
            randomOptions.casesPerCombo = static_cast<int64_t>(value);
        }
        else if (arg.compare(0, 1, "-") == 0 || libraryPath != nullptr)
        {
            return usage(argv[0], "unexpected argument '" + arg + "'");
        }
        else
        {
            libraryPath = argv[i];
        }
    }
    if (libraryPath == nullptr)
    {
        return usage(argv[0], "no plugin library given");
    }
    checkAccuracyRule();
    // Load as TensorRT's loadLibrary() does: dlopen, then the two entry points.
    void* lib = dlopen(libraryPath, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr)
    {
        std::fprintf(stderr, "cannot load %s: %s\n", libraryPath, dlerror());
        return 2;
    }
    using GetCreators = IPluginCreatorInterface* const* (*) (int32_t&);
    using SetLoggerFinder = void (*)(ILoggerFinder*);
    auto getCreators = reinterpret_cast<GetCreators>(dlsym(lib, "getCreators"));
    auto setLoggerFinder = reinterpret_cast<SetLoggerFinder>(dlsym(lib, "setLoggerFinder"));
    check(getCreators != nullptr && setLoggerFinder != nullptr, "library exports getCreators and setLoggerFinder");
    check(dlsym(lib, "trtgn_group_norm") == nullptr, "library keeps the kernels' C ABI internal");
    if (getCreators == nullptr || setLoggerFinder == nullptr)
    {
        std::printf("conformance: %d passed, %d failed\n", gPassed, gFailed);
        return 1;
    }
    static HarnessLoggerFinder finder;
    setLoggerFinder(&finder);

    int32_t nbCreators = -1;
    IPluginCreatorInterface* const* creators = getCreators(nbCreators);
    check(creators != nullptr && nbCreators == 2, "getCreators returns 2 creators", std::to_string(nbCreators));
    auto findCreator = [&](std::string const& name, std::string const& version, std::string const& ns) {
        for (int32_t i = 0; creators != nullptr && i < nbCreators; ++i)
        {
            IPluginCreatorInterface* ci = creators[i];
            if (std::strcmp(ci->getInterfaceInfo().kind, "PLUGIN CREATOR_V3ONE") != 0)
            {
                continue;
            }
            auto* c = static_cast<IPluginCreatorV3One*>(ci);
            if (name == c->getPluginName() && version == c->getPluginVersion() && ns == c->getPluginNamespace())
            {
                return c;
            }
        }
        return static_cast<IPluginCreatorV3One*>(nullptr);
    };
    IPluginCreatorV3One* mainCreator = findCreator(names::kPLUGIN_NAME, names::kPLUGIN_VERSION, names::kPLUGIN_NAMESPACE);
    IPluginCreatorV3One* legacyCreator
        = findCreator(names::kLEGACY_PLUGIN_NAME, names::kLEGACY_PLUGIN_VERSION, names::kLEGACY_PLUGIN_NAMESPACE);
    check(mainCreator != nullptr, "creator GroupNormAct v1 (namespace trt_gn) is a V3One creator");
    check(legacyCreator != nullptr, "creator GroupNorm v1 (empty namespace) is a V3One creator");
    if (mainCreator == nullptr || legacyCreator == nullptr)
    {
        std::printf("conformance: %d passed, %d failed\n", gPassed, gFailed);
        return 1;
    }
    {
        auto fieldNames = [](IPluginCreatorV3One* c) {
            std::set<std::string> s;
            PluginFieldCollection const* fc = c->getFieldNames();
            for (int32_t i = 0; fc != nullptr && i < fc->nbFields; ++i)
            {
                s.insert(fc->fields[i].name);
            }
            return s;
        };
        check(fieldNames(mainCreator)
                == std::set<std::string>{names::kFIELD_NUM_GROUPS, names::kFIELD_EPSILON, names::kFIELD_ACTIVATION},
            "GroupNormAct getFieldNames: num_groups, epsilon, activation");
        check(fieldNames(legacyCreator) == std::set<std::string>{names::kLEGACY_FIELD_EPSILON, names::kLEGACY_FIELD_SWISH},
            "GroupNorm (legacy) getFieldNames: epsilon, bSwish");
    }

    // ---- bad fields: the creator returns nullptr and says which field and value -------------
    using Attrs = std::map<std::string, OnnxAttr>;
    Attrs const good{{"num_groups", attrInt(32)}, {"epsilon", attrFloat(1e-5F)}, {"activation", attrString("silu")},
        {"plugin_version", attrString("1")}, {"plugin_namespace", attrString("trt_gn")}};
    auto badNode = [&](std::string const& what, IPluginCreatorV3One* creator, Attrs attrs,
                       std::vector<std::string> const& needles) {
        expectLoggedError(what, needles, [&] {
            ParserFields fields(*creator, attrs);
            IPluginV3* p = creator->createPlugin("bad_node", fields.get(), TensorRTPhase::kBUILD);
            delete p;
            return p == nullptr;
        });
    };
    auto with = [&](std::string const& key, OnnxAttr v) {
        Attrs a = good;
        a[key] = v;
        return a;
    };
    auto without = [&](std::string const& key) {
        Attrs a = good;
        a.erase(key);
        return a;
    };
    badNode("num_groups=0 is rejected", mainCreator, with("num_groups", attrInt(0)),
        {"layer 'bad_node'", "field 'num_groups' must be > 0, got 0"});
    badNode("num_groups=-4 is rejected", mainCreator, with("num_groups", attrInt(-4)),
        {"field 'num_groups' must be > 0, got -4"});
    badNode("activation='gelu' is rejected", mainCreator, with("activation", attrString("gelu")),
        {"field 'activation' must be one of 'none', 'silu', got 'gelu'"});
    badNode("epsilon=-1 is rejected", mainCreator, with("epsilon", attrFloat(-1.F)),
        {"field 'epsilon' must be a finite number >= 0, got -1"});
    badNode("epsilon=NaN is rejected", mainCreator, with("epsilon", attrFloat(std::nanf(""))),
        {"field 'epsilon' must be a finite number >= 0"});
    badNode("missing num_groups is rejected", mainCreator, without("num_groups"), {"field 'num_groups' is missing"});
    badNode("missing epsilon is rejected", mainCreator, without("epsilon"), {"field 'epsilon' is missing"});
    badNode("missing activation is rejected", mainCreator, without("activation"), {"field 'activation' is missing"});
    badNode("num_groups as a string is rejected", mainCreator, with("num_groups", attrString("32")),
        {"field 'num_groups' has type kCHAR with 3 element(s); expected one kINT32 or kINT64"});
    badNode("epsilon as an int is rejected", mainCreator, with("epsilon", attrInt(0)),
        {"field 'epsilon' has type kINT32", "expected one kFLOAT32 or kFLOAT64"});
    badNode("activation as a float is rejected", mainCreator, with("activation", attrFloat(1.F)),
        {"field 'activation' has type kFLOAT32", "expected a kCHAR string"});
    badNode("legacy bSwish=2 is rejected", legacyCreator, Attrs{{"epsilon", attrFloat(1e-5F)}, {"bSwish", attrInt(2)}},
        {"GroupNorm (legacy plugin", "field 'bSwish' must be 0 or 1, got 2"});
    badNode("legacy bSwish as a float is rejected", legacyCreator,
        Attrs{{"epsilon", attrFloat(1e-5F)}, {"bSwish", attrFloat(1.F)}},
        {"field 'bSwish' has type kFLOAT32", "expected one kINT32 or kINT64"});
    {
        // fields a direct API user might pass wrongly (the parser only passes known names)
        int32_t const g = 32;
        float const eps = 1e-5F;
        char const act[] = "silu";
        std::vector<PluginField> f = {{"num_groups", &g, PluginFieldType::kINT32, 1},
            {"epsilon", &eps, PluginFieldType::kFLOAT32, 1}, {"activation", act, PluginFieldType::kCHAR, 5},
            {"groups", &g, PluginFieldType::kINT32, 1}};
        PluginFieldCollection fc{static_cast<int32_t>(f.size()), f.data()};
        expectLoggedError("an unknown field is rejected", {"unknown field 'groups'"}, [&] {
            IPluginV3* p = mainCreator->createPlugin("n", &fc, TensorRTPhase::kBUILD);
            delete p;
            return p == nullptr;
        });
        f[3] = PluginField{"num_groups", &g, PluginFieldType::kINT32, 1};
        expectLoggedError("a field given twice is rejected", {"field 'num_groups' is given twice"}, [&] {
            IPluginV3* p = mainCreator->createPlugin("n", &fc, TensorRTPhase::kBUILD);
            delete p;
            return p == nullptr;
        });
        f[3] = PluginField{"num_groups", nullptr, PluginFieldType::kINT32, 1};
        f.resize(3);
        f[0] = PluginField{"num_groups", nullptr, PluginFieldType::kINT32, 1};
        fc.nbFields = 3;
        expectLoggedError("a field without data is rejected", {"field 'num_groups'", "no data"}, [&] {
            IPluginV3* p = mainCreator->createPlugin("n", &fc, TensorRTPhase::kBUILD);
            delete p;
            return p == nullptr;
        });
        int64_t const g64 = 16;
        double const eps64 = 1e-6;
        f[0] = PluginField{"num_groups", &g64, PluginFieldType::kINT64, 1};
        f[1] = PluginField{"epsilon", &eps64, PluginFieldType::kFLOAT64, 1};
        f[2] = PluginField{"activation", "none", PluginFieldType::kCHAR, 4}; // no NUL counted
        IPluginV3* p = mainCreator->createPlugin("n", &fc, TensorRTPhase::kBUILD);
        PluginHandle h = open(p);
        check(p != nullptr && std::string(h.build->getTimingCacheID()).find("num_groups=16;") != std::string::npos
                && std::string(h.build->getTimingCacheID()).find("activation=none") != std::string::npos,
            "kINT64/kFLOAT64 fields and a kCHAR string without NUL are accepted");
        delete p;
        expectLoggedError("createPlugin with no field collection is rejected", {"no field collection"},
            [&] { return mainCreator->createPlugin("n", nullptr, TensorRTPhase::kBUILD) == nullptr; });
    }
    {
        // the legacy creator keeps TensorRT 8.5's defaults for missing fields (with a warning)
        gLogger.clear();
        ParserFields fields(*legacyCreator, Attrs{});
        IPluginV3* p = legacyCreator->createPlugin("old_gn", fields.get(), TensorRTPhase::kBUILD);
        PluginHandle h = open(p);
        std::string const fc = p ? fieldsToString(h.runtime->getFieldsToSerialize()) : "";
        check(p != nullptr && gLogger.warnings().size() == 2 && fc.find("bSwish:5x1=0;") != std::string::npos,
            "legacy node without attributes: epsilon 1e-5, bSwish 0, warned", fc);
        delete p;
    }

    // ---- per configuration: build phase, serialization, runtime phase --------------------------
    struct Config
    {
        Expected e;
        IPluginCreatorV3One* creator;
        Attrs attrs;
    };
    std::vector<Config> const configs = {
        {{names::kPLUGIN_NAME, names::kPLUGIN_VERSION, names::kPLUGIN_NAMESPACE, 32, 1e-5F, true, false}, mainCreator,
            good},
        {{names::kPLUGIN_NAME, names::kPLUGIN_VERSION, names::kPLUGIN_NAMESPACE, 4, 1e-6F, false, false}, mainCreator,
            Attrs{{"num_groups", attrInt(4)}, {"epsilon", attrFloat(1e-6F)}, {"activation", attrString("none")}}},
        {{names::kLEGACY_PLUGIN_NAME, names::kLEGACY_PLUGIN_VERSION, names::kLEGACY_PLUGIN_NAMESPACE, 32, 1e-5F, true,
             true},
            legacyCreator, Attrs{{"epsilon", attrFloat(1e-5F)}, {"bSwish", attrInt(1)}}},
        {{names::kLEGACY_PLUGIN_NAME, names::kLEGACY_PLUGIN_VERSION, names::kLEGACY_PLUGIN_NAMESPACE, 32, 1e-5F, false,
             true},
            legacyCreator, Attrs{{"epsilon", attrFloat(1e-5F)}, {"bSwish", attrInt(0)}}},
    };

    int deviceCount = 0;
    cudaError_t const deviceErr = cudaGetDeviceCount(&deviceCount);
    bool const haveGpu = deviceErr == cudaSuccess && deviceCount > 0;
    std::string const noGpuReason = deviceErr != cudaSuccess ? std::string("cudaGetDeviceCount: ") + cudaGetErrorString(deviceErr)
                                                             : std::string("no CUDA device");
    if (haveGpu)
    {
        cudaDeviceProp prop{};
        cudaGetDeviceProperties(&prop, 0);
        std::printf("GPU: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
    }

    for (Config const& cfg : configs)
    {
        Expected const& e = cfg.e;
        std::string const tag = e.name + "(G=" + std::to_string(e.groups) + (e.silu ? ",silu" : ",none") + ")";
        ParserFields fields(*cfg.creator, cfg.attrs);
        gLogger.clear();
        IPluginV3* built = cfg.creator->createPlugin("gn_layer", fields.get(), TensorRTPhase::kBUILD);
        if (!check(built != nullptr && gLogger.errors().empty(), tag + ": createPlugin (build phase) from ONNX attributes"))
        {
            continue;
        }
        PluginHandle b = open(built);
        checkInterfaces(tag + " build", b, e);
        checkBuildPhase(tag, b, e);

        // clone in the build phase (TensorRT clones the network's plugin per layer)
        IPluginV3* buildClone = built->clone();
        check(buildClone != nullptr
                && fieldsToString(open(buildClone).runtime->getFieldsToSerialize())
                    == fieldsToString(b.runtime->getFieldsToSerialize()),
            tag + ": clone() keeps every field");

        // serialization round trip: the runtime-phase plugin is made from getFieldsToSerialize()
        PluginFieldCollection const* serial = b.runtime->getFieldsToSerialize();
        std::string const serialText = fieldsToString(serial);
        std::string const wantText = e.legacy
            ? "epsilon:1x1=" + [&] { std::ostringstream s; s << std::hexfloat << e.epsilon; return s.str(); }()
                + ";bSwish:5x1=" + (e.silu ? "1" : "0") + ";"
            : "num_groups:5x1=" + std::to_string(e.groups) + ";epsilon:1x1="
                + [&] { std::ostringstream s; s << std::hexfloat << e.epsilon; return s.str(); }() + ";activation:6x"
                + (e.silu ? "5='silu'" : "5='none'") + ";";
        check(serialText == wantText, tag + ": getFieldsToSerialize", serialText + " vs " + wantText);
        // copy the fields as a plan would hold them, and drop the build-phase plugin first
        std::vector<std::string> serialNames;
        std::vector<std::vector<uint8_t>> serialData;
        std::vector<PluginField> serialFields;
        for (int32_t i = 0; i < serial->nbFields; ++i)
        {
            PluginField const& f = serial->fields[i];
            size_t const bytes = static_cast<size_t>(f.length)
                * (f.type == PluginFieldType::kCHAR ? 1 : f.type == PluginFieldType::kFLOAT64 || f.type == PluginFieldType::kINT64 ? 8 : 4);
            serialNames.emplace_back(f.name);
            serialData.emplace_back(static_cast<uint8_t const*>(f.data), static_cast<uint8_t const*>(f.data) + bytes);
        }
        for (int32_t i = 0; i < serial->nbFields; ++i)
        {
            serialFields.emplace_back(serialNames[i].c_str(), serialData[i].data(), serial->fields[i].type,
                serial->fields[i].length);
        }
        PluginFieldCollection const plan{static_cast<int32_t>(serialFields.size()), serialFields.data()};
        delete built;
        delete buildClone;

        gLogger.clear();
        IPluginV3* runtimePlugin = cfg.creator->createPlugin("gn_layer", &plan, TensorRTPhase::kRUNTIME);
        if (!check(runtimePlugin != nullptr && gLogger.errors().empty(), tag + ": createPlugin (runtime phase)"))
        {
            continue;
        }
        PluginHandle r = open(runtimePlugin);
        checkInterfaces(tag + " runtime", r, e);
        check(fieldsToString(r.runtime->getFieldsToSerialize()) == serialText,
            tag + ": runtime-phase plugin serializes the same fields");

        HarnessErrorRecorder recorderA, recorderB;
        HarnessResourceContext contextA(&recorderA), contextB(&recorderB);
        IPluginV3* attachedA = r.runtime->attachToContext(&contextA);
        IPluginV3* attachedB = r.runtime->attachToContext(&contextB);
        check(attachedA != nullptr && attachedB != nullptr && attachedA != runtimePlugin && attachedA != attachedB,
            tag + ": attachToContext returns a new plugin per context");
        PluginHandle a = open(attachedA), a2 = open(attachedB);
        if (attachedA == nullptr || attachedB == nullptr)
        {
            continue;
        }
        checkInterfaces(tag + " attached", a, e);

        // onShapeChange (runtime phase: configurePlugin is never called on this object)
        int64_t const C = e.groups * 2;
        {
            Io io = makeIo(dims4(2, C, 8, 8), DataType::kHALF, TensorFormat::kHWC8, DataType::kFLOAT);
            gLogger.clear();
            check(a.runtime->onShapeChange(io.in, 3, io.out, 1) == 0 && gLogger.errors().empty(),
                tag + ": onShapeChange, good shape");
            Io badIo = makeIo(dims4(2, C + 1, 8, 8), DataType::kHALF, TensorFormat::kHWC8, DataType::kFLOAT);
            recorderA.clear();
            expectLoggedError(tag + ": onShapeChange rejects C not divisible by num_groups",
                {"num_groups=" + std::to_string(e.groups), "C=" + std::to_string(C + 1)},
                [&] { return a.runtime->onShapeChange(badIo.in, 3, badIo.out, 1) != 0; });
            check(recorderA.getNbErrors() == 1 && std::string(recorderA.getErrorDesc(0)).find("num_groups=") != std::string::npos
                    && recorderB.getNbErrors() == 0,
                tag + ": the error went to this context's error recorder only");
            // enqueue with a shape the kernels refuse: a clean error, nothing launched
            recorderA.clear();
            expectLoggedError(tag + ": enqueue refuses an invalid shape", {"enqueue", "TRTGN_STATUS_"}, [&] {
                void const* inputs[3] = {nullptr, nullptr, nullptr};
                void* outputs[1] = {nullptr};
                return a.runtime->enqueue(badIo.in, badIo.out, inputs, outputs, nullptr, nullptr) != 0;
            });
            check(recorderA.getNbErrors() == 1, tag + ": enqueue's error reached the error recorder");
        }
        IPluginV3* runtimeClone = attachedA->clone();
        check(runtimeClone != nullptr, tag + ": clone() of an attached plugin");

        if (haveGpu)
        {
            // every supported type x format (padded HWC8/HWC16 included) x gamma/beta type
            std::vector<Case> cases = {{2, C, 8, 8}, {1, 3 * e.groups, 5, 7}, {3, C, 1, 1}, {2, C, 33, 17}};
            if (e.groups == 4)
            {
                cases.push_back({2, 12, 3, 5});   // C=12: HWC8 pads 4 channels, HWC16 pads 4
                cases.push_back({1, 20, 16, 16}); // C=20: HWC8 pads 4, HWC16 pads 12
            }
            else
            {
                cases.push_back({2, 320, 16, 16});  // Stable Diffusion UNet
                cases.push_back({1, 128, 96, 96});  // VAE-like: few channels, large H x W
                cases.push_back({1, 64, 0, 8});     // empty tensor: a no-op
            }
            uint32_t seed = 1;
            for (Case const& cs : cases)
            {
                for (auto const& xc : kXCOMBOS)
                {
                    // FLOAT x: FLOAT gamma/beta; HALF/BF16 x: gamma/beta in x's type or FLOAT
                    std::vector<DataType> const affines = xc.first == DataType::kFLOAT
                        ? std::vector<DataType>{DataType::kFLOAT}
                        : std::vector<DataType>{xc.first, DataType::kFLOAT};
                    for (DataType affine : affines)
                    {
                        runEnqueue(tag, {a}, r.build, e, cs, xc.first, xc.second, affine, seed++, false);
                    }
                }
            }
            // two execution contexts at once, and capture into a CUDA graph
            runEnqueue(tag, {a, a2}, r.build, e, {2, C * 4, 32, 32}, DataType::kHALF, TensorFormat::kHWC8,
                DataType::kFLOAT, 999, false);
            runEnqueue(tag, {a}, r.build, e, {2, C * 4, 32, 32}, DataType::kBF16, TensorFormat::kLINEAR,
                DataType::kBF16, 1000, true);
        }
        delete runtimeClone;
        delete attachedA;
        delete attachedB;
        delete runtimePlugin;
    }

    runRandomSample(mainCreator, randomOptions, haveGpu);

    if (!haveGpu)
    {
        std::printf("conformance: %d passed, %d failed (host-side checks only)\n", gPassed, gFailed);
        std::printf("SKIP: GPU part not run: %s\n", noGpuReason.c_str());
        return gFailed == 0 ? 77 : 1;
    }
    std::printf("conformance: %d passed, %d failed\n", gPassed, gFailed);
    return gFailed == 0 ? 0 : 1;
}
