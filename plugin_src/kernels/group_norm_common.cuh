// Device helpers shared by the GroupNorm kernels: typed vector loads/stores,
// Welford/Chan merging, activations. Everything here is header-only and
// internal to the kernels library.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <type_traits>

#include "group_norm_args.h"
#include "trt_gn/group_norm.h"

namespace trtgn {

template <typename T> __device__ __forceinline__ float toFloat(T v);
template <> __device__ __forceinline__ float toFloat<float>(float v) { return v; }
template <> __device__ __forceinline__ float toFloat<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float toFloat<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T fromFloat(float v);
template <> __device__ __forceinline__ float fromFloat<float>(float v) { return v; }
template <> __device__ __forceinline__ __half fromFloat<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 fromFloat<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// The one dispatch of the ABI's dtype onto the kernels' element type: f(DtypeTag<T>{}) for the
// dtype's T, `otherwise` for a value outside the enum (the ABI rejects those before any launch).
template <typename T> struct DtypeTag { using type = T; };

template <typename R, typename F>
inline R dispatchDtype(trtgn_dtype_t dtype, R otherwise, F&& f) {
    switch (dtype) {
        case TRTGN_DTYPE_FLOAT32: return f(DtypeTag<float>{});
        case TRTGN_DTYPE_FLOAT16: return f(DtypeTag<__half>{});
        case TRTGN_DTYPE_BFLOAT16: return f(DtypeTag<__nv_bfloat16>{});
    }
    return otherwise;
}

// Elements in one 16-byte access.
template <typename T> constexpr int kVec16 = 16 / int(sizeof(T));
template <typename T> constexpr bool kIsBf16 = std::is_same_v<T, __nv_bfloat16>;

// Bit patterns of one element, so that packed vectors never need their
// address taken (which would move them from registers to local memory).
template <typename T> __device__ __forceinline__ float bitsToFloat(uint32_t bits);
template <> __device__ __forceinline__ float bitsToFloat<float>(uint32_t b) { return __uint_as_float(b); }
template <> __device__ __forceinline__ float bitsToFloat<__half>(uint32_t b) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(b)));
}
template <> __device__ __forceinline__ float bitsToFloat<__nv_bfloat16>(uint32_t b) {
    return __uint_as_float(b << 16);  // bf16 is the upper half of an fp32
}
template <typename T> __device__ __forceinline__ uint32_t floatToBits(float v);
template <> __device__ __forceinline__ uint32_t floatToBits<float>(float v) { return __float_as_uint(v); }
template <> __device__ __forceinline__ uint32_t floatToBits<__half>(float v) {
    return __half_as_ushort(__float2half_rn(v));
}
template <> __device__ __forceinline__ uint32_t floatToBits<__nv_bfloat16>(float v) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

__device__ __forceinline__ uint32_t word(const uint4& u, int i) {
    return i == 0 ? u.x : i == 1 ? u.y : i == 2 ? u.z : u.w;
}
__device__ __forceinline__ uint32_t word(const uint2& u, int i) { return i == 0 ? u.x : u.y; }
__device__ __forceinline__ uint32_t word(uint32_t u, int) { return u; }

// The unsigned type of a BYTES-byte access (one LDG/STG of 4, 8 or 16 bytes).
template <int BYTES> struct Word;
template <> struct Word<4> { using type = uint32_t; };
template <> struct Word<8> { using type = uint2; };
template <> struct Word<16> { using type = uint4; };

// A raw VEC-element chunk as it sits in memory. VEC * sizeof(T) is 16 bytes
// (one LDG.128/STG.128), 8 or 4 bytes (NHWC groups of C/G = 10 or 20 halves,
// read one group at a time: gnFusedGroup), or VEC == 1 (scalar path for
// unaligned layouts). get(e) must be called with a compile-time e (unrolled
// loops).
template <typename T, int VEC> struct Raw {
    static constexpr int kBytes = VEC * int(sizeof(T));
    static_assert(VEC == 1 || kBytes == 4 || kBytes == 8 || kBytes == 16, "VEC must be 1 or a 4, 8 or 16-byte vector");
    using Storage = typename std::conditional<VEC == 1, T, typename Word<(VEC == 1 ? 4 : kBytes)>::type>::type;
    Storage s;
    __device__ __forceinline__ float get(int e) const {
        if constexpr (VEC == 1) {
            return toFloat<T>(s);
        } else if constexpr (sizeof(T) == 4) {
            return bitsToFloat<T>(word(s, e));
        } else {
            const uint32_t w = word(s, e >> 1);
            return bitsToFloat<T>((e & 1) ? (w >> 16) : (w & 0xffffu));
        }
    }
    // As get(), through an opaque copy the compiler cannot hoist or share
    // across loop iterations: kernels that hold packed data in registers and
    // sweep it several times use this so that the unpacked floats are not
    // kept alive between sweeps (which would double the registers).
    __device__ __forceinline__ float getFresh(int e) const {
        if constexpr (VEC == 1) {
            return toFloat<T>(s);
        } else {
            uint32_t w = word(s, sizeof(T) == 4 ? e : (e >> 1));
            asm volatile("mov.b32 %0, %0;" : "+r"(w));
            if constexpr (sizeof(T) == 4) {
                return bitsToFloat<T>(w);
            } else {
                return bitsToFloat<T>((e & 1) ? (w >> 16) : (w & 0xffffu));
            }
        }
    }
};

