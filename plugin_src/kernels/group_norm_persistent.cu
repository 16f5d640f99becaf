// Single pass over a co-resident grid (Hopper): x is read from memory once,
// y written once, and x is held on chip in between, in shared memory.
//
// One block per SM, launched cooperatively so that every block is resident
// at once and may wait for the others (a grid-wide barrier):
//   1. each block copies one contiguous chunk of x into its shared memory
//      with the Tensor Memory Accelerator (cp.async.bulk, a few pieces, each
//      with its own mbarrier so the sums start while later pieces arrive);
//   2. sums its chunk into per-group partial sums and writes them to the
//      workspace;
//   3. grid barrier;
//   4. reads the partial sums of its image (NHWC) or group (NCHW) from L2,
//      turns them into mean and 1/std, and writes y from shared memory.
//
// NHWC: a block's chunk is a run of whole pixels of one image, so one bulk
// copy reads whole 16-byte vectors of every group (for C=320, G=32 a group is
// only 20 bytes of each pixel: reading pixels whole is what makes NHWC fast).
// Thread t always holds vector column t % (C/VEC) of the pixel, so the
// per-channel statistics, gamma, beta and group of its VEC channels stay in
// registers; the threads' sums are added into groups in a fixed order (no atomics:
// every launch gives bit-identical results).
// NCHW: a (n, group) is one contiguous run; a block's chunk is a part of one
// such run.
//
// Statistics are of d = x - k, k the group's first element (read by every
// block alike, before the barrier, so in-place calls stay correct): sums of d
// stay small, so fp32 keeps full precision for |mean| >> std; the blocks'
// partials are summed in double.
#include <cooperative_groups.h>

#include <algorithm>

#include "group_norm_common.cuh"
#include "group_norm_fused.h"

namespace cg = cooperative_groups;

namespace trtgn {
namespace {

constexpr int kThreads = 512;
constexpr int kMaxPieces = 4;

struct PersistentArgs {
    const void* x;
    void* y;
    const void* gamma;
    const void* beta;
    float2* partials;   // workspace: (sum d, sum d^2) per block and group
    int64_t hw;         // pixels per image
    int64_t chunk;      // NHWC: pixels per block; NCHW: elements per block
    int64_t pieceLen;   // the same unit, per bulk copy
    int c, cpg, groups;
    int blocksPer;      // NHWC: blocks per image; NCHW: blocks per (n, group)
    int tileOffset;     // bytes of shared memory before the tile
    double invCount;    // 1 / elements per group
    float eps;
    int act;
    bool affineFp32;
};

// The device code exists for Hopper and later only (the host never launches
// it elsewhere); older architectures get empty kernels.
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900

// ---- Tensor Memory Accelerator: 1-D bulk copies completed on an mbarrier ----

__device__ __forceinline__ uint32_t smemAddr(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbarInit(uint64_t* bar, int count) {
#if __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smemAddr(bar)), "r"(count) : "memory");
#endif
}

__device__ __forceinline__ void fenceBarrierInit() {
#if __CUDA_ARCH__ >= 900
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}

// Copies `bytes` (a multiple of 16, both addresses 16-byte aligned) from
// global to shared memory; the mbarrier completes when they have landed.
__device__ __forceinline__ void bulkLoad(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
#if __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smemAddr(bar)), "r"(bytes)
                 : "memory");
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
            smemAddr(dst)),
        "l"(src), "r"(bytes), "r"(smemAddr(bar))
        : "memory");
#endif
}

__device__ __forceinline__ void mbarWait(uint64_t* bar, uint32_t parity) {
#if __CUDA_ARCH__ >= 900
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "WAIT_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT_%=;\n"
        "}\n" ::"r"(smemAddr(bar)),
        "r"(parity)
        : "memory");
#endif
}

