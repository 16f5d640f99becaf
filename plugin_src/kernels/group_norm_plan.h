// The planner: which path and kernels run a validated problem on a device,
// with every launch value computed here, on the host. Host C++ only (no CUDA
// compiler, no GPU): the launchers (group_norm_launch.cu) only launch what a
// Plan says, and tests plan for described devices without one.
#pragma once

#include <driver_types.h>  // cudaError_t (host-side definitions)
#include <stddef.h>
#include <stdint.h>

#include "group_norm_args.h"
#include "trt_gn/group_norm.h"

namespace trtgn {

// A validated problem, sizes in elements.
struct Problem {
    const void* x;
    void* y;
    int64_t n, c, hw;     // hw = H * W
    int64_t groups, cpg;  // cpg = channels per group
    int64_t cs;           // channel stride (NHWC), == c for NCHW
    trtgn_layout_t layout;
    trtgn_dtype_t dtype;
    trtgn_activation_t act;
    float eps;
    const void* gamma;
    const void* beta;
    bool affineFp32;  // gamma/beta stored as fp32 (else as dtype)
    // The pre-add: s = x + preBias[n, c] + residual replaces x (NULL: no such
    // term); sumOut receives s. preAdd() says whether there is one.
    const void* preBias;
    int64_t preBiasNStride;  // 0 or c
    bool preBiasFp32;        // preBias stored as fp32 (else as dtype)
    const void* residual;
    void* sumOut;
    bool preAdd() const { return preBias != nullptr || residual != nullptr; }
};

// The kPre kernels' PreAdd of a problem.
inline PreAdd preAddOf(const Problem& p) {
    return PreAdd{p.preBias, p.residual, p.sumOut, p.preBiasNStride, p.cpg, p.preBiasFp32};
}

// The device, as planning needs it.
struct Device {
    int numSMs = 0;
    // Compute capability 9.0 or later, and this library's kernels loaded for
    // it from code built for 9.0 or later: the cluster kernels (K > 1) and the
    // grids use Hopper instructions under `__CUDA_ARCH__ >= 900`, and are
    // empty or wrong where the code came from older PTX.
    bool hopperCode = false;
    int maxSmemOptin = 0;  // bytes of shared memory a block may opt in to
};

// The kernels a plan may name (each for the problem's dtype).
enum class ClusterKernel { kGroupNCHW, kGroupNHWC, kGroupNHWC8Byte, kGroupNHWC4Byte, kSet2, kSetNHWC };
enum class GridKernel {
    kOnChipNHWC,
    kOnChipNHWCTwoGroups,
    kOnChipNCHW,
    kStreamNHWC,
    kStreamNHWCAhead,
    kStreamNCHW,
    kRollingNCHW
};
enum class ApplyKernel { kNHWC, kNCHW, kNCHWWide };  // two-pass application (its occupancy sizes the grid)

// What planning asks of the CUDA runtime about the compiled kernels, only
// where a decision needs it: the runtime answers (group_norm_launch.cu),
// tests answer from a table.
class KernelQueries {
public:
    virtual ~KernelQueries() = default;
    virtual cudaError_t staticSmem(GridKernel k, int* bytes) const = 0;
    virtual cudaError_t blocksPerSM(ApplyKernel k, int vec, int threads, int* blocks) const = 0;
    // Whether the driver encodes tensor maps (the on-chip grid's channel slices).
    virtual bool tensorMaps() const = 0;
};

enum class Path { kClusters, kOnChipGrid, kStreamingGrid, kTwoPass };
const char* pathName(Path p);

struct ClusterPlan {
    ClusterKernel kernel;
    int vpt;  // vectors a thread holds (the kernel's template argument)
    ClusterArgs args;
};

struct GridPlan {
    GridKernel kernel;
    GridArgs args;       // partials: set by the launcher (workspace offset 0)
    OnChipPlan onChip;   // gnOnChipNHWC only
    size_t smemBytes;    // dynamic shared memory of the launch
    int smemAttribute;   // the kernel's max dynamic shared memory attribute (see the launcher)
    int sliceChannels;   // channel slices (log2Slices > 0): the tensor map's box,
    int64_t slicePieceLen;  // sliceChannels x slicePieceLen
    RollPlan roll;          // gnRollingNCHW only (counters: set by the launcher)
    size_t rollCountersOffset;  // bytes into the workspace (the partials start at 0)
};

struct TwoPassPlan {
    ApplyKernel apply;
    TwoPassArgs args;     // stats and partials: set by the launcher (offsets below)
    FinalizeArgs finalize;
    size_t partialsOffset;  // bytes into the workspace; the stats start at 0
};

struct Plan {
    cudaError_t error = cudaSuccess;  // a query of KernelQueries failed: nothing to launch
    const char* unsupported = nullptr;  // else why no launch fits the problem: nothing to launch
    const char* invalid = nullptr;      // else why TRTGN_FORCE_PLAN's plan is malformed or cannot run
    Path path = Path::kTwoPass;
    Problem problem{};
    // What trtgn_describe_plan reports.
    const char* kernel = "";    // the kernel (template) that runs the path's main work
    int vec = 1;                // elements a thread loads at once
    int64_t gridX = 0, gridY = 1;  // blocks of the main kernel
    int threads = 0;            // threads a block
    int cluster = 1;            // blocks a cluster (clusters), else 1
    int split = 1;              // blocks that each hold a whole group (clusters, two blocks a group)
    int vpt = 0;                // vectors a thread holds (clusters)
    int slices = 1;             // channel slices an image (on-chip grid); column slices (two-pass)
    int64_t chunk = 0;          // units a block: pixels (NHWC grids, two-pass) or elements (NCHW grids)
    const char* partials = "";  // two-pass NHWC: "group" or "channel" partials
    size_t workspace = 0;       // bytes of workspace this plan uses (<= workspaceBytes())
    bool explain = false;       // whether the planner writes why (trtgn_describe_plan; launches skip the text)
    char why[320] = "";         // each path's verdict in the order tried, "; "-separated

    ClusterPlan clusters{};
    GridPlan grid{};
    TwoPassPlan twoPass{};
};

// The plan for a valid, non-empty problem. Paths are tried in order:
//   1. clusters, where their plan's estimated cost is under kClustersOverGridCost;
//   2. the grid (Hopper): on chip where the tensor fits the SMs' shared
//      memory, else streaming, up to the sizes where two passes win;
//   3. clusters with any plan (GPUs without the grid);
//   4. two passes: any size, layout and alignment.
// Paths 1-3 need 16-byte vectors (aligned pointers; NHWC: C and the channel
// stride multiples of the vector; NCHW: H*W a multiple of it).
// explain: also write Plan::why (text formatting a launch need not pay for).
// Built with TRT_GN_DEBUG_PLANS (a CMake option, off in every release), a
// non-empty TRTGN_FORCE_PLAN ("path=clusters cluster=4 vpt=8 [threads=256]",
// "path=on-chip-grid", ...) names the plan instead: planned by the same
// rules, why= starting "forced (TRTGN_FORCE_PLAN)", or Plan::invalid.
Plan planGroupNorm(const Problem& p, const Device& dev, const KernelQueries& queries, bool explain);

// The cluster plans' estimated cost above which the on-chip grid is faster
// where it applies (fitted with the cost model's constants, see planClusters).
constexpr double kClustersOverGridCost = 8250.0;

// Bytes of workspace a problem may need: the two-pass path's statistics and
// partials. Clusters need none; the grid paths are planned only where their
// partials fit in this much. Depends on n, c, groups and the layout only.
size_t workspaceBytes(const Problem& p);

}  // namespace trtgn
