// The kernels' arguments and the layout rules both the planner (host C++,
// group_norm_plan.cpp) and the kernels (CUDA) follow. Plain structs, passed
// to the kernels by value; every value in them is computed on the host.
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <vector_types.h>  // float2, float4 (host-side definitions)

#include <type_traits>

#ifdef __CUDACC__
#define TRTGN_HD __host__ __device__
#else
#define TRTGN_HD
#endif

namespace trtgn {

TRTGN_HD constexpr int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
TRTGN_HD constexpr int roundUp(int64_t v, int m) { return int((v + m - 1) / m * m); }

// Whether every vector of `vec` channels (they start at multiples of vec)
// holds channels of at most two groups of cpg.
inline bool vectorSpansAtMostTwoGroups(int64_t cpg, int vec) {
    for (int64_t c = 0; c < cpg * vec; c += vec)
        if ((c + vec - 1) / cpg - c / cpg > 1) return false;
    return true;
}

// The pre-add (ABI 4): s = (x + bias[n, c]) + residual, in fp32, in this
// order everywhere, rounded once to the dtype (preSum), so that every block
// and kernel computes the same s (a group's shift k is its first s). Kernels take it as a compile-time flag
// kPre and then an argument struct with a PreAdd appended (ArgsWith): the
// plain kernels keep their argument structs, byte for byte. (Growing a
// struct of 128 bytes changed the plain kernels' code: NVVM then read the
// parameter through its address instead of field by field.)
struct PreAdd {
    const void* bias;      // NULL or [C] ([N, C] where biasNStride == C), fp32 or the dtype (biasFp32)
    const void* residual;  // NULL or x's shape, layout and strides
    void* sum;             // NULL or where s goes, rounded to the dtype (y's strides)
    int64_t biasNStride;   // 0 or C
    int64_t cpg;           // channels a group: group g's first channel is g * cpg
    bool biasFp32;
};

template <typename Args>
struct WithPreAdd : Args {
    PreAdd pre;
};
template <bool kPre, typename Args>
using ArgsWith = typename std::conditional<kPre, WithPreAdd<Args>, Args>::type;

// A kernel's arguments: `args`, with `pre` appended where kPre.
template <bool kPre, typename Args>
inline ArgsWith<kPre, Args> argsWith(const Args& args, const PreAdd& pre) {
    if constexpr (kPre) {
        WithPreAdd<Args> w;
        static_cast<Args&>(w) = args;
        w.pre = pre;
        return w;
    } else {
        (void)pre;
        return args;
    }
}

// ---------------------------------------------------------- clusters ----

// At most 512 threads a block, so the compiler may give each thread up to 128
// registers: the data (4 per 16-byte vector) plus per-element statistics.
constexpr int kClusterMaxThreads = 512;
constexpr int kMaxK = 8;  // blocks a cluster
// Vectors a thread of a pre-add's plan (kPre), of a kernel whose plain plans
// hold up to maxVpt: half, since a thread holds x's and the residual's
// vectors while they load, then s in fp32 (twice a 16-bit vector's
// registers); a quarter in 16 bits for the kernels of per-element sums
// (`sets`: gnFusedSet2, gnFusedNHWC), whose half spilled. The planner and the
// compiled kernels share it.
TRTGN_HD constexpr int kPreMaxVpt(int maxVpt, bool sets, int elementBytes) {
    return sets && elementBytes == 2 ? maxVpt / 4 : maxVpt / 2;
}

struct ClusterArgs {
    const void* x;
    void* y;
    const void* gamma;
    const void* beta;
    int64_t hw;        // pixels per image
    int64_t cs;        // channel stride (NHWC)
    int64_t units;     // NHWC: pixels (= hw); NCHW: vectors per group
    int cpg;           // channels per group
    int setChannels;   // NHWC: channels per set; NCHW: unused
    int vs;            // NHWC: vectors per set
    int vp;            // NHWC: lanes per pixel (power of two >= vs)
    int R;             // NHWC: pixel rows per block; NCHW: threads
    int K;             // blocks per cluster
    int groupsPerN;    // NCHW: G; NHWC: sets per image
    int c;             // channels
    double invCount;   // 1 / elements per group
    float eps;
    int act;
    bool affineFp32;
    // gnFusedGroup (NHWC; log2S) and gnFusedSet2, set on the host so that
    // no division precedes the loads:
    int log2K;            // K = 1 << log2K
    int log2S;            // 1 << log2S blocks a group, each writing its share (splitShape); K == 1
    int rowMagic;         // ceil(65536 / lanes a unit): tid / lanes = tid * rowMagic >> 16 for tid < 512
    int64_t imageStride;  // elements from one image to the next
    int64_t unitStep;     // elements from a thread's vector to its next (R pixels)
    int exact;            // K * R * VPT == units: every vector in range (loads of NHWC gnFusedGroup, gnFusedSet2)
    // NHWC gnFusedGroup only, 32-bit (the planner sends it tensors of under
    // 2^31 elements only):
    uint32_t imageStride32;  // imageStride
    uint32_t unitStep32;     // unitStep
    uint32_t rankStep32;     // VPT * R * cs: from one cluster rank's pixels to the next
    uint32_t rowSkip32;      // cs - lanes * VEC: a row's step beyond its lanes' vectors
};

// --------------------------------------------------------------- grid ----

constexpr int kGridThreads = 512;  // NHWC grid blocks, and NCHW on chip
constexpr int kMaxPieces = 4;      // bulk copies (each with its mbarrier) a tile

struct GridArgs {
    const void* x;
    void* y;
    const void* gamma;
    const void* beta;
    float2* partials;   // workspace, per block and group, d = x - k: float2 (mean of d, M2) streaming NCHW,
                        // double2 (sum d, sum d^2) streaming NHWC, else float2 (sum d, sum d^2)
    double invCount;    // 1 / elements per group
    int64_t hw;         // pixels per image
    int64_t chunk;      // NHWC: pixels per block; NCHW: elements per block
    int64_t pieceLen;   // the same unit, per bulk copy
    int64_t tileCap;    // units of a chunk the tile holds (streaming: the tail; the head is read twice)
    int c, cpg, groups;
    int blocksPer;      // NHWC: blocks per image; NCHW: blocks per (n, group)
    int tileOffset;     // bytes of shared memory before the tile
    // On-chip NHWC in channel slices: c and groups are then a slice's, cs
    // and groupsAll the image's.
    int cs;             // channels a pixel in memory
    int groupsAll;      // groups an image
    int log2Slices;     // 1 << log2Slices slices an image
    float eps;
    int act;
    bool affineFp32;
};

// Streaming NHWC shared memory: mbarriers; the threads' per-channel mean - k
// and M2 [rows per pass][C] (x2), later the per-part group sums [parts][G];
// per group k, then (hi, lo, rstd); then the tile (128-byte aligned).
struct NhwcLayout {
    int sums, groupStats, tile;
};
TRTGN_HD inline NhwcLayout nhwcLayout(int c, int vec, int groups) {
    const int rowsPerPass = kGridThreads / (c / vec);
    NhwcLayout l;
    l.sums = 128;
    const int parts = groups >= kGridThreads ? 1 : kGridThreads / groups;
    const int64_t sums = int64_t(2) * rowsPerPass * c * 4, groupSums = int64_t(16) * parts * groups;
    l.groupStats = l.sums + int(sums > groupSums ? sums : groupSums);
    l.tile = int((l.groupStats + 16 * int64_t(groups) + 127) / 128 * 128);
    return l;
}

// On-chip NHWC (gnOnChipNHWC): shared-memory offsets and the divisions the
// kernel would otherwise make.
struct OnChipPlan {
    int offStats;      // smem: per group float4: (k, ...), later (hi, lo, rstd)
    int offChan;       // smem: the threads' per-channel sums [rowsPerPass][C] (x2)
    int vecsPerPixel;  // C / VEC
    int rowsPerPass;   // kGridThreads / vecsPerPixel
    int tpg;           // threads per group in the reductions: a power of two <= 32
    float invCpg;      // 1 / (C / G), for exact division of small integers
    float invRows;     // 1 / rowsPerPass, the same way
};
inline OnChipPlan onChipPlan(int c, int vec, int groups, int* tileOffset) {
    OnChipPlan q{};
    q.vecsPerPixel = c / vec;
    q.rowsPerPass = kGridThreads / q.vecsPerPixel;
    q.tpg = 1;
    while (q.tpg < 32 && 2 * q.tpg * groups <= kGridThreads) q.tpg *= 2;
    q.invCpg = 1.f / float(c / groups);
    q.invRows = 1.f / float(q.rowsPerPass);
    q.offStats = 128;
    q.offChan = q.offStats + 16 * groups;
    *tileOffset = roundUp(q.offChan + int64_t(8) * q.rowsPerPass * c, 128);
    return q;
}

// NCHW grid shared memory: mbarriers, warp scratch, gamma/beta of the block's
// channels, then the tile.
constexpr int kNchwTable = 256;  // channels of gamma/beta kept in shared memory
constexpr int kNchwHeaderBytes = 128 + 32 * 16 + kNchwTable * 8;
// Threads of an NCHW grid block. Streaming NCHW keeps little state a thread
// (64 registers), so 1024 fit, faster than 512. (NHWC keeps a vector's
// channels' state: 100-128.)
TRTGN_HD constexpr int nchwThreads(bool streaming) { return streaming ? 2 * kGridThreads : kGridThreads; }

// The rolling NCHW grid (gnRollingNCHW): block b holds elements
// [b * chunk, (b + 1) * chunk) of every (n, group) in turn, a "slice", in
// batches of `batch` (n, group)s; shared memory holds `slots` batches. A batch
// is written `lag` batches after it was summed, once every block has added
// its partial (a counter an (n, group)), so x is read once and y written once
// while reads and writes overlap. GridArgs.chunk is the slice's elements.
constexpr int kRollMaxBatch = 8;   // (n, group)s a batch
constexpr int kRollMaxBlocks = 160;  // blocks (SMs) the workspace holds partials for
constexpr int kRollMaxSlots = 16;  // batches in shared memory
constexpr int kRollWarps = kGridThreads / 32;
// Shared memory: an mbarrier a slot (its copies landed) and two a statistics
// half (written, read), the warps' sums (two batches'), the statistics (two
// batches'), gamma/beta of the block's channels [group][channel of the
// slice], each slice's (n, group)'s first vector, then the slices.
constexpr int kRollOffScratch = 2 * kRollMaxSlots * 8;
constexpr int kRollOffStats = kRollOffScratch + 2 * kRollWarps * kRollMaxBatch * 16;
constexpr int kRollOffAffine = kRollOffStats + 2 * kRollMaxBatch * 16;
constexpr int kRollOffFirst = kRollOffAffine + kNchwTable * 8;
constexpr int kRollHeaderBytes = kRollOffFirst + kRollMaxSlots * kRollMaxBatch * 16;
static_assert(kRollHeaderBytes % 128 == 0, "the slices start 128-byte aligned");
struct RollPlan {
    unsigned int* counters;  // workspace: one a (n, group), set by the launcher
    int segments;            // (n, group)s: n * groups
    int batch;               // (n, group)s a batch (<= kRollMaxBatch)
    int slots;               // batches in shared memory (<= kRollMaxSlots)
    int lag;                 // batches summed after a batch and before it is written: slots - 1
    int sliceBytes;          // shared memory a slice takes (chunk elements, 128-byte aligned)
    int chans;               // the most channels a block's slice of a (n, group) touches
};

// ----------------------------------------------------------- two-pass ----

constexpr int kTwoPassThreadsNHWC = 512;  // 2 blocks an SM
constexpr int kTwoPassThreadsNCHW = 256;  // 4 blocks an SM (measured faster on the VAE shapes)
constexpr int kFinalizeThreads = 256;
// Upper bound on the blocks of the statistics kernel, which bounds the
// workspace independently of the GPU model.
constexpr int64_t kMaxStatsBlocks = 1024;

struct TwoPassArgs {
    const void* x;
    void* y;
    const void* gamma;
    const void* beta;
    float2* partials;  // (mean, M2)
    float4* stats;     // (k, mean of x - k, rstd, unused) per (n, group)
    int64_t n, hw, cs, c;
    int64_t cpg, groups;
    int64_t chunkUnits;  // NHWC: pixels per chunk; NCHW: vectors per chunk
    int64_t units;       // NHWC: hw; NCHW: vectors per group
    int chunks;          // chunks per image (NHWC) / per group (NCHW)
    int vb;              // NHWC: vectors per block row
    int rows;            // NHWC: pixel rows per block
    bool groupPartials;  // NHWC: a block's channels are whole groups: one partial per group, not per channel
    float eps;
    int act;
    bool affineFp32;
};

struct FinalizeArgs {
    const void* x;
    const float2* partials;
    float4* stats;
    int64_t kN, kG;       // element offset of the group's first element: n*kN + g*kG
    int64_t nGroups;      // N * G
    int64_t groups;
    int64_t nStride, gStride, chunkStride;
    int64_t members;      // partials per chunk per group: channels (NHWC) or 1 (NCHW)
    int64_t chunks;
    int64_t chunkUnits, totalUnits;  // elements per partial = min(chunkUnits, totalUnits - chunk*chunkUnits) * unitElems
    int64_t unitElems;
    float eps;
};

}  // namespace trtgn
