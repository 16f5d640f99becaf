// Two-pass GroupNorm for tensors too large to keep on chip, and for layouts
// without 16-byte vectors:
//   1. statistics: about one wave of blocks, each walks a chunk of pixels
//      (NHWC: whole pixel rows, so every warp reads contiguous memory) and
//      keeps per-thread shifted sums per channel; a block writes one
//      (mean, M2) partial per group (NCHW; NHWC where no group straddles two
//      of its column slices) or per channel (other NHWC);
//   2. finalisation: one block per (n, group) merges its partials into mean
//      and 1/sqrt(var + eps);
//   3. application: the same blocks walk their chunks in REVERSE, so the data
//      the statistics pass read last (still in L2) is read first; the last
//      read of x and the write of y are marked evict-first.
// Statistics are taken of d = x - k, k the group's first element, so that
// fp32 keeps full precision for |mean| >> std (see group_norm_cluster.cu).
//
// With a pre-add (kPre, PreAdd), x is s = (x + bias) + residual, rounded to
// T, throughout: k is the group's first s, the statistics pass writes
// sum_out, and the apply pass reads s back from sum_out (the plain apply
// kernel on it: one read where x and the residual are two) or, without one,
// recomputes s from x and the residual.
#include "group_norm_common.cuh"
#include "group_norm_launch.h"

