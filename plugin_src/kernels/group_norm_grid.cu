// Single pass over a co-resident grid (Hopper): x is read from memory once,
// y written once, and x is held on chip in between, in shared memory.
//
// One block per SM, launched cooperatively so that every block is resident
// at once and may wait for the others (a grid-wide barrier):
//   1. each block copies one contiguous chunk of x into its shared memory
//      with the Tensor Memory Accelerator (cp.async.bulk, a few pieces, each
//      with its own mbarrier so the sums start while later pieces arrive);
//   2. sums its chunk into per-group partials and writes them to the
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
// every launch gives bit-identical results). In 16 bits, where the channels
// split into slices of 64-128 (the planner's sliceCount), a block's chunk is instead a run
// of pixels of one slice of the channels, gathered by 2-D bulk copies
// (cp.async.bulk.tensor) through a tensor map; c and groups are then the
// slice's.
// NCHW: a (n, group) is one contiguous run; a block's chunk is a part of one
// such run.
// Kernels: gnOnChipNHWC (the tensor fits the SMs' shared memory; written
// for short dependency chains, see there), gnStreamNHWC (streaming, below),
// gnPersistentNCHW<T, streaming>.
//
// Streaming (tensors larger than the SMs' shared memory, e.g. the VAE
// decoder's 512x512 activations): a block's share is larger than its tile.
// The tile is bulk-copied as above (NCHW: the tail of the block's chunk;
// NHWC: a run of the image's last pixels, the head before it dealt out to the
// blocks in slabs, see headSplit); the threads read the head from global
// memory (2-5 loads in flight, see kNhwcSumUnroll) and sum it while the copies land. After the
// barrier the head is read again, in reverse, so the rows read last, the
// likeliest to be still in L2, come first (evict-first loads and stores),
// with tile rows interleaved (NHWC); the rest of the tile is written from
// shared memory. Only the head is read twice, and most of it
// from L2.
//
// Numerics: a thread sums d = x - k and d^2 in fp32, k the group's first
// element (read before the barrier, so in-place calls stay correct); blocks'
// partials are added in double, in a fixed order: every launch gives
// bit-identical results. Streaming, where a thread sums up to ~250 rows (NHWC)
// or ~8000 values (NCHW, 2 GiB), it shifts by its own first value kt instead (see
// shiftedSums), NCHW adds each 16-byte vector's own sums first, and a block's
// partial is (mean - k, M2) (NCHW) or the double sums of d and d^2 (NHWC: its
// threads' means relative to k, added in double). The output is (x - hi) *
// scale + (beta - lo * scale), hi + lo the mean (see finishStats).
#include <cooperative_groups.h>
#include <cuda.h>  // CUtensorMap: the channel slices' 2-D bulk copies
#include <cudaTypedefs.h>

#include <type_traits>

#include "group_norm_common.cuh"
#include "group_norm_hopper.cuh"
#include "group_norm_launch.h"

namespace cg = cooperative_groups;

