// Internal: the launch paths, chosen by group_norm_dispatch.cu.
#pragma once

#include "group_norm_launch.h"

namespace trtgn {

struct DeviceInfo {
    int numSMs;
    int ccMajor;
    int maxSmemOptin;  // bytes of shared memory a block may opt in to
};

// Single pass over a co-resident grid, x held in shared memory across a grid
// barrier (group_norm_persistent.cu; Hopper). Sets *launched = false, without
// launching anything, where the problem does not fit on chip or this path.
cudaError_t tryLaunchPersistent(const Problem& p, const DeviceInfo& dev, void* workspace, size_t workspaceBytes,
                                cudaStream_t stream, bool* launched);

// Single pass with the data held in registers (group_norm_fused.cu). Sets
// *launched = false, without launching anything, where the problem does not
// fit this path (16-byte vectors needed, groups small enough for a cluster).
cudaError_t tryLaunchFused(const Problem& p, const DeviceInfo& dev, cudaStream_t stream, bool* launched);

// Statistics, finalisation, application: three kernels, any size and
// alignment (group_norm_two_pass.cu).
cudaError_t launchTwoPass(const Problem& p, const DeviceInfo& dev, void* workspace, cudaStream_t stream);

// Bytes of workspace launchTwoPass() may need.
size_t twoPassWorkspaceBytes(const Problem& p);

}  // namespace trtgn
