// The planner on described devices, without a GPU: the path each listed case
// takes, and the invariants every plan must keep over a sweep of the input
// space (the launch limits, the workspace bound, which devices may run what).
// Exit status 0 when every check passes; one line per failure.
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "group_norm_plan.h"

using namespace trtgn;

namespace {

int failures = 0, checks = 0;

#define CHECK(cond, ...)                                   \
    do {                                                   \
        ++checks;                                          \
        if (!(cond)) {                                     \
            ++failures;                                    \
            std::printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            std::printf(__VA_ARGS__);                      \
            std::printf("\n");                             \
        }                                                  \
    } while (0)

// What the CUDA runtime answers for this library's sm_90 kernels: static
// shared memory and registers as ptxas reports them (16-bit builds), and
// the occupancy calculator's rule (65536 registers an SM, allocated 256 a
// warp; 2048 threads, 32 blocks).
struct Sm90Queries final : KernelQueries {
    bool maps = true;
    cudaError_t fail = cudaSuccess;
    cudaError_t staticSmem(GridKernel k, int* bytes) const override {
        *bytes = k == GridKernel::kOnChipNCHW ? 128 : 0;
        return fail;
    }
    cudaError_t blocksPerSM(ApplyKernel k, int vec, int threads, int* blocks) const override {
        const bool v = vec > 1;
        const int regs = k == ApplyKernel::kNHWC ? (v ? 64 : 40) : k == ApplyKernel::kNCHW ? (v ? 63 : 44) : (v ? 56 : 40);
        const int warps = (threads + 31) / 32;
        const int perWarp = (regs * 32 + 255) / 256 * 256;
        int b = 65536 / (perWarp * warps);
        b = b < 2048 / threads ? b : 2048 / threads;
        *blocks = b < 32 ? b : 32;
        return fail;
    }
    bool tensorMaps() const override { return maps; }
};

struct NamedDevice {
    const char* name;
    Device dev;
};
// H100 SXM and H200: 132 SMs, 227 KB of shared memory a block. An 8.9 GPU
// (L40S: 142 SMs, 99 KB). An H100 running a build without sm_90 (its
// kernels from compute_80 PTX: no Hopper code).
const NamedDevice kH100{"H100", {132, true, 232448}};
const NamedDevice kH200{"H200", {132, true, 232448}};
const NamedDevice kL40S{"8.9 GPU", {142, false, 101376}};
const NamedDevice kH100NoSm90{"H100, build without sm_90", {132, false, 232448}};

Problem problem(int64_t n, int64_t c, int64_t h, int64_t w, int64_t g, trtgn_dtype_t dtype, trtgn_layout_t layout,
                int64_t cs = 0, uintptr_t misalign = 0) {
    Problem p{};
    p.x = reinterpret_cast<const void*>(uintptr_t(1) << 30 | misalign);
    p.y = reinterpret_cast<void*>(uintptr_t(2) << 30);
    p.n = n;
    p.c = c;
    p.hw = h * w;
    p.groups = g;
    p.cpg = c / g;
    p.cs = cs ? cs : c;
    p.layout = layout;
    p.dtype = dtype;
    p.act = TRTGN_ACTIVATION_SILU;
    p.eps = 1e-5f;
    p.gamma = reinterpret_cast<const void*>(uintptr_t(3) << 30);
    p.beta = reinterpret_cast<const void*>(uintptr_t(4) << 30);
    p.affineFp32 = false;
    return p;
}

// The problem with a pre-add: a per-image bias, a residual (`misalign` bytes
// off 16) and sum_out.
Problem withPreAdd(Problem p, uintptr_t misalign = 0) {
    p.preBias = reinterpret_cast<const void*>(uintptr_t(5) << 30);
    p.preBiasNStride = p.c;
    p.residual = reinterpret_cast<const void*>(uintptr_t(6) << 30 | misalign);
    p.sumOut = reinterpret_cast<void*>(uintptr_t(7) << 30);
    return p;
}

// The most vectors a thread of a pre-add's cluster plan with q's kernel (kernels of 4- and 8-byte
// vectors hold up to 32 in plain plans, the others up to 16).
int preMaxVpt(const Plan& q) {
    const ClusterKernel k = q.clusters.kernel;
    const bool narrow = k == ClusterKernel::kGroupNHWC8Byte || k == ClusterKernel::kGroupNHWC4Byte;
    const bool sets = k == ClusterKernel::kSet2 || k == ClusterKernel::kSetNHWC;
    return kPreMaxVpt(narrow ? 32 : 16, sets, q.problem.dtype == TRTGN_DTYPE_FLOAT32 ? 4 : 2);
}

std::string describe(const Plan& q) {
    char buf[256];
    std::snprintf(buf, sizeof(buf), "%s %s cluster=%d split=%d vpt=%d slices=%d vec=%d blocks=%" PRId64,
                  pathName(q.path), q.kernel, q.cluster, q.split, q.vpt, q.slices, q.vec, q.gridX * q.gridY);
    return buf;
}

// ---- the path of listed cases ----

struct Expect {
    const char* name;
    int64_t n, c, h, w, g;
    trtgn_layout_t layout;
    Path path;
    int cluster;  // clusters: blocks a cluster; grid: channel slices; 0: not checked
};

constexpr trtgn_layout_t NHWC = TRTGN_LAYOUT_NHWC, NCHW = TRTGN_LAYOUT_NCHW;

// The diffusion shape list (trt_gn/lab/shapes.py) on an H100 or H200, in 16
// bits: the plans trtgn_describe_plan reported there.
const Expect kHopperShapes[] = {
    {"sd15-unet-320x64", 2, 320, 64, 64, 32, NHWC, Path::kOnChipGrid, 4},
    {"sd15-unet-320x64", 2, 320, 64, 64, 32, NCHW, Path::kClusters, 2},
    {"sd15-unet-640x32", 2, 640, 32, 32, 32, NHWC, Path::kClusters, 2},
    {"sd15-unet-640x32", 2, 640, 32, 32, 32, NCHW, Path::kClusters, 2},
    {"sd15-unet-1280x16", 2, 1280, 16, 16, 32, NHWC, Path::kClusters, 1},
    {"sd15-unet-1280x16", 2, 1280, 16, 16, 32, NCHW, Path::kClusters, 2},
    {"sd15-unet-1280x8", 2, 1280, 8, 8, 32, NHWC, Path::kClusters, 1},
    {"sd15-unet-1280x8", 2, 1280, 8, 8, 32, NCHW, Path::kClusters, 1},
    {"sd15-unet-2560x8", 2, 2560, 8, 8, 32, NHWC, Path::kClusters, 1},
    {"sd15-unet-2560x8", 2, 2560, 8, 8, 32, NCHW, Path::kClusters, 2},
    {"sdxl-unet-320x128", 2, 320, 128, 128, 32, NHWC, Path::kOnChipGrid, 1},
    {"sdxl-unet-320x128", 2, 320, 128, 128, 32, NCHW, Path::kOnChipGrid, 1},
    {"sdxl-unet-640x64", 2, 640, 64, 64, 32, NHWC, Path::kOnChipGrid, 8},
    {"sdxl-unet-640x64", 2, 640, 64, 64, 32, NCHW, Path::kOnChipGrid, 1},
    {"vae-dec-512x128", 1, 512, 128, 128, 32, NHWC, Path::kOnChipGrid, 8},
    {"vae-dec-512x128", 1, 512, 128, 128, 32, NCHW, Path::kOnChipGrid, 1},
    {"vae-dec-256x512", 1, 256, 512, 512, 32, NHWC, Path::kStreamingGrid, 0},
    {"vae-dec-256x512", 1, 256, 512, 512, 32, NCHW, Path::kStreamingGrid, 0},
    {"vae-dec-128x512", 1, 128, 512, 512, 32, NHWC, Path::kStreamingGrid, 0},
    {"vae-dec-128x512", 1, 128, 512, 512, 32, NCHW, Path::kStreamingGrid, 0},
    {"sdxl-vae-dec-512x256", 1, 512, 256, 256, 32, NHWC, Path::kStreamingGrid, 0},
    {"sdxl-vae-dec-512x256", 1, 512, 256, 256, 32, NCHW, Path::kStreamingGrid, 0},
    {"sdxl-vae-dec-256x1024", 1, 256, 1024, 1024, 32, NHWC, Path::kTwoPass, 0},
    {"sdxl-vae-dec-256x1024", 1, 256, 1024, 1024, 32, NCHW, Path::kStreamingGrid, 0},
    {"sdxl-vae-dec-128x1024", 1, 128, 1024, 1024, 32, NHWC, Path::kStreamingGrid, 0},
    {"sdxl-vae-dec-128x1024", 1, 128, 1024, 1024, 32, NCHW, Path::kStreamingGrid, 0},
};

// Without Hopper code (an 8.9 GPU, or a build without sm_90): single-block
// clusters where the group fits one block's registers, else two passes.
const Expect kNoHopperShapes[] = {
    {"sd15-unet-1280x8", 2, 1280, 8, 8, 32, NHWC, Path::kClusters, 1},
    {"sd15-unet-1280x8", 2, 1280, 8, 8, 32, NCHW, Path::kClusters, 1},
    {"sd15-unet-2560x8", 2, 2560, 8, 8, 32, NCHW, Path::kClusters, 1},
    {"sd15-unet-640x32", 2, 640, 32, 32, 32, NHWC, Path::kClusters, 1},
    {"sdxl-unet-320x128", 2, 320, 128, 128, 32, NHWC, Path::kTwoPass, 0},
    {"vae-dec-512x128", 1, 512, 128, 128, 32, NHWC, Path::kTwoPass, 0},
    {"vae-dec-256x512", 1, 256, 512, 512, 32, NCHW, Path::kTwoPass, 0},
    {"sdxl-vae-dec-128x1024", 1, 128, 1024, 1024, 32, NHWC, Path::kTwoPass, 0},
};

void checkExpect(const NamedDevice& d, const Expect& e, trtgn_dtype_t dtype) {
    const Sm90Queries queries;
    const Plan q = planGroupNorm(problem(e.n, e.c, e.h, e.w, e.g, dtype, e.layout), d.dev, queries, true);
    const char* layout = e.layout == NHWC ? "NHWC" : "NCHW";
    CHECK(q.error == cudaSuccess && q.unsupported == nullptr, "%s %s %s: no plan", d.name, e.name, layout);
    CHECK(q.path == e.path, "%s %s %s dtype %d: expected %s, planned %s", d.name, e.name, layout, int(dtype),
          pathName(e.path), describe(q).c_str());
    if (e.path == Path::kClusters && e.cluster)
        CHECK(q.cluster == e.cluster, "%s %s %s: expected clusters of %d, planned %s", d.name, e.name, layout,
              e.cluster, describe(q).c_str());
    if (e.path == Path::kOnChipGrid && e.cluster)
        CHECK(q.slices == e.cluster, "%s %s %s: expected %d slices, planned %s", d.name, e.name, layout, e.cluster,
              describe(q).c_str());
}

// ---- invariants over a sweep ----

struct Lcg {
    uint64_t s;
    uint32_t next() {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        return uint32_t(s >> 33);
    }
    int64_t in(int64_t lo, int64_t hi) { return lo + int64_t(next() % uint64_t(hi - lo + 1)); }
    int64_t logIn(int64_t lo, int64_t hi) {  // log-uniform
        const double u = double(next()) / 4294967296.0;
        const int64_t v = int64_t(double(lo) * std::pow(double(hi + 1) / double(lo), u));
        return v < lo ? lo : v > hi ? hi : v;
    }
};

void checkInvariants(const NamedDevice& d, const Problem& p, const Plan& q, int* pathCount) {
    char what[200];
    std::snprintf(what, sizeof(what), "%s n=%" PRId64 " c=%" PRId64 " hw=%" PRId64 " g=%" PRId64 " cs=%" PRId64
                  " dtype=%d %s -> %s", d.name, p.n, p.c, p.hw, p.groups, p.cs, int(p.dtype),
                  p.layout == NHWC ? "NHWC" : "NCHW", describe(q).c_str());
    CHECK(q.error == cudaSuccess && q.unsupported == nullptr, "%s: no plan", what);
    ++pathCount[int(q.path)];
    CHECK(q.why[0] != '\0' && (q.path != Path::kClusters || std::strstr(q.why, "clusters: estimate") != nullptr),
          "%s: why %s", what, q.why);
    CHECK(q.workspace <= workspaceBytes(p), "%s: workspace %zu over the bound %zu", what, q.workspace,
          workspaceBytes(p));
    // (Two-pass NHWC blocks are vb * rows threads: 257 to 512, not always whole warps.)
    CHECK(q.gridX >= 1 && q.gridX <= 0x7fffffff && q.gridY >= 1 && q.gridY <= 65535 && q.threads >= 32 &&
              q.threads <= 1024 && (q.threads % 32 == 0 || (q.path == Path::kTwoPass && p.layout == NHWC)),
          "%s: launch shape out of CUDA's limits", what);
    const int vec = 16 / (p.dtype == TRTGN_DTYPE_FLOAT32 ? 4 : 2);
    const bool aligned = (reinterpret_cast<uintptr_t>(p.x) | reinterpret_cast<uintptr_t>(p.y) |
                          reinterpret_cast<uintptr_t>(p.residual) | reinterpret_cast<uintptr_t>(p.sumOut)) % 16 == 0;
    // Every path runs a pre-add and says so.
    CHECK(q.unsupported != nullptr || p.preAdd() == (std::strstr(q.why, "with the pre-add") != nullptr),
          "%s: why %s", what, q.why);
    const bool vectors = p.layout == NHWC ? aligned && p.c % vec == 0 && p.cs % vec == 0 : aligned && p.hw % vec == 0;
    switch (q.path) {
        case Path::kClusters: {
            const ClusterArgs& a = q.clusters.args;
            CHECK(vectors, "%s: clusters without 16-byte vectors", what);
            CHECK(q.cluster >= 1 && q.cluster <= (d.dev.hopperCode ? kMaxK : 1), "%s: cluster size", what);
            CHECK(q.threads <= kClusterMaxThreads && q.gridY == p.n, "%s: cluster launch", what);
            CHECK(int64_t(a.K) * a.R * q.clusters.vpt >= a.units, "%s: the units do not fit the cluster", what);
            CHECK(q.workspace == 0, "%s: clusters use no workspace", what);
            // A pre-add's thread holds s in fp32: fewer vectors.
            CHECK(!p.preAdd() || q.clusters.vpt <= preMaxVpt(q), "%s: %d vectors a thread with a pre-add", what,
                  q.clusters.vpt);
            break;
        }
        case Path::kOnChipGrid:
        case Path::kStreamingGrid: {
            const GridPlan& g = q.grid;
            CHECK(d.dev.hopperCode && vectors, "%s: grid without Hopper code or vectors", what);
            CHECK(q.gridX <= d.dev.numSMs, "%s: more blocks than SMs (one resident an SM)", what);
            CHECK(g.smemBytes <= size_t(g.smemAttribute) && g.smemAttribute <= d.dev.maxSmemOptin,
                  "%s: shared memory %zu over %d", what, g.smemBytes, g.smemAttribute);
            CHECK((q.path == Path::kOnChipGrid) == (g.args.tileCap >= g.args.chunk), "%s: on chip iff the chunk fits",
                  what);
            CHECK(q.slices == 1 || (p.dtype != TRTGN_DTYPE_FLOAT32 && g.sliceChannels * q.slices == p.c),
                  "%s: slices", what);
            if (g.kernel == GridKernel::kRollingNCHW) {
                const RollPlan& r = g.roll;
                const int64_t segs = p.n * p.groups, segLen = p.cpg * p.hw, chunk = g.args.chunk;
                CHECK(p.layout == NCHW && !p.preAdd() && q.gridX == d.dev.numSMs && r.segments == segs,
                      "%s: rolling grid", what);
                CHECK(chunk % vec == 0 && chunk * q.gridX >= segLen && (chunk - vec) * q.gridX < segLen &&
                          r.sliceBytes >= chunk * (16 / vec) && r.sliceBytes % 128 == 0,
                      "%s: rolling slices", what);
                CHECK(r.batch >= 1 && r.batch <= kRollMaxBatch && r.slots >= 2 && r.slots <= kRollMaxSlots &&
                          r.lag == r.slots - 1 &&
                          g.smemBytes == size_t(kRollHeaderBytes) + size_t(r.slots) * r.batch * r.sliceBytes,
                      "%s: rolling batches", what);
                CHECK(p.groups * r.chans <= kNchwTable && (chunk - 1) / p.hw + 1 <= r.chans, "%s: rolling table", what);
                CHECK(g.rollCountersOffset >= size_t(segs * q.gridX) * 8 && g.rollCountersOffset % 256 == 0 &&
                          q.workspace == g.rollCountersOffset + size_t(segs) * 4,
                      "%s: rolling workspace", what);
                ++pathCount[4];
            }
            break;
        }
        case Path::kTwoPass:
            CHECK(q.vec == (vectors ? vec : 1), "%s: two-pass vector", what);
            CHECK(q.workspace == workspaceBytes(p), "%s: two-pass workspace", what);
            break;
    }
}

void sweep(const NamedDevice& d, int cases, uint64_t seed) {
    Lcg r{seed}, pre{seed + 1};
    int pathCount[5] = {0, 0, 0, 0, 0}, planned = 0;  // [4]: rolling grid plans
    const Sm90Queries queries;
    for (int i = 0; i < cases; ++i) {
        const trtgn_dtype_t dtype = trtgn_dtype_t(r.in(0, 2));
        const trtgn_layout_t layout = r.in(0, 1) ? NHWC : NCHW;
        // Half the channel counts whole 16-byte vectors (the paths 1-3 need them).
        const int64_t c = r.in(0, 1) ? 8 * r.logIn(1, 512) : r.logIn(1, 4096);
        int64_t g = 1;  // a divisor of c
        for (int t = 0; t < 8; ++t) {
            const int64_t cand = r.logIn(1, c);
            if (c % cand == 0) g = cand;
        }
        if (r.in(0, 3) == 0 && c % 32 == 0) g = 32;
        // At most 2^28 elements (the fuzz command's space): h and w drawn within what n and c leave.
        // A quarter are VAE-like (few images, large pixels), where the grids stream and two passes take over.
        const bool large = r.in(0, 3) == 0;
        const int64_t n = large ? r.in(1, 4) : r.logIn(1, 64), room = (int64_t(1) << 28) / (n * c);
        if (room < 1) continue;
        const int64_t hMin = large ? std::min<int64_t>(room, 128) : 1;
        const int64_t h = r.logIn(hMin, std::min<int64_t>(512, room));
        const int64_t w = r.logIn(std::min<int64_t>(hMin, room / h), std::min<int64_t>(512, room / h));
        ++planned;
        const int64_t cs = layout == NHWC && r.in(0, 7) == 0 ? c + r.in(1, 16) : c;
        const uintptr_t misalign = r.in(0, 15) == 0 ? 2 * uintptr_t(r.in(1, 7)) : 0;
        Problem p = problem(n, c, h, w, g, dtype, layout, cs, misalign);
        // A third with a pre-add (drawn apart, so the other draws stay the same), some of them
        // with a residual off the vector alignment.
        if (pre.in(0, 2) == 0) p = withPreAdd(p, pre.in(0, 7) == 0 ? 2 * uintptr_t(pre.in(1, 7)) : 0);
        const Plan q = planGroupNorm(p, d.dev, queries, true);
        checkInvariants(d, p, q, pathCount);
        // A launch's plan (no text) is the same plan.
        const Plan l = planGroupNorm(p, d.dev, queries, false);
        CHECK(l.why[0] == '\0' && l.path == q.path && l.gridX == q.gridX && l.gridY == q.gridY &&
                  l.threads == q.threads && std::strcmp(l.kernel, q.kernel) == 0 && l.workspace == q.workspace,
              "%s: the launch's plan differs from the described one", describe(q).c_str());
    }
    std::printf("%s: %d cases planned: clusters %d, on-chip grid %d, streaming grid %d (rolling %d), two-pass %d\n",
                d.name, planned, pathCount[int(Path::kClusters)], pathCount[int(Path::kOnChipGrid)],
                pathCount[int(Path::kStreamingGrid)], pathCount[4], pathCount[int(Path::kTwoPass)]);
    if (d.dev.hopperCode) {
        for (int k = 0; k < 4; ++k) CHECK(pathCount[k] > 0, "%s: the sweep never reached path %s", d.name, pathName(Path(k)));
        CHECK(pathCount[4] > 0, "%s: the sweep never reached the rolling grid", d.name);
    } else {
        CHECK(pathCount[int(Path::kOnChipGrid)] + pathCount[int(Path::kStreamingGrid)] == 0, "%s: grid planned",
              d.name);
    }
}

#ifdef TRTGN_DEBUG_PLANS
// ---- forced plans (TRTGN_FORCE_PLAN, builds with TRT_GN_DEBUG_PLANS) ----

Plan forced(const char* spec, const Problem& p, const Device& dev, bool explain = true) {
    const Sm90Queries queries;
    setenv("TRTGN_FORCE_PLAN", spec, 1);
    const Plan q = planGroupNorm(p, dev, queries, explain);
    unsetenv("TRTGN_FORCE_PLAN");
    return q;
}

void checkRejected(const char* spec, const Problem& p, const Device& dev, const char* why) {
    const Plan q = forced(spec, p, dev);
    std::string expected = std::string("TRTGN_FORCE_PLAN=\"") + spec + "\": " + why;
    for (char& c : expected)
        if (c == '\n') c = ' ';
    CHECK(q.invalid != nullptr && expected == q.invalid, "%s: expected \"%s\", got \"%s\" (%s)", spec,
          expected.c_str(), q.invalid ? q.invalid : "(accepted)", describe(q).c_str());
}

void checkForcedPlans() {
    const Sm90Queries queries;
    int pathCount[5] = {0, 0, 0, 0, 0};
    // sd15-unet-640x32 NCHW fp16: 2560 vectors a group, 64 clusters.
    const Problem nchw = problem(2, 640, 32, 32, 32, TRTGN_DTYPE_FLOAT16, NCHW);
    {
        const Plan q = forced("path=clusters cluster=4 vpt=8", nchw, kH100.dev);
        CHECK(q.invalid == nullptr && q.path == Path::kClusters && q.cluster == 4 && q.vpt == 8 && q.threads == 96,
              "forced 4 x 8: %s %s", q.invalid ? q.invalid : "", describe(q).c_str());
        CHECK(std::strcmp(q.why, "forced (TRTGN_FORCE_PLAN); clusters: estimate 9246.88 of kind=nchw units=2560 "
                                 "lanes=1 clusters=64 sms=132") == 0, "forced 4 x 8: why %s", q.why);
        checkInvariants(kH100, nchw, q, pathCount);
        // The launch's plan (no text asked for) is the same plan.
        const Plan l = forced("path=clusters cluster=4 vpt=8", nchw, kH100.dev, false);
        CHECK(l.invalid == nullptr && l.cluster == 4 && l.vpt == 8 && l.threads == q.threads && l.gridX == q.gridX,
              "forced launch plan %s", describe(l).c_str());
    }
    // Forcing the plan the planner picks gives every launch value it computes.
    {
        const Plan own = planGroupNorm(nchw, kH100.dev, queries, true);
        char spec[64];
        std::snprintf(spec, sizeof(spec), "path=clusters cluster=%d vpt=%d threads=%d", own.cluster, own.vpt,
                      own.threads);
        const Plan q = forced(spec, nchw, kH100.dev);
        const ClusterArgs &a = own.clusters.args, &b = q.clusters.args;
        CHECK(q.invalid == nullptr && own.path == Path::kClusters && q.gridX == own.gridX && q.gridY == own.gridY &&
                  q.threads == own.threads && q.clusters.kernel == own.clusters.kernel && a.R == b.R && a.K == b.K &&
                  a.log2K == b.log2K && a.log2S == b.log2S && a.units == b.units && a.exact == b.exact &&
                  a.unitStep == b.unitStep && a.rankStep32 == b.rankStep32 && a.rowMagic == b.rowMagic,
              "%s: planned %s, forced %s", spec, describe(own).c_str(), describe(q).c_str());
    }
    // More threads than the fewest: whole warps, the rows of the group spread thinner.
    {
        const Plan q = forced("path=clusters cluster=2 vpt=4 threads=512", nchw, kH100.dev);
        CHECK(q.invalid == nullptr && q.threads == 512 && q.clusters.args.R == 512 && !q.clusters.args.exact,
              "threads=512: %s", describe(q).c_str());
    }
    {
        const Problem big = problem(1, 512, 128, 128, 32, TRTGN_DTYPE_FLOAT16, NHWC);
        const Plan g = forced("path=on-chip-grid", big, kH100.dev);
        CHECK(g.invalid == nullptr && g.path == Path::kOnChipGrid && g.slices == 8 &&
                  std::strcmp(g.why, "forced (TRTGN_FORCE_PLAN); grid: every block's chunk fits its shared memory, "
                                     "in channel slices") == 0,
              "forced grid: %s why %s", describe(g).c_str(), g.why);
        const Plan t = forced("path=two-pass", big, kH100.dev);
        CHECK(t.invalid == nullptr && t.path == Path::kTwoPass && t.vec == 8 &&
                  std::strcmp(t.why, "forced (TRTGN_FORCE_PLAN)") == 0,
              "forced two-pass: %s why %s", describe(t).c_str(), t.why);
        checkRejected("path=streaming-grid", big, kH100.dev,
                      "cannot run on this problem: grid: every block's chunk fits its shared memory, in channel "
                      "slices; so on-chip-grid, not streaming-grid");
        checkRejected("path=on-chip-grid", big, kL40S.dev, "cannot run on this problem: grid: no Hopper code on this device");
        checkRejected("path=clusters cluster=1 vpt=1", problem(1, 512, 128, 128, 32, TRTGN_DTYPE_FLOAT16, NHWC, 0, 2),
                      kH100.dev, "cannot run on this problem: no 16-byte vectors (x, y 16-byte aligned; NHWC C and "
                      "channel stride, NCHW H*W, multiples of 8)");
    }
    // What the cluster loop's rules reject, named.
    checkRejected("path=clusters cluster=16 vpt=8", nchw, kH100.dev,
                  "cannot run on this problem: clusters: cluster=16 vpt=8: this kernel takes clusters of 1 to 8 "
                  "blocks and 1 to 16 vectors a thread, powers of two");
    checkRejected("path=clusters cluster=2 vpt=8", nchw, kL40S.dev,
                  "cannot run on this problem: clusters: cluster=2 vpt=8: this kernel takes clusters of 1 to 1 "
                  "blocks and 1 to 16 vectors a thread, powers of two");
    checkRejected("path=clusters cluster=1 vpt=1", nchw, kH100.dev,
                  "cannot run on this problem: clusters: cluster=1 vpt=1 needs blocks of 2560 threads, over 512");
    checkRejected("path=clusters cluster=8 vpt=16", nchw, kH100.dev,
                  "cannot run on this problem: clusters: cluster=8 vpt=16 leaves a block with nothing to do");
    checkRejected("path=clusters cluster=2 vpt=4 threads=100", nchw, kH100.dev,
                  "cannot run on this problem: clusters: threads=100: this kernel's blocks hold 320 threads or more "
                  "here, in steps of 32");
    // sd15-unet-640x32 NHWC: 8-byte vectors (5 lanes), from 2 vectors a thread; never the sets instead.
    checkRejected("path=clusters cluster=2 vpt=1", problem(2, 640, 32, 32, 32, TRTGN_DTYPE_FLOAT16, NHWC), kH100.dev,
                  "cannot run on this problem: clusters: cluster=2 vpt=1: this kernel takes clusters of 1 to 8 "
                  "blocks and 2 to 32 vectors a thread, powers of two");
    // Malformed.
    checkRejected("path=clusters cluster=4", nchw, kH100.dev, "path=clusters needs cluster= and vpt=");
    checkRejected("cluster=4 vpt=8", nchw, kH100.dev,
                  "no path= (paths: clusters, on-chip-grid, streaming-grid, two-pass)");
    checkRejected("path=warp", nchw, kH100.dev,
                  "unknown path \"warp\" (paths: clusters, on-chip-grid, streaming-grid, two-pass)");
    checkRejected("path=clusters cluster=four vpt=8", nchw, kH100.dev, "cluster=four is not a positive integer");
    checkRejected("path=clusters cluster=0 vpt=8", nchw, kH100.dev, "cluster=0 is not a positive integer");
    checkRejected("path=clusters cluster=4 vpt=8 block=2", nchw, kH100.dev,
                  "unknown key \"block\" (keys: path, cluster, vpt, threads)");
    checkRejected("path=clusters vpt=8 vpt=4 cluster=2", nchw, kH100.dev, "vpt given twice");
    checkRejected("path=two-pass vpt=2", nchw, kH100.dev, "cluster=, vpt= and threads= belong to path=clusters");
    checkRejected("path clusters", nchw, kH100.dev, "\"path\" is not key=value (keys: path, cluster, vpt, threads)");
    // Any white space separates; the message stays one line.
    CHECK(forced("path=clusters\ncluster=4\tvpt=8\n", nchw, kH100.dev).cluster == 4, "newline-separated");
    checkRejected("path=clusters\ncluster=four vpt=8", nchw, kH100.dev, "cluster=four is not a positive integer");
    // Unset or empty: the planner's own plan.
    setenv("TRTGN_FORCE_PLAN", "", 1);
    const Plan own = planGroupNorm(nchw, kH100.dev, queries, true);
    unsetenv("TRTGN_FORCE_PLAN");
    CHECK(own.invalid == nullptr && std::strncmp(own.why, "clusters: estimate ", 19) == 0, "empty: why %s", own.why);
}

// Every forced cluster plan of the shape list (both layouts, fp16 and fp32) and of the other
// kernels' shapes on an H100, one line each: tests/test_costmodel.py checks that the cost model's
// Python formula (trt_gn/lab/costmodel.py) gives the estimate the planner printed.
void printForcedEstimates() {
    struct {
        int64_t n, c, h, w, g;
    } shapes[] = {{2, 320, 64, 64, 32}, {2, 640, 32, 32, 32},   {2, 1280, 16, 16, 32}, {2, 1280, 8, 8, 32},
                  {2, 2560, 8, 8, 32},  {1, 512, 64, 64, 32},   {1, 128, 64, 64, 32},  {2, 320, 32, 32, 32},
                  {2, 1920, 16, 16, 32}, {1, 256, 64, 64, 32},  {1, 96, 32, 32, 32},   {4, 640, 32, 32, 32},
                  {2, 960, 32, 32, 32},  {1, 512, 128, 128, 32}};
    int lines = 0;
    for (const auto& e : shapes)
        for (trtgn_layout_t layout : {NHWC, NCHW})
            for (trtgn_dtype_t dtype : {TRTGN_DTYPE_FLOAT16, TRTGN_DTYPE_FLOAT32})
                for (int k = 1; k <= kMaxK; k *= 2)
                    for (int vpt = 1; vpt <= 32; vpt *= 2) {
                        char spec[64];
                        std::snprintf(spec, sizeof(spec), "path=clusters cluster=%d vpt=%d", k, vpt);
                        const Plan q = forced(spec, problem(e.n, e.c, e.h, e.w, e.g, dtype, layout), kH100.dev);
                        if (q.invalid != nullptr) continue;
                        std::printf("forced-estimate: cluster=%d vpt=%d threads=%d why=%s\n", q.cluster, q.vpt,
                                    q.threads, q.why);
                        ++lines;
                    }
    CHECK(lines > 300, "only %d forced cluster plans", lines);
}
#endif

}  // namespace

