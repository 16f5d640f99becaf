// Single-pass GroupNorm: each (batch, group set) is held in the registers of
// one block, or of a thread-block cluster of up to 8 blocks on Hopper, which
// exchange their partial sums through distributed shared memory. x is read
// from memory once and y written once (the floor: a device copy's traffic).
//
// Statistics: one reduction. A thread sums d = x - k and d^2 in fp32, k the
// group's first element (the same for every block of the cluster), warps and
// blocks add those sums in double in a fixed order, and finishStats turns the
// totals into mean and 1/std (as the on-chip grid kernels do). k is a value
// of the group, so the sums of d stay small and fp32 keeps full precision
// even for |mean| >> std. One reduction, not two (sum, then sum of squares
// about the mean), because each is a chain of barriers; gamma and beta are
// loaded with the data, so no global load waits behind the statistics.
//
// gnFusedGroup, one (n, group) a cluster, scalar sums: NCHW, where a group
// is one contiguous run of (C/G)*H*W elements, and NHWC where C/G is a
// multiple of the vector (each pixel holds Vs whole vectors of the group),
// the vector 16 bytes or, for groups of 12, 20, 30 or 60 halves a pixel, 8
// or 4 bytes.
// gnFusedSet2, NHWC where a 16-byte vector spans at most two groups (C/G =
// 10, 20 with fp16), two scalar sums a thread; also sets doubled to two
// vectors a pixel where one vector would hold a whole set (C/G = 4 or 8 in
// 16 bits, 2 or 4 in fp32).
// gnFusedNHWC, the general NHWC case: a "set" is the smallest run of
// channels that holds whole groups and whole 16-byte vectors (lcm(C/G, VEC)
// channels, Vs vectors); each pixel's set is read by Vp = pow2 >= Vs adjacent
// lanes (Vp - Vs idle), so a warp reads 32/Vp pixels' contiguous runs and
// reduces with xor shuffles.
#include <cooperative_groups.h>

#include "group_norm_common.cuh"
#include "group_norm_hopper.cuh"
#include "group_norm_launch.h"

namespace cg = cooperative_groups;

namespace trtgn {
namespace {

constexpr int kMaxWarps = kClusterMaxThreads / 32;

__device__ __forceinline__ int clusterRank(int K) {
#if __CUDA_ARCH__ >= 900
    if (K > 1) return static_cast<int>(cg::this_cluster().block_rank());
#endif
    return 0;
}

// A block may not exit while others still read its shared memory: arrive
// after the last remote read, wait just before exiting.
__device__ __forceinline__ void clusterArrive(int K) {
    if (K > 1) clusterArriveRelease();
}
__device__ __forceinline__ void clusterWait(int K) {
    if (K > 1) clusterWaitAcquire();
}

// Sum of the pairs p[e * stride] (the blocks' double2 totals), e < n <= 16,
// added in Acc and in a fixed order: in chunks of 4 loaded at once (entries past n,
// still inside the array, count as zero), each chunk added as a tree.
// Loading one entry at a time, each behind a branch, serialises the loads.
template <typename Acc, typename V>
__device__ __forceinline__ double2 sumEntries(const V* p, int stride, int n) {
    Acc s1 = 0, s2 = 0;
#pragma unroll
    for (int e0 = 0; e0 < 16; e0 += 4) {
        if (e0 < n) {
            V v[4];
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                v[j] = p[(e0 + j) * stride];
                if (e0 + j >= n) v[j].x = v[j].y = 0;
            }
            s1 += (Acc(v[0].x) + Acc(v[1].x)) + (Acc(v[2].x) + Acc(v[3].x));
            s2 += (Acc(v[0].y) + Acc(v[1].y)) + (Acc(v[2].y) + Acc(v[3].y));
        }
    }
    return make_double2(s1, s2);
}

// Sum of the kMaxWarps float pairs p[e * stride] (a block's warp sums), as a
// tree of fixed shape: all loads first, no branches. Entries of warps a block
// does not have are zero (exchangeSums writes them), so the code is the same
// for every block size (half the instructions of a branching, chunked sum).
__device__ __forceinline__ double2 sumWarpEntries(const float2* p, int stride) {
    float2 v[kMaxWarps];
#pragma unroll
    for (int e = 0; e < kMaxWarps; ++e) v[e] = p[e * stride];
#pragma unroll
    for (int w = 1; w < kMaxWarps; w *= 2) {
#pragma unroll
        for (int e = 0; e < kMaxWarps; e += 2 * w) {
            v[e].x += v[e + w].x;
            v[e].y += v[e + w].y;
        }
    }
    return make_double2(v[0].x, v[0].y);
}

// The cluster's sums in gnFusedGroup and gnFusedSet2: no cluster barrier
// between the warps' sums and the statistics, and no remote read. Each warp
// writes its fp32 (sum d, sum d^2) of every group slot to red[warp][slot],
// then one __syncthreads.
// - One block (K == 1): every thread adds the entries of its slots itself
//   (slotStats).
// - A cluster: per slot, the lanes r < K of one warp add the block's warps'
//   sums and send the total into table[rank][slot] of block r with st.async,
//   which counts the bytes it delivers on block r's mbarrier; every block
//   waits on its own mbarrier for all K * count entries, and every thread adds
//   the K entries of its slots itself.
// A block's mbarrier completes only once every store into its shared memory
// has landed, so no block needs a barrier at exit. (gnFusedNHWC keeps
// clusterFinish below: block sums, cluster barrier, remote reads, statistics
// handed out through shared memory, a second barrier.)
// (A cluster barrier after plain remote stores, whose release compiles to
// MEMBAR.ALL.GPU, was slower.) The warps' sums (at most 16 a slot) are added
// in fp32 and the total goes to double once: a sum as short as the shuffle
// trees that made each of them (adding in double was slower).
// Every thread calls this once, right after issuing its loads: a block may
// write into another's shared memory only once that block has started and
// set up its mbarrier, and exchangeSums waits for this arrival first. The
// mbarrier expects the K * count entries (16 bytes each) the cluster sends.
__device__ __forceinline__ void clusterArriveStarted(int K, int count, uint64_t* bar) {
    if (K > 1) {
        if (threadIdx.x == 0) {
            mbarInit(bar, 1);
            mbarArriveExpectTx(bar, uint32_t(K * count * 16));
            fenceBarrierInit();
        }
        clusterArriveRelaxed();
    }
}

// Lane i < count of each warp holds the warp's fp32 sums of slot i in
// `mine`; red is block scratch of kMaxWarps * count entries. Returns the
// number of entries a slot has for slotStats: with a cluster, K, in
// table[e * count + i] (the blocks' double totals, the same in every block);
// with one block, the number of warps, in red[e * count + i] (the warps'
// sums, followed by zeros up to kMaxWarps, which slotStats reads). Every
// thread calls this.
__device__ __forceinline__ int exchangeSums(float2 mine, int count, int K, int rank, float2* red, double2* table,
                                            uint64_t* bar) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int numWarps = int(blockDim.x >> 5);
    if (lane < count) red[warp * count + lane] = mine;
    // Absent warps' entries are zero (sumWarpEntries): red holds at most
    // 16 * 8 entries and a block has at least 32 threads, so 4 rounds do.
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        const int j = numWarps * count + int(threadIdx.x) + r * int(blockDim.x);
        if (j < kMaxWarps * count) red[j] = make_float2(0.f, 0.f);
    }
    __syncthreads();