// Thread 0 initialises the mbarriers and starts the copies of `len` units of
// `unitBytes` in pieces of `pieceLen` units; the other threads go on (a
// __syncthreads() must follow before anyone waits on a barrier).
__device__ __forceinline__ void startLoads(unsigned char* tile, const unsigned char* src, int64_t len,
                                           int64_t pieceLen, int64_t unitBytes, uint64_t* bars) {
    if (threadIdx.x == 0) {
        for (int p = 0; p < kMaxPieces; ++p) mbarInit(&bars[p], 1);
        fenceBarrierInit();
        for (int p = 0; p * pieceLen < len; ++p) {
            const int64_t first = p * pieceLen;
            const int64_t units = min(pieceLen, len - first);
            bulkLoad(tile + first * unitBytes, src + first * unitBytes, uint32_t(units * unitBytes), &bars[p]);
        }
    }
}

// Waits, once each, for the pieces up to the one holding unit u.
struct PieceWaiter {
    uint64_t* bars;
    int64_t pieceLen;
    int64_t readyEnd = 0;  // units known to have landed
    int next = 0;
    __device__ __forceinline__ void until(int64_t u) {
        while (u >= readyEnd) {
            mbarWait(&bars[next], 0);
            ++next;
            readyEnd += pieceLen;
        }
    }
};

// An element's bit pattern, loaded through the read-only path.
template <typename T>
__device__ __forceinline__ uint32_t loadBits(const T* p) {
    if constexpr (sizeof(T) == 4) {
        return __ldg(reinterpret_cast<const unsigned int*>(p));
    } else {
        return __ldg(reinterpret_cast<const unsigned short*>(p));
    }
}
// gamma/beta[c] (NULL: 0, unused) as bits, in the input dtype or fp32.
template <typename T>
__device__ __forceinline__ uint32_t loadAffineBits(const void* p, int64_t c, bool fp32) {
    if (p == nullptr) return 0;
    return fp32 ? loadBits(static_cast<const float*>(p) + c) : loadBits(static_cast<const T*>(p) + c);
}
template <typename T>
__device__ __forceinline__ float affineBitsToFloat(uint32_t bits, bool fp32) {
    return fp32 ? __uint_as_float(bits) : bitsToFloat<T>(bits);
}

// Sums (a, b) over the block in a fixed order; every thread gets the totals.
__device__ __forceinline__ double2 blockSum2(double a, double b, double2* scratch) {
    a = warpSum(a);
    b = warpSum(b);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) scratch[warp] = make_double2(a, b);
    __syncthreads();
    double2 total = make_double2(0.0, 0.0);
    for (int w = 0; w < int(blockDim.x >> 5); ++w) {
        total.x += scratch[w].x;
        total.y += scratch[w].y;
    }
    __syncthreads();  // scratch may be reused
    return total;
}

// (mean of d, 1/std) from the sums of d and d^2 over the whole group.
__device__ __forceinline__ float2 finishStats(double s1, double s2, double invCount, float eps) {
    const double m = s1 * invCount;
    double var = s2 * invCount - m * m;
    if (var < 0.0) var = 0.0;  // rounding; NaN stays NaN
    return make_float2(float(m), rsqrtf(float(var) + eps));
}

#endif  // Hopper

// ---------------------------------------------------------------- NHWC ----

// Shared memory: mbarriers; the per-thread channel sums [rows per pass][C]
// (x2), later the per-part group sums [parts][G]; (mean of d, 1/std) per group; then the tile (128-byte aligned).
struct NhwcLayout {
    int sums, groupStats, tile;
};
__host__ __device__ inline NhwcLayout nhwcLayout(int c, int vec, int groups) {
    const int rowsPerPass = kThreads / (c / vec);
    NhwcLayout l;
    l.sums = 128;
    const int parts = groups >= kThreads ? 1 : kThreads / groups;
    l.groupStats = l.sums + int(std::max<int64_t>(int64_t(2) * rowsPerPass * c * 4, int64_t(16) * parts * groups));
    l.tile = int((l.groupStats + 8 * int64_t(groups) + 127) / 128 * 128);
    return l;
}