namespace trtgn {
namespace {

constexpr int kThreads = kTwoPassThreadsNHWC;
constexpr int kThreadsNCHW = kTwoPassThreadsNCHW;
constexpr int kUnroll = 4;       // independent 16-byte loads in flight per thread (apply)
constexpr int kStatsUnroll = 8;  // the statistics pass keeps less state: more loads in flight
constexpr int kStatsRunRows = 32 * kStatsUnroll;  // fp32 statistics: rows a thread sums before merging (gnStatsNHWC)
// kPre loads the residual beside x: half the loads in flight keep the NHWC
// kernels within the registers of two blocks an SM (64 a thread).
template <int kLoads, bool kPre> constexpr int kInFlight = kPre ? kLoads / 2 : kLoads;

// ---------------------------------------------------------------- NHWC ----

// The statistics pass writes sum_out (PreAdd::sum, moved to the thread's
// data; NULL: none), which the apply pass reads back.
template <typename T, int VEC>
__device__ __forceinline__ void storeSum(void* sum, int64_t off, const float (&s)[VEC]) {
    if (sum != nullptr) storeVec<T, VEC>(static_cast<T*>(sum) + off, s);
}

// An NHWC thread's pre-add (kPre): offsets are x's from the thread's vector;
// the residual and sum_out at the same offsets, the biases of its fixed
// channels in b.
template <typename T, int VEC>
struct PreRows {
    PreAdd p;      // residual and sum moved to the thread's vector
    float b[VEC];
    // s of x's vector d at offset off, the residual's vector rv; to sum_out.
    __device__ __forceinline__ void sum(const Raw<T, VEC>& d, const Raw<T, VEC>& rv, int64_t off,
                                        float (&s)[VEC]) const {
        preSumVec<T, VEC>(d, rv, b, s);
        storeSum<T, VEC>(p.sum, off, s);
    }
};

// An NCHW group's pre-add (kPre): offsets from the group's first element; a
// vector lies in one channel (hw % VEC == 0 where VEC > 1), offset / hw on from
// the group's first, divided in 32 bits where the group's offsets fit them.
template <typename T>
struct PreGroup {
    PreAdd p;  // residual and sum moved to the group's first element
    int64_t n, c0, hw;
    bool narrow;
    __device__ __forceinline__ float biasAt(int64_t off) const {
        const int64_t c = c0 + (narrow ? int64_t(uint32_t(off) / uint32_t(hw)) : off / hw);
        return preBiasAt<T>(p, n, c);
    }
    template <int VEC>
    __device__ __forceinline__ void sum(const Raw<T, VEC>& d, const Raw<T, VEC>& rv, int64_t off,
                                        float (&s)[VEC]) const {
        const float b = biasAt(off);
#pragma unroll
        for (int e = 0; e < VEC; ++e) s[e] = preSum<T>(d.get(e), b, rv.get(e));
        storeSum<T, VEC>(p.sum, off, s);
    }
};

template <typename T>
__device__ __forceinline__ PreGroup<T> preGroup(const WithPreAdd<TwoPassArgs>& a, int64_t ng) {
    PreGroup<T> r;
    const int64_t n = ng / a.groups;
    r.p = preAt<T>(a.pre, ng * a.cpg * a.hw);
    r.n = n;
    r.c0 = (ng - n * a.groups) * a.cpg;
    r.hw = a.hw;
    r.narrow = a.cpg * a.hw <= int64_t(UINT32_MAX);
    return r;
}

// The PreRows of a thread whose vector starts at element offset `off` of x,
// channel c0, in image n.
template <typename T, int VEC>
__device__ __forceinline__ PreRows<T, VEC> preRows(const WithPreAdd<TwoPassArgs>& a, int64_t off, int64_t n,
                                                   int64_t c0) {
    PreRows<T, VEC> r;
    r.p = preAt<T>(a.pre, off);
#pragma unroll
    for (int e = 0; e < VEC; ++e) r.b[e] = preBiasAt<T>(a.pre, n, min(c0 + e, a.c - 1));
    return r;
}

// Adds d = x - kt and d^2 to s1, s2 over one thread's rows p, p + step, ...
// below pEnd; returns their count. kPre: of s (pre), written to sum_out.
template <typename T, int VEC, bool kPre>
__device__ __forceinline__ float sumRun(const T* x, int64_t cs, int64_t p, int64_t pEnd, int64_t step,
                                        const float (&kt)[VEC], float (&s1)[VEC], float (&s2)[VEC],
                                        const PreRows<T, VEC>& pre) {
    constexpr int kU = kInFlight<kStatsUnroll, kPre>;
    float cnt = 0.f;
    for (; p + (kU - 1) * step < pEnd; p += kU * step) {
        Raw<T, VEC> d[kU];
        [[maybe_unused]] Raw<T, VEC> rv[kPre ? kU : 1];
#pragma unroll
        for (int u = 0; u < kU; ++u) d[u] = loadRaw<T, VEC>(x + (p + u * step) * cs);
        if constexpr (kPre) {
#pragma unroll
            for (int u = 0; u < kU; ++u) rv[u] = loadResidual<T, VEC>(pre.p, (p + u * step) * cs);
        }
#pragma unroll
        for (int u = 0; u < kU; ++u) {
            [[maybe_unused]] float sv[VEC];
            if constexpr (kPre) pre.sum(d[u], rv[u], (p + u * step) * cs, sv);
#pragma unroll
            for (int e = 0; e < VEC; ++e) {
                const float dv = valueOf<kPre>(d[u], sv, e) - kt[e];
                s1[e] += dv;
                s2[e] = fmaf(dv, dv, s2[e]);
            }
        }
        cnt += float(kU);
    }
    for (; p < pEnd; p += step) {
        const Raw<T, VEC> d = loadRaw<T, VEC>(x + p * cs);
        [[maybe_unused]] float sv[VEC];
        if constexpr (kPre) pre.sum(d, loadResidual<T, VEC>(pre.p, p * cs), p * cs, sv);
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
            const float dv = valueOf<kPre>(d, sv, e) - kt[e];
            s1[e] += dv;
            s2[e] = fmaf(dv, dv, s2[e]);
        }
        cnt += 1.f;
    }
    return cnt;
}

// The same over rows p, p + step, ... below pEnd (at least one), shifted by
// the first of them: kt is set to it and s1, s2 start from zero.
template <typename T, int VEC, bool kPre>
__device__ __forceinline__ float shiftedRun(const T* x, int64_t cs, int64_t p, int64_t pEnd, int64_t step,
                                            float (&kt)[VEC], float (&s1)[VEC], float (&s2)[VEC],
                                            const PreRows<T, VEC>& pre) {
    const Raw<T, VEC> first = loadRaw<T, VEC>(x + p * cs);
    [[maybe_unused]] float sv[VEC];
    if constexpr (kPre) pre.sum(first, loadResidual<T, VEC>(pre.p, p * cs), p * cs, sv);
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
        kt[e] = valueOf<kPre>(first, sv, e);
        s1[e] = s2[e] = 0.f;
    }
    return 1.f + sumRun<T, VEC, kPre>(x, cs, p + step, pEnd, step, kt, s1, s2, pre);
}

// kPre: the group's first s (k) of channel c (clamped to the last channel, as
// the thread's biases are) of image n, x at image n's first pixel.
template <typename T>
__device__ __forceinline__ float groupFirstS(const WithPreAdd<TwoPassArgs>& a, const T* xn, int64_t n, int64_t c) {
    const int64_t c0 = min(c, a.c - 1) / a.cpg * a.cpg;
    return preSumAt<T>(xn, preAt<T>(a.pre, n * a.hw * a.cs), c0, preBiasAt<T>(a.pre, n, c0));
}