enum class Cache { kDefault, kStreaming };

template <typename T, int VEC, Cache C = Cache::kDefault>
__device__ __forceinline__ Raw<T, VEC> loadRaw(const T* p) {
    using S = typename Raw<T, VEC>::Storage;
    Raw<T, VEC> r;
    if constexpr (VEC == 1) {
        r.s = *p;
    } else if constexpr (C == Cache::kStreaming) {
        r.s = __ldcs(reinterpret_cast<const S*>(p));  // last use: evict first
    } else {
        r.s = *reinterpret_cast<const S*>(p);
    }
    return r;
}

// Plain (weak) global stores of 16, 8 and 4 bytes, for storeVec's kAsm.
__device__ __forceinline__ void storeGlobal(uint4* p, uint4 v) {
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w));
}
__device__ __forceinline__ void storeGlobal(uint2* p, uint2 v) {
    asm volatile("st.global.v2.b32 [%0], {%1, %2};" ::"l"(p), "r"(v.x), "r"(v.y));
}
__device__ __forceinline__ void storeGlobal(uint32_t* p, uint32_t v) {
    asm volatile("st.global.b32 [%0], %1;" ::"l"(p), "r"(v));
}

// kAsm: the vector stored by asm, not by assignment. NVVM split
// `*(uint4*)p = u` into four 4-byte stores in the NCHW on-chip grid and, with
// pointers stepped by a runtime stride, in the NHWC cluster kernels; those
// take kAsm. The NCHW cluster kernels and the NHWC on-chip grid keep
// assignments: asm stores were no faster there. (__stwb, st.global.wb,
// compiles to a strong store.)
template <typename T, int VEC, Cache C = Cache::kDefault, bool kAsm = false>
__device__ __forceinline__ void storeVec(T* p, const float (&f)[VEC]) {
    if constexpr (VEC == 1) {
        *p = fromFloat<T>(f[0]);
    } else {
        constexpr int kWords = VEC * int(sizeof(T)) / 4;
        uint32_t w[kWords];
#pragma unroll
        for (int i = 0; i < kWords; ++i) {
            if constexpr (sizeof(T) == 4) {
                w[i] = floatToBits<T>(f[i]);
            } else {
                w[i] = floatToBits<T>(f[2 * i]) | (floatToBits<T>(f[2 * i + 1]) << 16);
            }
        }
        using S = typename Raw<T, VEC>::Storage;
        S u;
        if constexpr (kWords == 4) {
            u = make_uint4(w[0], w[1], w[2], w[3]);
        } else if constexpr (kWords == 2) {
            u = make_uint2(w[0], w[1]);
        } else {
            u = w[0];
        }
        if constexpr (C == Cache::kStreaming) {
            __stcs(reinterpret_cast<S*>(p), u);
        } else if constexpr (kAsm) {
            storeGlobal(reinterpret_cast<S*>(p), u);
        } else {
            *reinterpret_cast<S*>(p) = u;
        }
    }
}

// gamma/beta are stored either as the input dtype or as fp32.
template <typename T>
__device__ __forceinline__ float loadAffine(const void* p, int64_t c, bool fp32, float dflt) {
    if (p == nullptr) return dflt;
    return fp32 ? __ldg(static_cast<const float*>(p) + c) : toFloat<T>(static_cast<const T*>(p)[c]);
}

// ------------------------------------------------------------ pre-add ----
// s = (x + bias[n, c]) + residual in fp32, rounded once to T (PreAdd,
// group_norm_args.h): one order everywhere, so that every kernel and block
// computing an element's s gets the same value (the group's shift k, the
// first element's s, is computed by several). The statistics and y are of
// this s, the one sum_out holds (and an unfused model would normalise), so
// s can be read back from sum_out or held in a tile of T.
template <typename T>
__device__ __forceinline__ float preSum(float x, float b, float r) {
    return toFloat<T>(fromFloat<T>((x + b) + r));
}