#if __CUDA_ARCH__ >= 900
    if (K > 1) {
        clusterWaitAll();  // every block has started
        for (int i = warp; i < count; i += numWarps) {
            if (lane < K) stAsyncRemote(table + rank * count + i, bar, uint32_t(lane), sumWarpEntries(red + i, count));
        }
        mbarWaitCluster(bar, 0);
        return K;
    }
#endif
    return numWarps;  // one block: the warps' sums are the entries
}

// After exchangeSums: the statistics of slot `slot`, which every thread
// computes for itself from all entries (most lanes read the same addresses),
// in a fixed order, so every thread of every block gets bit-identical
// statistics. k is the slot's shift. With one block the entries are the
// warps' sums in red, with a cluster the blocks' sums in table.
__device__ __forceinline__ float4 slotStats(const float2* red, const double2* table, int count, int entries, int K,
                                            int slot, float k, double invCount, float eps) {
    const double2 s =
        K > 1 ? sumEntries<double>(table + slot, count, entries) : sumWarpEntries(red + slot, count);
    return finishStats(s.x, s.y, invCount, k, eps);
}

// part[i] (i < count) holds this block's double sums of group slot i: adds
// them over the K blocks of the cluster (one lane per (i, rank), the lanes of
// one i adjacent, a fixed xor order, so every block gets bit-identical
// statistics) and leaves stat[i] = finishStats(...) with shift kS[i]. Every
// thread of the block calls this.
__device__ __forceinline__ void clusterFinish(double2* part, float4* stat, const float* kS, int count,
                                              const ClusterArgs& a) {
    const int K = a.K;
#if __CUDA_ARCH__ >= 900
    if (K > 1) {
        cg::this_cluster().sync();  // every block's part is complete and visible
    } else
#endif
    {
        __syncthreads();
    }
    for (int base = 0; base < count * K; base += blockDim.x) {
        const int idx = base + threadIdx.x;
        const int i = idx / K, r = idx - i * K;
        double2 v = make_double2(0.0, 0.0);
        if (i < count) {
#if __CUDA_ARCH__ >= 900
            if (K > 1) {
                v = *cg::this_cluster().map_shared_rank(part + i, r);
            } else
#endif
            {
                v = part[i];
            }
        }
        for (int m = K >> 1; m >= 1; m >>= 1) {
            v.x += __shfl_xor_sync(0xffffffffu, v.x, m);
            v.y += __shfl_xor_sync(0xffffffffu, v.y, m);
        }
        if (i < count && r == 0) stat[i] = finishStats(v.x, v.y, a.invCount, kS[i], a.eps);
    }
    clusterArrive(K);
    __syncthreads();
}

// y = (x - hi) * scale + (beta - lo * scale), st = (hi, lo, rstd) from
// finishStats: see there for why the mean is split.
struct Affine {
    float hi, scale, shift;
};
__device__ __forceinline__ Affine affineOf(float4 st, float gamma, float beta) {
    const float scale = st.z * gamma;
    return {st.x, scale, beta - st.y * scale};
}

