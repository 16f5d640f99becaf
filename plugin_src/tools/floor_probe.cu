// What a single pass over the tensor costs, next to trt_gn, on the benchmark's
// shapes: how far GroupNorm+SiLU is from the floors that need no statistics.
//
//   trt_gn_floor_probe            (built with the native tests: cmake -S plugin_src -B build)
//   bash scripts/gpu_check.sh floor
//
// fp16, each time the benchmark's way: 20 launches captured in a CUDA graph,
// CUDA events around each replay, median of 50 replays after 5 warm-up ones,
// on random data. Columns (microseconds per launch):
//   memcpy   cudaMemcpyAsync device to device (what `trt-gn bench` calls copy)
//   copy     an SM kernel copying one 16-byte vector a thread
//   affine   an SM kernel writing silu(x * gamma[c] + beta[c]) (NHWC), one
//            16-byte vector a thread: GroupNorm+SiLU without the statistics
//   nhwc / nchw   trt_gn_group_norm() with SiLU
// Not a test: it checks nothing but that every call succeeds.
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "group_norm_common.cuh"  // the kernels' SiLU (trtgn::activateVec)
#include "trt_gn/group_norm.h"

#define CHECK_CUDA(x)                                                                        \
    do {                                                                                     \
        const cudaError_t e_ = (x);                                                          \
        if (e_ != cudaSuccess) {                                                             \
            std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
            std::exit(1);                                                                    \
        }                                                                                    \
    } while (0)

namespace {

float graphMedianUs(cudaStream_t s, const std::function<void()>& launch) {
    constexpr int kLaunches = 20, kWarmup = 5, kReplays = 50;
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < kLaunches; ++i) launch();
    CHECK_CUDA(cudaStreamEndCapture(s, &g));
    CHECK_CUDA(cudaGraphInstantiate(&ge, g, 0));
    cudaEvent_t a, b;
    CHECK_CUDA(cudaEventCreate(&a));
    CHECK_CUDA(cudaEventCreate(&b));
    for (int i = 0; i < kWarmup; ++i) CHECK_CUDA(cudaGraphLaunch(ge, s));
    std::vector<float> us;
    for (int i = 0; i < kReplays; ++i) {
        CHECK_CUDA(cudaEventRecord(a, s));
        CHECK_CUDA(cudaGraphLaunch(ge, s));
        CHECK_CUDA(cudaEventRecord(b, s));
        CHECK_CUDA(cudaEventSynchronize(b));
        float ms = 0.f;
        CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
        us.push_back(ms * 1000.f / kLaunches);
    }
    std::sort(us.begin(), us.end());
    CHECK_CUDA(cudaEventDestroy(a));
    CHECK_CUDA(cudaEventDestroy(b));
    CHECK_CUDA(cudaGraphExecDestroy(ge));
    CHECK_CUDA(cudaGraphDestroy(g));
    return us[us.size() / 2];
}

// Uniform values in [-1, 1) from a hash of the index (random data, never zeros).
__global__ void fillHash(__half* p, long long n, unsigned seed) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        unsigned h = unsigned(i) * 2654435761u ^ seed;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        p[i] = __float2half(float(h >> 8) * (2.f / 16777216.f) - 1.f);
    }
}

__global__ void copyVectors(const uint4* __restrict__ x, uint4* __restrict__ y, long long vectors) {
    const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < vectors) y[i] = x[i];
}

__global__ void affineSiluNHWC(const uint4* __restrict__ x, uint4* __restrict__ y, const __half* __restrict__ gamma,
                               const __half* __restrict__ beta, long long vectors, int c) {
    const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i >= vectors) return;
    const int c0 = int((i * 8) % c);
    const uint4 g4 = *reinterpret_cast<const uint4*>(gamma + c0), b4 = *reinterpret_cast<const uint4*>(beta + c0);
    const uint4 v = x[i];
    uint4 o;
    const __half2* vh = reinterpret_cast<const __half2*>(&v);
    const __half2* gh = reinterpret_cast<const __half2*>(&g4);
    const __half2* bh = reinterpret_cast<const __half2*>(&b4);
    __half2* oh = reinterpret_cast<__half2*>(&o);
    float f[8];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const float2 a = __half22float2(vh[j]), g = __half22float2(gh[j]), b = __half22float2(bh[j]);
        f[2 * j] = fmaf(a.x, g.x, b.x);
        f[2 * j + 1] = fmaf(a.y, g.y, b.y);
    }
    trtgn::activateVec(f, TRTGN_ACTIVATION_SILU);  // the kernels' SiLU
#pragma unroll
    for (int j = 0; j < 4; ++j) oh[j] = __floats2half2_rn(f[2 * j], f[2 * j + 1]);
    y[i] = o;
}

struct Shape {
    const char* name;
    long long n, c, h, w;
    float eps;
};

}  // namespace

