// Chooses the launch path for a validated problem on the current device.
#include <cstdint>
#include <limits>

#include "group_norm_fused.h"
#include "group_norm_launch.h"

namespace trtgn {

size_t workspaceBytes(const Problem& p) { return twoPassWorkspaceBytes(p); }

// Compiled like every kernel of the library: the PTX architecture the runtime
// loads it from tells which code the kernels run on this device.
__global__ void archProbe() {}

cudaError_t kernelsPtxArch(int* arch) {
    cudaFuncAttributes fa{};
    const cudaError_t e = cudaFuncGetAttributes(&fa, archProbe);
    if (e == cudaSuccess) *arch = fa.ptxVersion;
    return e;
}

static int elementBytes(trtgn_dtype_t d) { return d == TRTGN_DTYPE_FLOAT32 ? 4 : 2; }

cudaError_t launchGroupNorm(const Problem& p, void* workspace, cudaStream_t stream, PlanInfo* describe) {
    int device = 0;
    cudaError_t e = cudaGetDevice(&device);
    if (e != cudaSuccess) return e;
    DeviceInfo dev{};
    e = cudaDeviceGetAttribute(&dev.numSMs, cudaDevAttrMultiProcessorCount, device);
    if (e != cudaSuccess) return e;
    int ccMajor = 0;
    e = cudaDeviceGetAttribute(&ccMajor, cudaDevAttrComputeCapabilityMajor, device);
    if (e != cudaSuccess) return e;
    if (ccMajor >= 9) {
        // A library built without a 9.0+ architecture (CMAKE_CUDA_ARCHITECTURES=80,
        // say) runs on an H100 from compute_80 PTX, compiled there without the
        // `__CUDA_ARCH__ >= 900` code: the on-chip grid would write nothing and
        // the clusters would skip their exchange. Those paths then stay off
        // (the single-block cluster plans and two passes still run).
        int arch = 0;
        e = kernelsPtxArch(&arch);
        if (e != cudaSuccess) return e;
        dev.hopperCode = arch >= 90;
    }
    e = cudaDeviceGetAttribute(&dev.maxSmemOptin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    if (e != cudaSuccess) return e;

    // The single-pass paths work on 16-byte vectors only. Tried in order:
    // clusters where their plan is estimated to beat the on-chip grid; the
    // on-chip persistent grid (Hopper, any size that fits: also small tensors
    // whose cluster plans are slow, and those no cluster plan fits); clusters
    // with any plan (GPUs without the grid); then two passes (everything else).
    const int vec = 16 / elementBytes(p.dtype);
    const bool aligned = reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && reinterpret_cast<uintptr_t>(p.y) % 16 == 0;
    const bool vectorizable = p.layout == TRTGN_LAYOUT_NHWC ? aligned && p.c % vec == 0 && p.cs % vec == 0
                                                            : aligned && p.hw % vec == 0;
    if (vectorizable) {
        bool launched = false;
        e = tryLaunchFused(p, dev, kFusedOverGridCost, stream, &launched, describe);
        if (launched || e != cudaSuccess) return e;
        e = tryLaunchPersistent(p, dev, workspace, workspaceBytes(p), stream, &launched, describe);
        if (launched || e != cudaSuccess) return e;
        e = tryLaunchFused(p, dev, std::numeric_limits<double>::infinity(), stream, &launched, describe);
        if (launched || e != cudaSuccess) return e;
    }
    return launchTwoPass(p, dev, workspace, stream, describe);
}

}  // namespace trtgn