// gamma or beta (NULL: dflt) of the VEC channels c0 .. c0 + VEC - 1, c0 a
// multiple of VEC: whole 16-byte loads where the pointer is 16-byte aligned
// (the same for every thread), one load an element otherwise. Fewer loads
// made the NHWC kernels faster on small shapes.
template <typename T, int VEC>
__device__ __forceinline__ void loadAffineVec(const void* p, int64_t c0, bool fp32, float dflt, float (&out)[VEC]) {
    // Narrow vectors (gnFusedGroup's NHWC groups of 4 or 8 bytes a pixel)
    // take the element-wise loads.
    constexpr bool kWhole = VEC * sizeof(T) == 16;
    const bool aligned = kWhole && reinterpret_cast<uintptr_t>(p) % 16 == 0;
    if constexpr (kWhole) {
        if (p != nullptr && aligned && fp32) {
            const float4* f = reinterpret_cast<const float4*>(static_cast<const float*>(p) + c0);
#pragma unroll
            for (int i = 0; i < VEC / 4; ++i) {
                const float4 v = __ldg(f + i);
                out[4 * i] = v.x;
                out[4 * i + 1] = v.y;
                out[4 * i + 2] = v.z;
                out[4 * i + 3] = v.w;
            }
            return;
        }
        if (p != nullptr && aligned) {
            Raw<T, VEC> r;
            r.s = __ldg(reinterpret_cast<const uint4*>(static_cast<const T*>(p) + c0));
#pragma unroll
            for (int e = 0; e < VEC; ++e) out[e] = r.get(e);
            return;
        }
    }
#pragma unroll
    for (int e = 0; e < VEC; ++e) out[e] = loadAffine<T>(p, c0 + e, fp32, dflt);
}

// ------------------------------------------------------------ pre-add ----
// kPre (PreAdd, group_norm_args.h): x's and the residual's vectors are loaded
// together, and once they have landed each is turned into s in fp32, written
// to sum_out, and held (PreHeld) in place of x's packed vector for both the
// sums and the apply: k is the group's first s (groupFirst). In 16 bits the
// held s takes twice the registers of a packed vector, and while loads are in
// flight x's and the residual's vectors are both held in any dtype: the
// planner gives kPre plans fewer vectors a thread (kPreMaxVpt, half or a
// quarter), and only those are compiled. Plain kernels hold an empty
// array and read x's vectors exactly as before.
template <bool kPre, int VPT, int VEC>
struct PreHeld {
    float v[kPre ? VPT : 1][kPre ? VEC : 1];
};

// Element e of the thread's vector i: s (kPre) or x.
template <bool kPre, typename T, int VEC, int VPT>
__device__ __forceinline__ float held(const Raw<T, VEC>& d, const PreHeld<kPre, VPT, VEC>& s, int i, int e) {
    if constexpr (kPre) {
        return s.v[i][e];
    } else {
        return d.getFresh(e);
    }
}

// ---------------------------------------------------------------- NHWC ----

template <typename T, int VPT, bool kPre = false>
__global__ void __launch_bounds__(kClusterMaxThreads) gnFusedNHWC(ArgsWith<kPre, ClusterArgs> a) {
    constexpr int VEC = kVec16<T>;
    __shared__ float2 red[kMaxWarps][32][VEC];  // per warp, per vector of the set, per element
    __shared__ double2 part[VEC];  // this block's sums per group of the set (<= VEC groups)
    __shared__ float4 stat[VEC];
    __shared__ float kS[VEC];

    const int tid = threadIdx.x;
    const int warp = tid >> 5, lane = tid & 31;
    const int numWarps = blockDim.x >> 5;
    const int v = lane & (a.vp - 1);
    const int prow = warp * (32 / a.vp) + lane / a.vp;  // pixel row within the block
    const bool active = v < a.vs;
    const int gps = a.setChannels / a.cpg;  // groups in the set
    const int K = a.K;
    const int rank = clusterRank(K);
    const int64_t set = blockIdx.x / K;
    const int64_t n = blockIdx.y;
    const int64_t setBase = n * a.hw * a.cs + set * a.setChannels;
    const int vc = active ? v : 0;  // idle lanes mirror lane 0's channels, never load or store
    const int64_t c0 = set * a.setChannels + int64_t(vc) * VEC;
    const T* xs = static_cast<const T*>(a.x) + setBase;
    const T* x = xs + vc * VEC;
    T* y = static_cast<T*>(a.y) + setBase + vc * VEC;
    auto pixel = [&](int i) { return (int64_t(rank) * VPT + i) * a.R + prow; };

    Raw<T, VEC> data[VPT];
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
        if (active && pixel(i) < a.hw) data[i] = loadRaw<T, VEC>(x + pixel(i) * a.cs);
    }
    // kPre: the pre-add's tensors from the set's first element.
    [[maybe_unused]] PreAdd pre{};
    [[maybe_unused]] Raw<T, VEC> res[kPre ? VPT : 1];
    if constexpr (kPre) {
        pre = preAt<T>(a.pre, setBase);
#pragma unroll
        for (int i = 0; i < VPT; ++i) {
            if (active && pixel(i) < a.hw) res[i] = loadResidual<T, VEC>(pre, vc * VEC + pixel(i) * a.cs);
        }
    }
    auto groupOf = [&](int e) { return (vc * VEC + e) / a.cpg; };  // group of element e within the set
    float shiftK[VEC], gamma[VEC], beta[VEC];
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
        shiftK[e] = groupFirst<kPre, T>(xs, pre, groupOf(e) * a.cpg, n, set * a.setChannels + groupOf(e) * a.cpg);
        gamma[e] = loadAffine<T>(a.gamma, c0 + e, a.affineFp32, 1.f);
        beta[e] = loadAffine<T>(a.beta, c0 + e, a.affineFp32, 0.f);
    }
    const float kMine =
        tid < gps ? groupFirst<kPre, T>(xs, pre, tid * a.cpg, n, set * a.setChannels + tid * a.cpg) : 0.f;
    PreHeld<kPre, VPT, VEC> sv;
    if constexpr (kPre) {
        float b[VEC];
#pragma unroll
        for (int e = 0; e < VEC; ++e) b[e] = preBiasAt<T>(pre, n, c0 + e);
#pragma unroll
        for (int i = 0; i < VPT; ++i) {
            if (active && pixel(i) < a.hw)
                formSum<T, VEC>(pre, vc * VEC + pixel(i) * a.cs, true, data[i], res[i], b, sv.v[i]);
        }
    }

    float s1[VEC], s2[VEC];