namespace trtgn {
namespace {

constexpr int kThreads = kGridThreads;

// The device code exists for Hopper and later only (the host never launches
// it elsewhere); older architectures get empty kernels.
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900

// Thread 0 initialises the mbarriers and starts the copies of `len` units of
// `unitBytes` in pieces of `pieceLen` units; the other threads go on (a
// __syncthreads() must follow before anyone waits on a barrier).
__device__ __forceinline__ void startLoads(unsigned char* tile, const unsigned char* src, int64_t len,
                                           int64_t pieceLen, int64_t unitBytes, uint64_t* bars, bool evictFirst) {
    if (threadIdx.x == 0) {
        for (int p = 0; p < kMaxPieces; ++p) mbarInit(&bars[p], 1);
        fenceBarrierInit();
        for (int p = 0; p * pieceLen < len; ++p) {
            const int64_t first = p * pieceLen;
            const int64_t units = min(pieceLen, len - first);
            bulkLoad(tile + first * unitBytes, src + first * unitBytes, uint32_t(units * unitBytes), &bars[p], evictFirst);
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
// gamma/beta[c0, c0 + VEC) (NULL: 0, unused) as bits, in the input dtype or
// fp32: one branch for the whole row where the table is NULL, then VEC
// predicated loads. These loads run in a launch's first microsecond, where
// each instruction is fetched cold (see the on-chip kernel): tested per
// element (NULL table, inactive thread), the 16 loads of gamma and beta
// compiled to 260 instructions with 32 branches.
template <typename T, int VEC>
__device__ __forceinline__ void loadAffineRow(const void* p, int c0, bool fp32, uint32_t (&bits)[VEC]) {
    if (p == nullptr) {
#pragma unroll
        for (int j = 0; j < VEC; ++j) bits[j] = 0;
        return;
    }
    const float* pf = static_cast<const float*>(p) + c0;
    const T* pt = static_cast<const T*>(p) + c0;
#pragma unroll
    for (int j = 0; j < VEC; ++j) bits[j] = fp32 ? loadBits(pf + j) : loadBits(pt + j);
}
template <typename T>
__device__ __forceinline__ float affineBitsToFloat(uint32_t bits, bool fp32) {
    return fp32 ? __uint_as_float(bits) : bitsToFloat<T>(bits);
}

// Streaming: a thread sums x - kt in fp32, kt the first value it read: kt is
// one of its values, so those sums are well conditioned however far the
// group's mean is from k, the group's first element; they are moved to the
// shift k in double (exact algebra):
//   sum(x - k) = s1 + n*off,  sum((x - k)^2) = s2 + 2*off*s1 + n*off^2,
// with off = kt - k; the block turns its sums into (mean - k, M2).
__device__ __forceinline__ double2 shiftedSums(float s1, float s2, double n, double off) {
    return make_double2(double(s1) + n * off, double(s2) + off * (2.0 * double(s1) + n * off));
}

// Adds a vector's sums of d = x - kt and d^2 to (s1, s2), the vector's own
// sums first: a thread's running sums then take one addition per vector, not
// per element (fp32 rounding of ~1000 additions to a growing sum biased var
// by ~3e-6 in a simulation).
template <typename T>
__device__ __forceinline__ void addVectorSums(const uint4& raw, float kt, float& s1, float& s2) {
    Raw<T, kVec16<T>> v;
    v.s = raw;
    float l1 = 0.f, l2 = 0.f;
#pragma unroll
    for (int j = 0; j < kVec16<T>; ++j) {
        const float d = v.get(j) - kt;
        l1 += d;
        l2 = fmaf(d, d, l2);
    }
    s1 += l1;
    s2 += l2;
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

// The pre-add (kPre) on the grid: the residual's vectors are loaded this
// many rows (NHWC) or vectors (NCHW tile) ahead of their use, so a thread does
// not wait out a global load on each of its tile's rows.
constexpr int kPreRows = 4;

// use(i, rv) for items i = first, first + step, ... below end, rv the
// residual's vector of item i (at element offset off(i) from p; zeros
// without a residual), loaded U items ahead.
template <int U, typename T, Cache C, typename Off, typename Use>
__device__ __forceinline__ void withResiduals(int64_t first, int64_t end, int64_t step, const PreAdd& p, Off off,
                                              Use use) {
    constexpr int VEC = kVec16<T>;
#pragma unroll 1
    for (int64_t i0 = first; i0 < end; i0 += U * step) {
        Raw<T, VEC> rv[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            if (i0 + u * step < end) rv[u] = loadResidual<T, VEC, C>(p, off(i0 + u * step));
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            if (i0 + u * step < end) use(i0 + u * step, rv[u]);
        }
    }
}

// Writes s over the tile's vector i (the thread's own vector, which only it
// reads again); s is of T already (preSum), so the tile holds it exactly.
template <typename T>
__device__ __forceinline__ void storeTileVec(unsigned char* tile, int64_t i, const float (&s)[kVec16<T>]) {
    uint32_t w[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        if constexpr (sizeof(T) == 4) {
            w[k] = __float_as_uint(s[k]);
        } else {
            w[k] = floatToBits<T>(s[2 * k]) | (floatToBits<T>(s[2 * k + 1]) << 16);
        }
    }
    reinterpret_cast<uint4*>(tile)[i] = make_uint4(w[0], w[1], w[2], w[3]);
}

// A pre-add's pair of loaded vectors: x's and the residual's.
template <typename T>
struct XR {
    Raw<T, kVec16<T>> x, r;
};
// Vector i of x (xv) and of the residual (p, moved to the same origin).
template <typename T>
__device__ __forceinline__ XR<T> preLoad(const uint4* xv, const PreAdd& p, int64_t i, Cache c) {
    constexpr int VEC = kVec16<T>;
    XR<T> d;
    if (c == Cache::kStreaming) {
        d.x.s = __ldcs(&xv[i]);
        d.r = loadResidual<T, VEC, Cache::kStreaming>(p, i * VEC);
    } else {
        d.x.s = xv[i];
        d.r = loadResidual<T, VEC>(p, i * VEC);
    }
    return d;
}

#endif  // Hopper

// ---------------------------------------------------------------- NHWC ----

// (Device code for Hopper only, like the kernel that uses it.)
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
// The head of an image in streaming NHWC: pixels [0, head) in slabs of R
// (rows per pass); slab s belongs to block s mod B. Slab `full` is partial
// (rem pixels) if rem > 0; it is slab number slabQ of block slabR.
struct HeadSplit {
    int64_t head, full, slabQ;
    int rem, slabR;
    __host__ __device__ int64_t fullOf(int b) const { return slabQ + (b < slabR); }
    __host__ __device__ bool partialOf(int b) const { return rem > 0 && b == slabR; }
    // Slabs of block b that hold its pixel row r (r < rows per pass).
    __host__ __device__ int64_t rowsOf(int b, int r) const { return fullOf(b) + (partialOf(b) && r < rem); }
};
__host__ __device__ inline HeadSplit headSplit(int64_t hw, int64_t tileCap, int blocks, int rowsPerPass) {
    HeadSplit h;
    // 32-bit divisions (a streamed image has < 2^31 pixels): a 64-bit one is
    // about 110 instructions, run by every thread before its first load.
    h.head = hw - int64_t(blocks) * tileCap;
    h.full = uint32_t(h.head) / uint32_t(rowsPerPass);
    h.rem = int(h.head - h.full * rowsPerPass);
    h.slabQ = uint32_t(h.full) / uint32_t(blocks);
    h.slabR = int(h.full - h.slabQ * blocks);
    return h;
}
#endif

// Adds (u1, u2) over the tpg adjacent lanes of a group (tpg a power of two
// <= 32), in a fixed xor order; every lane of the warp must call it.
template <typename F>
__device__ __forceinline__ void sumOverGroupLanes(F& u1, F& u2, int tpg) {
#pragma unroll
    for (int m = 16; m >= 1; m >>= 1) {
        if (m < tpg) {
            u1 += __shfl_xor_sync(0xffffffffu, u1, m);
            u2 += __shfl_xor_sync(0xffffffffu, u2, m);
        }
    }
}

// Loads of 16 bytes in flight per thread where the head streams from global
// memory. Each is unrolled code run once per launch, so fewer can be faster
// although they leave less in flight: these were the fastest of 2, 3, 4, 5
// and 8 (NHWC first read, 512 threads; NCHW both reads, 1024 threads).
[[maybe_unused]] constexpr int kNhwcSumUnroll = 5;
[[maybe_unused]] constexpr int kNchwStreamUnroll = 2;
// A pre-add's streaming NHWC head (both reads): x's and the residual's
// vectors take twice the registers of x's, beside a thread's per-channel
// state; more in flight spilled.
[[maybe_unused]] constexpr int kPreStreamUnroll = 2;

// use(load(q), q) for q = 0 .. items-1, U loads in flight; while each batch
// is in flight, between() does other work (the shared-memory tile).
// (Issuing the next batch's loads before using the current one, at twice
// the registers, measured no faster for the sums; see streamItemsAhead.)
template <int U, typename Load, typename Use, typename Between>
__device__ __forceinline__ void streamItems(int64_t items, Load load, Use use, Between between) {
    using Item = decltype(load(int64_t(0)));  // uint4, or a pre-add's pair of them (XR)
    int64_t q = 0;
    for (; q + U <= items; q += U) {
        Item d[U];
#pragma unroll
        for (int u = 0; u < U; ++u) d[u] = load(q + u);
        between();
#pragma unroll
        for (int u = 0; u < U; ++u) use(d[u], q + u);
    }
    for (; q < items; ++q) use(load(q), q);
}
// streamItems with the next batch's loads issued before the current batch is
// used (twice the registers), so that they stay in flight while the current
// one is normalised and activated. Used for the NHWC second read where most
// of the image is head (gnStreamNHWC<T, true>, see the launch); NCHW (1024
// threads, 2 in flight) ran slower with it, so it keeps streamItems.
template <int U, typename Load, typename Use, typename Between>
__device__ __forceinline__ void streamItemsAhead(int64_t items, Load load, Use use, Between between) {
    int64_t q = 0;
    uint4 d[U];
    if (items >= U) {
#pragma unroll
        for (int u = 0; u < U; ++u) d[u] = load(u);
    }
    for (; q + U <= items; q += U) {
        uint4 next[U];
        const bool more = q + 2 * U <= items;
#pragma unroll
        for (int u = 0; u < U; ++u) next[u] = more ? load(q + U + u) : make_uint4(0, 0, 0, 0);
        between();
#pragma unroll
        for (int u = 0; u < U; ++u) use(d[u], q + u);
#pragma unroll
        for (int u = 0; u < U; ++u) d[u] = next[u];
    }
    for (; q < items; ++q) use(load(q), q);
}
// Tile rows to interleave with each batch of head loads (NHWC), so that the
// tile's share is spread over the whole head instead of following it
// (faster; NCHW measured no faster).
template <int U>
[[maybe_unused]] __host__ __device__ constexpr int64_t perBatch(int64_t headItems, int64_t tileItems) {
    // 32-bit division: a block's rows are < 2^31
    return headItems >= U ? (uint32_t(tileItems) + uint32_t(headItems) / U - 1) / (uint32_t(headItems) / U) : 0;
}

// kAhead: the second read loads a batch ahead (streamItemsAhead), chosen at
// launch where most of the image is head.
// kPre: see "The pre-add" below (without kAhead: see the planner).
template <typename T, bool kAhead, bool kPre = false>
__global__ void __launch_bounds__(kThreads, 1) gnStreamNHWC(ArgsWith<kPre, GridArgs> a) {
    static_assert(!(kAhead && kPre), "a pre-add streams without kAhead");
#if __CUDA_ARCH__ >= 900
    constexpr int VEC = kVec16<T>;
    extern __shared__ __align__(128) unsigned char smem[];
    const NhwcLayout L = nhwcLayout(a.c, VEC, a.groups);
    uint64_t* bars = reinterpret_cast<uint64_t*>(smem);
    float4* gstat = reinterpret_cast<float4*>(smem + L.groupStats);  // per group: k, later (hi, lo, rstd)
    unsigned char* tile = smem + L.tile;

    const int t = threadIdx.x;
    const int n = blockIdx.x / a.blocksPer;
    const int jb = blockIdx.x - n * a.blocksPer;
    const int V = a.c / VEC;  // vectors per pixel
    const int rowsPerPass = kThreads / V;
    const bool active = t < rowsPerPass * V;
    const int col = t % V, row = t / V;
    const int64_t imageBase = int64_t(n) * a.hw * a.c;
    // The image's pixels: the head [0, H), read from global memory, then a
    // tile of tileCap pixels per block (B blocks), which lands in shared
    // memory. The head is dealt out in slabs of rowsPerPass pixels, slab s to
    // block s mod B, so that all blocks read (and later write) one moving
    // front of memory rather than B separate streams (a mix of reads and
    // writes runs faster that way).
    const HeadSplit hs = headSplit(a.hw, a.tileCap, a.blocksPer, rowsPerPass);
    const int64_t kept = a.tileCap;
    const int64_t tile0 = hs.head + int64_t(jb) * a.tileCap;  // the image's first pixel in the tile
    float* chan1 = reinterpret_cast<float*>(smem + L.sums);  // [rowsPerPass][C]
    float* chan2 = chan1 + rowsPerPass * a.c;

    const T* x = static_cast<const T*>(a.x);
    // The bulk copies first: loads issued before them would delay them (the
    // barrier-init fence waits for this thread's loads).
    startLoads(tile, reinterpret_cast<const unsigned char*>(x + imageBase + tile0 * a.c), kept, a.pieceLen,
               int64_t(a.c) * sizeof(T), bars, true);

    // Per channel of this thread's column: group, shift k, gamma, beta (read
    // first: issued after the bulk copies they would wait behind them), sums
    // of d and d^2.
    // They are kept as loaded (bit patterns) and converted where first used,
    // so that no thread waits for them before the tile has landed.
    const int c0 = col * VEC;
    int grp[VEC];
    uint32_t kBits[VEC], gBits[VEC], bBits[VEC];
    float s1[VEC], s2[VEC];
    // The pre-add (kPre). The head's rows are read twice, as x's are: once
    // for the sums, where s is formed and written to sum_out, and again,
    // after the barrier, for the apply: s read back from sum_out (the s the
    // sums saw: one read where x and the residual are two), or without one,
    // formed again from x and the residual (mostly from L2, in reverse).
    // The tile's rows: s is written over the tile's x (the thread's own
    // vector) and read there. k is the group's first s, kt the thread's first.
    [[maybe_unused]] PreAdd preI{};  // from the thread's vector of the image's pixel 0
    [[maybe_unused]] float pb[VEC], kPreK[VEC];
    if constexpr (kPre) preI = preAt<T>(a.pre, imageBase + c0);
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
        grp[j] = (c0 + j) / a.cpg;
        if constexpr (kPre) {
            kPreK[j] = groupFirst<true, T>(x, a.pre, imageBase + int64_t(grp[j]) * a.cpg, n, int64_t(grp[j]) * a.cpg);
            pb[j] = preBiasAt<T>(preI, n, c0 + j);
        } else {
            kBits[j] = loadBits(x + imageBase + int64_t(grp[j]) * a.cpg);
        }
        s1[j] = 0.f;
        s2[j] = 0.f;
    }
    loadAffineRow<T>(a.gamma, c0, a.affineFp32, gBits);
    loadAffineRow<T>(a.beta, c0, a.affineFp32, bBits);
    // This thread's shift kt is the first pixel it sums (head or tile): its
    // sums run over up to ~250 rows (the launch sees to it).
    const int64_t rowsHead = active ? hs.rowsOf(jb, row) : 0;
    const int64_t rowsKept = row < kept ? uint32_t(kept - 1 - row) / uint32_t(rowsPerPass) + 1 : 0;
    uint4 firstRaw = make_uint4(0, 0, 0, 0);
    // This thread's vector of head pixel p is xv[p * V]; its q-th head pixel
    // is (jb + q * B) * rowsPerPass + row.
    const uint4* xv = reinterpret_cast<const uint4*>(x + imageBase + c0);
    const int64_t headFirst = (int64_t(jb) * rowsPerPass + row) * V, headStep = int64_t(a.blocksPer) * rowsPerPass * V;
    if (rowsHead > 0) firstRaw = xv[headFirst];
    [[maybe_unused]] Raw<T, VEC> firstRes{};  // kPre: the residual's vector of that pixel
    if constexpr (kPre) {
        if (rowsHead > 0) {
            firstRes = loadResidual<T, VEC>(preI, headFirst * VEC);
        } else if (active && rowsKept > 0) {
            firstRes = loadResidual<T, VEC>(preI, (tile0 + row) * a.c);
        }
    }
    __syncthreads();  // the mbarriers are initialised
    const uint4* tv = reinterpret_cast<const uint4*>(tile);
    PieceWaiter wait{bars, a.pieceLen};
    if (active && rowsHead == 0 && rowsKept > 0) {  // the first tile row: it is needed first anyway
        wait.until(row);
        firstRaw = tv[row * V + col];
    }
    float k[VEC], kt[VEC];
    {
        Raw<T, VEC> f;
        f.s = firstRaw;
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            if constexpr (kPre) {
                k[j] = kPreK[j];
                kt[j] = preSum<T>(f.get(j), pb[j], firstRes.get(j));
            } else {
                k[j] = bitsToFloat<T>(kBits[j]);
                kt[j] = f.get(j);
            }
        }
    }
    auto accumulate = [&](const uint4& raw) {
        Raw<T, VEC> v;
        v.s = raw;
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            const float d = v.get(j) - kt[j];
            s1[j] += d;
            s2[j] = fmaf(d, d, s2[j]);
        }
    };
    // kPre: s of x's d and the residual's rv at element offset off (from
    // preI), to sum_out, then summed as x would be; returned in sv.
    [[maybe_unused]] auto accumulatePre = [&](const Raw<T, VEC>& d, const Raw<T, VEC>& rv, int64_t off,
                                              float (&sv)[VEC]) {
        formSum<T, VEC>(preI, off, true, d, rv, pb, sv);
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            const float dj = sv[j] - kt[j];
            s1[j] += dj;
            s2[j] = fmaf(dj, dj, s2[j]);
        }
    };
    // kPre: tile row r (s written over it).
    [[maybe_unused]] auto accumulateTileRow = [&](int64_t r, const Raw<T, VEC>& rv) {
        wait.until(r);
        Raw<T, VEC> v;
        v.s = tv[r * V + col];
        float sv[VEC];
        accumulatePre(v, rv, (tile0 + r) * a.c, sv);
        storeTileVec<T>(tile, r * V + col, sv);
    };
    if (active) {
        if constexpr (kPre) {
            int64_t r = row;  // the next tile row
            const int64_t n = perBatch<kPreStreamUnroll>(rowsHead, rowsKept);
            streamItems<kPreStreamUnroll>(
                rowsHead, [&](int64_t q) { return preLoad<T>(xv, preI, headFirst + q * headStep, Cache::kDefault); },
                [&](const XR<T>& d, int64_t q) {
                    float sv[VEC];
                    accumulatePre(d.x, d.r, (headFirst + q * headStep) * VEC, sv);
                },
                [&] {
                    for (int64_t e = 0; e < n && r < kept; ++e, r += rowsPerPass)
                        accumulateTileRow(r, loadResidual<T, VEC>(preI, (tile0 + r) * a.c));
                });
            // The rest of the tile.
            withResiduals<kPreStreamUnroll, T, Cache::kDefault>(
                r, kept, rowsPerPass, preI, [&](int64_t ru) { return (tile0 + ru) * a.c; },
                [&](int64_t ru, const Raw<T, VEC>& rv) { accumulateTileRow(ru, rv); });
        } else {
            int64_t r = row;  // the next tile row
            const int64_t n = perBatch<kNhwcSumUnroll>(rowsHead, rowsKept);
            streamItems<kNhwcSumUnroll>(rowsHead, [&](int64_t q) { return xv[headFirst + q * headStep]; },
                        [&](const uint4& d, int64_t) { accumulate(d); },
                        [&] {
                            for (int64_t e = 0; e < n && r < kept; ++e, r += rowsPerPass) {
                                wait.until(r);
                                accumulate(tv[r * V + col]);
                            }
                        });
            for (; r < kept; r += rowsPerPass) {
                wait.until(r);
                accumulate(tv[r * V + col]);
            }
        }
        // Per channel: the mean relative to the group's k and M2 (small
        // numbers, which fp32 holds).
        const int64_t rows = rowsHead + rowsKept;
        const float invRows = rows > 0 ? __frcp_rn(float(rows)) : 0.f;  // = 1.f / rows, without the division routine
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            const float m = s1[j] * invRows;
            chan1[row * a.c + c0 + j] = (kt[j] - k[j]) + m;
            chan2[row * a.c + c0 + j] = fmaf(-s1[j], m, s2[j]);
        }
    }
    // k of each group, for the statistics after the barrier (x may be y by
    // then), from the row-0 thread that holds the group's first channel.
    if (row == 0) {
#pragma unroll
        for (int j = 0; j < VEC; ++j)
            if (c0 + j == grp[j] * a.cpg) gstat[grp[j]].w = k[j];
    }
    __syncthreads();
    // The block's partial per group, sum(x - k) and sum((x - k)^2) in
    // double, in a fixed order (every launch gives bit-identical results): P
    // threads per group (adjacent lanes) each add every P-th of the group's
    // rows x channels, then an xor shuffle over the P lanes. A thread's count * (mean - k) and M2 + count *
    // (mean - k)^2 are added in double: the means are relative to k, so the
    // squares carry no large terms that cancel. No divisions in the loop.
    // (A warp per group in two passes with a division per item was slower.)
    // A streamed chunk has a few hundred rows a thread (see the launch): its
    // row counts fit 32 bits.
    // Rows summed by the threads of row r: head slabs, then tile rows r mod rowsPerPass.
    const int hq = int(hs.fullOf(jb)), hr = hs.partialOf(jb) ? hs.rem : 0;
    const int kq = int(kept) / rowsPerPass, kr = int(kept) - kq * rowsPerPass;
    double2* part = reinterpret_cast<double2*>(a.partials) + int64_t(blockIdx.x) * a.groups;
    int logP = 5;
    while (logP > 0 && (a.groups << logP) > kThreads) --logP;
    const int P = 1 << logP;
    const int items = rowsPerPass * a.cpg, p = t & (P - 1);
    const int row0 = p / a.cpg, col0 = p - row0 * a.cpg;       // item p as (row, channel)
    const int stepRow = P / a.cpg, stepCol = P - stepRow * a.cpg;  // item += P
    for (int gBase = 0; gBase < a.groups; gBase += kThreads >> logP) {  // the same trips for every thread
        const int g = gBase + (t >> logP);
        double u1 = 0.0, u2 = 0.0;
        if (g < a.groups) {
            int r = row0, cc = col0;
#pragma unroll 1  // code run once per launch costs its fetch: kept short
            for (int i = p; i < items; i += P) {
                const int idx = r * a.c + g * a.cpg + cc;
                const double cnt = double(hq + (r < hr) + kq + (r < kr)), m = chan1[idx];
                u1 = fma(cnt, m, u1);
                u2 += fma(cnt * m, m, double(chan2[idx]));
                r += stepRow;
                cc += stepCol;
                if (cc >= a.cpg) {
                    cc -= a.cpg;
                    ++r;
                }
            }
        }
        sumOverGroupLanes(u1, u2, P);
        if (g < a.groups && p == 0) part[g] = make_double2(u1, u2);
    }