template <typename T>
__global__ void __launch_bounds__(kThreads, 1) gnPersistentNHWC(PersistentArgs a) {
#if __CUDA_ARCH__ >= 900
    constexpr int VEC = kVec16<T>;
    extern __shared__ __align__(128) unsigned char smem[];
    const NhwcLayout L = nhwcLayout(a.c, VEC, a.groups);
    uint64_t* bars = reinterpret_cast<uint64_t*>(smem);
    float2* gstat = reinterpret_cast<float2*>(smem + L.groupStats);
    unsigned char* tile = smem + L.tile;

    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const int n = blockIdx.x / a.blocksPer;
    const int jb = blockIdx.x - n * a.blocksPer;
    const int64_t pix0 = int64_t(jb) * a.chunk;
    const int64_t pixels = a.hw - pix0 < a.chunk ? (a.hw - pix0 > 0 ? a.hw - pix0 : 0) : a.chunk;
    const int V = a.c / VEC;  // vectors per pixel
    const int rowsPerPass = kThreads / V;
    const bool active = t < rowsPerPass * V;
    const int col = t % V, row = t / V;
    const int64_t imageBase = int64_t(n) * a.hw * a.c;
    float* chan1 = reinterpret_cast<float*>(smem + L.sums);  // [rowsPerPass][C]
    float* chan2 = chan1 + rowsPerPass * a.c;

    const T* x = static_cast<const T*>(a.x);

    // Per channel of this thread's column: group, shift k, gamma, beta (read
    // first: issued after the bulk copies they would wait behind them), sums
    // of d and d^2.
    // They are kept as loaded (bit patterns) and converted where first used,
    // so that no thread waits for them before the tile has landed.
    const int c0 = col * VEC;
    int grp[VEC];
    uint32_t kBits[VEC], gBits[VEC], bBits[VEC];
    float s1[VEC], s2[VEC];
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
        grp[j] = (c0 + j) / a.cpg;
        kBits[j] = loadBits(x + imageBase + int64_t(grp[j]) * a.cpg);
        gBits[j] = loadAffineBits<T>(a.gamma, c0 + j, a.affineFp32);
        bBits[j] = loadAffineBits<T>(a.beta, c0 + j, a.affineFp32);
        s1[j] = 0.f;
        s2[j] = 0.f;
    }
    startLoads(tile, reinterpret_cast<const unsigned char*>(x + imageBase + pix0 * a.c), pixels, a.pieceLen,
                   int64_t(a.c) * sizeof(T), bars);
    __syncthreads();  // the mbarriers are initialised
    const uint4* tv = reinterpret_cast<const uint4*>(tile);
    PieceWaiter wait{bars, a.pieceLen};
    float k[VEC];