// The pre-add with its residual and sum_out moved `off` elements on.
template <typename T>
__device__ __forceinline__ PreAdd preAt(PreAdd p, int64_t off) {
    if (p.residual != nullptr) p.residual = static_cast<const T*>(p.residual) + off;
    if (p.sum != nullptr) p.sum = static_cast<T*>(p.sum) + off;
    return p;
}

// The pre-add's bias of channel c of image n (0 without a bias).
template <typename T>
__device__ __forceinline__ float preBiasAt(const PreAdd& p, int64_t n, int64_t c) {
    return loadAffine<T>(p.bias, n * p.biasNStride + c, p.biasFp32, 0.f);
}

// s of the element at offset `off` of x (and of the residual) whose bias is b.
template <typename T>
__device__ __forceinline__ float preSumAt(const T* x, const PreAdd& p, int64_t off, float b) {
    const float r = p.residual != nullptr ? toFloat<T>(static_cast<const T*>(p.residual)[off]) : 0.f;
    return preSum<T>(toFloat<T>(x[off]), b, r);
}

// The residual's vector at offset `off` (zeros without a residual).
template <typename T, int VEC, Cache C = Cache::kDefault>
__device__ __forceinline__ Raw<T, VEC> loadResidual(const PreAdd& p, int64_t off) {
    Raw<T, VEC> r{};
    if (p.residual != nullptr) r = loadRaw<T, VEC, C>(static_cast<const T*>(p.residual) + off);
    return r;
}

// s of a loaded vector d of x, its residual's vector rv (loadResidual) and the
// biases b of its elements' channels.
template <typename T, int VEC>
__device__ __forceinline__ void preSumVec(const Raw<T, VEC>& d, const Raw<T, VEC>& rv, const float (&b)[VEC],
                                          float (&s)[VEC]) {
#pragma unroll
    for (int e = 0; e < VEC; ++e) s[e] = preSum<T>(d.get(e), b[e], rv.get(e));
}

// s of x's vector d at element offset off (of x, the residual and sum_out, as
// p has them), the residual's vector r and the biases b of its elements; to
// sum_out where `write`.
template <typename T, int VEC>
__device__ __forceinline__ void formSum(const PreAdd& p, int64_t off, bool write, const Raw<T, VEC>& d,
                                        const Raw<T, VEC>& r, const float (&b)[VEC], float (&s)[VEC]) {
    preSumVec<T, VEC>(d, r, b, s);
    if (write && p.sum != nullptr) storeVec<T, VEC, Cache::kDefault, true>(static_cast<T*>(p.sum) + off, s);
}

// A group's shift k: its first element of x, or of s (kPre) with the bias of
// channel c of image n; off from x (and p's residual).
template <bool kPre, typename T>
__device__ __forceinline__ float groupFirst(const T* x, const PreAdd& p, int64_t off, int64_t n, int64_t c) {
    if constexpr (kPre) {
        return preSumAt<T>(x, p, off, preBiasAt<T>(p, n, c));
    } else {
        return toFloat<T>(x[off]);
    }
}

// Element e of x's vector d (plain kernels) or of s (kPre): plain kernels
// compile exactly as without a pre-add.
template <bool kPre, typename T, int VEC>
__device__ __forceinline__ float valueOf(const Raw<T, VEC>& d, const float (&s)[VEC], int e) {
    if constexpr (kPre) {
        return s[e];
    } else {
        return d.get(e);
    }
}