    cg::this_grid().sync();

    // The image's totals: `parts` threads per group, each over every
    // parts-th block in double (consecutive threads read consecutive groups:
    // coalesced), then the parts in a fixed order (bit-identical results).
    const int parts = a.groups >= kThreads ? 1 : kThreads / a.groups;
    double2* red = reinterpret_cast<double2*>(smem + L.sums);  // [parts][G]; the channel sums are dead
    const double2* imageParts = reinterpret_cast<const double2*>(a.partials) + int64_t(n) * a.blocksPer * a.groups;
    for (int item = t; item < a.groups * parts; item += kThreads) {
        const int g = item % a.groups, p = item / a.groups;
        double u1 = 0.0, u2 = 0.0;
        // Up to kBatch loads in flight: one L2 round trip for <= 16 * parts
        // blocks (two dependent rounds of 4 were slower).
        constexpr int kBatch = 16;
        for (int b0 = p; b0 < a.blocksPer; b0 += kBatch * parts) {
            double2 v[kBatch];
#pragma unroll
            for (int u = 0; u < kBatch; ++u) {
                const int b = b0 + u * parts;
                v[u] = b < a.blocksPer ? __ldcg(&imageParts[int64_t(b) * a.groups + g]) : make_double2(0.0, 0.0);
            }
#pragma unroll
            for (int u = 0; u < kBatch; ++u) {  // + 0.0 past the last block: exact
                u1 += v[u].x;
                u2 += v[u].y;
            }
        }
        red[item] = make_double2(u1, u2);
    }
    __syncthreads();
    for (int g = t; g < a.groups; g += kThreads) {
        double u1 = 0.0, u2 = 0.0;
#pragma unroll 4
        for (int p = 0; p < parts; ++p) {
            u1 += red[p * a.groups + g].x;
            u2 += red[p * a.groups + g].y;
        }
        gstat[g] = finishStats(u1, u2, a.invCount, gstat[g].w, a.eps);
    }
    __syncthreads();