int main() {
    for (const NamedDevice* d : {&kH100, &kH200})
        for (const Expect& e : kHopperShapes)
            for (trtgn_dtype_t t : {TRTGN_DTYPE_FLOAT16, TRTGN_DTYPE_BFLOAT16}) checkExpect(*d, e, t);
    for (const NamedDevice* d : {&kL40S, &kH100NoSm90})
        for (const Expect& e : kNoHopperShapes)
            for (trtgn_dtype_t t : {TRTGN_DTYPE_FLOAT16, TRTGN_DTYPE_BFLOAT16, TRTGN_DTYPE_FLOAT32}) checkExpect(*d, e, t);

    // The question a newcomer asks: 1x512x128x128 fp16 NHWC on an H100.
    {
        const Sm90Queries queries;
        const Plan q = planGroupNorm(problem(1, 512, 128, 128, 32, TRTGN_DTYPE_FLOAT16, NHWC), kH100.dev, queries, true);
        std::printf("1x512x128x128 fp16 NHWC on an H100: %s\n", describe(q).c_str());
        std::printf("  why: %s\n", q.why);
        CHECK(std::strncmp(q.why, "clusters: estimate ", 19) == 0 &&
                  std::strstr(q.why, " not under 8250; grid: every block's chunk fits its shared memory, in channel "
                                     "slices") != nullptr,
              "why: %s", q.why);
        // Without 16-byte vectors (x 2 bytes off), the same shape takes two passes, element by element.
        const Plan u = planGroupNorm(problem(1, 512, 128, 128, 32, TRTGN_DTYPE_FLOAT16, NHWC, 0, 2), kH100.dev, queries, true);
        CHECK(u.path == Path::kTwoPass && u.vec == 1, "unaligned x: planned %s", describe(u).c_str());
        CHECK(std::strncmp(u.why, "no 16-byte vectors", 18) == 0, "unaligned x: why %s", u.why);
        // Padded pixels (channel stride 520) keep vectors but not the grid's bulk copies.
        const Plan s = planGroupNorm(problem(1, 512, 128, 128, 32, TRTGN_DTYPE_FLOAT16, NHWC, 520), kH100.dev, queries, true);
        CHECK(s.path != Path::kOnChipGrid && s.path != Path::kStreamingGrid, "padded pixels: planned %s",
              describe(s).c_str());
        CHECK(std::strstr(s.why, "grid: padded pixels (channel stride over C)") != nullptr, "padded: why %s", s.why);
    }
    // A pre-add takes the plain path, with the same launch but where it needs fewer registers. Its
    // workspace is the same.
    for (const NamedDevice* d : {&kH100, &kL40S})
        for (const Expect& e : kHopperShapes) {
            const Sm90Queries queries;
            const Problem p = problem(e.n, e.c, e.h, e.w, e.g, TRTGN_DTYPE_FLOAT16, e.layout);
            const Plan plain = planGroupNorm(p, d->dev, queries, true);
            const Plan q = planGroupNorm(withPreAdd(p), d->dev, queries, true);
            const char* layout = e.layout == NHWC ? "NHWC" : "NCHW";
            // The plain path and launch (a pre-add streams NHWC without a second batch in flight);
            // but a group that needs more vectors a thread than a pre-add's cluster holds (one block
            // before Hopper) takes another path.
            const bool over = plain.path == Path::kClusters && plain.clusters.vpt > preMaxVpt(plain);
            const bool ahead = plain.path == Path::kStreamingGrid && plain.grid.kernel == GridKernel::kStreamNHWCAhead;
            // The rolling grid has no pre-add: the streaming NCHW grid runs it.
            const bool rolling = plain.path == Path::kStreamingGrid && plain.grid.kernel == GridKernel::kRollingNCHW;
            CHECK(!rolling || (q.grid.kernel == GridKernel::kStreamNCHW &&
                               std::strstr(q.why, "rolling grid: not with a pre-add") != nullptr),
                  "%s %s: a pre-add rolls: %s, why %s", d->name, e.name, describe(q).c_str(), q.why);
            CHECK(q.error == cudaSuccess && q.unsupported == nullptr &&
                      (over || (q.path == plain.path &&
                                (q.path == Path::kClusters || ahead || rolling || describe(q) == describe(plain)))),
                  "%s %s %s with a pre-add: planned %s (without: %s)", d->name, e.name, layout, describe(q).c_str(),
                  describe(plain).c_str());
            CHECK(!ahead || q.grid.kernel == GridKernel::kStreamNHWC, "%s %s: a pre-add streams without kAhead",
                  d->name, e.name);
            CHECK(workspaceBytes(withPreAdd(p)) == workspaceBytes(p), "%s: a pre-add changed the workspace", e.name);
            // A residual off the 16-byte alignment: element by element, as x would be.
            const Plan u = planGroupNorm(withPreAdd(p, 2), d->dev, queries, true);
            CHECK(u.path == Path::kTwoPass && u.vec == 1 && std::strncmp(u.why, "no 16-byte vectors (x, y, residual", 34) == 0,
                  "%s %s %s, misaligned residual: planned %s, why %s", d->name, e.name, layout, describe(u).c_str(), u.why);
        }
    // Without the driver's tensor maps, the sliced on-chip grid keeps whole pixels.
    {
        Sm90Queries queries;
        queries.maps = false;
        const Plan q = planGroupNorm(problem(1, 512, 128, 128, 32, TRTGN_DTYPE_FLOAT16, NHWC), kH100.dev, queries, true);
        CHECK(q.path == Path::kOnChipGrid && q.slices == 1, "no tensor maps: planned %s", describe(q).c_str());
    }
    // Streaming NHWC loads a batch ahead in its second read where at least half the image is head:
    // vae-dec-128x512 (about 62% head), 2x72x640x640 (78%), not 1x128x400x400 (37%).
    {
        const Sm90Queries queries;
        struct {
            int64_t n, c, h, w;
            bool ahead;
        } cases[] = {{1, 128, 512, 512, true}, {2, 72, 640, 640, true}, {1, 128, 400, 400, false}};
        for (const auto& e : cases) {
            const Plan q = planGroupNorm(problem(e.n, e.c, e.h, e.w, 8, TRTGN_DTYPE_FLOAT16, NHWC), kH100.dev, queries, true);
            const GridArgs& a = q.grid.args;
            const int64_t head = e.h * e.w - int64_t(a.blocksPer) * a.tileCap;
            CHECK(q.path == Path::kStreamingGrid && (q.grid.kernel == GridKernel::kStreamNHWCAhead) == e.ahead &&
                      (2 * head >= e.h * e.w) == e.ahead &&
                      std::strcmp(q.kernel, e.ahead ? "gnStreamNHWC<ahead>" : "gnStreamNHWC") == 0,
                  "%lldx%lldx%lldx%lld: head %lld of %lld pixels, planned %s", (long long)e.n, (long long)e.c,
                  (long long)e.h, (long long)e.w, (long long)head, (long long)(e.h * e.w), describe(q).c_str());
        }
    }
    // The rolling NCHW grid where a block's slice of a group is 24 KB or more (16 bits: groups of
    // 3.1 MB and more): batches of about 64 KB of slices, three in shared memory. The 67 MB VAE
    // shapes (16 KB slices) stream; sdxl-vae-dec-256x1024's slices (124 KB) leave no room for two;
    // a pre-add streams too; the on-chip shapes stay on chip. In fp32 the slices are twice as large.
    {
        const Sm90Queries queries;
        const char* const stream = "grid: a block's chunk";
        struct {
            int64_t n, c, h, w;
            trtgn_dtype_t dtype;
            const char* kernel;
            int batch, slots;
            const char* why;
        } cases[] = {
            {1, 256, 512, 512, TRTGN_DTYPE_FLOAT16, "gnRollingNCHW", 2, 3, "rolling grid: batches of 2 groups, 3 in shared memory"},
            {1, 256, 512, 512, TRTGN_DTYPE_BFLOAT16, "gnRollingNCHW", 2, 3, "rolling grid: batches of 2 groups, 3 in shared memory"},
            {1, 128, 1024, 1024, TRTGN_DTYPE_FLOAT16, "gnRollingNCHW", 1, 3, "rolling grid: batches of 1 groups, 3 in shared memory"},
            {1, 128, 512, 512, TRTGN_DTYPE_FLOAT32, "gnRollingNCHW", 2, 3, "rolling grid: batches of 2 groups, 3 in shared memory"},
            {1, 256, 512, 512, TRTGN_DTYPE_FLOAT32, "gnRollingNCHW", 1, 3, "rolling grid: batches of 1 groups, 3 in shared memory"},
            {1, 128, 512, 512, TRTGN_DTYPE_FLOAT16, "gnPersistentNCHW", 0, 0, "rolling grid: a block's slice of a group (15888 B) under 24576 B"},
            {1, 512, 256, 256, TRTGN_DTYPE_BFLOAT16, "gnPersistentNCHW", 0, 0, "rolling grid: a block's slice of a group (15888 B) under 24576 B"},
            {1, 256, 1024, 1024, TRTGN_DTYPE_FLOAT16, "gnPersistentNCHW", 0, 0,
             "rolling grid: a block's slice of a group (124 KB) leaves no room for two in shared memory"},
            {1, 512, 128, 128, TRTGN_DTYPE_FLOAT16, "gnPersistentNCHW", 0, 0, "grid: every block's chunk fits its shared memory"},
        };
        for (const auto& e : cases) {
            const Problem p = problem(e.n, e.c, e.h, e.w, 32, e.dtype, NCHW);
            const Plan q = planGroupNorm(p, kH200.dev, queries, true);
            CHECK(std::strcmp(q.kernel, e.kernel) == 0 && std::strstr(q.why, e.why) != nullptr &&
                      (e.batch == 0 ? (e.why[0] == 'g' || std::strstr(q.why, stream) != nullptr)
                                    : q.grid.roll.batch == e.batch && q.grid.roll.slots == e.slots),
                  "%lldx%lldx%lldx%lld NCHW dtype %d: planned %s batch %d slots %d, why %s", (long long)e.n,
                  (long long)e.c, (long long)e.h, (long long)e.w, int(e.dtype), describe(q).c_str(),
                  q.grid.roll.batch, q.grid.roll.slots, q.why);
            const Plan pre = planGroupNorm(withPreAdd(p), kH200.dev, queries, true);
            CHECK(std::strcmp(pre.kernel, "gnPersistentNCHW") == 0, "%lldx%lldx%lldx%lld NCHW with a pre-add: %s",
                  (long long)e.n, (long long)e.c, (long long)e.h, (long long)e.w, describe(pre).c_str());
        }
    }
    // A failed query is the plan's error: nothing is planned around it.
    {
        Sm90Queries queries;
        queries.fail = cudaErrorInvalidDeviceFunction;
        const Plan q = planGroupNorm(problem(1, 256, 512, 512, 32, TRTGN_DTYPE_FLOAT16, NHWC), kH100.dev, queries, true);
        CHECK(q.error == cudaErrorInvalidDeviceFunction, "failed query: error %d", int(q.error));
    }
    // Beyond CUDA's grid limits: unsupported, with a reason.
    {
        const Sm90Queries queries;
        const Plan q = planGroupNorm(problem(int64_t(1) << 31, 1, 1, 1, 1, TRTGN_DTYPE_FLOAT32, NCHW), kH100.dev, queries, true);
        CHECK(q.unsupported != nullptr, "2^31 (n, group) pairs planned %s", describe(q).c_str());
    }
    // The workspace bound grows with n and c only.
    {
        const Problem a = problem(2, 320, 64, 64, 32, TRTGN_DTYPE_FLOAT16, NHWC);
        const Problem b = problem(2, 320, 1, 3, 32, TRTGN_DTYPE_FLOAT16, NHWC);
        CHECK(workspaceBytes(a) == workspaceBytes(b), "workspace depends on h, w");
    }
    // NCHW: the rolling grid's partials only where it may run (groups of 24 KB or more, at most 256
    // groups), and a bound that never shrinks as the shape grows (a TensorRT profile's largest shape).
    {
        const Problem tiny = problem(2, 64, 8, 8, 32, TRTGN_DTYPE_FLOAT16, NCHW);
        const Problem flat = problem(2, 64, 1, 1, 32, TRTGN_DTYPE_FLOAT16, NCHW);
        CHECK(workspaceBytes(tiny) == workspaceBytes(flat), "NCHW workspace of small groups depends on h, w");
        // statistics 64 float4, partials kMaxStatsBlocks float2; 1286 float4 and float2, 256-byte aligned
        CHECK(workspaceBytes(tiny) == 1024 + 8192, "NCHW workspace of small groups: %zu", workspaceBytes(tiny));
        const Problem many = problem(1, 3858, 64, 64, 1286, TRTGN_DTYPE_FLOAT32, NCHW);
        CHECK(workspaceBytes(many) == workspaceBytes(problem(1, 3858, 1, 1, 1286, TRTGN_DTYPE_FLOAT32, NCHW)),
              "NCHW workspace of 1286 groups depends on h, w");
        CHECK(workspaceBytes(many) == 20736 + 10496, "NCHW workspace of 1286 groups: %zu", workspaceBytes(many));
        size_t last = 0;
        for (int64_t hw = 1; hw <= 1024; hw *= 2) {
            const size_t w = workspaceBytes(problem(1, 256, hw, hw, 32, TRTGN_DTYPE_FLOAT16, NCHW));
            CHECK(w >= last, "NCHW workspace shrank at %lldx%lld", (long long)hw, (long long)hw);
            last = w;
        }
        CHECK(last >= size_t(32) * (kRollMaxBlocks + 1) * 8, "NCHW workspace without the rolling grid's partials");
    }
    for (const NamedDevice* d : {&kH100, &kH200, &kL40S, &kH100NoSm90}) sweep(*d, 20000, 1);
#ifdef TRTGN_DEBUG_PLANS
    checkForcedPlans();
    printForcedEstimates();
#endif

    std::printf("%d checks, %d failed\n", checks, failures);
    return failures == 0 ? 0 : 1;
}
