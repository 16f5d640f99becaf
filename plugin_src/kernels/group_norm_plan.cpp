// The planner (see group_norm_plan.h): the order of the paths, and for each
// the rule that says whether it takes a problem and with which launch. The
// kernels these plans are for: group_norm_cluster.cu, group_norm_grid.cu,
// group_norm_two_pass.cu; the design and its measurements: README.md.
#include "group_norm_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>

namespace trtgn {
namespace {

int elementBytes(trtgn_dtype_t d) { return d == TRTGN_DTYPE_FLOAT32 ? 4 : 2; }

// Appends one verdict to plan->why (what trtgn_describe_plan reports after why=). Returns false,
// so that a rule can reject and say why in one statement.
bool because(Plan* plan, const char* fmt, ...) {
    if (!plan->explain) return false;
    const size_t used = std::strlen(plan->why);
    if (used + 3 >= sizeof(plan->why)) return false;
    char* at = plan->why + used;
    size_t room = sizeof(plan->why) - used;
    if (used > 0) {
        std::memcpy(at, "; ", 3);
        at += 2;
        room -= 2;
    }
    va_list args;
    va_start(args, fmt);
    std::vsnprintf(at, room, fmt, args);
    va_end(args);
    return false;
}

// The 16-byte vector paths (clusters, grid) need aligned pointers and, NHWC,
// whole vectors a pixel (C and the channel stride), NCHW whole vectors a
// channel (H * W).
// The pre-add's residual and sum_out are read and written like x and y.
bool hasVectors(const Problem& p) {
    const int vec = 16 / elementBytes(p.dtype);
    const bool aligned = reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && reinterpret_cast<uintptr_t>(p.y) % 16 == 0 &&
                         reinterpret_cast<uintptr_t>(p.residual) % 16 == 0 &&
                         reinterpret_cast<uintptr_t>(p.sumOut) % 16 == 0;
    return p.layout == TRTGN_LAYOUT_NHWC ? aligned && p.c % vec == 0 && p.cs % vec == 0 : aligned && p.hw % vec == 0;
}

// The problem's pointers and scalars, the same in every path's arguments.
template <typename Args>
Args argsOf(const Problem& p) {
    Args a{};
    a.x = p.x;
    a.y = p.y;
    a.gamma = p.gamma;
    a.beta = p.beta;
    a.eps = p.eps;
    a.act = int(p.act);
    a.affineFp32 = p.affineFp32;
    return a;
}

int64_t gcd64(int64_t a, int64_t b) {
    while (b) {
        const int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

// ---------------------------------------------------------- clusters ----

constexpr int kVptChoices[] = {1, 2, 4, 8, 16, 32};
// Registers a thread needs, for the occupancy estimate of the cost model. A
// pre-add's thread holds s in fp32: twice the registers a vector.
constexpr int clusterRegs(int vpt, bool nhwcSets, bool pre) {
    const int r = (nhwcSets ? 64 : 32) + (pre ? 12 : 6) * vpt;
    return r > 128 ? 128 : r;
}

struct ClusterShape {
    bool ok = false;
    int K = 0, vpt = 0, R = 0, threads = 0;
    int S = 1;        // blocks a group (K == 1): splitShape
    double cost = 0;  // the estimate below, in units of about 1 ns
    bool said = false;  // a forced shape that does not fit: clusterShape wrote why
};

// The kernel a shape is for; each prices a vector and a cluster its own way.
enum class CostKind {
    kNHWCGroup,   // gnFusedGroup, NHWC, whole 16-byte vectors of one group a pixel
    kNHWCSet,     // gnFusedSet2 / gnFusedNHWC: sets of groups, per-element statistics
    kNCHW,        // gnFusedGroup, NCHW
    kNHWCNarrow,  // gnFusedGroup, NHWC, one group a pixel in 4- or 8-byte vectors
};
const char* const kCostKindNames[] = {"nhwc-group", "nhwc-set", "nchw", "nhwc-narrow"};

// The cost model's constants, one row a CostKind, in units of about 1 ns.
// `python -m trt_gn.lab.costmodel fit` fits them to a sweep of every
// (K, VPT) plan, with kClustersOverGridCost, and prints this table (see
// docs/lab/README.md, "Refitting the cost model on a new GPU").
struct CostConstants {
    double wave;      // a wave of clusters
    double vector;    // a vector a thread holds, each wave
    double data;      // a vector of the busiest SM's data, each wave
    double thread;    // a thread of a block, each wave
    double smThread;  // a thread the busiest SM runs, each wave
    double cluster;   // a cluster of more than one block
    double log2K;     // log2 of the blocks a cluster
};
constexpr CostConstants kCost[] = {
    {2000.0, 300.0, 0.03, 2.8, 1.0, 500.0, 320.0},  // kNHWCGroup
    {2000.0, 300.0, 0.03, 2.8, 1.0, 500.0, 320.0},  // kNHWCSet
    {2000.0, 700.0, 0.03, 2.8, 1.0, 500.0, 320.0},  // kNCHW
    {2000.0, 200.0, 0.03, 2.8, 1.0, 250.0, 500.0},  // kNHWCNarrow
};

// A plan named by TRTGN_FORCE_PLAN (builds with TRT_GN_DEBUG_PLANS only):
// the path and, for clusters, the blocks a cluster, vectors a thread and,
// where given, threads a block. planForced parses and plans it.
struct ForcedPlan {
    Path path = Path::kClusters;
    int cluster = 0, vpt = 0, threads = 0;  // threads 0: the fewest that hold the group
};

// Chooses blocks per cluster (K), vectors per thread (VPT) and rows per
// block (R; a block has R * lanes threads) so that `units` fit in K*R*VPT,
// by an estimate of the time. Its terms: a fixed cost per wave; per vector a
// thread holds, its unrolled code (fetched anew on each launch, so code
// length costs time) and, NCHW, two affine loads a vector; the data the
// busiest SM holds; threads a block (barriers over more warps) and threads
// the busiest SM runs (more warps queue for the same memory and barriers); a
// cluster's barrier and distributed-shared-memory stores, growing with K.
// The constants (kCost) are fitted to a sweep of every (K, VPT) plan,
// together with kClustersOverGridCost. Narrow shapes have their own cost a
// vector and a cluster: their best is mostly clusters of 2 for two images,
// which the other kinds' constants price too high.
// force: only the forced (K, VPT[, threads]) is considered; where it breaks
// a rule of the loop, clusterShape says which in out->why (ok false, said).
ClusterShape clusterShape(int64_t units, int lanes, int64_t clusters, int numSMs, int maxK, CostKind kind,
                          bool pre, int elementBytes, int minK = 1, const ForcedPlan* force = nullptr,
                          Plan* out = nullptr) {
    const bool narrow = kind == CostKind::kNHWCNarrow;
    const CostConstants& c = kCost[int(kind)];
    // The range the cost was fitted on; a pre-add's kernels hold fewer.
    const int plainMax = narrow ? 32 : 16;
    const int minVpt = narrow ? 2 : 1,
              maxVpt = pre ? kPreMaxVpt(plainMax, kind == CostKind::kNHWCSet, elementBytes) : plainMax;
    ClusterShape best;
    int64_t g32 = 32, l = lanes;  // rows * lanes must be whole warps
    while (l % 2 == 0 && g32 > 1) {
        l /= 2;
        g32 /= 2;
    }
    const int64_t rowQuantum = g32;  // 32 / gcd(lanes, 32)
    bool forcedSeen = false;
    for (int K = minK; K <= maxK; K *= 2) {
        for (int vpt : kVptChoices) {
            if (vpt < minVpt || vpt > maxVpt) continue;
            if (force && (K != force->cluster || vpt != force->vpt)) continue;
            forcedSeen = true;
            const int64_t perBlock = ceilDiv(units, int64_t(K) * vpt);
            int64_t R = ceilDiv(perBlock, rowQuantum) * rowQuantum;
            if (force && force->threads) {
                if (force->threads % (rowQuantum * lanes) != 0 || force->threads < R * lanes) {
                    because(out, "clusters: threads=%d: this kernel's blocks hold %d threads or more here, in "
                            "steps of %lld", force->threads, int(R * lanes), (long long)(rowQuantum * lanes));
                    break;
                }
                R = force->threads / lanes;
            }
            const int64_t threads = R * lanes;
            if (threads > kClusterMaxThreads) {
                if (force) because(out, "clusters: cluster=%d vpt=%d needs blocks of %lld threads, over %d", K, vpt,
                                   (long long)threads, kClusterMaxThreads);
                continue;
            }
            if (int64_t(K) * R * vpt - units >= int64_t(R) * vpt) {  // a block with nothing to do
                if (force) because(out, "clusters: cluster=%d vpt=%d leaves a block with nothing to do", K, vpt);
                continue;
            }
            const int64_t regs = clusterRegs(vpt, kind == CostKind::kNHWCSet, pre);
            const int64_t bps = std::max<int64_t>(1, std::min<int64_t>(2048 / threads, 65536 / (threads * regs)));
            // Clusters must fit in one GPC: with K >= 4 some SMs stay idle
            // (15, not 16, clusters of 8 one-block SMs fit an H100/H200).
            const int64_t slots = int64_t(numSMs) * bps;
            const int64_t concurrent = std::max<int64_t>(1, K <= 2 ? slots / K : slots * 7 / (8 * K));
            const int64_t waves = ceilDiv(clusters, concurrent);
            const int64_t busy = std::min<int64_t>(bps, ceilDiv(clusters * K, numSMs));
            const double perWave = c.wave + c.vector * vpt + c.data * double(busy * threads * vpt) +
                                   c.thread * double(threads) + c.smThread * double(busy * threads);
            const double cost = double(waves) * perWave + (K > 1 ? c.cluster : 0.0) + c.log2K * std::log2(double(K));
            if (!best.ok || cost < best.cost) {
                best.ok = true;
                best.K = K;
                best.vpt = vpt;
                best.R = int(R);
                best.threads = int(threads);
                best.cost = cost;
            }
        }
    }
    if (force && !best.ok) {
        if (!forcedSeen)
            because(out, "clusters: cluster=%d vpt=%d: this kernel takes clusters of 1 to %d blocks and %d to %d "
                    "vectors a thread, powers of two", force->cluster, force->vpt, maxK, minVpt, maxVpt);
        best.said = true;
    }
    return best;
}

// A shape of single blocks (K = 1) that leaves more than half the SMs idle
// (64 groups, say) runs two blocks a group instead: each loads and sums the
// whole group (the second block's read is served by L2) and writes every
// other vector of its threads (log2S). No exchange between blocks, and half
// the writes, with their SiLU, an SM. Where a thread would hold 4 or more
// vectors, the block takes twice the threads with half the vectors each.
// NHWC groups of whole 16-byte vectors (gnFusedGroup), Hopper: where it was
// measured faster. Not for the 8-byte groups (slower) nor NCHW, whose
// one-block shapes hold one vector a thread.
ClusterShape splitShape(ClusterShape s, int64_t clusters, const Device& dev) {
    if (!s.ok || s.K != 1 || !dev.hopperCode || 2 * clusters > dev.numSMs || s.vpt < 2) return s;
    s.S = 2;
    if (s.vpt >= 4 && 2 * s.threads <= kClusterMaxThreads) {
        s.vpt /= 2;
        s.R *= 2;
        s.threads *= 2;
    }
    return s;
}

bool rejectShape(const ClusterShape& s, double maxCost, int maxK, Plan* out) {
    if (s.said) return false;
    if (!s.ok) return because(out, "clusters: no shape holds a group in %d block%s of %d threads", maxK, maxK > 1 ? "s" : "",
                              kClusterMaxThreads);
    return because(out, "clusters: estimate %.0f not under %.0f", s.cost, maxCost);
}

// Clusters, where a shape's estimated cost is under maxCost. Kernels:
// - gnFusedGroup, one (n, group) a cluster, scalar sums: NCHW, and NHWC
//   where C/G is a multiple of the vector, 16 bytes or, for groups of 12,
//   20, 30 or 60 halves a pixel, 8 or 4 bytes;
// - gnFusedSet2, NHWC where a 16-byte vector spans at most two groups;
// - gnFusedNHWC, any other NHWC: a "set" is lcm(C/G, VEC) channels.
// force: that plan only, at any cost, as it is (no two blocks a group, no
// pairs rule); a rule it breaks is said in out->why.
bool planClusters(const Problem& p, const Device& dev, double maxCost, Plan* out, const ForcedPlan* force = nullptr) {
    const int eb = elementBytes(p.dtype);
    const int VEC = 16 / eb;
    const int maxK = dev.hopperCode ? kMaxK : 1;  // thread-block clusters need Hopper
    const bool pre = p.preAdd();
    if (p.n > 65535 || p.c > (int64_t(1) << 30)) return because(out, "clusters: over 65535 images or 2^30 channels");
    ClusterArgs a = argsOf<ClusterArgs>(p);
    a.hw = p.hw;
    a.cs = p.cs;
    a.cpg = int(p.cpg);
    a.c = int(p.c);
    a.invCount = 1.0 / (double(p.hw) * double(p.cpg));
    ClusterShape s;
    ClusterKernel kernel = ClusterKernel::kGroupNCHW;
    const char* name = "";
    // NHWC sets of one 16-byte vector a pixel (C/G = 8 or 4 in 16 bits, 4 or
    // 2 in fp32) are read as 16-byte pieces C apart, so half of every 32-byte
    // sector an SM fetches belongs to another cluster. Such sets are doubled
    // (two vectors, gnFusedSet2, at most VEC groups a set); priced as doubled
    // sets, the larger tensors go to the on-chip grid instead.
    const int64_t pairSet = 2 * (p.cpg / gcd64(p.cpg, VEC) * VEC);  // two sets of lcm(cpg, VEC) channels
    const bool widen = p.layout == TRTGN_LAYOUT_NHWC && pairSet / VEC == 2 && p.c % pairSet == 0 &&
                       pairSet / p.cpg <= VEC;
    // NHWC groups whose channels fill no whole 16-byte vector a pixel but
    // whole 8-byte ones (C/G = 12, 20, 60 halves; 10 floats), or at least 8
    // 4-byte ones (C/G = 30 halves): one group a cluster, read in 8- or
    // 4-byte vectors, instead of the sets below (several groups a cluster,
    // fewer and larger clusters), which were slower. Not with 5 lanes of 4
    // bytes (C/G = 10 halves): slower than the sets or the grid there.
    const int64_t groupBytes = p.cpg * eb;
    const int narrowBytes = groupBytes % 8 == 0 ? 8 : 4;
    const int64_t narrowLanes = groupBytes / narrowBytes;
    const bool narrowGroups = p.layout == TRTGN_LAYOUT_NHWC && groupBytes % 16 != 0 && groupBytes % 4 == 0 &&
                              narrowLanes <= 32 && (narrowBytes == 8 ? narrowLanes >= 2 : eb == 2 && narrowLanes >= 8);
    // Where they have no shape under maxCost, the sets below are tried.
    if (narrowGroups)
        s = clusterShape(p.hw, int(narrowLanes), p.n * p.groups, dev.numSMs, maxK, CostKind::kNHWCNarrow, pre, eb, 1, force, out);
    // gnFusedGroup's NHWC offsets are 32-bit; larger tensors (thousands of
    // images) take another path.
    const bool fits32 = p.n * p.hw * p.cs < (int64_t(1) << 31);
    int groupVec = VEC;  // elements a vector of the NHWC gnFusedGroup picked
    CostKind kind = CostKind::kNHWCNarrow;
    int64_t costUnits = p.hw, costLanes = narrowLanes, costClusters = p.n * p.groups;  // clusterShape's inputs
    if (narrowGroups && (force || (s.ok && s.cost < maxCost))) {
        if (!s.ok) return rejectShape(s, maxCost, maxK, out);
        if (!fits32) return because(out, "clusters: 2^31 elements or more");
        groupVec = narrowBytes / eb;
        a.vs = int(narrowLanes);
        a.groupsPerN = int(p.groups);
        a.units = p.hw;
        kernel = narrowBytes == 4 ? ClusterKernel::kGroupNHWC4Byte : ClusterKernel::kGroupNHWC8Byte;
        name = narrowBytes == 4 ? "gnFusedGroup<NHWC,4-byte>" : "gnFusedGroup<NHWC,8-byte>";
    } else if (p.layout == TRTGN_LAYOUT_NHWC && !widen && p.cpg % VEC == 0 && p.cpg / VEC <= 32) {
        // Whole vectors per group: one group a cluster, scalar sums.
        const int64_t vs = p.cpg / VEC;
        kind = CostKind::kNHWCGroup;
        costLanes = vs;
        s = clusterShape(p.hw, int(vs), p.n * p.groups, dev.numSMs, maxK, kind, pre, eb, 1, force, out);
        if (!s.ok || s.cost >= maxCost) return rejectShape(s, maxCost, maxK, out);
        if (!fits32) return because(out, "clusters: 2^31 elements or more");
        if (!force) s = splitShape(s, p.n * p.groups, dev);
        a.vs = int(vs);
        a.groupsPerN = int(p.groups);
        a.units = p.hw;
        kernel = ClusterKernel::kGroupNHWC;
        name = "gnFusedGroup<NHWC>";
    } else if (p.layout == TRTGN_LAYOUT_NHWC && vectorSpansAtMostTwoGroups(p.cpg, VEC)) {
        const int64_t setChannels = widen ? pairSet : p.cpg / gcd64(p.cpg, VEC) * VEC;  // lcm(cpg, VEC)
        const int64_t vs = setChannels / VEC;
        if (vs > 32) return because(out, "clusters: a set of over 32 vectors a pixel");
        const int64_t sets = p.c / setChannels;
        kind = CostKind::kNHWCSet;
        costLanes = vs;
        costClusters = p.n * sets;
        s = clusterShape(p.hw, int(vs), p.n * sets, dev.numSMs, maxK, kind, pre, eb, 1, force, out);
        if (!s.ok || s.cost >= maxCost) return rejectShape(s, maxCost, maxK, out);
        a.setChannels = int(setChannels);
        a.vs = int(vs);
        a.groupsPerN = int(sets);
        a.units = p.hw;
        kernel = ClusterKernel::kSet2;
        name = "gnFusedSet2";
    } else if (p.layout == TRTGN_LAYOUT_NHWC) {
        // This kernel wins on small tensors and loses to the two-pass kernels
        // on large ones, where its wide per-thread state costs more than a
        // second read from L2.
        constexpr double kMaxBytes = 8.0 * (1 << 20);
        if (double(p.n) * double(p.hw) * double(p.c) * eb > kMaxBytes)
            return because(out, "clusters: NHWC groups that straddle vectors, over 8 MB");
        const int64_t setChannels = p.cpg / gcd64(p.cpg, VEC) * VEC;  // lcm(cpg, VEC)
        const int64_t vs = setChannels / VEC;
        if (vs > 32) return because(out, "clusters: a set of over 32 vectors a pixel");
        int vp = 1;
        while (vp < vs) vp <<= 1;
        const int64_t sets = p.c / setChannels;
        kind = CostKind::kNHWCSet;
        costLanes = vp;
        costClusters = p.n * sets;
        s = clusterShape(p.hw, vp, p.n * sets, dev.numSMs, maxK, kind, pre, eb, 1, force, out);
        if (!s.ok || s.cost >= maxCost) return rejectShape(s, maxCost, maxK, out);
        a.setChannels = int(setChannels);
        a.vs = int(vs);
        a.vp = vp;
        a.groupsPerN = int(sets);
        a.units = p.hw;
        kernel = ClusterKernel::kSetNHWC;
        name = "gnFusedNHWC";
    } else {
        const int64_t units = p.cpg * p.hw / VEC;
        const int64_t clusters = p.n * p.groups;
        kind = CostKind::kNCHW;
        costUnits = units;
        costLanes = 1;
        s = clusterShape(units, 1, clusters, dev.numSMs, maxK, kind, pre, eb, 1, force, out);
        if (!s.ok || s.cost >= maxCost) return rejectShape(s, maxCost, maxK, out);
        // Where clusters of 2 put one block on each of at least half the SMs
        // (two images of 32 groups: 64 clusters, 128 blocks), 16-bit NCHW runs
        // fastest on them, which the estimate, preferring clusters of 4-8 (2-4
        // blocks an SM), misses. Not for groups under 512 vectors nor fp32
        // (slower there).
        if (!force && eb == 2 && maxK >= 2 && 2 * clusters <= dev.numSMs && 4 * clusters > dev.numSMs && units >= 512) {
            const ClusterShape pairs = clusterShape(units, 1, clusters, dev.numSMs, 2, CostKind::kNCHW, pre, eb, 2);
            if (pairs.ok) s = pairs;
        }
        a.groupsPerN = int(p.groups);
        a.units = units;
        kernel = ClusterKernel::kGroupNCHW;
        name = "gnFusedGroup<NCHW>";
    }
    a.R = s.R;
    a.K = s.K;
    a.log2K = 0;
    while ((1 << a.log2K) < s.K) ++a.log2K;
    a.log2S = s.S == 2 ? 1 : 0;
    const bool nhwc = p.layout == TRTGN_LAYOUT_NHWC;
    const int lanes = nhwc ? a.vs : 1;
    a.rowMagic = (65536 + lanes - 1) / lanes;
    a.imageStride = nhwc ? p.hw * p.cs : p.c * p.hw;
    a.unitStep = int64_t(s.R) * (nhwc ? p.cs : VEC);
    a.exact = int64_t(s.K) * s.R * s.vpt == a.units;
    a.imageStride32 = uint32_t(a.imageStride);
    a.unitStep32 = uint32_t(a.unitStep);
    a.rankStep32 = uint32_t(int64_t(s.vpt) * s.R * p.cs);
    a.rowSkip32 = uint32_t(p.cs - int64_t(a.vs) * groupVec);

    Plan& q = *out;
    const char* withPre = pre ? ", with the pre-add" : "";
    if (force)  // the inputs of the estimate: what the cost model's sweep records of each plan
        because(out, "clusters: estimate %.2f of kind=%s units=%lld lanes=%lld clusters=%lld sms=%d%s", s.cost,
                kCostKindNames[int(kind)], (long long)costUnits, (long long)costLanes, (long long)costClusters,
                dev.numSMs, withPre);
    else if (std::isinf(maxCost))
        because(out, "clusters: estimate %.0f, taken at any cost (no grid)%s", s.cost, withPre);
    else
        because(out, "clusters: estimate %.0f under %.0f%s", s.cost, maxCost, withPre);
    q.path = Path::kClusters;
    q.kernel = name;
    q.vec = groupVec;
    q.gridX = int64_t(a.groupsPerN) * s.K * s.S;
    q.gridY = p.n;
    q.threads = s.threads;
    q.cluster = s.K;
    q.split = s.S;
    q.vpt = s.vpt;
    q.workspace = 0;
    q.clusters = ClusterPlan{kernel, s.vpt, a};
    return true;
}

// --------------------------------------------------------------- grid ----

// Channel slices of the on-chip NHWC grid. A block holds the pixels of one
// slice of an image's channels (whole groups) instead of whole pixels,
// gathered by 2-D bulk copies (cp.async.bulk.tensor, one a piece): its sums
// are of a few groups, and after the grid barrier it reads its slice's
// groups' partials, from 1/slices of the blocks. The rule takes the most
// slices of 64-128 channels whose rows are whole 32-byte sectors, at most
// 128 KB a block, 16 bits only (where it was measured; see docs/lab/HISTORY.md for
// what lost). Returns log2 of the slices an image (0: whole pixels) and sets
// pieceLen. 2-D bulk copies need boxes of at most 256 rows and 256
// channels, rows of 16-byte multiples and 128-byte aligned destinations.
int sliceCount(const Problem& p, const Device& dev, int64_t staticSmem, int64_t* pieceLen) {
    const int eb = elementBytes(p.dtype), VEC = 16 / eb;
    constexpr int64_t kMinSliceChannels = 64, kMaxSliceChannels = 128, kMaxTileBytes = 128 * 1024;
    if (eb != 2) return 0;
    int log2s = 0;
    for (int l = 1; l <= 4; ++l) {
        const int64_t s = int64_t(1) << l, sliceC = p.c / s;
        if (p.c % s == 0 && p.groups % s == 0 && sliceC % VEC == 0 && sliceC >= kMinSliceChannels &&
            sliceC <= kMaxSliceChannels && (sliceC * eb) % 32 == 0)
            log2s = l;
    }
    if (log2s == 0) return 0;
    const int64_t s = int64_t(1) << log2s;
    if (p.n * s > dev.numSMs) return 0;
    const int64_t rowBytes = p.c / s * eb;
    const int64_t chunk = ceilDiv(p.hw, dev.numSMs / (p.n * s));
    const int64_t quantum = 128 / std::gcd(rowBytes, int64_t(128));  // rows a piece: 128-byte aligned pieces
    const int64_t len = ceilDiv(ceilDiv(chunk, kMaxPieces), quantum) * quantum;
    const int64_t tileBytes = kMaxPieces * len * rowBytes;
    int tileOffset = 0;
    onChipPlan(int(p.c / s), VEC, int(p.groups / s), &tileOffset);
    if (len > 256 || tileBytes > kMaxTileBytes || staticSmem + tileOffset + tileBytes > dev.maxSmemOptin) return 0;
    *pieceLen = len;
    return log2s;
}

// The grid (Hopper): one block an SM, all resident (a cooperative launch),
// x held in shared memory across a grid barrier: on chip where each block's
// chunk fits, else streaming (a tile of the chunk on chip, the rest read
// twice) up to the sizes where two passes win. False where the problem does
// not fit this path.
constexpr size_t kAlign = 256;
size_t alignUp(size_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

// The rolling NCHW grid (gnRollingNCHW, see RollPlan): for NCHW tensors over
// the SMs' shared memory, where the other grids read the part that does not
// fit twice. It needs every block's slice of a (n, group) to be whole 16-byte
// vectors of at least kRollMinSlice bytes (smaller slices spend more on the
// exchange than they move), two batches of slices in shared memory, and the
// gamma/beta of a block's channels in its table. The partials take
// n * groups * blocks float2 and a counter an (n, group): workspaceBytes()
// holds them for up to kRollMaxBlocks blocks.
constexpr int64_t kRollMinSlice = 24 << 10;
constexpr int64_t kRollBatchBytes = 64 << 10;  // a batch's slices, about: bytes in flight while one is written
bool planRolling(const Problem& p, const Device& dev, const KernelQueries& queries, GridArgs a, Plan* out) {
    const int eb = elementBytes(p.dtype), VEC = 16 / eb;
    const int64_t segs = p.n * p.groups, segLen = p.cpg * p.hw, blocks = dev.numSMs;
    if (p.preAdd()) return because(out, "rolling grid: not with a pre-add");
    if (segLen > int64_t(UINT32_MAX)) return because(out, "rolling grid: a group of 2^32 elements or more");
    if (blocks > kRollMaxBlocks) return because(out, "rolling grid: over %d SMs", kRollMaxBlocks);
    const int64_t chunk = ceilDiv(ceilDiv(segLen, blocks), VEC) * VEC;
    if (chunk * eb < kRollMinSlice)
        return because(out, "rolling grid: a block's slice of a group (%lld B) under %lld B", (long long)(chunk * eb),
                       (long long)kRollMinSlice);
    int staticSmem = 0;
    out->error = queries.staticSmem(GridKernel::kRollingNCHW, &staticSmem);
    if (out->error != cudaSuccess) return false;
    const int64_t sliceBytes = int64_t(roundUp(chunk * eb, 128));
    const int64_t fit = (int64_t(dev.maxSmemOptin) - staticSmem - kRollHeaderBytes) / sliceBytes;
    int64_t batch = std::min<int64_t>(kRollMaxBatch, ceilDiv(kRollBatchBytes, sliceBytes));
    while (batch > 1 && fit / batch < 3) --batch;  // three slots where they fit: two batches of lag
    int64_t slots = std::min<int64_t>(kRollMaxSlots, fit / batch);
#ifdef TRTGN_DEBUG_PLANS
    // The lab's override (debug builds only): TRTGN_ROLL="off" or "batch slots".
    if (const char* o = std::getenv("TRTGN_ROLL"); o != nullptr && o[0] != '\0') {
        if (std::strcmp(o, "off") == 0) return because(out, "rolling grid: off (TRTGN_ROLL)");
        long ob = 0, os = 0;
        if (std::sscanf(o, "%ld %ld", &ob, &os) == 2 && ob >= 1 && ob <= kRollMaxBatch && os >= 2 &&
            os <= kRollMaxSlots && ob * os <= fit) {
            batch = ob;
            slots = os;
        }
    }
#endif
    if (slots < 2)
        return because(out, "rolling grid: a block's slice of a group (%lld KB) leaves no room for two in shared memory",
                       (long long)(chunk * eb >> 10));
    const int64_t chans = std::min<int64_t>(p.cpg, (chunk - 1) / p.hw + 2);
    if (p.groups * chans > kNchwTable)
        return because(out, "rolling grid: %lld channels of gamma/beta a block, over %d", (long long)(p.groups * chans),
                       kNchwTable);
    const size_t countersOffset = alignUp(size_t(segs * blocks) * sizeof(float2));
    const size_t need = countersOffset + size_t(segs) * sizeof(unsigned int);
    if (need > workspaceBytes(p)) return because(out, "rolling grid: partials over the workspace");

    a.chunk = chunk;
    a.blocksPer = int(blocks);
    a.tileOffset = kRollHeaderBytes;
    a.tileCap = 0;  // nothing is read twice: no tile and head
    a.pieceLen = 0;
    RollPlan r{};
    r.segments = int(segs);
    r.batch = int(batch);
    r.slots = int(slots);
    r.lag = int(slots - 1);
    r.sliceBytes = int(sliceBytes);
    r.chans = int(chans);

    Plan& q = *out;
    because(out, "rolling grid: batches of %d groups, %d in shared memory", r.batch, r.slots);
    q.path = Path::kStreamingGrid;
    q.kernel = "gnRollingNCHW";
    q.vec = VEC;
    q.gridX = blocks;
    q.gridY = 1;
    q.threads = kGridThreads;
    q.slices = 1;
    q.chunk = chunk;
    q.workspace = need;
    GridPlan& g = q.grid;
    g.kernel = GridKernel::kRollingNCHW;
    g.args = a;
    g.onChip = OnChipPlan{};
    g.smemBytes = size_t(kRollHeaderBytes + slots * batch * sliceBytes);
    g.smemAttribute = dev.maxSmemOptin - staticSmem;
    g.sliceChannels = 0;
    g.slicePieceLen = 0;
    g.roll = r;
    g.rollCountersOffset = countersOffset;
    return true;
}

bool planGrid(const Problem& p, const Device& dev, const KernelQueries& queries, Plan* out) {
    const int eb = elementBytes(p.dtype), VEC = 16 / eb;
    if (!dev.hopperCode || dev.maxSmemOptin <= 0) return because(out, "grid: no Hopper code on this device");
    const size_t workspace = workspaceBytes(p);
    GridArgs a = argsOf<GridArgs>(p);
    a.invCount = 1.0 / (double(p.hw) * double(p.cpg));
    a.hw = p.hw;
    a.c = int(p.c);
    a.cpg = int(p.cpg);
    a.groups = int(p.groups);
    a.cs = int(p.c);
    a.groupsAll = int(p.groups);
    a.log2Slices = 0;

    const double bytes = double(p.n) * double(p.c) * double(p.hw) * eb;

    // How far streaming goes (against the two-pass kernels; the head's second
    // read then comes mostly from DRAM and the on-chip tile saves less and
    // less). NHWC: a thread's fp32 sums run over chunk / rowsPerPass rows
    // before they go to double. In 16 bits streaming stops being faster at
    // about 256 rows. fp32 outputs of inputs with |mean| >> std miss their
    // tolerance before that, so fp32 streams up to 160 rows; up to 160 MB
    // everything streams. NCHW sums each vector first, keeps its margin and
    // beat two passes on every size measured, up to 2 GiB.
    const int64_t maxStreamRowsNhwc = eb == 4 ? 160 : 256;
    constexpr double kStreamBytesAny = 160.0 * (1 << 20);
    constexpr double kMaxStreamBytesNchw = 2.0 * (1 << 30);
    const bool nhwc = p.layout == TRTGN_LAYOUT_NHWC;
    int64_t blocks = 0, chunk = 0, unitBytes = 0, unitQuantum = 1;
    size_t need = 0;  // workspace: one partial a block and group
    if (nhwc) {
        // Whole pixels, packed (no padding channels: a bulk copy would read
        // them), a vector column per thread.
        if (p.cs != p.c) return because(out, "grid: padded pixels (channel stride over C)");
        if (p.c / VEC > kGridThreads) return because(out, "grid: over %d vectors a pixel", kGridThreads);
        if (p.n > dev.numSMs) return because(out, "grid: more images (%lld) than SMs (%d)", (long long)p.n, dev.numSMs);
        const int64_t perImage = std::max<int64_t>(1, dev.numSMs / p.n);
        chunk = ceilDiv(p.hw, perImage);
        a.blocksPer = int(ceilDiv(p.hw, chunk));
        a.tileOffset = nhwcLayout(a.c, VEC, a.groups).tile;
        unitBytes = p.c * eb;
        blocks = p.n * a.blocksPer;
        need = size_t(blocks) * size_t(p.groups) * 2 * sizeof(double);  // double2 (streaming)
        if (need > workspace) return because(out, "grid: partials over the workspace");
    } else {
        // Over what the SMs' shared memory holds: the rolling grid, where it applies.
        if (bytes > double(dev.numSMs) * double(dev.maxSmemOptin - kNchwHeaderBytes)) {
            if (planRolling(p, dev, queries, a, out) || out->error != cudaSuccess) return out->error == cudaSuccess;
        }
        const int64_t segs = p.n * p.groups;
        const int64_t segLen = p.cpg * p.hw;
        // (A segment's offsets must fit 32 bits; the size limits below keep
        // them far smaller.)
        if (segs > dev.numSMs)
            return because(out, "grid: more (image, group) pairs (%lld) than SMs (%d)", (long long)segs, dev.numSMs);
        if (segLen > int64_t(UINT32_MAX)) return because(out, "grid: a group of 2^32 elements or more");
        const int64_t perSeg = std::max<int64_t>(1, dev.numSMs / segs);
        chunk = ceilDiv(ceilDiv(segLen, perSeg), VEC) * VEC;
        a.blocksPer = int(ceilDiv(segLen, chunk));
        a.tileOffset = kNchwHeaderBytes;
        unitBytes = eb;
        unitQuantum = VEC;  // the tile and its pieces hold whole vectors
        blocks = segs * a.blocksPer;
        need = size_t(blocks) * 2 * sizeof(float);  // float2
        if (need > workspace) return because(out, "grid: partials over the workspace");
    }
    a.chunk = chunk;

    // The tile holds the whole chunk if it fits; else its tail (streaming).
    // The grid barrier takes some static shared memory of its own.
    GridKernel kernel = !nhwc                                   ? GridKernel::kOnChipNCHW
                        : vectorSpansAtMostTwoGroups(p.cpg, VEC) ? GridKernel::kOnChipNHWCTwoGroups
                                                                 : GridKernel::kOnChipNHWC;
    OnChipPlan onChip{};
    if (nhwc) onChip = onChipPlan(a.c, VEC, a.groups, &a.tileOffset);
    int staticSmem = 0;
    out->error = queries.staticSmem(kernel, &staticSmem);
    if (out->error != cudaSuccess) return false;
    const bool streaming = a.tileOffset + chunk * unitBytes + int64_t(staticSmem) > dev.maxSmemOptin;
    // On-chip NHWC in channel slices where sliceCount finds a plan (and the
    // driver encodes tensor maps): a slice's channels, groups and blocks.
    int64_t slicePieceLen = 0;
    if (nhwc && !streaming) {
        const int log2s = sliceCount(p, dev, staticSmem, &slicePieceLen);
        const int64_t imageSlices = p.n << log2s;
        const int64_t sliceChunk = log2s > 0 ? ceilDiv(p.hw, dev.numSMs / imageSlices) : 0;
        const int64_t stride = (ceilDiv(p.hw, std::max<int64_t>(1, sliceChunk)) + 1) & ~int64_t(1);
        const size_t sliceNeed = size_t(p.n * p.groups * stride) * 2 * sizeof(float);  // float2
        if (log2s > 0 && sliceNeed <= workspace && queries.tensorMaps()) {
            a.log2Slices = log2s;
            a.c = int(p.c >> log2s);
            a.groups = int(p.groups >> log2s);
            chunk = sliceChunk;
            a.chunk = chunk;
            a.blocksPer = int(ceilDiv(p.hw, chunk));
            blocks = imageSlices * a.blocksPer;
            unitBytes = a.c * eb;
            onChip = onChipPlan(a.c, VEC, a.groups, &a.tileOffset);
            need = sliceNeed;
        }
    }
    if (streaming) {
        if (nhwc) {
            a.tileOffset = nhwcLayout(a.c, VEC, a.groups).tile;
            if (bytes > kStreamBytesAny && ceilDiv(chunk, kGridThreads / (p.c / VEC)) > maxStreamRowsNhwc)
                return because(out, "grid: over %.0f MB and %lld rows a thread (two passes are faster)",
                               kStreamBytesAny / (1 << 20), (long long)maxStreamRowsNhwc);
        } else if (bytes > kMaxStreamBytesNchw) {
            return because(out, "grid: NCHW over 2 GiB");
        }
        kernel = nhwc ? GridKernel::kStreamNHWC : GridKernel::kStreamNCHW;
        out->error = queries.staticSmem(kernel, &staticSmem);
        if (out->error != cudaSuccess) return false;
    }
    const int64_t room = int64_t(dev.maxSmemOptin) - int64_t(staticSmem) - a.tileOffset;
    a.tileCap = std::min<int64_t>(chunk, room / (unitBytes * unitQuantum) * unitQuantum);
    // Streaming NHWC: every block's tile holds tileCap pixels of the image's
    // tail, the rest is the head (see headSplit in the kernel).
    if (nhwc && streaming) a.tileCap = std::min<int64_t>(a.tileCap, p.hw / a.blocksPer);
    if (a.tileCap < (streaming ? kMaxPieces * unitQuantum : chunk))
        return because(out, "grid: a block's tile does not fit its shared memory");
    a.pieceLen = ceilDiv(ceilDiv(a.tileCap, kMaxPieces), unitQuantum) * unitQuantum;
    if (a.log2Slices > 0) {  // four whole boxes of slicePieceLen rows (sliceCount checked the room)
        a.pieceLen = slicePieceLen;
        a.tileCap = kMaxPieces * slicePieceLen;
    }
    // Streaming NHWC where at least half the image is head: its second read
    // keeps the next batch in flight while the current one is activated
    // (faster there; with less head it was no faster or slower). Not with a
    // pre-add, whose pairs of vectors (x's and the residual's) leave no
    // registers for a second batch.
    if (nhwc && streaming && !p.preAdd() && 2 * (p.hw - int64_t(a.blocksPer) * a.tileCap) >= p.hw)
        kernel = GridKernel::kStreamNHWCAhead;

    Plan& q = *out;
    const char* withPre = p.preAdd() ? ", with the pre-add" : "";
    if (streaming)
        because(out, "grid: a block's chunk (%lld KB) over its shared memory: streams%s",
                (long long)(chunk * unitBytes >> 10), withPre);
    else
        because(out, "grid: every block's chunk fits its shared memory%s%s",
                a.log2Slices > 0 ? ", in channel slices" : "", withPre);
    q.path = streaming ? Path::kStreamingGrid : Path::kOnChipGrid;
    q.kernel = !nhwc                                      ? "gnPersistentNCHW"
               : kernel == GridKernel::kStreamNHWCAhead ? "gnStreamNHWC<ahead>"
               : streaming                              ? "gnStreamNHWC"
                                                        : "gnOnChipNHWC";
    q.vec = VEC;
    q.gridX = blocks;
    q.gridY = 1;
    q.threads = nhwc ? kGridThreads : nchwThreads(streaming);
    q.slices = 1 << a.log2Slices;
    q.chunk = chunk;
    q.workspace = need;
    GridPlan& g = q.grid;
    g.kernel = kernel;
    g.args = a;
    g.onChip = onChip;
    g.smemBytes = size_t(a.tileOffset + a.tileCap * unitBytes);
    // The launcher sets the kernel's attribute to all that the device allows
    // beside the static shared memory (>= smemBytes): see there.
    g.smemAttribute = dev.maxSmemOptin - staticSmem;
    g.sliceChannels = a.log2Slices > 0 ? a.c : 0;
    g.slicePieceLen = a.log2Slices > 0 ? slicePieceLen : 0;
    return true;
}

// ----------------------------------------------------------- two-pass ----

size_t statsBytes(const Problem& p) { return alignUp(size_t(p.n * p.groups) * sizeof(float4)); }

size_t partialsCapacity(const Problem& p) {
    // NHWC: n * chunks <= max(n, kMaxStatsBlocks) blocks, c partials each.
    // NCHW: n * groups * chunks <= max(n * groups, kMaxStatsBlocks), 1 each;
    // where planRolling may take the problem on some device, its
    // n * groups * (blocks <= kRollMaxBlocks) and its counters in one more
    // float2 an (n, group). The conditions here only hold more as the shape
    // grows, so a TensorRT profile's largest shape asks for enough, and leave
    // the pre-add out, so that it never changes the workspace.
    if (p.layout == TRTGN_LAYOUT_NHWC) return size_t(std::max<int64_t>(p.n, kMaxStatsBlocks)) * size_t(p.c);
    const int64_t twoPass = std::max<int64_t>(p.n * p.groups, kMaxStatsBlocks);
    const int eb = elementBytes(p.dtype);
    const bool rollable = p.groups <= kNchwTable && ceilDiv(p.cpg * p.hw, 16 / eb) * 16 >= kRollMinSlice;
    return size_t(rollable ? std::max<int64_t>(twoPass, p.n * p.groups * (kRollMaxBlocks + 1)) : twoPass);
}

// Statistics (about one wave of blocks, each a chunk of pixels or of a
// group), finalisation (a block a group), application (the same blocks, in
// reverse). Any size, layout and alignment.
void planTwoPass(const Problem& p, bool vectors, const Device& dev, const KernelQueries& queries, Plan* out) {
    const int VEC = vectors ? 16 / elementBytes(p.dtype) : 1;
    TwoPassArgs a = argsOf<TwoPassArgs>(p);
    a.n = p.n;
    a.hw = p.hw;
    a.cs = p.cs;
    a.c = p.c;
    a.cpg = p.cpg;
    a.groups = p.groups;

    FinalizeArgs f{};
    f.x = p.x;
    f.nGroups = p.n * p.groups;
    f.groups = p.groups;
    f.eps = p.eps;

    Plan& q = *out;
    TwoPassPlan& t = q.twoPass;
    int64_t gridX = 0, gridY = 1;
    int threads = 0;
    if (p.layout == TRTGN_LAYOUT_NHWC) {
        t.apply = ApplyKernel::kNHWC;
        const int64_t V = ceilDiv(p.c, VEC);
        a.vb = int(std::min<int64_t>(V, kTwoPassThreadsNHWC));
        a.rows = kTwoPassThreadsNHWC / a.vb;
        const int64_t slices = ceilDiv(V, a.vb);
        int bps = 1;
        q.error = queries.blocksPerSM(t.apply, VEC, a.vb * a.rows, &bps);
        if (q.error != cudaSuccess) return;
        const int64_t target = int64_t(dev.numSMs) * std::max(bps, 1);
        int64_t chunks = ceilDiv(target, p.n * slices);
        chunks = std::min<int64_t>(chunks, std::max<int64_t>(1, kMaxStatsBlocks / p.n));
        chunks = std::max<int64_t>(1, std::min<int64_t>(chunks, p.hw));
        a.chunkUnits = ceilDiv(p.hw, chunks);
        a.chunks = int(ceilDiv(p.hw, a.chunkUnits));
        a.units = p.hw;
        gridX = p.n * a.chunks;
        gridY = slices;
        threads = a.vb * a.rows;
        // Where no group straddles two column slices of blocks, the
        // statistics blocks merge each group's channels themselves.
        a.groupPartials = slices == 1 || (int64_t(a.vb) * VEC) % p.cpg == 0;
        const int64_t perChunk = a.groupPartials ? p.groups : p.c;
        f.nStride = int64_t(a.chunks) * perChunk;
        f.gStride = a.groupPartials ? 1 : p.cpg;
        f.chunkStride = perChunk;
        f.members = a.groupPartials ? 1 : p.cpg;
        f.chunks = a.chunks;
        f.chunkUnits = a.chunkUnits;
        f.totalUnits = p.hw;
        f.unitElems = a.groupPartials ? p.cpg : 1;
        f.kN = p.hw * p.cs;
        f.kG = p.cpg;
    } else {
        const int64_t units = p.cpg * p.hw / VEC;
        t.apply = units * VEC < (int64_t(1) << 32) ? ApplyKernel::kNCHW : ApplyKernel::kNCHWWide;
        int bps = 1;
        q.error = queries.blocksPerSM(t.apply, VEC, kTwoPassThreadsNCHW, &bps);
        if (q.error != cudaSuccess) return;
        const int64_t target = int64_t(dev.numSMs) * std::max(bps, 1);
        const int64_t ng = p.n * p.groups;
        int64_t chunks = ceilDiv(target, ng);
        chunks = std::min<int64_t>(chunks, std::max<int64_t>(1, kMaxStatsBlocks / ng));
        chunks = std::max<int64_t>(1, std::min<int64_t>(chunks, ceilDiv(units, kTwoPassThreadsNCHW)));
        a.chunkUnits = ceilDiv(units, chunks);
        a.chunks = int(ceilDiv(units, a.chunkUnits));
        a.units = units;
        gridX = ng * a.chunks;
        threads = kTwoPassThreadsNCHW;
        f.nStride = p.groups * a.chunks;
        f.gStride = a.chunks;
        f.chunkStride = 1;
        f.members = 1;
        f.chunks = a.chunks;
        f.chunkUnits = a.chunkUnits * VEC;
        f.totalUnits = units * VEC;
        f.unitElems = 1;
        f.kN = p.c * p.hw;
        f.kG = p.cpg * p.hw;
    }
    // CUDA's grid limits (the finaliser launches a block an (n, group)).
    if (gridX > 0x7fffffff || gridY > 65535 || f.nGroups > 0x7fffffff) {
        q.unsupported = "n * num_groups, or the blocks the tensor needs, exceed CUDA's grid limits";
        return;
    }
    const bool nhwc = p.layout == TRTGN_LAYOUT_NHWC;
    if (p.preAdd()) because(out, "two-pass: with the pre-add");
    q.path = Path::kTwoPass;
    q.kernel = nhwc ? "gnStatsNHWC+gnApplyNHWC" : "gnStatsNCHW+gnApplyNCHW";
    q.vec = VEC;
    q.gridX = gridX;
    q.gridY = gridY;
    q.threads = threads;
    q.slices = int(gridY);
    q.chunk = a.chunkUnits;
    q.partials = nhwc ? (a.groupPartials ? "group" : "channel") : "group";
    q.workspace = workspaceBytes(p);
    t.args = a;
    t.finalize = f;
    t.partialsOffset = statsBytes(p);
}

#ifdef TRTGN_DEBUG_PLANS
// ------------------------------------------------------- forced plans ----

// The message of a forced plan that is malformed or cannot run (Plan::invalid).
thread_local char forcedMessage[512];

bool forcedError(Plan* plan, const char* text, const char* fmt, ...) {
    int used = std::snprintf(forcedMessage, sizeof(forcedMessage), "TRTGN_FORCE_PLAN=\"%s\": ", text);
    if (used < 0 || size_t(used) >= sizeof(forcedMessage)) used = 0;
    va_list args;
    va_start(args, fmt);
    std::vsnprintf(forcedMessage + used, sizeof(forcedMessage) - size_t(used), fmt, args);
    va_end(args);
    for (char* c = forcedMessage; *c; ++c)  // one line, whatever the variable holds
        if (*c == '\n' || *c == '\r') *c = ' ';
    plan->invalid = forcedMessage;
    return false;
}

// "path=P [cluster=K vpt=V [threads=T]]", keys in any order, separated by
// white space; P is a name of pathName(); cluster and vpt are required for
// clusters and belong to it alone, as does threads.
bool parseForced(const char* text, ForcedPlan* f, Plan* plan) {
    bool seen[4] = {false, false, false, false};
    const char* const keys[] = {"path", "cluster", "vpt", "threads"};
    auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
    for (const char* at = text; *at;) {
        while (space(*at)) ++at;
        if (!*at) break;
        const char* end = at;
        while (*end && !space(*end)) ++end;
        const char* eq = static_cast<const char*>(std::memchr(at, '=', size_t(end - at)));
        const int len = int(end - at);
        if (eq == nullptr || eq == at || eq + 1 == end)
            return forcedError(plan, text, "\"%.*s\" is not key=value (keys: path, cluster, vpt, threads)", len, at);
        const int keyLen = int(eq - at);
        int key = 0;
        while (key < 4 && !(std::strlen(keys[key]) == size_t(keyLen) && std::strncmp(at, keys[key], size_t(keyLen)) == 0))
            ++key;
        if (key == 4) return forcedError(plan, text, "unknown key \"%.*s\" (keys: path, cluster, vpt, threads)", keyLen, at);
        if (seen[key]) return forcedError(plan, text, "%s given twice", keys[key]);
        seen[key] = true;
        const char* value = eq + 1;
        const int valueLen = int(end - value);
        if (key == 0) {
            int k = 0;
            while (k < 4 && !(std::strlen(pathName(Path(k))) == size_t(valueLen) &&
                              std::strncmp(value, pathName(Path(k)), size_t(valueLen)) == 0))
                ++k;
            if (k == 4)
                return forcedError(plan, text, "unknown path \"%.*s\" (paths: clusters, on-chip-grid, streaming-grid, "
                                   "two-pass)", valueLen, value);
            f->path = Path(k);
        } else {
            long v = 0;
            for (const char* d = value; d < end; ++d) {
                if (*d < '0' || *d > '9' || v > 100000)
                    return forcedError(plan, text, "%s=%.*s is not a positive integer", keys[key], valueLen, value);
                v = v * 10 + (*d - '0');
            }
            if (v < 1) return forcedError(plan, text, "%s=%.*s is not a positive integer", keys[key], valueLen, value);
            (key == 1 ? f->cluster : key == 2 ? f->vpt : f->threads) = int(v);
        }
        at = end;
    }
    if (!seen[0]) return forcedError(plan, text, "no path= (paths: clusters, on-chip-grid, streaming-grid, two-pass)");
    if (f->path == Path::kClusters && (!seen[1] || !seen[2]))
        return forcedError(plan, text, "path=clusters needs cluster= and vpt=");
    if (f->path != Path::kClusters && (seen[1] || seen[2] || seen[3]))
        return forcedError(plan, text, "cluster=, vpt= and threads= belong to path=clusters");
    return true;
}

// The forced plan, through the same rules and launch values as any plan, or
// Plan::invalid naming the rule it breaks. Nothing else is tried.
void planForced(const Problem& p, const Device& dev, const KernelQueries& queries, const char* text, Plan* plan) {
    ForcedPlan f;
    if (!parseForced(text, &f, plan)) return;
    plan->explain = true;  // the verdicts say why a forced plan cannot run
    because(plan, "forced (TRTGN_FORCE_PLAN)");
    const size_t said = std::strlen(plan->why) + 2;
    const bool vectors = hasVectors(p);
    bool ok = true;
    if (f.path == Path::kTwoPass) {
        planTwoPass(p, vectors, dev, queries, plan);
    } else if (!vectors) {
        ok = because(plan, "no 16-byte vectors (x, y 16-byte aligned; NHWC C and channel stride, NCHW H*W, "
                     "multiples of %d)", 16 / elementBytes(p.dtype));
    } else if (f.path == Path::kClusters) {
        ok = planClusters(p, dev, std::numeric_limits<double>::infinity(), plan, &f);
    } else {
        ok = planGrid(p, dev, queries, plan);
        if (ok && plan->path != f.path)
            ok = because(plan, "so %s, not %s", pathName(plan->path), pathName(f.path));
    }
    if (plan->error != cudaSuccess || plan->unsupported != nullptr) return;
    if (!ok) forcedError(plan, text, "cannot run on this problem: %s", plan->why + std::min(said, std::strlen(plan->why)));
}
#endif

}  // namespace

const char* pathName(Path p) {
    switch (p) {
        case Path::kClusters: return "clusters";
        case Path::kOnChipGrid: return "on-chip-grid";
        case Path::kStreamingGrid: return "streaming-grid";
        case Path::kTwoPass: return "two-pass";
    }
    return "";
}

size_t workspaceBytes(const Problem& p) { return statsBytes(p) + alignUp(partialsCapacity(p) * sizeof(float2)); }

Plan planGroupNorm(const Problem& p, const Device& dev, const KernelQueries& queries, bool explain) {
    Plan plan;
    plan.problem = p;
    plan.explain = explain;
#ifdef TRTGN_DEBUG_PLANS
    if (const char* force = std::getenv("TRTGN_FORCE_PLAN"); force != nullptr && force[0] != '\0') {
        planForced(p, dev, queries, force, &plan);
        return plan;
    }
#endif
    const bool vectors = hasVectors(p);
    if (!vectors) {
        because(&plan,
                "no 16-byte vectors (x, y%s 16-byte aligned; NHWC C and channel stride, NCHW H*W, multiples of %d)",
                p.residual != nullptr || p.sumOut != nullptr ? ", residual, sum_out" : "", 16 / elementBytes(p.dtype));
    } else {
        if (planClusters(p, dev, kClustersOverGridCost, &plan)) return plan;
        if (planGrid(p, dev, queries, &plan) || plan.error != cudaSuccess) return plan;
        const size_t said = std::strlen(plan.why);
        if (planClusters(p, dev, std::numeric_limits<double>::infinity(), &plan)) return plan;
        // The same verdict as the first try's (no shape fits, say) is said once.
        if (std::strlen(plan.why) > said + 2 && std::strstr(plan.why, plan.why + said + 2) < plan.why + said)
            plan.why[said] = '\0';
    }
    planTwoPass(p, vectors, dev, queries, &plan);
    return plan;
}

}  // namespace trtgn