#pragma unroll
    for (int e = 0; e < VEC; ++e) s1[e] = s2[e] = 0.f;
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
        if (active && pixel(i) < a.hw) {
#pragma unroll
            for (int e = 0; e < VEC; ++e) {
                const float d = held<kPre>(data[i], sv, i, e) - shiftK[e];
                s1[e] += d;
                s2[e] = fmaf(d, d, s2[e]);
            }
        }
    }
    // The warp's pixels: lanes l, l + vp, l + 2vp, ... share a vector.
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
        for (int m = 16; m >= a.vp; m >>= 1) {
            s1[e] += __shfl_xor_sync(0xffffffffu, s1[e], m);
            s2[e] += __shfl_xor_sync(0xffffffffu, s2[e], m);
        }
    }
    if (lane < a.vs) {
#pragma unroll
        for (int e = 0; e < VEC; ++e) red[warp][lane][e] = make_float2(s1[e], s2[e]);
    }
    if (tid < gps) kS[tid] = kMine;
    __syncthreads();
    // One warp per group of the set sums its (warp, channel) partials in a
    // fixed order; lanes take consecutive channels (consecutive banks).
    for (int gi = warp; gi < gps; gi += numWarps) {
        double u1 = 0.0, u2 = 0.0;
        for (int cl = lane; cl < a.cpg; cl += 32) {
            const int ch = gi * a.cpg + cl;
            for (int w = 0; w < numWarps; ++w) {
                const float2 r = red[w][ch / VEC][ch % VEC];
                u1 += r.x;
                u2 += r.y;
            }
        }
        u1 = warpSum(u1);
        u2 = warpSum(u2);
        if (lane == 0) part[gi] = make_double2(u1, u2);
    }
    clusterFinish(part, stat, kS, gps, a);

    Affine f[VEC];
#pragma unroll
    for (int e = 0; e < VEC; ++e) f[e] = affineOf(stat[groupOf(e)], gamma[e], beta[e]);
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
        if (active && pixel(i) < a.hw) {
            float out[VEC];
#pragma unroll
            for (int e = 0; e < VEC; ++e)
                out[e] = fmaf(held<kPre>(data[i], sv, i, e) - f[e].hi, f[e].scale, f[e].shift);
            activateVec(out, a.act);
            storeVec<T, VEC>(y + pixel(i) * a.cs, out);
        }
    }
    clusterWait(K);
}

// --------------------------------------------------- two groups a vector ----