#pragma unroll
    for (int j = 0; j < VEC; ++j) k[j] = bitsToFloat<T>(kBits[j]);
    if (active) {
        for (int64_t r = row; r < pixels; r += rowsPerPass) {
            wait.until(r);
            Raw<T, VEC> v;
            v.s = tv[r * V + col];
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
                const float d = v.get(j) - k[j];
                s1[j] += d;
                s2[j] = fmaf(d, d, s2[j]);
            }
        }
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            chan1[row * a.c + c0 + j] = s1[j];
            chan2[row * a.c + c0 + j] = s2[j];
        }
    }
    __syncthreads();
    // The block's sums per group, a warp per group, in a fixed order (every
    // launch gives bit-identical results): rows x channels of the group.
    float2* part = a.partials + int64_t(blockIdx.x) * a.groups;
    const int items = rowsPerPass * a.cpg;
    for (int g = warp; g < a.groups; g += kThreads / 32) {
        float u1 = 0.f, u2 = 0.f;
        for (int i = lane; i < items; i += 32) {
            const int r = i / a.cpg, c = g * a.cpg + (i - r * a.cpg);
            u1 += chan1[r * a.c + c];
            u2 += chan2[r * a.c + c];
        }
        u1 = warpSum(u1);
        u2 = warpSum(u2);
        if (lane == 0) part[g] = make_float2(u1, u2);
    }

    cg::this_grid().sync();

    // The image's totals: `parts` threads per group, each over every
    // parts-th block in double (consecutive threads read consecutive groups:
    // coalesced), then the parts in a fixed order (bit-identical results).
    const int parts = a.groups >= kThreads ? 1 : kThreads / a.groups;
    double2* red = reinterpret_cast<double2*>(smem + L.sums);  // [parts][G]; the channel sums are dead
    const float2* imageParts = a.partials + int64_t(n) * a.blocksPer * a.groups;
    for (int item = t; item < a.groups * parts; item += kThreads) {
        const int g = item % a.groups, p = item / a.groups;
        double u1 = 0.0, u2 = 0.0;
#pragma unroll 4
        for (int b = p; b < a.blocksPer; b += parts) {
            const float2 v = __ldcg(&imageParts[int64_t(b) * a.groups + g]);
            u1 += v.x;
            u2 += v.y;
        }
        red[item] = make_double2(u1, u2);
    }
    __syncthreads();
    for (int g = t; g < a.groups; g += kThreads) {
        double u1 = 0.0, u2 = 0.0;
        for (int p = 0; p < parts; ++p) {
            u1 += red[p * a.groups + g].x;
            u2 += red[p * a.groups + g].y;
        }
        gstat[g] = finishStats(u1, u2, a.invCount, a.eps);
    }
    __syncthreads();

    if (active) {
        // y = act((x - k) * scale + (beta - mean_d * scale)), scale = rstd * gamma.
        float scale[VEC], shift[VEC];
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            const float2 st = gstat[grp[j]];
            const float gm = a.gamma ? affineBitsToFloat<T>(gBits[j], a.affineFp32) : 1.f;
            const float bt = a.beta ? affineBitsToFloat<T>(bBits[j], a.affineFp32) : 0.f;
            scale[j] = st.y * gm;
            shift[j] = bt - st.x * scale[j];
        }
        T* y = static_cast<T*>(a.y) + imageBase + pix0 * a.c;
        for (int64_t r = row; r < pixels; r += rowsPerPass) {
            Raw<T, VEC> v;
            v.s = tv[r * V + col];
            float o[VEC];
#pragma unroll
            for (int j = 0; j < VEC; ++j) o[j] = activate<T>(fmaf(v.get(j) - k[j], scale[j], shift[j]), a.act);
            storeVec<T, VEC>(y + r * a.c + c0, o);
        }
    }
#endif
}

// ---------------------------------------------------------------- NCHW ----

// Shared memory: mbarriers, warp scratch, gamma/beta of the block's channels,
// then the tile.
constexpr int kNchwTable = 256;  // channels of gamma/beta kept in shared memory
constexpr int kNchwHeaderBytes = 128 + 32 * 16 + kNchwTable * 8;