    if (active) {
        // y = act((x - hi) * scale + (beta - lo * scale)), scale = rstd * gamma.
        float mean[VEC], scale[VEC], shift[VEC];
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            const float4 st = gstat[grp[j]];
            const float gm = a.gamma ? affineBitsToFloat<T>(gBits[j], a.affineFp32) : 1.f;
            const float bt = a.beta ? affineBitsToFloat<T>(bBits[j], a.affineFp32) : 0.f;
            mean[j] = st.x;
            scale[j] = st.z * gm;
            shift[j] = bt - st.y * scale[j];
        }
        T* y = static_cast<T*>(a.y) + imageBase + c0;
        int64_t r = row;  // the next tile row
        auto emit = [&](const uint4& raw, int64_t r) {
            Raw<T, VEC> v;
            v.s = raw;
            float o[VEC];
            if constexpr (kIsBf16<T>) {
                // SiLU an element at a time: in bf16 this loop ran slower with
                // pairs.
#pragma unroll
                for (int j = 0; j < VEC; ++j) o[j] = activate(fmaf(v.get(j) - mean[j], scale[j], shift[j]), a.act);
            } else {
#pragma unroll
                for (int j = 0; j < VEC; ++j) o[j] = fmaf(v.get(j) - mean[j], scale[j], shift[j]);
                activateVec(o, a.act);
            }
            storeVec<T, VEC, Cache::kStreaming>(y + r * a.c, o);
        };
        // The head again, last slabs first (the likeliest still in L2); the
        // pixel of slab q is (jb + q * B) * rowsPerPass + row.
        // Batches of 4 loads, not 8: as fast in a test of this loop alone (32 KB
        // in flight an SM cover the latency), and half the unrolled code,
        // which is fetched anew each launch.
        constexpr int kApplyUnroll = 4;
        const int64_t items = rowsHead, last = items - 1;
        const int64_t n = perBatch<kApplyUnroll>(items, rowsKept);
        const int64_t slabPixels = int64_t(a.blocksPer) * rowsPerPass;
        auto load = [&](int64_t q) { return __ldcs(&xv[headFirst + (last - q) * headStep]); };
        auto use = [&](const uint4& d, int64_t q) { emit(d, int64_t(jb) * rowsPerPass + row + (last - q) * slabPixels); };
        auto between = [&] {
            for (int64_t e = 0; e < n && r < kept; ++e, r += rowsPerPass) emit(tv[r * V + col], tile0 + r);
        };
        // kPre without sum_out: y of x's d and the residual's rv at pixel p (s formed again).
        [[maybe_unused]] auto emitPre = [&](const Raw<T, VEC>& d, const Raw<T, VEC>& rv, int64_t p) {
            float sv[VEC];
            preSumVec<T, VEC>(d, rv, pb, sv);
            float o[VEC];
            if constexpr (kIsBf16<T>) {
#pragma unroll
                for (int j = 0; j < VEC; ++j) o[j] = activate(fmaf(sv[j] - mean[j], scale[j], shift[j]), a.act);
            } else {
#pragma unroll
                for (int j = 0; j < VEC; ++j) o[j] = fmaf(sv[j] - mean[j], scale[j], shift[j]);
                activateVec(o, a.act);
            }
            storeVec<T, VEC, Cache::kStreaming>(y + p * a.c, o);
        };
        if constexpr (kPre) {
            const int64_t nPre = perBatch<kPreStreamUnroll>(items, rowsKept);
            auto betweenPre = [&] {
                for (int64_t e = 0; e < nPre && r < kept; ++e, r += rowsPerPass) emit(tv[r * V + col], tile0 + r);
            };
            const T* sums = static_cast<const T*>(preI.sum);
            if (sums != nullptr) {
                const uint4* sv = reinterpret_cast<const uint4*>(sums);  // the thread's vector of pixel 0
                streamItems<kApplyUnroll>(
                    items, [&](int64_t q) { return __ldcs(&sv[headFirst + (last - q) * headStep]); }, use, between);
            } else {
                streamItems<kPreStreamUnroll>(
                    items,
                    [&](int64_t q) {
                        return preLoad<T>(xv, preI, headFirst + (last - q) * headStep, Cache::kStreaming);
                    },
                    [&](const XR<T>& d, int64_t q) {
                        emitPre(d.x, d.r, int64_t(jb) * rowsPerPass + row + (last - q) * slabPixels);
                    },
                    betweenPre);
            }
        } else if constexpr (kAhead) {
            streamItemsAhead<kApplyUnroll>(items, load, use, between);
        } else {
            streamItems<kApplyUnroll>(items, load, use, between);
        }
        // The rest of the tile (kPre: s is there).
        for (; r < kept; r += rowsPerPass) emit(tv[r * V + col], tile0 + r);
    }
#endif
}

// ------------------------------------------------------- NHWC, on chip ----

// The tensor fits the SMs' shared memory (no streaming). Every phase here is
// latency, not bandwidth: 1 block of 16 warps an SM, ~40-200 KB each. Two
// costs shaped it:
// - uncached straight-line code runs at about one instruction per 6 cycles,
//   and code is fetched anew each launch, so the launch plan (divisions,
//   layout) is made on the host and the bulk copy is issued first;
// - each dependent round trip (global load, shared-memory loop with a
//   division, __syncthreads) costs about a microsecond, so each phase issues
//   its loads together and reduces with shuffles: threads of a group are
//   adjacent lanes.
// Per channel gamma/beta are loaded into registers at the start and used
// after the grid barrier (their latency hidden behind it).
// kTwoGroups: each thread's vector holds channels of at most two groups (lo,
// then hi from element `split`: C/G = 4 or >= 6 in 16 bits, >= 2 in fp32;
// see vectorSpansAtMostTwoGroups), so a thread adds its channels' sums into
// the two groups' before the block's group sums, which then read a (lo, hi)
// pair of each thread of a group's columns instead of each (row, channel):
// several times fewer items a group.
template <typename T, bool kTwoGroups, bool kPre = false>
__global__ void __launch_bounds__(kThreads, 1) gnOnChipNHWC(ArgsWith<kPre, GridArgs> a, OnChipPlan q,
                                                             const __grid_constant__ CUtensorMap slicesMap) {
#if __CUDA_ARCH__ >= 900
    constexpr int VEC = kVec16<T>;
    extern __shared__ __align__(128) unsigned char smem[];
    uint64_t* bars = reinterpret_cast<uint64_t*>(smem);
    float4* gstat = reinterpret_cast<float4*>(smem + q.offStats);
    unsigned char* tile = smem + a.tileOffset;

    const int t = threadIdx.x;
    const int ns = blockIdx.x / a.blocksPer;  // (image, slice)
    const int jb = blockIdx.x - ns * a.blocksPer;
    const int n = ns >> a.log2Slices, sl = ns & ((1 << a.log2Slices) - 1);
    const int64_t pix0 = int64_t(jb) * a.chunk;
    const int64_t pixels = a.hw - pix0 < a.chunk ? a.hw - pix0 : a.chunk;  // >= 1: the host makes no empty blocks
    // n / (C/G) for 0 <= n < 2^16: (n + 0.5) / d lies at least 0.5/d from an
    // integer, and the fp32 product is within 2^-23 of it, relatively (checked
    // exhaustively for d <= 4096).
    auto divCpg = [&](int v) { return int((float(v) + 0.5f) * q.invCpg); };
    const T* x = static_cast<const T*>(a.x) + int64_t(n) * a.hw * a.cs + sl * a.c;  // the slice's first channel
    if (a.log2Slices == 0) {
        startLoads(tile, reinterpret_cast<const unsigned char*>(x + pix0 * a.c), pixels, a.pieceLen,
                   int64_t(a.c) * sizeof(T), bars, false);
    } else if (t == 0) {  // the slice's rows, in pieces of pieceLen rows (the tile holds 4 whole ones)
        for (int p = 0; p < kMaxPieces; ++p) mbarInit(&bars[p], 1);
        fenceBarrierInit();
        const uint32_t pieceBytes = uint32_t(a.pieceLen * a.c * int64_t(sizeof(T)));
        for (int p = 0; p * a.pieceLen < pixels; ++p)
            tensorLoad2d(tile + p * pieceBytes, &slicesMap, sl * a.c, int(int64_t(n) * a.hw + pix0 + p * a.pieceLen),
                         pieceBytes, &bars[p]);
    }

    // Thread t holds vector column t % V of every rowsPerPass-th pixel.
    const int V = q.vecsPerPixel, rowsPerPass = q.rowsPerPass;
    const int row = t / V, col = t - row * V, c0 = col * VEC;
    const bool active = row < rowsPerPass;
    // k of each group (its first element), read before the barrier: in-place
    // calls stay correct. Loaded by warp 1 (group g by thread g ^ 32): loads
    // that warp 0 issues after thread 0 has issued the bulk copy come back
    // behind the copy, and the sums wait for k.
    // kPre: the pre-add's tensors from the slice's first element; k is the
    // group's first s.
    [[maybe_unused]] PreAdd preX{};
    if constexpr (kPre) preX = preAt<T>(a.pre, int64_t(n) * a.hw * a.cs + sl * a.c);
#pragma unroll 1
    for (int g = t ^ 32; g < a.groups; g += kThreads) {
        if constexpr (kPre) {
            gstat[g].x = groupFirst<true, T>(x, preX, int64_t(g) * a.cpg, n, sl * a.c + int64_t(g) * a.cpg);
        } else {
            gstat[g].x = toFloat<T>(x[int64_t(g) * a.cpg]);
        }
    }
    uint32_t gBits[VEC], bBits[VEC];  // inactive threads too: c0 < C, and the loads need no branch
    // bf16 with gamma/beta of its own dtype on 16-byte boundaries: one 16-byte
    // load each, kept packed until after the grid barrier. Loaded an element
    // at a time, NVVM moved bf16's conversions (shifts) up to the loads and
    // ptxas moved the loaded registers before the first __syncthreads, so the
    // block waited there for gamma and beta (long-scoreboard stalls). fp16
    // keeps the element loads: its conversions stay where they are used, and
    // 16-byte loads were no faster there.
    uint4 gPacked = make_uint4(0, 0, 0, 0), bPacked = gPacked;
    const bool packed = kIsBf16<T> && !a.affineFp32 &&
                        ((reinterpret_cast<uintptr_t>(a.gamma) | reinterpret_cast<uintptr_t>(a.beta)) & 15) == 0;
    if (packed) {
        if (a.gamma) gPacked = __ldg(reinterpret_cast<const uint4*>(static_cast<const T*>(a.gamma) + sl * a.c + c0));
        if (a.beta) bPacked = __ldg(reinterpret_cast<const uint4*>(static_cast<const T*>(a.beta) + sl * a.c + c0));
    } else {
        loadAffineRow<T>(a.gamma, sl * a.c + c0, a.affineFp32, gBits);
        loadAffineRow<T>(a.beta, sl * a.c + c0, a.affineFp32, bBits);
    }
    // kPre: the thread's vector's pre-add (its rows r * cs on) and biases.
    [[maybe_unused]] PreAdd preT{};
    [[maybe_unused]] float pb[kPre ? VEC : 1];
    if constexpr (kPre) {
        preT = preAt<T>(preX, pix0 * a.cs + c0);
#pragma unroll
        for (int j = 0; j < VEC; ++j) pb[j] = preBiasAt<T>(preT, n, sl * a.c + c0 + j);
    }
    __syncthreads();  // the mbarriers are initialised, k is in place

    float* chan1 = reinterpret_cast<float*>(smem + q.offChan);  // [rowsPerPass][C]
    float* chan2 = chan1 + rowsPerPass * a.c;
    // kTwoGroups: the threads' (lo, hi) sums, [rowsPerPass][V + 1]: the
    // padding puts a group's lanes, which read one column in adjacent rows,
    // in different banks (rows V apart: 6- to 8-way bank conflicts).
    float4* pair = reinterpret_cast<float4*>(smem + q.offChan);
    // kTwoGroups: elements j < split are of group gLo, the rest of gHi.
    const int gLo = divCpg(c0), gHi = divCpg(c0 + VEC - 1);
    const int split = gHi == gLo ? VEC : (gLo + 1) * a.cpg - c0;
    if (active) {
        float k[VEC], s1[VEC], s2[VEC];
        if constexpr (kTwoGroups) {
            const float kLo = gstat[gLo].x, kHi = gstat[gHi].x;
#pragma unroll
            for (int j = 0; j < VEC; ++j) k[j] = j < split ? kLo : kHi;
        }
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            if constexpr (!kTwoGroups) k[j] = gstat[divCpg(c0 + j)].x;
            s1[j] = s2[j] = 0.f;
        }
        const uint4* tv = reinterpret_cast<const uint4*>(tile);
        PieceWaiter wait{bars, a.pieceLen};
        if constexpr (kPre) {
            // s of each row once its piece has landed, the residual's vectors
            // loaded kPreRows rows ahead; to sum_out, and back into the tile
            // (the thread's own vector: the apply reads s there).
            withResiduals<kPreRows, T, Cache::kDefault>(
                row, pixels, rowsPerPass, preT, [&](int64_t r) { return r * a.cs; },
                [&](int64_t r, const Raw<T, VEC>& rv) {
                    wait.until(r);
                    Raw<T, VEC> v;
                    v.s = tv[r * V + col];
                    float sv[VEC];
                    formSum<T, VEC>(preT, r * a.cs, true, v, rv, pb, sv);
                    storeTileVec<T>(tile, r * V + col, sv);
#pragma unroll
                    for (int j = 0; j < VEC; ++j) {
                        const float d = sv[j] - k[j];
                        s1[j] += d;
                        s2[j] = fmaf(d, d, s2[j]);
                    }
                });
        } else {
#pragma unroll 1
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
        }
        if constexpr (kTwoGroups) {
            float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
                if (j < split) {
                    v.x += s1[j];
                    v.y += s2[j];
                } else {
                    v.z += s1[j];
                    v.w += s2[j];
                }
            }
            pair[row * (V + 1) + col] = v;
        } else {
#pragma unroll
            for (int j = 0; j < VEC; j += 4) {
                *reinterpret_cast<float4*>(chan1 + row * a.c + c0 + j) = make_float4(s1[j], s1[j + 1], s1[j + 2], s1[j + 3]);
                *reinterpret_cast<float4*>(chan2 + row * a.c + c0 + j) = make_float4(s2[j], s2[j + 1], s2[j + 2], s2[j + 3]);
            }
        }
    }
    __syncthreads();

    // The block's partial per group: tpg adjacent threads a group, each over
    // every tpg-th (row, channel) of it, then xor shuffles (a fixed order:
    // every launch gives bit-identical results).
    const int tpg = q.tpg, p = t & (tpg - 1), perPass = kThreads / tpg;
    // Partials are [n][g][block]: a group's are adjacent, for the reads below,
    // in rows of even length (a zero partial pads odd ones), read two a load.
    const int stride = (a.blocksPer + 1) & ~1;
    const bool pad = stride != a.blocksPer && jb == a.blocksPer - 1;
    const int64_t sliceParts = (int64_t(n) * a.groupsAll + sl * a.groups) * stride;  // the slice's first group's
    float2* part = a.partials + sliceParts + jb;