// NHWC where a 16-byte vector spans at most two groups (e.g. C/G = 10 or 20
// with 8 halves a vector): a cluster holds one set (lcm(C/G, VEC) channels,
// Vs vectors a pixel, gps groups); thread t owns vector t % Vs of pixels
// t / Vs, t / Vs + rows, ..., so its elements belong to two fixed groups
// (lo for e < split, hi after) and it keeps two pairs of scalar sums. No idle
// lanes, and consecutive threads read consecutive memory.
template <typename T, int VPT, bool kPre = false>
__global__ void __launch_bounds__(kClusterMaxThreads) gnFusedSet2(ArgsWith<kPre, ClusterArgs> a) {
    constexpr int VEC = kVec16<T>;
    __shared__ __align__(16) float2 red[kMaxWarps * VEC];  // see exchangeSums
    __shared__ double2 table[kMaxK * VEC];
    __shared__ float kS[VEC];
    __shared__ uint64_t bar;

    // Before the loads only multiplications and shifts: a division is a
    // chain of ~20 dependent instructions, and the loads wait for it.
    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int row = (tid * a.rowMagic) >> 16;
    const int lu = tid - row * a.vs;
    const int gps = a.setChannels / a.cpg;
    const int K = a.K;
    const int rank = clusterRank(K);
    const int set = blockIdx.x >> a.log2K;
    const int64_t setBase = blockIdx.y * a.imageStride + int64_t(set) * a.setChannels;
    const T* xs = static_cast<const T*>(a.x) + setBase;
    const int R = a.R;
    const int u0 = rank * VPT * R + row;  // the thread's first pixel; then every R
    const int64_t off0 = int64_t(u0) * a.cs + lu * VEC;
    const T* x = xs + off0;
    T* y = static_cast<T*>(a.y) + setBase + off0;
    // Lambdas capture locals by value (see gnFusedGroup).
    auto unit = [=](int i) { return u0 + i * R; };

    Raw<T, VEC> data[VPT];
    if (a.exact) {  // no bounds checks before the loads (see gnFusedGroup)
#pragma unroll
        for (int i = 0; i < VPT; ++i) data[i] = loadRaw<T, VEC>(x + i * a.unitStep);
    } else {
#pragma unroll
        for (int i = 0; i < VPT; ++i) {
            if (unit(i) < a.hw) data[i] = loadRaw<T, VEC>(x + i * a.unitStep);
        }
    }
    // kPre: the pre-add's tensors from the set's first element.
    [[maybe_unused]] PreAdd pre{};
    [[maybe_unused]] Raw<T, VEC> res[kPre ? VPT : 1];
    if constexpr (kPre) {
        pre = preAt<T>(a.pre, setBase);
#pragma unroll
        for (int i = 0; i < VPT; ++i) {
            if (a.exact || unit(i) < a.hw) res[i] = loadResidual<T, VEC>(pre, off0 + i * a.unitStep);
        }
    }
    const int c0 = lu * VEC;  // channel of element 0 within the set
    const int gLo = c0 / a.cpg, gHi = (c0 + VEC - 1) / a.cpg;
    const int split = gHi == gLo ? VEC : (gLo + 1) * a.cpg - c0;  // elements e < split are of gLo
    clusterArriveStarted(K, gps, &bar);
    const int64_t n = blockIdx.y, cSet = int64_t(set) * a.setChannels;
    const float kLo = groupFirst<kPre, T>(xs, pre, gLo * a.cpg, n, cSet + gLo * a.cpg);
    const float kHi = groupFirst<kPre, T>(xs, pre, gHi * a.cpg, n, cSet + gHi * a.cpg);
    const float kMine = tid < gps ? groupFirst<kPre, T>(xs, pre, tid * a.cpg, n, cSet + tid * a.cpg) : 0.f;
    const int64_t cAbs = set * a.setChannels + c0;
    float gamma[VEC], beta[VEC];
    loadAffineVec<T, VEC>(a.gamma, cAbs, a.affineFp32, 1.f, gamma);
    loadAffineVec<T, VEC>(a.beta, cAbs, a.affineFp32, 0.f, beta);
    PreHeld<kPre, VPT, VEC> sv;
    if constexpr (kPre) {
        float b[VEC];
        loadAffineVec<T, VEC>(pre.bias, n * pre.biasNStride + cAbs, pre.biasFp32, 0.f, b);
#pragma unroll
        for (int i = 0; i < VPT; ++i) {
            if (unit(i) < a.hw) formSum<T, VEC>(pre, off0 + i * a.unitStep, true, data[i], res[i], b, sv.v[i]);
        }
    }

    // Each vector's sums first (see gnFusedGroup).
    float lo1 = 0.f, lo2 = 0.f, hi1 = 0.f, hi2 = 0.f;
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
        if (unit(i) < a.hw) {
            float l1 = 0.f, l2 = 0.f, h1 = 0.f, h2 = 0.f;
#pragma unroll
            for (int e = 0; e < VEC; ++e) {
                const float d = held<kPre>(data[i], sv, i, e) - (e < split ? kLo : kHi);
                if (e < split) {
                    l1 += d;
                    l2 = fmaf(d, d, l2);
                } else {
                    h1 += d;
                    h2 = fmaf(d, d, h2);
                }
            }
            lo1 += l1;
            lo2 += l2;
            hi1 += h1;
            hi2 += h2;
        }
    }
    // One warp shuffle tree per group of the set; lane gi keeps group gi's.
    float2 mine = make_float2(0.f, 0.f);
    for (int gi = 0; gi < gps; ++gi) {
        const bool isLo = gLo == gi, isHi = gHi == gi && gHi != gLo;
        float v1 = (isLo ? lo1 : 0.f) + (isHi ? hi1 : 0.f);
        float v2 = (isLo ? lo2 : 0.f) + (isHi ? hi2 : 0.f);
        v1 = warpSum(v1);
        v2 = warpSum(v2);
        if (lane == gi) mine = make_float2(v1, v2);
    }
    if (tid < gps) kS[tid] = kMine;
    const int entries = exchangeSums(mine, gps, K, rank, red, table, &bar);
    const float4 stLo = slotStats(red, table, gps, entries, K, gLo, kS[gLo], a.invCount, a.eps);
    const float4 stHi = slotStats(red, table, gps, entries, K, gHi, kS[gHi], a.invCount, a.eps);
    Affine f[VEC];
#pragma unroll
    for (int e = 0; e < VEC; ++e) f[e] = affineOf(e < split ? stLo : stHi, gamma[e], beta[e]);
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
        if (unit(i) < a.hw) {
            float out[VEC];
#pragma unroll
            for (int e = 0; e < VEC; ++e)
                out[e] = fmaf(held<kPre>(data[i], sv, i, e) - f[e].hi, f[e].scale, f[e].shift);
            activateVec(out, a.act);
            storeVec<T, VEC, Cache::kDefault, true>(y + i * a.unitStep, out);
        }
    }
}