template <typename T>
__global__ void __launch_bounds__(kThreads, 1) gnPersistentNCHW(PersistentArgs a) {
#if __CUDA_ARCH__ >= 900
    constexpr int VEC = kVec16<T>;
    extern __shared__ __align__(128) unsigned char smem[];
    uint64_t* bars = reinterpret_cast<uint64_t*>(smem);
    double2* scratch = reinterpret_cast<double2*>(smem + 128);
    float2* affine = reinterpret_cast<float2*>(smem + 128 + 32 * 16);
    unsigned char* tile = smem + a.tileOffset;

    const int t = threadIdx.x;
    const int seg = blockIdx.x / a.blocksPer;  // n * groups + g
    const int jb = blockIdx.x - seg * a.blocksPer;
    const int g = seg % a.groups;
    const int64_t segLen = int64_t(a.cpg) * a.hw;
    const int64_t e0 = int64_t(jb) * a.chunk;  // first element of this block in the group
    const int64_t len = segLen - e0 < a.chunk ? (segLen - e0 > 0 ? segLen - e0 : 0) : a.chunk;
    const int64_t vecs = len / VEC;
    const T* xs = static_cast<const T*>(a.x) + int64_t(seg) * segLen;

    // gamma/beta of the channels this block touches, while the tile loads.
    const int64_t ch0 = int64_t(g) * a.cpg + e0 / a.hw;
    const int64_t chans = len == 0 ? 0 : (e0 + len - 1) / a.hw - e0 / a.hw + 1;
    const bool tabled = chans <= kNchwTable;
    if (tabled && t < chans)
        affine[t] = make_float2(loadAffine<T>(a.gamma, ch0 + t, a.affineFp32, 1.f),
                                loadAffine<T>(a.beta, ch0 + t, a.affineFp32, 0.f));
    const float k = toFloat<T>(xs[0]);
    startLoads(tile, reinterpret_cast<const unsigned char*>(xs + e0), vecs, a.pieceLen / VEC, 16, bars);
    __syncthreads();  // the mbarriers are initialised

    const uint4* tv = reinterpret_cast<const uint4*>(tile);
    PieceWaiter wait{bars, a.pieceLen / VEC};
    float s1 = 0.f, s2 = 0.f;
    for (int64_t i = t; i < vecs; i += kThreads) {
        wait.until(i);
        Raw<T, VEC> v;
        v.s = tv[i];
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            const float d = v.get(j) - k;
            s1 += d;
            s2 = fmaf(d, d, s2);
        }
    }
    const double2 b = blockSum2(s1, s2, scratch);
    if (t == 0) a.partials[blockIdx.x] = make_float2(float(b.x), float(b.y));

    cg::this_grid().sync();

    // The group's totals: a few partials (blocks per group <= SMs).
    if (t < 32) {
        double u1 = 0.0, u2 = 0.0;
        for (int j = t; j < a.blocksPer; j += 32) {
            const float2 v = __ldcg(&a.partials[int64_t(seg) * a.blocksPer + j]);
            u1 += v.x;
            u2 += v.y;
        }
        u1 = warpSum(u1);
        u2 = warpSum(u2);
        if (t == 0) scratch[0] = make_double2(u1, u2);
    }
    __syncthreads();
    const float2 st = finishStats(scratch[0].x, scratch[0].y, a.invCount, a.eps);

    T* ys = static_cast<T*>(a.y) + int64_t(seg) * segLen + e0;
    int64_t cached = -1;
    float scale = 0.f, shift = 0.f;
    for (int64_t i = t; i < vecs; i += kThreads) {
        // A vector lies in one channel (H*W is a multiple of VEC).
        const int64_t ch = (e0 + i * VEC) / a.hw - e0 / a.hw;  // relative to ch0
        if (ch != cached) {
            cached = ch;
            const float2 gb = tabled ? affine[ch]
                                     : make_float2(loadAffine<T>(a.gamma, ch0 + ch, a.affineFp32, 1.f),
                                                   loadAffine<T>(a.beta, ch0 + ch, a.affineFp32, 0.f));
            scale = st.y * gb.x;
            shift = gb.y - st.x * scale;
        }
        Raw<T, VEC> v;
        v.s = tv[i];
        float o[VEC];
#pragma unroll
        for (int j = 0; j < VEC; ++j) o[j] = activate<T>(fmaf(v.get(j) - k, scale, shift), a.act);
        storeVec<T, VEC>(ys + i * VEC, o);
    }
#endif
}

// ---------------------------------------------------------------- launch ----

