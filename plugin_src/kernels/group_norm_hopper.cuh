// Hopper primitives shared by the cluster and grid kernels: mbarriers, bulk
// copies (Tensor Memory Accelerator), cluster barriers and the clusters'
// distributed-shared-memory stores. Each is empty below compute capability
// 9.0: the planner sends no work that needs them to code built for older
// GPUs (Device::hopperCode).
#pragma once

#include <cuda.h>  // CUtensorMap
#include <stdint.h>

namespace trtgn {

__device__ __forceinline__ uint32_t smemAddr(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }

// ---- mbarriers ----

__device__ __forceinline__ void mbarInit(uint64_t* bar, int count) {
#if __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smemAddr(bar)), "r"(count) : "memory");
#endif
}

// Makes initialised mbarriers visible to the cluster's (and the bulk copy
// engine's) operations.
__device__ __forceinline__ void fenceBarrierInit() {
#if __CUDA_ARCH__ >= 900
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}

// This thread's arrival, expecting `bytes` more to land before the phase completes.
__device__ __forceinline__ void mbarArriveExpectTx(uint64_t* bar, uint32_t bytes) {
#if __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smemAddr(bar)), "r"(bytes) : "memory");
#endif
}

// This thread's arrival, a release: its earlier reads and writes are ordered
// before what a waiter for the phase does after its wait.
__device__ __forceinline__ void mbarArrive(uint64_t* bar) {
#if __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smemAddr(bar)) : "memory");
#endif
}

// Waits for phase `parity` of a barrier completed by this block's bulk copies.
__device__ __forceinline__ void mbarWait(uint64_t* bar, uint32_t parity) {
#if __CUDA_ARCH__ >= 900
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "WAIT_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT_%=;\n"
        "}\n" ::"r"(smemAddr(bar)),
        "r"(parity)
        : "memory");
#endif
}

// The same for a barrier completed by other blocks' stores (stAsyncRemote):
// acquire at cluster scope, so their data is visible after it.
__device__ __forceinline__ void mbarWaitCluster(uint64_t* bar, uint32_t parity) {
#if __CUDA_ARCH__ >= 900
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "WAIT_%=:\n"
        "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT_%=;\n"
        "}\n" ::"r"(smemAddr(bar)),
        "r"(parity)
        : "memory");
#endif
}

// ---- bulk copies ----

// Copies `bytes` (a multiple of 16, both addresses 16-byte aligned) from
// global to shared memory, counted on the mbarrier: several copies may count
// on one barrier phase, whose bytes one mbarArriveExpectTx announced.
// evictFirst: the lines are marked first to go from L2 (streaming: the data
// is on chip now, and L2 is better spent on what will be read again).
__device__ __forceinline__ void bulkCopy(void* dst, const void* src, uint32_t bytes, uint64_t* bar, bool evictFirst) {
#if __CUDA_ARCH__ >= 900
    if (evictFirst) {
        uint64_t policy;
        asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
        asm volatile(
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], "
            "%4;" ::"r"(smemAddr(dst)),
            "l"(src), "r"(bytes), "r"(smemAddr(bar)), "l"(policy)
            : "memory");
    } else {
        asm volatile(
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                smemAddr(dst)),
            "l"(src), "r"(bytes), "r"(smemAddr(bar))
            : "memory");
    }
#endif
}

// One copy that completes a barrier phase of its own: the arrival and the copy.
__device__ __forceinline__ void bulkLoad(void* dst, const void* src, uint32_t bytes, uint64_t* bar, bool evictFirst) {
    mbarArriveExpectTx(bar, bytes);
    bulkCopy(dst, src, bytes, bar, evictFirst);
}

// Copies the box of the 2-D tensor map at (column c0, row r0) to shared
// memory (128-byte aligned); the mbarrier completes when its `bytes` (the
// whole box, rows past the tensor filled with zeros) have landed.
__device__ __forceinline__ void tensorLoad2d(void* dst, const CUtensorMap* map, int c0, int r0, uint32_t bytes,
                                             uint64_t* bar) {
#if __CUDA_ARCH__ >= 900
    mbarArriveExpectTx(bar, bytes);
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
            smemAddr(dst)),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(r0), "r"(smemAddr(bar))
        : "memory");
#endif
}

// ---- flags between the blocks of a co-resident grid ----

// Adds v to *p after this thread's earlier writes are visible GPU-wide.
__device__ __forceinline__ void redAddRelease(unsigned int* p, unsigned int v) {
#if __CUDA_ARCH__ >= 900
    asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
#endif
}
// *p, with the writes released before the value it reads visible after it.
__device__ __forceinline__ unsigned int ldAcquire(const unsigned int* p) {
    unsigned int v = 0;
#if __CUDA_ARCH__ >= 900
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
#endif
    return v;
}

// ---- clusters ----

// The cluster barrier in halves. A block may not exit while others still
// read its shared memory: arrive (release) after the last remote read, wait
// (acquire) just before exiting.
__device__ __forceinline__ void clusterArriveRelease() {
#if __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void clusterWaitAcquire() {
#if __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#endif
}
// Arrival that orders nothing ("this block has started"), and its wait.
__device__ __forceinline__ void clusterArriveRelaxed() {
#if __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void clusterWaitAll() {
#if __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
#endif
}

// Stores v into `local`'s counterpart in the shared memory of cluster block
// `rank`, counted (16 bytes) on that block's mbarrier at `localBar`'s offset.
__device__ __forceinline__ void stAsyncRemote(const double2* local, uint64_t* localBar, uint32_t rank, double2 v) {
#if __CUDA_ARCH__ >= 900
    uint32_t dst, remoteBar;
    asm("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(dst) : "r"(smemAddr(local)), "r"(rank));
    asm("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remoteBar) : "r"(smemAddr(localBar)), "r"(rank));
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f64 [%0], {%1, %2}, [%3];" ::"r"(dst),
                 "d"(v.x), "d"(v.y), "r"(remoteBar)
                 : "memory");
#endif
}

}  // namespace trtgn