#pragma unroll 1
    for (int base = 0; base < a.groups; base += perPass) {
        const int g = base + t / tpg;
        float u1 = 0.f, u2 = 0.f;
        if constexpr (kTwoGroups) {
            // Group g's columns colA .. colB, rows inner: item i is (column
            // colA + i / rowsPerPass, row i % rowsPerPass). A column holds g
            // as its lo group where it starts in g, else (colA only) as hi.
            const int g0 = g * a.cpg, colA = g0 / VEC, items = ((g0 + a.cpg - 1) / VEC - colA + 1) * rowsPerPass;
            const int divRows = int((float(tpg) + 0.5f) * q.invRows), dr = tpg - divRows * rowsPerPass;
            if (g < a.groups) {
                int cc = int((float(p) + 0.5f) * q.invRows);
                int r = p - cc * rowsPerPass;
                cc += colA;
#pragma unroll 1
                for (int i = p; i < items; i += tpg) {
                    const float4 v = pair[r * (V + 1) + cc];
                    const bool lo = cc * VEC >= g0;
                    u1 += lo ? v.x : v.z;
                    u2 += lo ? v.y : v.w;
                    r += dr;
                    cc += divRows;
                    if (r >= rowsPerPass) {
                        r -= rowsPerPass;
                        ++cc;
                    }
                }
            }
        } else if (g < a.groups) {
            const int items = rowsPerPass * a.cpg;
            const int dr = divCpg(tpg), dc = tpg - dr * a.cpg;
            int r = divCpg(p), cc = p - r * a.cpg;
#pragma unroll 4
            for (int i = p; i < items; i += tpg) {
                const int off = r * a.c + g * a.cpg + cc;
                u1 += chan1[off];
                u2 += chan2[off];
                cc += dc;
                r += dr;
                if (cc >= a.cpg) {
                    cc -= a.cpg;
                    ++r;
                }
            }
        }
        sumOverGroupLanes(u1, u2, tpg);
        if (g < a.groups && p == 0) {
            part[int64_t(g) * stride] = make_float2(u1, u2);
            if (pad) part[int64_t(g) * stride + 1] = make_float2(0.f, 0.f);
        }
    }

    cg::this_grid().sync();

    // The image's totals, the same way, in double: thread p of a group adds
    // blocks 2p and 2p + 1, then 2(p + tpg) and 2(p + tpg) + 1, ... (adjacent
    // lanes read adjacent partials; read [block][g], 16 times as many L2
    // sectors, it was about twice as slow); its group's statistics go to
    // gstat. Two partials a 16-byte load rather than one in 8 bytes: faster,
    // most of all on single images (132 partials a group).
    const float4* imageParts = reinterpret_cast<const float4*>(a.partials + sliceParts);
    const int quads = stride / 2;
#pragma unroll 1
    for (int base = 0; base < a.groups; base += perPass) {
        const int g = base + t / tpg;
        double u1 = 0.0, u2 = 0.0;
        if (g < a.groups) {
            // Batches of kBatch predicated loads, all issued before the first
            // addition (+ 0.0 past the row's end: exact): one L2 round trip
            // for up to 5 * tpg * 2 partials (two images on 132 SMs), two for
            // one image, where a loop unrolled by 4 took two and three (its
            // lanes with a fifth load waited for a second trip). Batches of 8
            // were slower than of 5.
            constexpr int kBatch = 5;
            const float4* row = imageParts + int64_t(g) * quads;
#pragma unroll 1
            for (int b0 = p; b0 < quads; b0 += kBatch * tpg) {
                float4 v[kBatch];
#pragma unroll
                for (int u = 0; u < kBatch; ++u) {
                    const int b = b0 + u * tpg;
                    v[u] = b < quads ? __ldcg(&row[b]) : make_float4(0.f, 0.f, 0.f, 0.f);
                }
#pragma unroll
                for (int u = 0; u < kBatch; ++u) {
                    u1 += v[u].x;
                    u2 += v[u].y;
                    u1 += v[u].z;
                    u2 += v[u].w;
                }
            }
        }
        sumOverGroupLanes(u1, u2, tpg);
        if (g < a.groups && p == 0) gstat[g] = finishStats(u1, u2, a.invCount, gstat[g].x, a.eps);
    }
    __syncthreads();

    if (active) {
        // y = act((x - hi) * scale + (beta - lo * scale)), scale = rstd * gamma.
        float mean[VEC], scale[VEC], shift[VEC];
        float4 stLo = make_float4(0.f, 0.f, 0.f, 0.f), stHi = stLo;
        if constexpr (kTwoGroups) {
            stLo = gstat[gLo];
            stHi = gstat[gHi];
        }
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            const float4 st = kTwoGroups ? (j < split ? stLo : stHi) : gstat[divCpg(c0 + j)];
            float gm, bt;
            if (packed) {
                uint32_t gw = word(gPacked, j >> 1), bw = word(bPacked, j >> 1);
                asm volatile("" : "+r"(gw), "+r"(bw));  // the unpacking stays after the grid barrier
                gm = a.gamma ? bitsToFloat<T>((j & 1) ? gw >> 16 : gw & 0xffffu) : 1.f;
                bt = a.beta ? bitsToFloat<T>((j & 1) ? bw >> 16 : bw & 0xffffu) : 0.f;
            } else {
                gm = a.gamma ? affineBitsToFloat<T>(gBits[j], a.affineFp32) : 1.f;
                bt = a.beta ? affineBitsToFloat<T>(bBits[j], a.affineFp32) : 0.f;
            }
            mean[j] = st.x;
            scale[j] = st.z * gm;
            shift[j] = bt - st.y * scale[j];
        }
        const uint4* tv = reinterpret_cast<const uint4*>(tile);
        T* y = static_cast<T*>(a.y) + (int64_t(n) * a.hw + pix0) * a.cs + sl * a.c + c0;
        // The tile holds x (kPre: s).
#pragma unroll 1
        for (int64_t r = row; r < pixels; r += rowsPerPass) {
            Raw<T, VEC> v;
            v.s = tv[r * V + col];
            float o[VEC];
#pragma unroll
            for (int j = 0; j < VEC; ++j) o[j] = fmaf(v.get(j) - mean[j], scale[j], shift[j]);
            activateVec(o, a.act);
            storeVec<T, VEC>(y + r * a.cs, o);
        }
    }
#endif
}

// ---------------------------------------------------------------- NCHW ----

// Shared memory: mbarriers, warp scratch, gamma/beta of the block's channels
// (kNchwHeaderBytes), then the tile.
static_assert(nchwThreads(true) / 32 * 16 <= 32 * 16, "the warp scratch holds 32 warps' double2");
static_assert(kNchwTable + 32 <= nchwThreads(false), "warps 1 and up load the gamma/beta table");