template <typename T>
cudaError_t tryLaunchPersistentT(const Problem& p, const DeviceInfo& dev, void* workspace,
                                 size_t workspaceBytes, cudaStream_t stream, bool* launched) {
    constexpr int VEC = kVec16<T>;
    *launched = false;
    if (dev.ccMajor < 9 || dev.maxSmemOptin <= 0) return cudaSuccess;

    PersistentArgs a{};
    a.x = p.x;
    a.y = p.y;
    a.gamma = p.gamma;
    a.beta = p.beta;
    a.partials = static_cast<float2*>(workspace);
    a.hw = p.hw;
    a.c = int(p.c);
    a.cpg = int(p.cpg);
    a.groups = int(p.groups);
    a.invCount = 1.0 / (double(p.hw) * double(p.cpg));
    a.eps = p.eps;
    a.act = int(p.act);
    a.affineFp32 = p.affineFp32;

    // Below these sizes the grid barrier and the reads of every block's
    // partial sums cost more than the cluster kernels' extra work (measured on
    // an H200, fp16: at 2.6 MB NHWC 10.4 us here vs 8.6 us; at 5.2 MB 11.8 us
    // vs 14.1 us; NCHW at 2.6 MB 8.0 us vs 8.8 us, at 1.3 MB 7.2 vs 5.3 us).
    constexpr double kMinBytesNHWC = 4.0 * (1 << 20), kMinBytesNCHW = 2.0 * (1 << 20);
    const double bytes = double(p.n) * double(p.c) * double(p.hw) * sizeof(T);
    if (bytes < (p.layout == TRTGN_LAYOUT_NHWC ? kMinBytesNHWC : kMinBytesNCHW)) return cudaSuccess;

    int64_t blocks = 0;
    int64_t tileBytes = 0;
    void* kernel = nullptr;
    if (p.layout == TRTGN_LAYOUT_NHWC) {
        // Whole pixels, packed (no padding channels: a bulk copy would read
        // them), a vector column per thread.
        if (p.cs != p.c || p.c % VEC != 0 || p.c / VEC > kThreads || p.n > dev.numSMs) return cudaSuccess;
        const int64_t perImage = std::max<int64_t>(1, dev.numSMs / p.n);
        const int64_t chunk = ceilDiv(p.hw, perImage);
        a.blocksPer = int(ceilDiv(p.hw, chunk));
        a.chunk = chunk;
        a.pieceLen = ceilDiv(chunk, kMaxPieces);
        a.tileOffset = nhwcLayout(a.c, VEC, a.groups).tile;
        tileBytes = chunk * p.c * int64_t(sizeof(T));
        blocks = p.n * a.blocksPer;
        if (size_t(blocks) * size_t(p.groups) * sizeof(float2) > workspaceBytes) return cudaSuccess;
        kernel = reinterpret_cast<void*>(&gnPersistentNHWC<T>);
    } else {
        const int64_t segs = p.n * p.groups;
        const int64_t segLen = p.cpg * p.hw;
        if (p.hw % VEC != 0 || segs > dev.numSMs) return cudaSuccess;
        const int64_t perSeg = std::max<int64_t>(1, dev.numSMs / segs);
        const int64_t chunk = ceilDiv(ceilDiv(segLen, perSeg), VEC) * VEC;
        a.blocksPer = int(ceilDiv(segLen, chunk));
        a.chunk = chunk;
        a.pieceLen = ceilDiv(ceilDiv(chunk, kMaxPieces), VEC) * VEC;
        a.tileOffset = kNchwHeaderBytes;
        tileBytes = chunk * int64_t(sizeof(T));
        blocks = segs * a.blocksPer;
        if (size_t(blocks) * sizeof(float2) > workspaceBytes) return cudaSuccess;
        kernel = reinterpret_cast<void*>(&gnPersistentNCHW<T>);
    }
    // The grid barrier takes some static shared memory of its own.
    cudaFuncAttributes fa{};
    cudaError_t e = cudaFuncGetAttributes(&fa, kernel);
    if (e != cudaSuccess) return e;
    const int64_t smemBytes = a.tileOffset + tileBytes;
    if (smemBytes + int64_t(fa.sharedSizeBytes) > dev.maxSmemOptin) return cudaSuccess;

    e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smemBytes));
    if (e != cudaSuccess) return e;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(unsigned(blocks), 1, 1);
    cfg.blockDim = dim3(kThreads, 1, 1);
    cfg.dynamicSmemBytes = size_t(smemBytes);
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeCooperative;  // all blocks resident: the grid barrier is safe
    attr[0].val.cooperative = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    void* args[] = {&a};
    *launched = true;
    return cudaLaunchKernelExC(&cfg, kernel, args);
}

}  // namespace

cudaError_t tryLaunchPersistent(const Problem& p, const DeviceInfo& dev, void* workspace, size_t workspaceBytes,
                                cudaStream_t stream, bool* launched) {
    switch (p.dtype) {
        case TRTGN_DTYPE_FLOAT32: return tryLaunchPersistentT<float>(p, dev, workspace, workspaceBytes, stream, launched);
        case TRTGN_DTYPE_FLOAT16: return tryLaunchPersistentT<__half>(p, dev, workspace, workspaceBytes, stream, launched);
        case TRTGN_DTYPE_BFLOAT16:
            return tryLaunchPersistentT<__nv_bfloat16>(p, dev, workspace, workspaceBytes, stream, launched);
    }
    *launched = false;
    return cudaSuccess;
}

}  // namespace trtgn