// Per thread and channel: sums s1, s2 of d = x - k_t, k_t the first value
// the thread reads (no per-element division, unlike Welford's update). At the
// end M2 = s2 - s1^2/n; its rounding error is bounded by n * eps * (k_t -
// mean)^2, which k_t itself contributes to the group's M2, so the error stays
// at ~n*eps of M2 even when k_t is an outlier. Means are kept relative to the
// group's first element k_g (exact: (k_t - k_g) + s1/n), as the finaliser and
// the apply pass expect. kPre: k_t = k_g (see there).
template <typename T, int VEC, bool kPre>
__global__ void __launch_bounds__(kThreads, 2) gnStatsNHWC(ArgsWith<kPre, TwoPassArgs> a) {
    __shared__ float smMean[kThreads * VEC];
    __shared__ float smM2[kThreads * VEC];
    __shared__ float smCnt[kThreads];

    const int tid = threadIdx.x;
    const int v = tid % a.vb, row = tid / a.vb;
    const int64_t n = blockIdx.x / a.chunks;
    const int64_t chunk = blockIdx.x - n * a.chunks;
    const int64_t vg = int64_t(blockIdx.y) * a.vb + v;  // vector index within the pixel
    const bool active = vg * VEC < a.c;
    const int64_t p0 = chunk * a.chunkUnits;
    const int64_t p1 = min(a.hw, p0 + a.chunkUnits);

    float mean[VEC], m2[VEC];
#pragma unroll
    for (int e = 0; e < VEC; ++e) mean[e] = m2[e] = 0.f;
    float cnt = 0.f;
    if (active && p0 + row < p1) {
        const T* xn = static_cast<const T*>(a.x) + n * a.hw * a.cs;
        const T* x = xn + vg * VEC;
        const int64_t step = a.rows;
        PreRows<T, VEC> pre{};
        if constexpr (kPre) pre = preRows<T, VEC>(a, n * a.hw * a.cs + vg * VEC, n, vg * VEC);
        // Sums shifted by the thread's first value kt. 16-bit: one run over
        // the thread's rows. fp32: runs of up to kStatsRunRows rows, each
        // merged (Chan) into the thread's (count, mean - kt, M2): one run of
        // ~500 rows missed fp32's tolerance on inputs with |mean| >> std, ~250
        // passed; shorter runs, or each run shifted by its own first value,
        // cost more. 16-bit outputs, 2 ulps wide, need no more, and the
        // merge's registers would spill there.
        float kt[VEC], s1[VEC], s2[VEC];
        int64_t pEnd = sizeof(T) == 4 ? min(p1, p0 + row + (1 + kStatsRunRows) * step) : p1;
        if constexpr (kPre) {
            // Shifted by the group's first s, not the thread's: s carries more
            // bits than a 16-bit x, so the sums of d are no longer exact, and
            // their error grows with |shift - mean|, which the accuracy rule
            // bounds by the group's first element's (a thread's first value
            // may lie far out). The mean then needs no re-basing (kt - kg = 0).
#pragma unroll
            for (int e = 0; e < VEC; ++e) {
                kt[e] = groupFirstS<T>(a, xn, n, vg * VEC + e);
                s1[e] = s2[e] = 0.f;
            }
            cnt = sumRun<T, VEC, kPre>(x, a.cs, p0 + row, pEnd, step, kt, s1, s2, pre);
        } else {
            cnt = shiftedRun<T, VEC, kPre>(x, a.cs, p0 + row, pEnd, step, kt, s1, s2, pre);
        }
        float rc = 1.f / cnt;
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
            mean[e] = s1[e] * rc;  // relative to kt until the end
            m2[e] = s2[e] - s1[e] * mean[e];
        }
        if constexpr (sizeof(T) == 4) {
            for (int64_t p = pEnd; p < p1; p = pEnd) {
                pEnd = min(p1, p + kStatsRunRows * step);
#pragma unroll
                for (int e = 0; e < VEC; ++e) s1[e] = s2[e] = 0.f;
                const float runCnt = sumRun<T, VEC, kPre>(x, a.cs, p, pEnd, step, kt, s1, s2, pre);
                const float wb = runCnt / (cnt + runCnt);  // the run's weight in the merge
                rc = 1.f / runCnt;
#pragma unroll
                for (int e = 0; e < VEC; ++e) {
                    const float md = s1[e] * rc, dm = md - mean[e];
                    m2[e] += (s2[e] - s1[e] * md) + dm * dm * cnt * wb;
                    mean[e] += dm * wb;
                }
                cnt += runCnt;
            }
        }
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
            float kg;  // the group's first element (kPre: its s, which kt already is)
            if constexpr (kPre) {
                kg = kt[e];
            } else {
                kg = toFloat<T>(xn[(vg * VEC + e) / a.cpg * a.cpg]);
            }
            mean[e] += kt[e] - kg;
            m2[e] = m2[e] < 0.f ? 0.f : m2[e];  // rounding; NaN and Inf pass through
        }
    }

    // Merge the block's rows pairwise (tree), per channel.
    const int width = a.vb * VEC;
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
        smMean[row * width + v * VEC + e] = mean[e];
        smM2[row * width + v * VEC + e] = m2[e];
    }
    smCnt[tid] = cnt;
    int span = 1;
    while (span < a.rows) span <<= 1;
    for (int s = span >> 1; s > 0; s >>= 1) {
        __syncthreads();
        if (row < s && row + s < a.rows) {
            const int other = (row + s) * width + v * VEC;
            const int mine = row * width + v * VEC;
            const float nb = smCnt[tid + s * a.vb];
            const float na = smCnt[tid];
#pragma unroll
            for (int e = 0; e < VEC; ++e) {
                const Welford w = welfordMerge({na, smMean[mine + e], smM2[mine + e]},
                                               {nb, smMean[other + e], smM2[other + e]});
                smMean[mine + e] = w.mean;
                smM2[mine + e] = w.m2;
            }
            smCnt[tid] = na + nb;
        }
    }
    __syncthreads();
    if (a.groupPartials) {
        // The block's channels are whole groups: a warp merges each group's
        // channels (equal counts, means relative to the group's k) in double
        // into one partial, so that the finaliser adds chunks partials a
        // group, not chunks x channels (one group of 324 channels would leave
        // 256 x 324 to one block).
        const int64_t c0 = int64_t(blockIdx.y) * width;
        const int cpg = int(a.cpg);
        const int groupsHere = int(min(int64_t(width), a.c - c0)) / cpg;
        const double nc = double(p1 - p0);  // every channel's count: the chunk's pixels
        float2* out = a.partials + (n * a.chunks + chunk) * a.groups + c0 / cpg;
        // Whole warps only: the block has vb * rows threads (at least 257),
        // not always a multiple of 32, and warpSum needs all 32 lanes.
        const int warp = tid >> 5, lane = tid & 31, warps = int(blockDim.x) >> 5;
        for (int gl = warp; warp < warps && gl < groupsHere; gl += warps) {
            double sum = 0.0, sq = 0.0;
            for (int ch = gl * cpg + lane; ch < (gl + 1) * cpg; ch += 32) {
                const double m = smMean[ch];
                sum += m;
                sq += fma(nc * m, m, double(smM2[ch]));
            }
            sum = warpSum(sum);
            sq = warpSum(sq);
            if (lane == 0) {
                const double mean = sum / cpg;
                double m2 = sq - nc * sum * mean;
                m2 = m2 < 0.0 ? 0.0 : m2;  // rounding; NaN and Inf pass through
                out[gl] = make_float2(float(mean), float(m2));
            }
        }
    } else if (row == 0 && active) {
        float2* out = a.partials + (n * a.chunks + chunk) * a.c + vg * VEC;
#pragma unroll
        for (int e = 0; e < VEC; ++e) out[e] = make_float2(smMean[v * VEC + e], smM2[v * VEC + e]);
    }
}

