// The C ABI of the kernels library: argument validation with one message per
// failure, workspace sizing, and the per-thread error message.
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>

#include "group_norm_launch.h"
#include "trt_gn/group_norm.h"

namespace {

// Per thread, like cudaGetLastError(): calls on other threads never see or
// overwrite it, so the library keeps no shared mutable state.
thread_local char tlsMessage[512] = "";

trtgn_status_t fail(trtgn_status_t status, const char* fmt, ...) {
    va_list args;
    va_start(args, fmt);
    std::vsnprintf(tlsMessage, sizeof(tlsMessage), fmt, args);
    va_end(args);
    return status;
}

trtgn_status_t ok() {
    tlsMessage[0] = '\0';
    return TRTGN_STATUS_SUCCESS;
}

bool knownDtype(int d) { return d == TRTGN_DTYPE_FLOAT32 || d == TRTGN_DTYPE_FLOAT16 || d == TRTGN_DTYPE_BFLOAT16; }

// a * b, saturated at UINT64_MAX (sizes are validated >= 0).
uint64_t satMul(uint64_t a, uint64_t b) { return b != 0 && a > UINT64_MAX / b ? UINT64_MAX : a * b; }

// Bytes from a tensor's first element to just past its last (x's layout and
// strides): NHWC spans n*h*w pixels of channel_stride, the last of c.
uint64_t extentBytes(const trtgn_params_t& p) {
    const uint64_t pixels = satMul(uint64_t(p.n), satMul(uint64_t(p.h), uint64_t(p.w)));
    if (pixels == 0 || p.c == 0) return 0;
    const uint64_t elements = p.layout == TRTGN_LAYOUT_NHWC
                                  ? satMul(pixels - 1, uint64_t(p.channel_stride)) + uint64_t(p.c)
                                  : satMul(pixels, uint64_t(p.c));
    return satMul(elements, p.dtype == TRTGN_DTYPE_FLOAT32 ? 4 : 2);
}

// Whether two tensors of x's extent at a and b share a byte (NULL: never).
bool overlaps(const void* a, const void* b, uint64_t extent) {
    if (a == nullptr || b == nullptr || extent == 0) return false;
    const uintptr_t u = reinterpret_cast<uintptr_t>(a), v = reinterpret_cast<uintptr_t>(b);
    return u < v ? v - u < extent : u - v < extent;
}

// Validates everything but the data pointers and the workspace; fills `out`.
trtgn_status_t validate(const trtgn_params_t* params, trtgn::Problem* out) {
    if (params == nullptr) return fail(TRTGN_STATUS_INVALID_ARGUMENT, "params is NULL");
    const trtgn_params_t& p = *params;
    if (p.n < 0 || p.c < 0 || p.h < 0 || p.w < 0)
        return fail(TRTGN_STATUS_INVALID_ARGUMENT, "sizes must be >= 0, got n=%lld c=%lld h=%lld w=%lld",
                    (long long)p.n, (long long)p.c, (long long)p.h, (long long)p.w);
    if (p.num_groups <= 0)
        return fail(TRTGN_STATUS_INVALID_ARGUMENT, "num_groups must be > 0, got %lld", (long long)p.num_groups);
    if (p.c % p.num_groups != 0)
        return fail(TRTGN_STATUS_INVALID_ARGUMENT, "c (%lld) must be divisible by num_groups (%lld)",
                    (long long)p.c, (long long)p.num_groups);
    if (p.layout != TRTGN_LAYOUT_NHWC && p.layout != TRTGN_LAYOUT_NCHW)
        return fail(TRTGN_STATUS_INVALID_ARGUMENT, "unknown layout %d", (int)p.layout);
    if (!knownDtype(p.dtype)) return fail(TRTGN_STATUS_INVALID_ARGUMENT, "unknown dtype %d", (int)p.dtype);
    if (p.activation != TRTGN_ACTIVATION_NONE && p.activation != TRTGN_ACTIVATION_SILU)
        return fail(TRTGN_STATUS_INVALID_ARGUMENT, "unknown activation %d", (int)p.activation);
    const bool biasTakesAffine = p.pre_bias != nullptr && p.pre_bias_float32 == 0;
    if ((p.gamma != nullptr || p.beta != nullptr || biasTakesAffine) && p.affine_dtype != p.dtype &&
        p.affine_dtype != TRTGN_DTYPE_FLOAT32)
        return fail(TRTGN_STATUS_INVALID_ARGUMENT,
                    "affine_dtype %d must be the input dtype (%d) or TRTGN_DTYPE_FLOAT32", (int)p.affine_dtype,
                    (int)p.dtype);
    if (p.layout == TRTGN_LAYOUT_NHWC && p.channel_stride < p.c)
        return fail(TRTGN_STATUS_INVALID_ARGUMENT, "channel_stride (%lld) must be >= c (%lld) for NHWC",
                    (long long)p.channel_stride, (long long)p.c);
    if (p.layout == TRTGN_LAYOUT_NCHW && p.channel_stride != p.c)
        return fail(TRTGN_STATUS_INVALID_ARGUMENT, "channel_stride (%lld) must equal c (%lld) for NCHW",
                    (long long)p.channel_stride, (long long)p.c);
    if (!(p.epsilon >= 0.0f) || std::isinf(p.epsilon))
        return fail(TRTGN_STATUS_INVALID_ARGUMENT, "epsilon must be finite and >= 0, got %g", (double)p.epsilon);
    if (p.pre_bias != nullptr && p.pre_bias_n_stride != 0 && p.pre_bias_n_stride != p.c)
        return fail(TRTGN_STATUS_INVALID_ARGUMENT, "pre_bias_n_stride (%lld) must be 0 or c (%lld)",
                    (long long)p.pre_bias_n_stride, (long long)p.c);
    if (p.sum_out != nullptr && p.pre_bias == nullptr && p.residual == nullptr)
        return fail(TRTGN_STATUS_INVALID_ARGUMENT, "sum_out needs pre_bias or residual");
    // The kernels read x and residual and write y and sum_out element by
    // element in no fixed order across blocks: an output overlapping another
    // tensor (but y equal to x, each element read before it is written by the
    // same thread) would be read after it was written.
    const uint64_t extent = extentBytes(p);
    if (overlaps(p.sum_out, p.x, extent)) return fail(TRTGN_STATUS_INVALID_ARGUMENT, "sum_out must not overlap x");
    if (overlaps(p.sum_out, p.residual, extent))
        return fail(TRTGN_STATUS_INVALID_ARGUMENT, "sum_out must not overlap residual");
    if (overlaps(p.sum_out, p.y, extent)) return fail(TRTGN_STATUS_INVALID_ARGUMENT, "sum_out must not overlap y");
    if (overlaps(p.y, p.residual, extent))
        return fail(TRTGN_STATUS_INVALID_ARGUMENT, "y must not overlap residual (y may equal x)");

    trtgn::Problem& q = *out;
    q.x = p.x;
    q.y = p.y;
    q.n = p.n;
    q.c = p.c;
    q.hw = p.h * p.w;
    q.groups = p.num_groups;
    q.cpg = p.c / p.num_groups;
    q.cs = p.channel_stride;
    q.layout = p.layout;
    q.dtype = p.dtype;
    q.act = p.activation;
    q.eps = p.epsilon;
    q.gamma = p.gamma;
    q.beta = p.beta;
    q.affineFp32 = p.affine_dtype == TRTGN_DTYPE_FLOAT32;
    q.preBias = p.pre_bias;
    q.preBiasNStride = p.pre_bias != nullptr ? p.pre_bias_n_stride : 0;
    q.preBiasFp32 = p.pre_bias != nullptr && (p.pre_bias_float32 != 0 || q.affineFp32);
    q.residual = p.residual;
    q.sumOut = p.sum_out;
    return TRTGN_STATUS_SUCCESS;
}

bool isEmpty(const trtgn::Problem& q) { return q.n == 0 || q.c == 0 || q.hw == 0; }

trtgn_status_t cudaFailure(cudaError_t e) {
    return fail(TRTGN_STATUS_CUDA_ERROR, "CUDA error: %s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
}

// The plan of a valid, non-empty problem on the current device.
trtgn_status_t planFor(const trtgn::Problem& q, trtgn::Plan* plan, bool explain) {
    const cudaError_t e = trtgn::planOnCurrentDevice(q, plan, explain);
    if (e != cudaSuccess) return cudaFailure(e);
    if (plan->unsupported != nullptr) return fail(TRTGN_STATUS_NOT_SUPPORTED, "%s", plan->unsupported);
    if (plan->invalid != nullptr) return fail(TRTGN_STATUS_INVALID_ARGUMENT, "%s", plan->invalid);
    return TRTGN_STATUS_SUCCESS;
}

}  // namespace

extern "C" {

TRTGN_API trtgn_status_t trtgn_workspace_size(const trtgn_params_t* params, size_t* workspace_bytes) {
    if (workspace_bytes == nullptr) return fail(TRTGN_STATUS_INVALID_ARGUMENT, "workspace_bytes is NULL");
    trtgn::Problem q;
    const trtgn_status_t s = validate(params, &q);
    if (s != TRTGN_STATUS_SUCCESS) return s;
    *workspace_bytes = isEmpty(q) ? 0 : trtgn::workspaceBytes(q);
    return ok();
}

TRTGN_API trtgn_status_t trtgn_workspace_size_max(const trtgn_params_t* params, size_t* workspace_bytes) {
    // workspaceBytes() never shrinks as n, h or w grow (partialsCapacity), so
    // the bound over every smaller shape is the value at the given shape.
    if (workspace_bytes == nullptr) return fail(TRTGN_STATUS_INVALID_ARGUMENT, "workspace_bytes is NULL");
    trtgn::Problem q;
    const trtgn_status_t s = validate(params, &q);
    if (s != TRTGN_STATUS_SUCCESS) return s;
    *workspace_bytes = q.n == 0 || q.c == 0 ? 0 : trtgn::workspaceBytes(q);
    return ok();
}

TRTGN_API trtgn_status_t trtgn_group_norm(const trtgn_params_t* params, void* workspace, size_t workspace_bytes,
                                          void* stream) {
    trtgn::Problem q;
    const trtgn_status_t s = validate(params, &q);
    if (s != TRTGN_STATUS_SUCCESS) return s;
    if (isEmpty(q)) return ok();
    if (q.x == nullptr) return fail(TRTGN_STATUS_INVALID_ARGUMENT, "x is NULL");
    if (q.y == nullptr) return fail(TRTGN_STATUS_INVALID_ARGUMENT, "y is NULL");
    const size_t need = trtgn::workspaceBytes(q);
    if (workspace_bytes < need)
        return fail(TRTGN_STATUS_WORKSPACE_TOO_SMALL, "workspace_bytes (%zu) is smaller than the %zu bytes needed",
                    workspace_bytes, need);
    if (need > 0 && workspace == nullptr)
        return fail(TRTGN_STATUS_INVALID_ARGUMENT, "workspace is NULL but %zu bytes are needed", need);
    if (reinterpret_cast<uintptr_t>(workspace) % 256 != 0)
        return fail(TRTGN_STATUS_INVALID_ARGUMENT, "workspace must be 256-byte aligned");

    trtgn::Plan plan;
    const trtgn_status_t planned = planFor(q, &plan, false);
    if (planned != TRTGN_STATUS_SUCCESS) return planned;
    const cudaError_t e = trtgn::launchPlan(plan, workspace, static_cast<cudaStream_t>(stream));
    if (e != cudaSuccess) return cudaFailure(e);
    return ok();
}

TRTGN_API trtgn_status_t trtgn_describe_plan(const trtgn_params_t* params, char* buffer, size_t size) {
    if (buffer == nullptr || size == 0) return fail(TRTGN_STATUS_INVALID_ARGUMENT, "buffer is NULL or size is 0");
    buffer[0] = '\0';
    trtgn::Problem q;
    const trtgn_status_t s = validate(params, &q);
    if (s != TRTGN_STATUS_SUCCESS) return s;
    int need = 0;
    if (isEmpty(q)) {
        need = std::snprintf(buffer, size, "path=none");
    } else {
        if (q.x == nullptr) return fail(TRTGN_STATUS_INVALID_ARGUMENT, "x is NULL");
        if (q.y == nullptr) return fail(TRTGN_STATUS_INVALID_ARGUMENT, "y is NULL");
        trtgn::Plan d;
        const trtgn_status_t planned = planFor(q, &d, true);
        if (planned != TRTGN_STATUS_SUCCESS) return planned;
        need = std::snprintf(buffer, size,
                             "path=%s kernel=%s vec=%d blocks=%lld threads=%d cluster=%d split=%d vpt=%d slices=%d "
                             "chunk=%lld partials=%s workspace=%zu why=%s",
                             trtgn::pathName(d.path), d.kernel, d.vec, (long long)(d.gridX * d.gridY), d.threads,
                             d.cluster, d.split, d.vpt, d.slices, (long long)d.chunk, d.partials[0] ? d.partials : "-",
                             d.workspace, d.why);
    }
    if (need < 0 || size_t(need) >= size) {
        buffer[0] = '\0';
        return fail(TRTGN_STATUS_INVALID_ARGUMENT, "buffer of %zu bytes is too small: %d needed", size, need + 1);
    }
    return ok();
}

TRTGN_API trtgn_status_t trtgn_kernels_ptx_arch(int* arch) {
    if (arch == nullptr) return fail(TRTGN_STATUS_INVALID_ARGUMENT, "arch is NULL");
    const cudaError_t e = trtgn::kernelsPtxArch(arch);
    if (e != cudaSuccess) return cudaFailure(e);
    return ok();
}

TRTGN_API const char* trtgn_last_error_message(void) { return tlsMessage; }

TRTGN_API const char* trtgn_status_name(trtgn_status_t status) {
    switch (status) {
        case TRTGN_STATUS_SUCCESS: return "TRTGN_STATUS_SUCCESS";
        case TRTGN_STATUS_INVALID_ARGUMENT: return "TRTGN_STATUS_INVALID_ARGUMENT";
        case TRTGN_STATUS_WORKSPACE_TOO_SMALL: return "TRTGN_STATUS_WORKSPACE_TOO_SMALL";
        case TRTGN_STATUS_CUDA_ERROR: return "TRTGN_STATUS_CUDA_ERROR";
        case TRTGN_STATUS_NOT_SUPPORTED: return "TRTGN_STATUS_NOT_SUPPORTED";
    }
    return "TRTGN_STATUS_UNKNOWN";
}

TRTGN_API int trtgn_abi_version(void) { return TRTGN_ABI_VERSION; }

}  // extern "C"