// ----------------------------------------------------- one group a cluster ----

// NCHW, and NHWC where whole vectors belong to one group (C/G a multiple of
// VEC): a cluster holds one (n, group), every element of a thread is of that
// group, so the sums are scalars. A "unit" is a 16-byte vector (NCHW) or a
// pixel's Vs = (C/G)/VEC vectors of the group (NHWC; VB-byte vectors, VB =
// 16, or 8 or 4 where a group's bytes a pixel are no multiple of 16); thread t owns lane
// t % lanes of units t / lanes, t / lanes + rows, ... (consecutive threads
// read consecutive memory in both layouts).
template <typename T, int VPT, bool NHWC, int VB = 16, bool kPre = false>
__global__ void __launch_bounds__(kClusterMaxThreads) gnFusedGroup(ArgsWith<kPre, ClusterArgs> a) {
    static_assert(VB == 16 || NHWC, "NCHW reads 16-byte vectors");
    constexpr int VEC = VB / int(sizeof(T));
    __shared__ __align__(16) float2 red[kMaxWarps];  // see exchangeSums
    __shared__ double2 table[kMaxK];
    __shared__ uint64_t bar;

    // Before the loads only multiplications and shifts: a division is a
    // chain of ~20 dependent instructions, and the loads wait for it.
    const int tid = threadIdx.x;
    const int row = NHWC ? (tid * a.rowMagic) >> 16 : tid;
    const int lu = NHWC ? tid - row * a.vs : 0;  // vector within the unit
    const int K = a.K;
    const int rank = clusterRank(K);
    // NHWC only (log2S is 0 for NCHW): vectors i with i % S == part are
    // this block's to write (the planner's splitShape).
    const int sMask = (1 << a.log2S) - 1;
    const int part = blockIdx.x & sMask;
    // Lambdas capture locals by value: capturing `a` by reference made NVVM
    // address the kernel parameter through a pointer, and the NCHW kernels
    // slower.
    auto mine = [=](int i) { return (i & sMask) == part; };
    // Element offset of the group's first element, and of the thread's
    // vector i. NCHW keeps its earlier form (a division, 64-bit unit
    // offsets): the NHWC form has not been measured on NCHW alone.
    const int64_t g = NHWC ? int64_t(blockIdx.x >> (a.log2K + a.log2S)) : int64_t(blockIdx.x / K);
    // NHWC offsets are 32-bit (the host sends no tensor of 2^31 elements or
    // more here) and the thread's is one sum of products of host-made terms:
    // u0 * cs + lu * VEC = tid * VEC + row * (cs - lanes * VEC) + rank's,
    // so the first load goes out early. (Loading k before the data as well
    // was slower.)
    const uint32_t base32 = NHWC ? blockIdx.y * a.imageStride32 + uint32_t(g) * uint32_t(a.cpg) : 0u;
    const int64_t base = NHWC ? int64_t(base32) : (int64_t(blockIdx.y) * a.c + g * a.cpg) * a.hw;
    const int R = a.R;
    const uint32_t unitStep32 = a.unitStep32;
    const int u0 = rank * VPT * R + row;  // NHWC: the thread's first pixel; then every R
    const uint32_t off32 =
        NHWC ? base32 + uint32_t(rank) * a.rankStep32 + uint32_t(tid) * VEC + uint32_t(row) * a.rowSkip32 : 0u;
    // NHWC: offsets from the tensor's start; NCHW: from the group's.
    const T* x = static_cast<const T*>(a.x) + (NHWC ? 0 : base);
    T* y = static_cast<T*>(a.y) + (NHWC ? 0 : base);
    auto unit = [=](int i) -> int64_t {
        if constexpr (NHWC) return u0 + i * R;
        return (int64_t(rank) * VPT + i) * R + row;
    };
    auto offset = [=](int i) -> int64_t {
        if constexpr (NHWC) return int64_t(off32 + uint32_t(i) * unitStep32);
        return ((int64_t(rank) * VPT + i) * R + row) * VEC;
    };

    // Where the plan covers the units exactly (a uniform branch), NHWC loads
    // go out without bounds checks: fewer instructions before the first
    // load. NCHW keeps its checks: the same branch made it slower.
    Raw<T, VEC> data[VPT];
    if (NHWC && a.exact) {
#pragma unroll
        for (int i = 0; i < VPT; ++i) data[i] = loadRaw<T, VEC>(x + offset(i));
    } else {
#pragma unroll
        for (int i = 0; i < VPT; ++i) {
            if (unit(i) < a.units) data[i] = loadRaw<T, VEC>(x + offset(i));
        }
    }
    // kPre: the pre-add's tensors from x's origin here (NHWC: the tensor's
    // first element; NCHW: the group's).
    [[maybe_unused]] PreAdd pre{};
    [[maybe_unused]] Raw<T, VEC> res[kPre ? VPT : 1];
    if constexpr (kPre) {
        pre = preAt<T>(a.pre, NHWC ? 0 : base);
#pragma unroll
        for (int i = 0; i < VPT; ++i) {
            if ((NHWC && a.exact) || unit(i) < a.units) res[i] = loadResidual<T, VEC>(pre, offset(i));
        }
    }
    clusterArriveStarted(K, 1, &bar);
    [[maybe_unused]] const int64_t n = blockIdx.y;
    float k;
    if constexpr (kPre) {
        k = groupFirst<kPre, T>(static_cast<const T*>(a.x), a.pre, base, n, g * a.cpg);
    } else {
        k = toFloat<T>(static_cast<const T*>(a.x)[base]);
    }
    // gamma and beta: NHWC, this thread's VEC channels g*cpg + lu*VEC + j;
    // NCHW, the channel of unit j (hw % VEC == 0 on this path, so a vector
    // lies in one channel). Loaded with the data, except NCHW with 16 units
    // a thread, where 32 more registers would spill.
    // NCHW: units j = 0, 1, ... of a thread are R apart, so their channels
    // are walked (ChannelWalk; a division a vector, each unrolled, was
    // slower). A group a cluster holds has at most 8 * 512 * 16 vectors:
    // offsets fit 32 bits.
    auto walkChannels = [&] {
        return ChannelWalk::from(uint32_t(unit(0) * VEC), uint32_t(a.R * VEC), uint32_t(a.hw));
    };
    // NCHW: the channel of unit j, the next of the walk.
    auto channel = [&](int j, ChannelWalk& w) -> int64_t {
        const int64_t c = g * a.cpg + w.next();
        return unit(j) < a.units ? c : g * a.cpg;  // past the end: never used
    };
    constexpr bool kPrefetch = NHWC || VPT <= 8;
    static_assert(kPrefetch || !kPre, "kPre plans hold at most 8 NCHW vectors a thread");
    constexpr int kAff = kPrefetch ? (NHWC ? VEC : VPT) : 1;
    float gamma[kAff], beta[kAff];
    // kPre: the pre-add's biases, like gamma (NCHW: one a vector).
    [[maybe_unused]] float pb[kPre ? kAff : 1];
    if constexpr (NHWC) {
        loadAffineVec<T, VEC>(a.gamma, g * a.cpg + lu * VEC, a.affineFp32, 1.f, gamma);
        loadAffineVec<T, VEC>(a.beta, g * a.cpg + lu * VEC, a.affineFp32, 0.f, beta);
        if constexpr (kPre)
            loadAffineVec<T, VEC>(pre.bias, n * pre.biasNStride + g * a.cpg + lu * VEC, pre.biasFp32, 0.f, pb);
    } else if constexpr (kPrefetch) {
        ChannelWalk w = walkChannels();
#pragma unroll
        for (int j = 0; j < kAff; ++j) {
            const int64_t c = channel(j, w);
            gamma[j] = loadAffine<T>(a.gamma, c, a.affineFp32, 1.f);
            beta[j] = loadAffine<T>(a.beta, c, a.affineFp32, 0.f);
            if constexpr (kPre) pb[j] = preBiasAt<T>(pre, n, c);
        }
    }
    PreHeld<kPre, VPT, VEC> sv;
    if constexpr (kPre) {
#pragma unroll
        for (int i = 0; i < VPT; ++i) {
            if (unit(i) < a.units) {
                float b[VEC];
#pragma unroll
                for (int e = 0; e < VEC; ++e) b[e] = pb[NHWC ? e : i];
                formSum<T, VEC>(pre, offset(i), mine(i), data[i], res[i], b, sv.v[i]);
            }
        }
    }

    // Each vector's sums first, then the thread's: one running sum of up to
    // 128 values put 16-bit outputs near zero past their tolerance where the
    // shift k lies 3-4 std from the group's mean.
    float s1 = 0.f, s2 = 0.f;
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
        if (unit(i) < a.units) {
            float v1 = 0.f, v2 = 0.f;
#pragma unroll
            for (int e = 0; e < VEC; ++e) {
                const float d = held<kPre>(data[i], sv, i, e) - k;
                v1 += d;
                v2 = fmaf(d, d, v2);
            }
            s1 += v1;
            s2 += v2;
        }
    }
    s1 = warpSum(s1);
    s2 = warpSum(s2);
    const int entries = exchangeSums(make_float2(s1, s2), 1, K, rank, red, table, &bar);
    const float4 st = slotStats(red, table, 1, entries, K, 0, k, a.invCount, a.eps);
    if constexpr (NHWC) {
        Affine f[VEC];
#pragma unroll
        for (int e = 0; e < VEC; ++e) f[e] = affineOf(st, gamma[e], beta[e]);
#pragma unroll
        for (int i = 0; i < VPT; ++i) {
            if (unit(i) < a.units && mine(i)) {
                float out[VEC];
#pragma unroll
                for (int e = 0; e < VEC; ++e)
                    out[e] = fmaf(held<kPre>(data[i], sv, i, e) - f[e].hi, f[e].scale, f[e].shift);
                activateVec(out, a.act);
                storeVec<T, VEC, Cache::kDefault, true>(y + offset(i), out);
            }
        }
    } else {
        [[maybe_unused]] ChannelWalk w = kPrefetch ? ChannelWalk{} : walkChannels();
#pragma unroll
        for (int i = 0; i < VPT; ++i) {
            if (unit(i) < a.units) {
                if constexpr (!kPrefetch) {
                    const int64_t c = channel(i, w);
                    gamma[0] = loadAffine<T>(a.gamma, c, a.affineFp32, 1.f);
                    beta[0] = loadAffine<T>(a.beta, c, a.affineFp32, 0.f);
                }
                const Affine f = affineOf(st, gamma[kPrefetch ? i : 0], beta[kPrefetch ? i : 0]);
                float out[VEC];
#pragma unroll
                for (int e = 0; e < VEC; ++e)
                    out[e] = fmaf(held<kPre>(data[i], sv, i, e) - f.hi, f.scale, f.shift);
                activateVec(out, a.act);
                storeVec<T, VEC>(y + offset(i), out);
            }
        }
    }
}

