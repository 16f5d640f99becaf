// Internal interface between the C ABI (group_norm_api.cpp: validation,
// messages, workspace sizing), the runtime side of planning and the
// launchers, one in each path's file.
#pragma once

#include <cuda_runtime_api.h>

#include "group_norm_plan.h"

namespace trtgn {

// group_norm_launch.cu: the current device, planned for, and the plan run.
cudaError_t currentDevice(Device* dev);
// The plan of a valid, non-empty problem; its error, if any, is returned too.
cudaError_t planOnCurrentDevice(const Problem& p, Plan* plan, bool explain);
// Runs a plan (no error, not unsupported) on `stream`; the workspace holds
// plan.workspace bytes.
cudaError_t launchPlan(const Plan& plan, void* workspace, cudaStream_t stream);
// The PTX architecture (major * 10 + minor) the library's kernels run from
// on the current device (see trtgn_kernels_ptx_arch).
cudaError_t kernelsPtxArch(int* arch);

// group_norm_cluster.cu
cudaError_t launchClusters(const Plan& plan, cudaStream_t stream);

// group_norm_grid.cu
// pre: the pre-add's (kPre) kernel.
const void* gridKernel(GridKernel k, trtgn_dtype_t dtype, bool pre);
bool tensorMapsAvailable();
cudaError_t launchGrid(const Plan& plan, void* workspace, cudaStream_t stream);

// group_norm_two_pass.cu
const void* applyKernel(ApplyKernel k, int vec, trtgn_dtype_t dtype);
cudaError_t launchTwoPass(const Plan& plan, void* workspace, cudaStream_t stream);

}  // namespace trtgn