template <typename T, int VEC, bool kPre>
__global__ void __launch_bounds__(kThreads, 2) gnApplyNHWC(ArgsWith<kPre, TwoPassArgs> a) {
    const int tid = threadIdx.x;
    const int v = tid % a.vb, row = tid / a.vb;
    const int64_t n = blockIdx.x / a.chunks;
    const int64_t chunk = blockIdx.x - n * a.chunks;
    const int64_t vg = int64_t(blockIdx.y) * a.vb + v;
    if (vg * VEC >= a.c) return;
    const int64_t p0 = chunk * a.chunkUnits;
    const int64_t p1 = min(a.hw, p0 + a.chunkUnits);
    if (p0 + row >= p1) return;

    // y = (x - k) * scale + (beta - mean_d * scale): x - k is exact and both
    // terms are of the output's magnitude, so nothing large cancels.
    float shiftK[VEC], scale[VEC], shift[VEC];
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
        const int64_t c = min(vg * VEC + e, a.c - 1);
        const float4 st = a.stats[n * a.groups + c / a.cpg];
        shiftK[e] = st.x;
        scale[e] = st.z * loadAffine<T>(a.gamma, c, a.affineFp32, 1.f);
        shift[e] = loadAffine<T>(a.beta, c, a.affineFp32, 0.f) - st.y * scale[e];
    }
    const int64_t base = n * a.hw * a.cs + vg * VEC;
    const T* x = static_cast<const T*>(a.x) + base;
    T* y = static_cast<T*>(a.y) + base;
    const int64_t step = a.rows;
    // kPre (without sum_out, see the launch): s recomputed as the statistics pass did.
    [[maybe_unused]] PreRows<T, VEC> pre{};
    if constexpr (kPre) pre = preRows<T, VEC>(a, base, n, vg * VEC);
    // Last pixel of this row, then walk backwards.
    constexpr int kU = kInFlight<kUnroll, kPre>;
    int64_t p = p0 + row + ((p1 - 1 - p0 - row) / step) * step;
    for (; p - (kU - 1) * step >= p0; p -= kU * step) {
        Raw<T, VEC> d[kU];
        [[maybe_unused]] Raw<T, VEC> rv[kPre ? kU : 1];
#pragma unroll
        for (int u = 0; u < kU; ++u) d[u] = loadRaw<T, VEC, Cache::kStreaming>(x + (p - u * step) * a.cs);
        if constexpr (kPre) {
#pragma unroll
            for (int u = 0; u < kU; ++u)
                rv[u] = loadResidual<T, VEC, Cache::kStreaming>(pre.p, (p - u * step) * a.cs);
        }
#pragma unroll
        for (int u = 0; u < kU; ++u) {
            [[maybe_unused]] float sv[VEC];
            if constexpr (kPre) preSumVec<T, VEC>(d[u], rv[u], pre.b, sv);
            float out[VEC];
#pragma unroll
            for (int e = 0; e < VEC; ++e) out[e] = fmaf(valueOf<kPre>(d[u], sv, e) - shiftK[e], scale[e], shift[e]);
            activateVec(out, a.act);
            storeVec<T, VEC, Cache::kStreaming>(y + (p - u * step) * a.cs, out);
        }
    }
    for (; p >= p0; p -= step) {
        const Raw<T, VEC> d = loadRaw<T, VEC, Cache::kStreaming>(x + p * a.cs);
        [[maybe_unused]] float sv[VEC];
        if constexpr (kPre) preSumVec<T, VEC>(d, loadResidual<T, VEC, Cache::kStreaming>(pre.p, p * a.cs), pre.b, sv);
        float out[VEC];
#pragma unroll
        for (int e = 0; e < VEC; ++e) out[e] = fmaf(valueOf<kPre>(d, sv, e) - shiftK[e], scale[e], shift[e]);
        activateVec(out, a.act);
        storeVec<T, VEC, Cache::kStreaming>(y + p * a.cs, out);
    }
}