template <typename T, bool kStream, bool kPre = false>
__global__ void __launch_bounds__(nchwThreads(kStream), 1) gnPersistentNCHW(ArgsWith<kPre, GridArgs> a) {
#if __CUDA_ARCH__ >= 900
    constexpr int NT = nchwThreads(kStream);
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
    // Streaming: vectors [0, head) of the chunk are read from global memory,
    // [head, vecs) land in the tile.
    const int64_t vecs = len / VEC;
    const int64_t head = kStream && vecs > a.tileCap / VEC ? vecs - a.tileCap / VEC : 0;
    const int64_t kept = vecs - head;
    const T* xs = static_cast<const T*>(a.x) + int64_t(seg) * segLen;

    // gamma/beta of the channels this block touches, and k, loaded while the
    // tile loads. Where the chunk is all on chip, warp 0 loads none of them:
    // thread 0's barrier-init fence (a release) waits for its own earlier
    // loads, which would hold back the bulk copy; warp 0 reads k from shared
    // memory after the barrier below. (Issuing the copy before all loads was
    // slower.)
    // Offsets within a segment fit 32 bits (the host makes sure): 32-bit
    // divisions, about 16 instructions where a 64-bit one takes about 110
    // (see channelOf).
    const int64_t chBase = uint32_t(e0) / uint32_t(a.hw);
    const int64_t ch0 = int64_t(g) * a.cpg + chBase;
    const int64_t chans = len == 0 ? 0 : int64_t(uint32_t(e0 + len - 1) / uint32_t(a.hw)) - chBase + 1;
    const bool tabled = chans <= kNchwTable;
    const int entry = kStream ? t : t - 32;  // the table entry this thread loads
    if (tabled && entry >= 0 && entry < chans)
        affine[entry] = make_float2(loadAffine<T>(a.gamma, ch0 + entry, a.affineFp32, 1.f),
                                    loadAffine<T>(a.beta, ch0 + entry, a.affineFp32, 0.f));
    __shared__ float kShared;
    // kPre: the pre-add's tensors from the segment's first element (preS) and
    // the chunk's (preE); the bias of a vector's channel, the channel of the
    // segment's element e being g * cpg + e / hw.
    [[maybe_unused]] PreAdd preS{}, preE{};
    [[maybe_unused]] const int64_t nImg = seg / a.groups;
    if constexpr (kPre) {
        preS = preAt<T>(a.pre, int64_t(seg) * segLen);
        preE = preAt<T>(preS, e0);
    }
    [[maybe_unused]] auto preBiasOf = [&](int64_t e) {
        return preBiasAt<T>(preS, nImg, int64_t(g) * a.cpg + uint32_t(e) / uint32_t(a.hw));
    };
    float k;
    if constexpr (kPre) {
        k = kStream || t >= 32 ? groupFirst<true, T>(xs, preS, 0, nImg, int64_t(g) * a.cpg) : 0.f;
    } else {
        k = kStream || t >= 32 ? toFloat<T>(xs[0]) : 0.f;
    }
    if (!kStream && t == 32) kShared = k;
    // Vectors this thread sums from the head and from the tile. Streaming, its
    // shift kt is the first value it sums (its sums run over up to ~8000
    // values at 2 GiB); else it is k (at most ~250 values).
    const int64_t vecsHead = kStream && t < head ? (head - 1 - t) / NT + 1 : 0;
    const int64_t vecsKept = t < kept ? (kept - 1 - t) / NT + 1 : 0;
    float kt;
    if constexpr (kPre) {
        const int64_t first = e0 + (vecsHead > 0 ? t : head + t) * VEC;
        kt = !kStream ? k : vecsHead + vecsKept > 0 ? preSumAt<T>(xs, preS, first, preBiasOf(first)) : 0.f;
    } else {
        kt = !kStream                        ? k
             : vecsHead + vecsKept > 0 ? toFloat<T>(xs[e0 + (vecsHead > 0 ? t : head + t) * VEC])
                                       : 0.f;
    }
    startLoads(tile, reinterpret_cast<const unsigned char*>(xs + e0 + head * VEC), kept, a.pieceLen / VEC, 16, bars,
               kStream);
    __syncthreads();  // the mbarriers are initialised, k is in shared memory
    if constexpr (!kStream) {
        if (t < 32) kt = k = kShared;
    }

    const uint4* tv = reinterpret_cast<const uint4*>(tile);
    const uint4* xv = reinterpret_cast<const uint4*>(xs + e0);  // vector i of the chunk (the head's source)
    PieceWaiter wait{bars, a.pieceLen / VEC};
    float s1 = 0.f, s2 = 0.f;
    auto accumulate = [&](const uint4& raw) { addVectorSums<T>(raw, kt, s1, s2); };
    // kPre: s of the chunk's vector i from x's d and the residual's r, to
    // sum_out, then summed as x would be.
    [[maybe_unused]] auto accumulatePre = [&](const Raw<T, VEC>& d, const Raw<T, VEC>& r, int64_t i, float (&sv)[VEC]) {
        float b[VEC];
        const float bi = preBiasOf(e0 + i * VEC);
#pragma unroll
        for (int j = 0; j < VEC; ++j) b[j] = bi;
        formSum<T, VEC>(preE, i * VEC, true, d, r, b, sv);
        float l1 = 0.f, l2 = 0.f;
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            const float dj = sv[j] - kt;
            l1 += dj;
            l2 = fmaf(dj, dj, l2);
        }
        s1 += l1;
        s2 += l2;
    };
    if constexpr (kStream && kPre) {
        streamItems<kNchwStreamUnroll>(
            vecsHead, [&](int64_t q) { return preLoad<T>(xv, preE, t + q * NT, Cache::kDefault); },
            [&](const XR<T>& d, int64_t q) {
                float sv[VEC];
                accumulatePre(d.x, d.r, t + q * NT, sv);
            },
            [] {});
    } else if constexpr (kStream) {
        streamItems<kNchwStreamUnroll>(vecsHead, [&](int64_t q) { return xv[t + q * NT]; },
                    [&](const uint4& d, int64_t) { accumulate(d); }, [] {});
    }
    if constexpr (kPre) {
        // The residual's vectors kPreRows ahead; s is written over the tile's
        // x (its own vector), from where the apply reads it.
        withResiduals<kPreRows, T, Cache::kDefault>(
            t, kept, NT, preE, [&](int64_t i) { return (head + i) * VEC; },
            [&](int64_t i, const Raw<T, VEC>& rv) {
                wait.until(i);
                Raw<T, VEC> v;
                v.s = tv[i];
                float sv[VEC];
                accumulatePre(v, rv, head + i, sv);
                storeTileVec<T>(tile, i, sv);
            });
    } else {
        for (int64_t i = t; i < kept; i += NT) {
            wait.until(i);
            accumulate(tv[i]);
        }
    }
    // The block's partial. Streaming: (mean - k, M2), small numbers, which
    // fp32 holds; else (sum d, sum d^2).
    if constexpr (kStream) {
        const double2 sums = shiftedSums(s1, s2, double((vecsHead + vecsKept) * VEC), double(kt) - double(k));
        const double2 b = blockSum2(sums.x, sums.y, scratch);
        if (t == 0) {
            const double m = len > 0 ? b.x / double(len) : 0.0;
            a.partials[blockIdx.x] = make_float2(float(m), float(b.y - b.x * m));
        }
    } else {
        const double2 b = blockSum2(s1, s2, scratch);
        if (t == 0) a.partials[blockIdx.x] = make_float2(float(b.x), float(b.y));
    }

    cg::this_grid().sync();

    // The group's totals: a few partials (blocks per group <= SMs).
    if (t < 32) {
        double u1 = 0.0, u2 = 0.0;
        for (int j = t; j < a.blocksPer; j += 32) {
            const float2 v = __ldcg(&a.partials[int64_t(seg) * a.blocksPer + j]);
            if constexpr (kStream) {  // (mean - k, M2) -> sums
                const double cnt = double(j == a.blocksPer - 1 ? segLen - j * a.chunk : a.chunk), m = v.x;
                u1 += cnt * m;
                u2 += v.y + cnt * m * m;
            } else {
                u1 += v.x;
                u2 += v.y;
            }
        }
        u1 = warpSum(u1);
        u2 = warpSum(u2);
        if (t == 0) scratch[0] = make_double2(u1, u2);
    }
    __syncthreads();
    const float4 st = finishStats(scratch[0].x, scratch[0].y, a.invCount, k, a.eps);

    // Vector i of the chunk lies in one channel (H*W is a multiple of VEC):
    // its scale and shift. A 32-bit division only (offsets within a segment
    // fit 32 bits): a 64-bit one compiled into these loops for giant
    // segments slowed the kernel even though it was never taken.
    auto channelOf = [&](int64_t i) {  // relative to ch0
        return int64_t(uint32_t(e0 + i * VEC) / uint32_t(a.hw)) - chBase;
    };
    auto scaleShift = [&](int64_t ch) {
        const float2 gb = tabled ? affine[ch]
                                 : make_float2(loadAffine<T>(a.gamma, ch0 + ch, a.affineFp32, 1.f),
                                               loadAffine<T>(a.beta, ch0 + ch, a.affineFp32, 0.f));
        const float sc = st.z * gb.x;
        return make_float2(sc, gb.y - st.y * sc);
    };
    constexpr Cache kStore = kStream ? Cache::kStreaming : Cache::kDefault;
    T* ys = static_cast<T*>(a.y) + int64_t(seg) * segLen + e0;
    auto emit = [&](const uint4& raw, int64_t i, float2 ss) {
        Raw<T, VEC> v;
        v.s = raw;
        float o[VEC];
        if constexpr (kIsBf16<T>) {
            // SiLU an element at a time: in bf16 this loop ran slower with pairs.
#pragma unroll
            for (int j = 0; j < VEC; ++j) o[j] = activate(fmaf(v.get(j) - st.x, ss.x, ss.y), a.act);
        } else {
#pragma unroll
            for (int j = 0; j < VEC; ++j) o[j] = fmaf(v.get(j) - st.x, ss.x, ss.y);
            activateVec(o, a.act);
        }
        storeVec<T, VEC, kStore, true>(ys + i * VEC, o);  // whole 16-byte stores (storeVec)
    };
    // kPre without sum_out: s of x's vector d and the residual's r, as the
    // sums saw it, to y.
    [[maybe_unused]] auto emitPre = [&](const Raw<T, VEC>& d, const Raw<T, VEC>& r, int64_t i, float2 ss) {
        const float b = preBiasOf(e0 + i * VEC);
        float o[VEC];
#pragma unroll
        for (int j = 0; j < VEC; ++j) o[j] = fmaf(preSum<T>(d.get(j), b, r.get(j)) - st.x, ss.x, ss.y);
        if constexpr (kIsBf16<T>) {
#pragma unroll
            for (int j = 0; j < VEC; ++j) o[j] = activate(o[j], a.act);
        } else {
            activateVec(o, a.act);
        }
        storeVec<T, VEC, kStore, true>(ys + i * VEC, o);
    };
    int64_t cached = -1;  // consecutive vectors of a thread mostly share a channel
    float2 ss = make_float2(0.f, 0.f);
    auto emitTile = [&](int64_t i) {
        const int64_t ch = channelOf(head + i);
        if (ch != cached) {
            cached = ch;
            ss = scaleShift(ch);
        }
        emit(tv[i], head + i, ss);
    };
    if constexpr (kStream) {
        // The head again, last vectors first (the likeliest still in L2).
        const int64_t items = t < head ? (head - 1 - t) / NT + 1 : 0;
        // Its vectors are NT apart: their channels are walked back from the
        // last (ChannelWalk), not divided out one by one (faster; the tile's
        // loop, which divides only to see whether the channel changed,
        // measured no faster walked).
        const int64_t last = t + (items - 1) * NT;
        ChannelWalk walk = ChannelWalk::from(uint32_t(e0 + last * VEC), uint32_t(NT * VEC), uint32_t(a.hw));
        auto use = [&](const uint4& d, int64_t q) {  // q = 0, 1, ...
            emit(d, last - q * NT, scaleShift(int64_t(walk.prev()) - chBase));
        };
        if constexpr (kPre) {
            // The head's s again: with sum_out, read back from there (the s
            // the sums saw, written by this thread: one read where x and the
            // residual are two); else formed again from x and the residual.
            const T* sums = static_cast<const T*>(preE.sum);
            if (sums != nullptr) {
                const uint4* sv = reinterpret_cast<const uint4*>(sums);
                streamItems<kNchwStreamUnroll>(items, [&](int64_t q) { return __ldcs(&sv[last - q * NT]); }, use,
                                               [] {});
            } else {
                streamItems<kNchwStreamUnroll>(
                    items, [&](int64_t q) { return preLoad<T>(xv, preE, last - q * NT, Cache::kStreaming); },
                    [&](const XR<T>& d, int64_t q) {
                        emitPre(d.x, d.r, last - q * NT, scaleShift(int64_t(walk.prev()) - chBase));
                    },
                    [] {});
            }
        } else {
            streamItems<kNchwStreamUnroll>(items, [&](int64_t q) { return __ldcs(&xv[last - q * NT]); }, use, [] {});
        }
    }
    for (int64_t i = t; i < kept; i += NT) emitTile(i);  // the tile holds x (kPre: s)