// The hardware's approximate 2^x and 1/x (one MUFU op each, no branches):
// within 2 fp32 ulp, far inside the 1e-5 relative target of fp32 outputs.
__device__ __forceinline__ float ex2Approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ float rcpApprox(float x) {
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ float activate(float v, int act) {
    if (act == TRTGN_ACTIVATION_SILU) {
        // x * sigmoid(x) = x / (1 + 2^(-x log2 e)): five instructions. For
        // x < -88 the power is inf and the result -0 (true value < 1e-37);
        // NaN stays NaN.
        return v * rcpApprox(1.0f + ex2Approx(v * -1.4426950408889634f));
    }
    return v;
}

// SiLU of two values with one reciprocal between them: 1/a and 1/b are
// b/(ab) and a/(ab), so three MUFU operations instead of four (the MUFU pipe
// runs 16 lanes a cycle an SM, an eighth of the FMA pipes', and bounds the
// apply loops; README "Numerics"). 2^(-v log2 e) is capped at 2^62, so ab
// stays below 2^125 and its reciprocal normal: an inf would make the
// partner's b * rcp(ab) NaN, a flushed reciprocal would make it 0. Below
// v = -43 the true result is under 1e-17. A NaN stays NaN (fminf takes the
// cap, the last product is NaN) and leaves its partner alone; only v = -inf
// differs from activate(): -inf instead of NaN.
__device__ __forceinline__ void siluPair(float& v0, float& v1) {
    const float e0 = ex2Approx(fminf(v0 * -1.4426950408889634f, 62.f));
    const float e1 = ex2Approx(fminf(v1 * -1.4426950408889634f, 62.f));
    const float a0 = 1.0f + e0, a1 = 1.0f + e1;
    const float r = rcpApprox(a0 * a1);
    v0 *= a1 * r;
    v1 *= a0 * r;
}

// activate() over the N values one thread writes as a vector, in pairs
// (siluPair). Not used by the NCHW grid and the streaming NHWC grid in bf16,
// which ran slower with pairs (see there).
template <int N>
__device__ __forceinline__ void activateVec(float (&o)[N], int act) {
    if (act == TRTGN_ACTIVATION_SILU) {
#pragma unroll
        for (int i = 0; i + 1 < N; i += 2) siluPair(o[i], o[i + 1]);
        if constexpr (N % 2 == 1) o[N - 1] = activate(o[N - 1], act);
    }
}

// Running statistics of a set of values: count, mean and M2 = sum((x-mean)^2).
struct Welford {
    float n, mean, m2;
};

// Chan et al.'s parallel merge; exact in exact arithmetic and free of the
// E[x^2] - E[x]^2 cancellation.
__device__ __forceinline__ Welford welfordMerge(Welford a, Welford b) {
    const float n = a.n + b.n;
    if (n == 0.f) return a;
    const float wb = b.n / n;
    const float d = b.mean - a.mean;
    Welford r;
    r.n = n;
    r.mean = a.mean + d * wb;
    r.m2 = a.m2 + b.m2 + d * d * a.n * wb;
    return r;
}

__device__ __forceinline__ Welford shflXorWelford(Welford w, int mask) {
    Welford o;
    o.n = __shfl_xor_sync(0xffffffffu, w.n, mask);
    o.mean = __shfl_xor_sync(0xffffffffu, w.mean, mask);
    o.m2 = __shfl_xor_sync(0xffffffffu, w.m2, mask);
    return o;
}

__device__ __forceinline__ Welford warpMergeWelford(Welford w) {
#pragma unroll
    for (int m = 16; m >= 1; m >>= 1) w = welfordMerge(w, shflXorWelford(w, m));
    return w;
}

template <typename F>
__device__ __forceinline__ F warpSum(F v) {
#pragma unroll
    for (int m = 16; m >= 1; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
    return v;
}

// The group's statistics from S1 = sum(x - k) and S2 = sum((x - k)^2) over
// its N values, in double: the mean split into hi + lo (hi the nearest fp32,
// lo the rest) and 1/sqrt(var + eps). y is then (x - hi) * scale + (beta - lo *
// scale): x - hi is exact or nearly so for x near the mean, so an output near
// zero keeps an error of a few fp32 ulps of beta, whatever k was (an outlier
// k in a (x - k) * scale + shift form costs ulps of |x - k| * scale instead).
__device__ __forceinline__ float4 finishStats(double s1, double s2, double invCount, float k, float eps) {
    const double m = s1 * invCount;
    double var = s2 * invCount - m * m;
    if (var < 0.0) var = 0.0;  // rounding; NaN stays NaN
    const double mean = double(k) + m;
    const float hi = float(mean);
    return make_float4(hi, float(mean - double(hi)), rsqrtf(float(var + double(eps))), 0.f);
}

// NCHW: the channels (offset / hw) of offsets first, first + step, ... (next)
// or first, first - step, ... (prev), walked by additions from one division:
// a 32-bit division is ~16 instructions and a MUFU op, a 64-bit one ~110.
// Offsets must fit 32 bits.
struct ChannelWalk {
    uint32_t q, r, sq, sr, hw;  // offset = q * hw + r; step = sq * hw + sr
    __device__ __forceinline__ static ChannelWalk from(uint32_t first, uint32_t step, uint32_t hw) {
        const uint32_t q = first / hw, sq = step / hw;
        return ChannelWalk{q, first - q * hw, sq, step - sq * hw, hw};
    }
    // The channel of this offset; then moves one step on (next) or back (prev).
    __device__ __forceinline__ uint32_t next() {
        const uint32_t c = q;
        r += sr;
        q += sq;
        if (r >= hw) {
            r -= hw;
            ++q;
        }
        return c;
    }
    __device__ __forceinline__ uint32_t prev() {
        const uint32_t c = q;
        if (r < sr) {
            r += hw;
            --q;
        }
        r -= sr;
        q -= sq;
        return c;
    }
};

}  // namespace trtgn