// ---------------------------------------------------------------- NCHW ----

// kPre: a vector's channel is its offset / hw (hw % VEC == 0 where VEC > 1),
// in 32 bits where the group's offsets fit them.
template <typename T, int VEC, bool kPre>
__global__ void __launch_bounds__(kThreadsNCHW, 4) gnStatsNCHW(ArgsWith<kPre, TwoPassArgs> a) {
    __shared__ Welford smW[32];
    const int tid = threadIdx.x;
    const int64_t ng = blockIdx.x / a.chunks;  // n * G + g
    const int64_t chunk = blockIdx.x - ng * a.chunks;
    const int64_t q0 = chunk * a.chunkUnits;
    const int64_t q1 = min(a.units, q0 + a.chunkUnits);
    const T* x = static_cast<const T*>(a.x) + ng * a.cpg * a.hw;  // groups are contiguous

    Welford w{0.f, 0.f, 0.f};
    [[maybe_unused]] PreGroup<T> pre{};
    if constexpr (kPre) pre = preGroup<T>(a, ng);
    float shiftK;
    if constexpr (kPre) {
        shiftK = preSumAt<T>(x, pre.p, 0, pre.biasAt(0));
    } else {
        shiftK = toFloat<T>(x[0]);
    }
    // Each vector's own (mean, M2) is exact over VEC values; merge it in.
    // kPre: of s, the residual's vector rv, written to sum_out.
    auto addVector = [&](const Raw<T, VEC>& d, [[maybe_unused]] const Raw<T, VEC>& rv, [[maybe_unused]] int64_t j) {
        [[maybe_unused]] float sv[VEC];
        if constexpr (kPre) pre.template sum<VEC>(d, rv, j * VEC, sv);
        float s = 0.f;
#pragma unroll
        for (int e = 0; e < VEC; ++e) s += valueOf<kPre>(d, sv, e) - shiftK;
        const float lm = s * (1.0f / VEC);
        float lm2 = 0.f;
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
            const float dd = (valueOf<kPre>(d, sv, e) - shiftK) - lm;
            lm2 += dd * dd;
        }
        w = welfordMerge(w, {float(VEC), lm, lm2});
    };
    const int64_t step = blockDim.x;
    int64_t j = q0 + tid;
    for (; j + (kUnroll - 1) * step < q1; j += kUnroll * step) {
        Raw<T, VEC> d[kUnroll];
        Raw<T, VEC> rv[kPre ? kUnroll : 1];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) d[u] = loadRaw<T, VEC>(x + (j + u * step) * VEC);
        if constexpr (kPre) {
#pragma unroll
            for (int u = 0; u < kUnroll; ++u) rv[u] = loadResidual<T, VEC>(pre.p, (j + u * step) * VEC);
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) addVector(d[u], rv[kPre ? u : 0], j + u * step);
    }
    for (; j < q1; j += step) {
        [[maybe_unused]] Raw<T, VEC> rv;
        if constexpr (kPre) rv = loadResidual<T, VEC>(pre.p, j * VEC);
        addVector(loadRaw<T, VEC>(x + j * VEC), rv, j);
    }

    w = warpMergeWelford(w);
    const int warp = tid >> 5, lane = tid & 31;
    if (lane == 0) smW[warp] = w;
    __syncthreads();
    if (warp == 0) {
        w = lane < int(blockDim.x >> 5) ? smW[lane] : Welford{0.f, 0.f, 0.f};
        w = warpMergeWelford(w);
        if (lane == 0) a.partials[ng * a.chunks + chunk] = make_float2(w.mean, w.m2);
    }
}