#endif
}

// ------------------------------------------------------------ rolling ----

// gnRollingNCHW: see RollPlan (group_norm_args.h). One block an SM, every
// block co-resident (cooperative launch). The last warp computes statistics,
// the others ("workers") sum and write. Workers, step k:
// write batch k - lag (its statistics ready, y from shared memory, then the
// slot refilled with batch k - lag + slots), then sum batch k (a partial an
// (n, group) to the workspace and its counter bumped). The statistics warp,
// batch after batch, waits for the batch's counters, adds every block's
// partials and hands the statistics over, so no round trip to L2 lies on the
// workers' path. A block waits for batch j only after it has
// published every batch up to j + lag, and every block publishes in the same
// order, so with all blocks resident no wait can close a cycle.
// Numerics as the streaming NCHW grid's: a thread sums x - kt in fp32 (kt its
// first value, each vector's own sums first), a block's partial is (mean - k,
// M2) of its slice, k the (n, group)'s first element, which every block
// copies with its slice before it publishes (so y may alias x). Every block
// adds the partials in the same order: bit-identical statistics.
constexpr int kRollWorkerWarps = kRollWarps - 1;
constexpr int kRollWorkers = kRollWorkerWarps * 32;
constexpr int kRollPartialsALane = (kRollMaxBlocks + 31) / 32;
// Named barrier 1: the workers alone. The statistics go through two halves
// of a table, batch j in half j & 1, each with two mbarriers: `written` (every
// lane of the statistics warp arrives once it has written its entry) and
// `read` (every worker arrives once it has written the batch). Each thread
// arrives for its own accesses (an arrival is that thread's release). The
// statistics warp writes batch j + 2 into the half after batch j's `read`
// phase, so it may run two batches ahead of the workers. A parity wait is
// unambiguous: its waiter has already seen the barrier's previous phase end.
__device__ __forceinline__ void workersSync() {
    asm volatile("bar.sync 1, %0;" ::"n"(kRollWorkers) : "memory");
}

template <typename T>
__global__ void __launch_bounds__(kGridThreads, 1) gnRollingNCHW(GridArgs a, RollPlan r) {
#if __CUDA_ARCH__ >= 900
    constexpr int NT = kRollWorkers, VEC = kVec16<T>;
    extern __shared__ __align__(128) unsigned char smem[];
    uint64_t* full = reinterpret_cast<uint64_t*>(smem);       // [slot]: the copies landed
    uint64_t* written = full + kRollMaxSlots;                  // [half]: the statistics written
    uint64_t* read = written + 2;                              // [half]: every worker has read them
    double2* scratch = reinterpret_cast<double2*>(smem + kRollOffScratch);  // [2][warp][batch]
    float4* stats = reinterpret_cast<float4*>(smem + kRollOffStats);        // [2][batch]
    float2* affine = reinterpret_cast<float2*>(smem + kRollOffAffine);
    uint4* firsts = reinterpret_cast<uint4*>(smem + kRollOffFirst);  // [slot][batch]
    unsigned char* slices = smem + kRollHeaderBytes;                  // [slot][batch][sliceBytes]

    const int t = threadIdx.x, warp = t >> 5, lane = t & 31;
    const int blocks = int(gridDim.x), b = int(blockIdx.x);
    const int64_t segLen = int64_t(a.cpg) * a.hw;
    const int64_t e0 = int64_t(b) * a.chunk;  // the slice's first element in its (n, group)
    const int64_t len = segLen - e0 < a.chunk ? (segLen - e0 > 0 ? segLen - e0 : 0) : a.chunk;
    const int vecs = int(len / VEC);
    const int batches = (r.segments + r.batch - 1) / r.batch;
    // Offsets within a (n, group) fit 32 bits (the planner makes sure).
    const uint32_t chBase = uint32_t(e0) / uint32_t(a.hw);
    const int chans = len == 0 ? 0 : int(uint32_t(e0 + len - 1) / uint32_t(a.hw) - chBase) + 1;
    const T* x = static_cast<const T*>(a.x);
    T* y = static_cast<T*>(a.y);

    // Thread 0: batch j's slices and first vectors into slot j % slots, one
    // barrier phase for all of them.
    auto issue = [&](int j) {
        const int slot = j % r.slots, s0 = j * r.batch, nb = min(r.batch, r.segments - s0);
        uint64_t* bar = &full[slot];
        mbarArriveExpectTx(bar, uint32_t(nb) * uint32_t(16 + len * int64_t(sizeof(T))));
        for (int i = 0; i < nb; ++i) {
            const T* seg = x + int64_t(s0 + i) * segLen;
            bulkCopy(&firsts[slot * kRollMaxBatch + i], seg, 16, bar, false);
            if (len > 0)
                bulkCopy(slices + (int64_t(slot) * r.batch + i) * r.sliceBytes, seg + e0,
                         uint32_t(len * int64_t(sizeof(T))), bar, true);
        }
    };
    if (t == 0) {
        for (int s = 0; s < r.slots; ++s) mbarInit(&full[s], 1);
        for (int h = 0; h < 2; ++h) {
            mbarInit(&written[h], 32);
            mbarInit(&read[h], kRollWorkers);
        }
        fenceBarrierInit();
        for (int j = 0; j < r.slots && j < batches; ++j) issue(j);
    }
    for (int e = t; e < a.groups * chans; e += kGridThreads) {
        const int g = e / chans, q = e - g * chans;
        const int64_t ch = int64_t(g) * a.cpg + chBase + q;
        affine[e] = make_float2(loadAffine<T>(a.gamma, ch, a.affineFp32, 1.f),
                                loadAffine<T>(a.beta, ch, a.affineFp32, 0.f));
    }
    // The counters start at zero in every launch: zeroed here, then a grid
    // barrier before any block adds to them (the copies are in flight).
    for (int s = b * kGridThreads + t; s < r.segments; s += blocks * kGridThreads) r.counters[s] = 0u;
    cg::this_grid().sync();

    auto firstOf = [&](int slot, int i) {
        Raw<T, VEC> v;
        v.s = firsts[slot * kRollMaxBatch + i];
        return v.get(0);
    };
    auto sliceOf = [&](int slot, int i) {
        return reinterpret_cast<const uint4*>(slices + (int64_t(slot) * r.batch + i) * r.sliceBytes);
    };

    if (warp == kRollWorkerWarps) {
        // The statistics warp, batch after batch: lane i waits for counter i of the batch; every
        // lane loads its share of each (n, group)'s partials (all in flight at once), the warp adds
        // them in a fixed order (every block the same), and lane i writes (n, group) i's.
        for (int j = 0; j < batches; ++j) {
            const int slot = j % r.slots, s0 = j * r.batch, nb = min(r.batch, r.segments - s0);
            if (lane < nb) {
                while (ldAcquire(&r.counters[s0 + lane]) < unsigned(blocks)) __nanosleep(32);
            }
            __syncwarp();
            float2 v[kRollMaxBatch][kRollPartialsALane];
#pragma unroll
            for (int i = 0; i < kRollMaxBatch; ++i) {
#pragma unroll
                for (int u = 0; u < kRollPartialsALane; ++u) {
                    const int q = lane + 32 * u;
                    v[i][u] = i < nb && q < blocks ? __ldcg(&a.partials[int64_t(s0 + i) * blocks + q])
                                                   : make_float2(0.f, 0.f);
                }
            }
            mbarWait(&full[slot], uint32_t(j / r.slots) & 1u);  // the first vectors (k) have landed
            float4 mine = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
            for (int i = 0; i < kRollMaxBatch; ++i) {
                if (i < nb) {
                    double u1 = 0.0, u2 = 0.0;
#pragma unroll
                    for (int u = 0; u < kRollPartialsALane; ++u) {
                        const int64_t rest = segLen - int64_t(lane + 32 * u) * a.chunk;
                        const double cnt = double(rest < a.chunk ? (rest > 0 ? rest : 0) : a.chunk), m = v[i][u].x;
                        u1 += cnt * m;
                        u2 += v[i][u].y + cnt * m * m;
                    }
                    u1 = warpSum(u1);
                    u2 = warpSum(u2);
                    if (lane == i) mine = finishStats(u1, u2, a.invCount, firstOf(slot, i), a.eps);
                }
            }
            const int h = j & 1;
            if (j >= 2) mbarWait(&read[h], uint32_t((j >> 1) - 1) & 1u);  // batch j - 2 written out
            if (lane < nb) stats[h * kRollMaxBatch + lane] = mine;
            mbarArrive(&written[h]);
        }
        return;
    }

    auto sumBatch = [&](int j) {
        const int slot = j % r.slots, s0 = j * r.batch, nb = min(r.batch, r.segments - s0);
        mbarWait(&full[slot], uint32_t(j / r.slots) & 1u);
        double2* sc = scratch + (j & 1) * kRollWarps * kRollMaxBatch;
        for (int i = 0; i < nb; ++i) {
            const uint4* sv = sliceOf(slot, i);
            const float kt = t < vecs ? Raw<T, VEC>{sv[t]}.get(0) : 0.f;
            float s1 = 0.f, s2 = 0.f;
            for (int v = t; v < vecs; v += NT) addVectorSums<T>(sv[v], kt, s1, s2);
            const int mine = t < vecs ? (vecs - 1 - t) / NT + 1 : 0;
            double2 d = shiftedSums(s1, s2, double(mine * VEC), double(kt) - double(firstOf(slot, i)));
            d.x = warpSum(d.x);
            d.y = warpSum(d.y);
            if (lane == 0) sc[warp * kRollMaxBatch + i] = d;
        }
        workersSync();
        if (t < nb) {
            double u1 = 0.0, u2 = 0.0;
            for (int w = 0; w < kRollWorkerWarps; ++w) {
                u1 += sc[w * kRollMaxBatch + t].x;
                u2 += sc[w * kRollMaxBatch + t].y;
            }
            const double m = len > 0 ? u1 / double(len) : 0.0;
            a.partials[int64_t(s0 + t) * blocks + b] = make_float2(float(m), float(u2 - u1 * m));
            redAddRelease(&r.counters[s0 + t], 1u);
        }
        // The next batch's sums use the other half of the scratch; the one
        // after waits for this batch's workersSync above.
    };

    auto writeBatch = [&](int j) {
        const int slot = j % r.slots, s0 = j * r.batch, nb = min(r.batch, r.segments - s0);
        const int h = j & 1;
        mbarWait(&written[h], uint32_t(j >> 1) & 1u);
        for (int i = 0; i < nb; ++i) {
            const float4 st = stats[h * kRollMaxBatch + i];
            const float2* gb = affine + ((s0 + i) % a.groups) * chans;
            const uint4* sv = sliceOf(slot, i);
            T* ys = y + int64_t(s0 + i) * segLen + e0;
            ChannelWalk walk = ChannelWalk::from(uint32_t(e0) + uint32_t(t * VEC), uint32_t(NT * VEC), uint32_t(a.hw));
            for (int v = t; v < vecs; v += NT) {
                const float2 ab = gb[walk.next() - chBase];
                const float scale = st.z * ab.x, shift = ab.y - st.y * scale;
                Raw<T, VEC> xv;
                xv.s = sv[v];
                float o[VEC];
                if constexpr (kIsBf16<T>) {
#pragma unroll
                    for (int e = 0; e < VEC; ++e) o[e] = activate(fmaf(xv.get(e) - st.x, scale, shift), a.act);
                } else {
#pragma unroll
                    for (int e = 0; e < VEC; ++e) o[e] = fmaf(xv.get(e) - st.x, scale, shift);
                    activateVec(o, a.act);
                }
                storeVec<T, VEC, Cache::kStreaming, true>(ys + int64_t(v) * VEC, o);
            }
        }
        mbarArrive(&read[h]);
        workersSync();  // the slot has been read: the next copy may land in it
        if (t == 0 && j + r.slots < batches) issue(j + r.slots);
    };

    for (int k = 0; k < batches + r.lag; ++k) {
        if (k >= r.lag) writeBatch(k - r.lag);
        if (k < batches) sumBatch(k);
    }
#endif
}

