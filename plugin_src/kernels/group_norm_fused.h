// Internal: the launch paths, chosen by group_norm_dispatch.cu.
#pragma once

#include "group_norm_launch.h"

namespace trtgn {

// Each launcher below, given `describe`, fills it where it would launch and
// sets *launched as it would, but launches nothing.
struct DeviceInfo {
    int numSMs;
    // Compute capability 9.0 or later, and this library's kernels loaded for
    // it from code built for 9.0 or later: the cluster kernels (K > 1) and the
    // on-chip grid use Hopper instructions under `__CUDA_ARCH__ >= 900` and
    // are empty or wrong where the code came from older PTX (see dispatch).
    bool hopperCode;
    int maxSmemOptin;  // bytes of shared memory a block may opt in to
};

// Single pass over a co-resident grid, x held in shared memory across a grid
// barrier (group_norm_persistent.cu; Hopper). Sets *launched = false, without
// launching anything, where the problem does not fit on chip or this path.
cudaError_t tryLaunchPersistent(const Problem& p, const DeviceInfo& dev, void* workspace, size_t workspaceBytes,
                                cudaStream_t stream, bool* launched, PlanInfo* describe);

// Single pass with the data held in registers (group_norm_fused.cu). Sets
// *launched = false, without launching anything, where the problem does not
// fit this path (16-byte vectors needed, groups small enough for a cluster)
// or where its plan's estimated cost is maxCost or more.
cudaError_t tryLaunchFused(const Problem& p, const DeviceInfo& dev, double maxCost, cudaStream_t stream,
                           bool* launched, PlanInfo* describe);
// The cluster plans' estimated cost (planFused) above which the on-chip grid
// is faster where it applies. Fitted together with the planner's constants
// (see planFused). It applies at every size: under 4 MB most plans are
// estimated under it (there the grid's barrier and partial sums cost more
// than they save), and those that are not ran slower than the grid.
constexpr double kFusedOverGridCost = 8250.0;

// Statistics, finalisation, application: three kernels, any size and
// alignment (group_norm_two_pass.cu).
cudaError_t launchTwoPass(const Problem& p, const DeviceInfo& dev, void* workspace, cudaStream_t stream,
                          PlanInfo* describe);

// Bytes of workspace launchTwoPass() may need.
size_t twoPassWorkspaceBytes(const Problem& p);

}  // namespace trtgn