// kWide: a group has 2^32 elements or more, so offsets within it need 64-bit
// divisions (a run-time choice between the two in the loop made it longer).
template <typename T, int VEC, bool kWide, bool kPre>
__global__ void __launch_bounds__(kThreadsNCHW, 4) gnApplyNCHW(ArgsWith<kPre, TwoPassArgs> a) {
    const int tid = threadIdx.x;
    const int64_t ng = blockIdx.x / a.chunks;
    const int64_t chunk = blockIdx.x - ng * a.chunks;
    const int64_t q0 = chunk * a.chunkUnits;
    const int64_t q1 = min(a.units, q0 + a.chunkUnits);
    if (q0 + tid >= q1) return;
    const int64_t g = ng % a.groups;
    const int64_t base = ng * a.cpg * a.hw;
    const T* x = static_cast<const T*>(a.x) + base;
    T* y = static_cast<T*>(a.y) + base;
    const float4 st = a.stats[ng];
    const int64_t c0 = g * a.cpg;
    // kPre (without sum_out, see the launch): s recomputed as the statistics pass did.
    [[maybe_unused]] PreAdd pre{};
    [[maybe_unused]] int64_t n = 0;
    if constexpr (kPre) {
        pre = preAt<T>(a.pre, base);
        n = ng / a.groups;
    }

    auto apply = [&](int64_t j, const Raw<T, VEC>& d, [[maybe_unused]] const Raw<T, VEC>& rv) {
        // hw % VEC == 0 whenever VEC > 1, so a vector lies in one channel.
        const int64_t off = j * VEC;
        const int64_t c = c0 + (kWide ? off / a.hw : int64_t(uint32_t(off) / uint32_t(a.hw)));
        const float s = st.z * loadAffine<T>(a.gamma, c, a.affineFp32, 1.f);
        const float b = loadAffine<T>(a.beta, c, a.affineFp32, 0.f) - st.y * s;
        [[maybe_unused]] float sv[VEC];
        if constexpr (kPre) {
            const float pb = preBiasAt<T>(pre, n, c);
#pragma unroll
            for (int e = 0; e < VEC; ++e) sv[e] = preSum<T>(d.get(e), pb, rv.get(e));
        }
        float out[VEC];
#pragma unroll
        for (int e = 0; e < VEC; ++e) out[e] = fmaf(valueOf<kPre>(d, sv, e) - st.x, s, b);
        activateVec(out, a.act);
        storeVec<T, VEC, Cache::kStreaming>(y + off, out);
    };
    const int64_t step = blockDim.x;
    int64_t j = q0 + tid + ((q1 - 1 - q0 - tid) / step) * step;
    for (; j - (kUnroll - 1) * step >= q0; j -= kUnroll * step) {
        Raw<T, VEC> d[kUnroll];
        Raw<T, VEC> rv[kPre ? kUnroll : 1];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) d[u] = loadRaw<T, VEC, Cache::kStreaming>(x + (j - u * step) * VEC);
        if constexpr (kPre) {
#pragma unroll
            for (int u = 0; u < kUnroll; ++u) rv[u] = loadResidual<T, VEC, Cache::kStreaming>(pre, (j - u * step) * VEC);
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) apply(j - u * step, d[u], rv[kPre ? u : 0]);
    }
    for (; j >= q0; j -= step) {
        [[maybe_unused]] Raw<T, VEC> rv;
        if constexpr (kPre) rv = loadResidual<T, VEC, Cache::kStreaming>(pre, j * VEC);
        apply(j, loadRaw<T, VEC, Cache::kStreaming>(x + j * VEC), rv);
    }
}

