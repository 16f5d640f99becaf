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

// The plan a call runs (trtgn_describe_plan): the path and its main launch
// values. Each launcher fills it instead of launching when asked to.
struct PlanInfo {
    const char* path = "";    // "clusters", "on-chip-grid", "streaming-grid" or "two-pass"
    const char* kernel = "";  // the kernel (template) that runs the path's main work
    int vec = 1;              // elements a thread loads at once
    int64_t blocks = 0;       // blocks of the main kernel
    int threads = 0;          // threads a block
    int cluster = 1;          // blocks a cluster (clusters), else 1
    int split = 1;            // blocks that each hold a whole group (clusters, two blocks a group)
    int vpt = 0;              // vectors a thread holds (clusters)
    int slices = 1;           // channel slices an image (on-chip grid); column slices (two-pass)
    int64_t chunk = 0;        // units a block: pixels (NHWC grids, two-pass) or elements (NCHW grids)
    const char* partials = "";  // two-pass NHWC: "group" or "channel" partials
};

// Picks the kernels for the current device and enqueues them on `stream`.
// The problem is valid and non-empty; the workspace is large enough. With
// `describe`, fills it and launches nothing (the device queries still run).
cudaError_t launchGroupNorm(const Problem& p, void* workspace, cudaStream_t stream, PlanInfo* describe = nullptr);

}  // namespace trtgn
