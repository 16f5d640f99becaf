// The runtime side of planning (the device's description and the answers to
// the planner's questions about the compiled kernels), and the launch of a
// plan by its path.
#include "group_norm_launch.h"

namespace trtgn {
namespace {

// Compiled like every kernel of the library: the PTX architecture the runtime
// loads it from tells which code the kernels run on this device.
__global__ void archProbe() {}

class RuntimeQueries final : public KernelQueries {
public:
    // pre: the problem has a pre-add (the grid's kPre kernels run it).
    RuntimeQueries(trtgn_dtype_t dtype, bool pre) : dtype_(dtype), pre_(pre) {}
    cudaError_t staticSmem(GridKernel k, int* bytes) const override {
        cudaFuncAttributes fa{};
        const cudaError_t e = cudaFuncGetAttributes(&fa, gridKernel(k, dtype_, pre_));
        if (e == cudaSuccess) *bytes = int(fa.sharedSizeBytes);
        return e;
    }
    cudaError_t blocksPerSM(ApplyKernel k, int vec, int threads, int* blocks) const override {
        return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, applyKernel(k, vec, dtype_), threads, 0);
    }
    bool tensorMaps() const override { return tensorMapsAvailable(); }

private:
    trtgn_dtype_t dtype_;
    bool pre_;
};

}  // namespace

cudaError_t kernelsPtxArch(int* arch) {
    cudaFuncAttributes fa{};
    const cudaError_t e = cudaFuncGetAttributes(&fa, archProbe);
    if (e == cudaSuccess) *arch = fa.ptxVersion;
    return e;
}

cudaError_t currentDevice(Device* dev) {
    int device = 0;
    cudaError_t e = cudaGetDevice(&device);
    if (e != cudaSuccess) return e;
    *dev = Device{};
    e = cudaDeviceGetAttribute(&dev->numSMs, cudaDevAttrMultiProcessorCount, device);
    if (e != cudaSuccess) return e;
    int ccMajor = 0;
    e = cudaDeviceGetAttribute(&ccMajor, cudaDevAttrComputeCapabilityMajor, device);
    if (e != cudaSuccess) return e;
    if (ccMajor >= 9) {
        // A library built without a 9.0+ architecture (CMAKE_CUDA_ARCHITECTURES=80,
        // say) runs on an H100 from compute_80 PTX, compiled there without the
        // `__CUDA_ARCH__ >= 900` code: the grid would write nothing and the
        // clusters would skip their exchange. Those paths then stay off (the
        // single-block cluster plans and two passes still run).
        int arch = 0;
        e = kernelsPtxArch(&arch);
        if (e != cudaSuccess) return e;
        dev->hopperCode = arch >= 90;
    }
    return cudaDeviceGetAttribute(&dev->maxSmemOptin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
}

cudaError_t planOnCurrentDevice(const Problem& p, Plan* plan, bool explain) {
    Device dev;
    const cudaError_t e = currentDevice(&dev);
    if (e != cudaSuccess) return e;
    *plan = planGroupNorm(p, dev, RuntimeQueries(p.dtype, p.preAdd()), explain);
    return plan->error;
}

cudaError_t launchPlan(const Plan& plan, void* workspace, cudaStream_t stream) {
    switch (plan.path) {
        case Path::kClusters: return launchClusters(plan, stream);
        case Path::kOnChipGrid:
        case Path::kStreamingGrid: return launchGrid(plan, workspace, stream);
        case Path::kTwoPass: return launchTwoPass(plan, workspace, stream);
    }
    return cudaErrorInvalidValue;
}

}  // namespace trtgn