// ------------------------------------------------------------ finalize ----

// Partials are (mean, M2) of x - k_g with known counts; in double, the sums
// S = sum(n_i * mean_i) and Q = sum(M2_i + n_i * mean_i^2) lose nothing that
// matters (the means are small next to k_g), and need no division per item.

// One block per (n, group): its threads load the group's partials together
// (one latency, not one per item) and sum in double.
template <typename T, bool kPre>
__global__ void __launch_bounds__(kFinalizeThreads) gnFinalize(ArgsWith<kPre, FinalizeArgs> f) {
    __shared__ double sm[3][kFinalizeThreads / 32];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int64_t idx = blockIdx.x;
    const int64_t n = idx / f.groups, g = idx - n * f.groups;
    const float2* part = f.partials + n * f.nStride + g * f.gStride;
    double cnt = 0.0, sum = 0.0, sq = 0.0;
    const int members = int(f.members);
    const int items = int(f.chunks) * members;  // <= kMaxStatsBlocks * C
    // kFinalizeUnroll loads in flight a thread: NHWC whose groups straddle
    // the statistics blocks' column slices (no groupPartials, see
    // launchTwoPassT) leaves up to kMaxStatsBlocks * C/G partials a group,
    // which one load in flight at a time would read slowly.
    constexpr int kFinalizeUnroll = 8;
    for (int i0 = tid; i0 < items; i0 += kFinalizeThreads * kFinalizeUnroll) {
        float2 pm[kFinalizeUnroll];
        int chunk[kFinalizeUnroll];
#pragma unroll
        for (int u = 0; u < kFinalizeUnroll; ++u) {
            const int i = i0 + u * kFinalizeThreads;
            chunk[u] = i / members;
            pm[u] = i < items ? part[int64_t(chunk[u]) * f.chunkStride + (i - chunk[u] * members)] : make_float2(0.f, 0.f);
        }
#pragma unroll
        for (int u = 0; u < kFinalizeUnroll; ++u) {
            if (i0 + u * kFinalizeThreads >= items) break;
            const double ci = double(min(f.chunkUnits, f.totalUnits - chunk[u] * f.chunkUnits) * f.unitElems);
            const double mi = pm[u].x;
            cnt += ci;
            sum = fma(ci, mi, sum);
            sq += fma(ci * mi, mi, double(pm[u].y));
        }
    }
    cnt = warpSum(cnt);
    sum = warpSum(sum);
    sq = warpSum(sq);
    if (lane == 0) {
        sm[0][warp] = cnt;
        sm[1][warp] = sum;
        sm[2][warp] = sq;
    }
    __syncthreads();
    if (tid == 0) {
        cnt = sum = sq = 0.0;
        for (int w = 0; w < kFinalizeThreads / 32; ++w) {
            cnt += sm[0][w];
            sum += sm[1][w];
            sq += sm[2][w];
        }
        const double mean = sum / cnt;
        double var = (sq - sum * mean) / cnt;
        if (var < 0.0) var = 0.0;  // rounding; a NaN stays NaN
        const int64_t first = n * f.kN + g * f.kG;
        float k;  // the group's first element, as the statistics kernels took it (kPre: its s)
        if constexpr (kPre) {
            k = preSumAt<T>(static_cast<const T*>(f.x), f.pre, first, preBiasAt<T>(f.pre, n, g * f.pre.cpg));
        } else {
            k = toFloat<T>(static_cast<const T*>(f.x)[first]);
        }
        f.stats[idx] = make_float4(k, float(mean), rsqrtf(float(var) + f.eps), 0.f);
    }
}

// ------------------------------------------------------------- launch ----