int main() {
    // The benchmark's shape list (trt_gn/lab/shapes.py), G = 32.
    const Shape shapes[] = {{"sd15-unet-320x64", 2, 320, 64, 64, 1e-5f},  {"sd15-unet-640x32", 2, 640, 32, 32, 1e-5f},
                            {"sd15-unet-1280x16", 2, 1280, 16, 16, 1e-5f}, {"sd15-unet-1280x8", 2, 1280, 8, 8, 1e-5f},
                            {"sd15-unet-2560x8", 2, 2560, 8, 8, 1e-5f},   {"sdxl-unet-320x128", 2, 320, 128, 128, 1e-5f},
                            {"sdxl-unet-640x64", 2, 640, 64, 64, 1e-5f},   {"vae-dec-512x128", 1, 512, 128, 128, 1e-6f},
                            {"vae-dec-256x512", 1, 256, 512, 512, 1e-6f},  {"vae-dec-128x512", 1, 128, 512, 512, 1e-6f}};
    cudaDeviceProp prop{};
    CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
    std::printf("%s, fp16, microseconds per launch (ratio to memcpy)\n", prop.name);
    std::printf("%-18s %7s %14s %14s %14s %14s\n", "shape", "memcpy", "copy", "affine", "nhwc", "nchw");
    cudaStream_t s;
    CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (const Shape& sh : shapes) {
        const long long n = sh.n * sh.c * sh.h * sh.w, vectors = n / 8;
        __half *x, *y, *gamma, *beta;
        CHECK_CUDA(cudaMalloc(&x, n * 2));
        CHECK_CUDA(cudaMalloc(&y, n * 2));
        CHECK_CUDA(cudaMalloc(&gamma, sh.c * 2));
        CHECK_CUDA(cudaMalloc(&beta, sh.c * 2));
        fillHash<<<264, 512, 0, s>>>(x, n, 1u);
        fillHash<<<1, 512, 0, s>>>(gamma, sh.c, 2u);
        fillHash<<<1, 512, 0, s>>>(beta, sh.c, 3u);
        CHECK_CUDA(cudaGetLastError());
        trtgn_params_t p{};
        p.x = x;
        p.y = y;
        p.n = sh.n;
        p.c = sh.c;
        p.h = sh.h;
        p.w = sh.w;
        p.num_groups = 32;
        p.channel_stride = sh.c;
        p.dtype = TRTGN_DTYPE_FLOAT16;
        p.activation = TRTGN_ACTIVATION_SILU;
        p.epsilon = sh.eps;
        p.gamma = gamma;
        p.beta = beta;
        p.affine_dtype = TRTGN_DTYPE_FLOAT16;
        size_t wsBytes = 0;
        for (trtgn_layout_t layout : {TRTGN_LAYOUT_NHWC, TRTGN_LAYOUT_NCHW}) {
            p.layout = layout;
            size_t b = 0;
            if (trtgn_workspace_size(&p, &b) != TRTGN_STATUS_SUCCESS) {
                std::fprintf(stderr, "trtgn_workspace_size: %s\n", trtgn_last_error_message());
                return 1;
            }
            wsBytes = std::max(wsBytes, b);
        }
        void* ws = nullptr;
        if (wsBytes > 0) CHECK_CUDA(cudaMalloc(&ws, wsBytes));
        const unsigned grid = unsigned((vectors + 255) / 256);
        float t[5];
        t[0] = graphMedianUs(s, [&] { CHECK_CUDA(cudaMemcpyAsync(y, x, n * 2, cudaMemcpyDeviceToDevice, s)); });
        t[1] = graphMedianUs(s, [&] { copyVectors<<<grid, 256, 0, s>>>((const uint4*)x, (uint4*)y, vectors); });
        t[2] = graphMedianUs(
            s, [&] { affineSiluNHWC<<<grid, 256, 0, s>>>((const uint4*)x, (uint4*)y, gamma, beta, vectors, int(sh.c)); });
        for (int l = 0; l < 2; ++l) {
            p.layout = l == 0 ? TRTGN_LAYOUT_NHWC : TRTGN_LAYOUT_NCHW;
            t[3 + l] = graphMedianUs(s, [&] {
                if (trtgn_group_norm(&p, ws, wsBytes, s) != TRTGN_STATUS_SUCCESS) {
                    std::fprintf(stderr, "trtgn_group_norm: %s\n", trtgn_last_error_message());
                    std::exit(1);
                }
            });
        }
        std::printf("%-18s %7.2f", sh.name, t[0]);
        for (int i = 1; i < 5; ++i) std::printf(" %7.2f (%.2fx)", t[i], t[i] / t[0]);
        std::printf("\n");
        CHECK_CUDA(cudaFree(x));
        CHECK_CUDA(cudaFree(y));
        CHECK_CUDA(cudaFree(gamma));
        CHECK_CUDA(cudaFree(beta));
        if (ws) CHECK_CUDA(cudaFree(ws));
    }
    CHECK_CUDA(cudaStreamDestroy(s));
    return 0;
}