// ------------------------------------------------------------- launch ----

// The kernel of `vpt` vectors a thread, up to 16 (kWith32: 32). kPre plans
// hold fewer (kPreMaxVpt; `sets`: the kernels of per-element sums): only
// those are compiled.
template <typename T, template <typename, int, bool> class Kernel, bool kWith32, bool kPre, bool kSets = false>
const void* pickKernel(int vpt) {
    constexpr int kMax = kPre ? kPreMaxVpt(kWith32 ? 32 : 16, kSets, int(sizeof(T))) : (kWith32 ? 32 : 16);
    if constexpr (kMax == 32) {
        if (vpt == 32) return Kernel<T, 32, kPre>::get();
    }
    switch (vpt) {
        case 1: return Kernel<T, 1, kPre>::get();
        case 2: return Kernel<T, 2, kPre>::get();
        case 4: return Kernel<T, 4, kPre>::get();
        case 8:
            if constexpr (kMax >= 8) return Kernel<T, 8, kPre>::get();
            return nullptr;
        default:
            if constexpr (kMax >= 16) return Kernel<T, 16, kPre>::get();
            return nullptr;
    }
}

#define TRTGN_CLUSTER_KERNEL(Name, ...)                                                   \
    template <typename T, int VPT, bool kPre>                                             \
    struct Name {                                                                         \
        static const void* get() { return reinterpret_cast<const void*>(&__VA_ARGS__); } \
    };