template <typename T, bool kPre = false>
const void* applyKernelT(ApplyKernel k, int vec) {
    constexpr int VEC = kVec16<T>;
    const bool v = vec == VEC;
    switch (k) {
        case ApplyKernel::kNHWC:
            return v ? reinterpret_cast<const void*>(&gnApplyNHWC<T, VEC, kPre>)
                     : reinterpret_cast<const void*>(&gnApplyNHWC<T, 1, kPre>);
        case ApplyKernel::kNCHW:
            return v ? reinterpret_cast<const void*>(&gnApplyNCHW<T, VEC, false, kPre>)
                     : reinterpret_cast<const void*>(&gnApplyNCHW<T, 1, false, kPre>);
        case ApplyKernel::kNCHWWide:
            return v ? reinterpret_cast<const void*>(&gnApplyNCHW<T, VEC, true, kPre>)
                     : reinterpret_cast<const void*>(&gnApplyNCHW<T, 1, true, kPre>);
    }
    return nullptr;
}

template <typename T, bool kPre>
const void* statsKernelT(bool nhwc, int vec) {
    constexpr int VEC = kVec16<T>;
    if (nhwc)
        return vec == VEC ? reinterpret_cast<const void*>(&gnStatsNHWC<T, VEC, kPre>)
                          : reinterpret_cast<const void*>(&gnStatsNHWC<T, 1, kPre>);
    return vec == VEC ? reinterpret_cast<const void*>(&gnStatsNCHW<T, VEC, kPre>)
                      : reinterpret_cast<const void*>(&gnStatsNCHW<T, 1, kPre>);
}

template <typename T, bool kPre>
cudaError_t launchTwoPassT(const Plan& plan, void* workspace, cudaStream_t stream) {
    const TwoPassPlan& t = plan.twoPass;
    const PreAdd pre = preAddOf(plan.problem);
    TwoPassArgs plain = t.args;
    FinalizeArgs plainF = t.finalize;
    plain.stats = static_cast<float4*>(workspace);
    plain.partials = reinterpret_cast<float2*>(static_cast<char*>(workspace) + t.partialsOffset);
    plainF.stats = plain.stats;
    plainF.partials = plain.partials;
    ArgsWith<kPre, TwoPassArgs> a = argsWith<kPre>(plain, pre);
    ArgsWith<kPre, FinalizeArgs> f = argsWith<kPre>(plainF, pre);

    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(unsigned(plan.gridX), unsigned(plan.gridY), 1);
    cfg.blockDim = dim3(unsigned(plan.threads), 1, 1);
    cfg.stream = stream;
    void* args[] = {&a};
    cudaError_t e = cudaLaunchKernelExC(&cfg, statsKernelT<T, kPre>(t.apply == ApplyKernel::kNHWC, plan.vec), args);
    if (e != cudaSuccess) return e;

    cudaLaunchConfig_t fcfg = {};
    fcfg.gridDim = dim3(unsigned(f.nGroups), 1, 1);
    fcfg.blockDim = dim3(kFinalizeThreads, 1, 1);
    fcfg.stream = stream;
    void* fargs[] = {&f};
    e = cudaLaunchKernelExC(&fcfg, reinterpret_cast<const void*>(&gnFinalize<T, kPre>), fargs);
    if (e != cudaSuccess) return e;

    // With sum_out: the plain apply kernel reads s back from there, exactly
    // the s the statistics saw (see the top of this file).
    if (kPre && pre.sum != nullptr) {
        plain.x = pre.sum;
        void* plainArgs[] = {&plain};
        return cudaLaunchKernelExC(&cfg, applyKernelT<T, false>(t.apply, plan.vec), plainArgs);
    }
    return cudaLaunchKernelExC(&cfg, applyKernelT<T, kPre>(t.apply, plan.vec), args);
}

}  // namespace

const void* applyKernel(ApplyKernel k, int vec, trtgn_dtype_t dtype) {
    return dispatchDtype(dtype, static_cast<const void*>(nullptr),
                         [&](auto t) { return applyKernelT<typename decltype(t)::type>(k, vec); });
}

cudaError_t launchTwoPass(const Plan& plan, void* workspace, cudaStream_t stream) {
    return dispatchDtype(plan.problem.dtype, cudaErrorInvalidValue, [&](auto t) {
        using T = typename decltype(t)::type;
        return plan.problem.preAdd() ? launchTwoPassT<T, true>(plan, workspace, stream)
                                     : launchTwoPassT<T, false>(plan, workspace, stream);
    });
}

}  // namespace trtgn