// ---------------------------------------------------------------- launch ----

// kPre: the pre-add's kernels (the planner gives a pre-add no kStreamNHWCAhead).
template <typename T, bool kPre>
const void* gridKernelT(GridKernel k) {
    switch (k) {
        case GridKernel::kOnChipNHWC: return reinterpret_cast<const void*>(&gnOnChipNHWC<T, false, kPre>);
        case GridKernel::kOnChipNHWCTwoGroups: return reinterpret_cast<const void*>(&gnOnChipNHWC<T, true, kPre>);
        case GridKernel::kOnChipNCHW: return reinterpret_cast<const void*>(&gnPersistentNCHW<T, false, kPre>);
        case GridKernel::kStreamNHWC: return reinterpret_cast<const void*>(&gnStreamNHWC<T, false, kPre>);
        case GridKernel::kStreamNHWCAhead:
            if constexpr (kPre) return nullptr;
            return reinterpret_cast<const void*>(&gnStreamNHWC<T, true>);
        case GridKernel::kStreamNCHW: return reinterpret_cast<const void*>(&gnPersistentNCHW<T, true, kPre>);
        case GridKernel::kRollingNCHW:  // no pre-add (see the planner)
            return kPre ? nullptr : reinterpret_cast<const void*>(&gnRollingNCHW<T>);
    }
    return nullptr;
}

// The driver's tensor-map encoder, looked up on every call (nothing is kept
// between calls). A failed lookup is an answer, not an error: its error is
// taken back out of the thread's last error, unless that held the caller's.
PFN_cuTensorMapEncodeTiled_v12000 tensorMapEncoder() {
    PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
    cudaDriverEntryPointQueryResult found{};
    const cudaError_t before = cudaPeekAtLastError();
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", reinterpret_cast<void**>(&encode), 12000,
                                         cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
        if (before == cudaSuccess) cudaGetLastError();
        return nullptr;
    }
    return encode;
}

// The 2-D tensor map of x for the channel slices: (channels, pixels of all
// images), boxes of one slice's channels by pieceLen rows.
bool encodeSlicesMap(const Plan& plan, CUtensorMap* map) {
    const Problem& p = plan.problem;
    const PFN_cuTensorMapEncodeTiled_v12000 encode = tensorMapEncoder();
    if (encode == nullptr) return false;
    const cuuint64_t dims[2] = {cuuint64_t(p.c), cuuint64_t(p.n * p.hw)};
    const cuuint64_t strides[1] = {cuuint64_t(p.cs) * 2};  // slices are planned in 16 bits only
    const cuuint32_t box[2] = {cuuint32_t(plan.grid.sliceChannels), cuuint32_t(plan.grid.slicePieceLen)};
    const cuuint32_t elementStrides[2] = {1, 1};
    const CUtensorMapDataType type =
        p.dtype == TRTGN_DTYPE_FLOAT16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    return encode(map, type, 2, const_cast<void*>(p.x), dims, strides, box, elementStrides,
                  CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace

const void* gridKernel(GridKernel k, trtgn_dtype_t dtype, bool pre) {
    return dispatchDtype(dtype, static_cast<const void*>(nullptr), [&](auto t) {
        using T = typename decltype(t)::type;
        return pre ? gridKernelT<T, true>(k) : gridKernelT<T, false>(k);
    });
}

bool tensorMapsAvailable() { return tensorMapEncoder() != nullptr; }

cudaError_t launchGrid(const Plan& plan, void* workspace, cudaStream_t stream) {
    const GridPlan& g = plan.grid;
    const bool pre = plan.problem.preAdd();
    const void* kernel = gridKernel(g.kernel, plan.problem.dtype, pre);
    if (kernel == nullptr) return cudaErrorInvalidDeviceFunction;
    GridArgs a = g.args;
    a.partials = static_cast<float2*>(workspace);
    ArgsWith<true, GridArgs> w = argsWith<true>(a, preAddOf(plan.problem));
    OnChipPlan onChip = g.onChip;
    CUtensorMap slicesMap{};
    // The planner asked tensorMapsAvailable(); an encoding that fails now is
    // an error, not a reason to run something else.
    if (a.log2Slices > 0 && !encodeSlicesMap(plan, &slicesMap)) return cudaErrorInvalidValue;
    // The attribute is the function's, for every thread: set to this call's
    // size, another thread's smaller one could land between it and this
    // launch, which would then fail. So every call sets the same value, all
    // that the device allows beside the static shared memory (>= smemBytes).
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, g.smemAttribute);
    if (e != cudaSuccess) return e;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(unsigned(plan.gridX), 1, 1);
    cfg.blockDim = dim3(unsigned(plan.threads), 1, 1);
    cfg.dynamicSmemBytes = g.smemBytes;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeCooperative;  // all blocks resident: the grid barrier is safe
    attr[0].val.cooperative = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    const bool onChipNhwc = g.kernel == GridKernel::kOnChipNHWC || g.kernel == GridKernel::kOnChipNHWCTwoGroups;
    void* args0 = pre ? static_cast<void*>(&w) : static_cast<void*>(&a);
    void* onChipArgs[] = {args0, &onChip, &slicesMap};
    RollPlan roll = g.roll;
    roll.counters = reinterpret_cast<unsigned int*>(static_cast<unsigned char*>(workspace) + g.rollCountersOffset);
    void* rollArgs[] = {args0, &roll};
    void* otherArgs[] = {args0};
    return cudaLaunchKernelExC(&cfg, kernel,
                               onChipNhwc ? onChipArgs : g.kernel == GridKernel::kRollingNCHW ? rollArgs : otherArgs);
}

}  // namespace trtgn