TRTGN_CLUSTER_KERNEL(SetNHWCKernel, gnFusedNHWC<T, VPT, kPre>)
TRTGN_CLUSTER_KERNEL(Set2Kernel, gnFusedSet2<T, VPT, kPre>)
TRTGN_CLUSTER_KERNEL(GroupNCHWKernel, gnFusedGroup<T, VPT, false, 16, kPre>)
TRTGN_CLUSTER_KERNEL(GroupNHWCKernel, gnFusedGroup<T, VPT, true, 16, kPre>)
TRTGN_CLUSTER_KERNEL(GroupNHWC8Kernel, gnFusedGroup<T, VPT, true, 8, kPre>)
TRTGN_CLUSTER_KERNEL(GroupNHWC4Kernel, gnFusedGroup<T, VPT, true, 4, kPre>)
#undef TRTGN_CLUSTER_KERNEL

template <typename T, bool kPre>
const void* clusterKernel(ClusterKernel k, int vpt) {
    switch (k) {
        case ClusterKernel::kGroupNCHW: return pickKernel<T, GroupNCHWKernel, false, kPre>(vpt);
        case ClusterKernel::kGroupNHWC: return pickKernel<T, GroupNHWCKernel, false, kPre>(vpt);
        case ClusterKernel::kGroupNHWC8Byte: return pickKernel<T, GroupNHWC8Kernel, true, kPre>(vpt);
        case ClusterKernel::kGroupNHWC4Byte:
            if constexpr (sizeof(T) == 2) return pickKernel<T, GroupNHWC4Kernel, true, kPre>(vpt);
            return nullptr;  // 4-byte vectors hold whole fp32 values only in pairs: never planned
        case ClusterKernel::kSet2: return pickKernel<T, Set2Kernel, false, kPre, true>(vpt);
        case ClusterKernel::kSetNHWC: return pickKernel<T, SetNHWCKernel, false, kPre, true>(vpt);
    }
    return nullptr;
}

}  // namespace

cudaError_t launchClusters(const Plan& plan, cudaStream_t stream) {
    const ClusterPlan& c = plan.clusters;
    const trtgn_dtype_t dtype = plan.problem.dtype;
    const bool pre = plan.problem.preAdd();
    const void* kernel = dispatchDtype(dtype, static_cast<const void*>(nullptr), [&](auto t) {
        using T = typename decltype(t)::type;
        return pre ? clusterKernel<T, true>(c.kernel, c.vpt) : clusterKernel<T, false>(c.kernel, c.vpt);
    });
    if (kernel == nullptr) return cudaErrorInvalidDeviceFunction;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(unsigned(plan.gridX), unsigned(plan.gridY), 1);
    cfg.blockDim = dim3(unsigned(plan.threads), 1, 1);
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    if (plan.cluster > 1) {
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = unsigned(plan.cluster);
        attr[0].val.clusterDim.y = 1;
        attr[0].val.clusterDim.z = 1;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
    }
    ClusterArgs a = c.args;
    void* args[] = {&a};
    if (pre) {
        ArgsWith<true, ClusterArgs> w = argsWith<true>(a, preAddOf(plan.problem));
        void* preArgs[] = {&w};
        return cudaLaunchKernelExC(&cfg, kernel, preArgs);
    }
    return cudaLaunchKernelExC(&cfg, kernel, args);
}

}  // namespace trtgn
