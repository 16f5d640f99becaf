// Internal interface between the C ABI (group_norm_api.cpp: validation,
// messages, workspace sizing) and the CUDA code (launch planning and kernels).
#pragma once

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "trt_gn/group_norm.h"

namespace trtgn {

// A validated problem, sizes in elements.
struct Problem {
    const void* x;
    void* y;
    int64_t n, c, hw;  // hw = H * W
    int64_t groups, cpg;  // cpg = channels per group
    int64_t cs;        // channel stride (NHWC), == c for NCHW
    trtgn_layout_t layout;
    trtgn_dtype_t dtype;
    trtgn_activation_t act;
    float eps;
    const void* gamma;
    const void* beta;
    bool affineFp32;   // gamma/beta stored as fp32 (else as dtype)
};

// Upper bound on the blocks of the two-pass statistics kernel, which bounds
// the workspace independently of the GPU model.
constexpr int64_t kMaxStatsBlocks = 1024;

// Device workspace the launch below may use, in bytes (depends only on the
// problem's n, c, groups, layout).
size_t workspaceBytes(const Problem& p);

// The PTX architecture (major * 10 + minor) the library's kernels run from
// on the current device (see trtgn_kernels_ptx_arch).
cudaError_t kernelsPtxArch(int* arch);

// Picks the kernels for the current device and enqueues them on `stream`.
// The problem is valid and non-empty; the workspace is large enough.
cudaError_t launchGroupNorm(const Problem& p, void* workspace, cudaStream_t stream);

}  // namespace trtgn
