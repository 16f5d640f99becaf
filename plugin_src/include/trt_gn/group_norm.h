/*
 * trt_gn: fused GroupNorm (+ activation) CUDA kernels, C ABI.
 *
 *   y = act((x - mean[n,g]) * rstd[n,g] * gamma[c] + beta[c])
 *
 * mean/rstd are taken over the H*W*(C/G) elements of each (batch n, group g);
 * statistics are accumulated in fp32 with a numerically stable method.
 *
 * With a pre-add (ABI 4: pre_bias and/or residual), x is first replaced by
 *   s = x + pre_bias[n, c] + residual     (each term optional; in fp32,
 *                                          then rounded once to the dtype)
 * and y is computed from s (its statistics and its values): the s an unfused
 * model would normalise. s can also be written out (sum_out): a convolution's
 * bias and a residual add cost no separate pass in front of the normalisation.
 * Without pre_bias and residual every result is bit-identical to ABI 3's.
 *
 * This header is the whole public interface of the kernels library. It knows
 * nothing of TensorRT or PyTorch; both wrap it.
 *
 * Contract of trtgn_group_norm():
 *   - no allocation, no host synchronisation, no global mutable state;
 *   - all device work is enqueued on the given stream only (capturable in a
 *     CUDA graph);
 *   - safe to call from several threads / streams at once, as long as every
 *     call in flight has its own workspace and output buffer;
 *   - bad input returns an error status and launches nothing; the message is
 *     kept per thread and read with trtgn_last_error_message();
 *   - a zero-size tensor (N, H or W == 0) is a successful no-op.
 */
#ifndef TRT_GN_GROUP_NORM_H
#define TRT_GN_GROUP_NORM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define TRTGN_API __declspec(dllexport)
#else
#define TRTGN_API __attribute__((visibility("default")))
#endif

/* Version of this ABI: bumped when a struct, an enum or the set of
 * functions changes. 2: trtgn_kernels_ptx_arch(). 3: trtgn_describe_plan().
 * 4: the pre-add fields at the end of trtgn_params_t. 5: pre_bias_float32. */
#define TRTGN_ABI_VERSION 5

typedef enum trtgn_status {
    TRTGN_STATUS_SUCCESS = 0,
    TRTGN_STATUS_INVALID_ARGUMENT = 1,   /* a parameter is out of range */
    TRTGN_STATUS_WORKSPACE_TOO_SMALL = 2,/* workspace_bytes < trtgn_workspace_size() */
    TRTGN_STATUS_CUDA_ERROR = 3,         /* a CUDA call or launch failed */
    TRTGN_STATUS_NOT_SUPPORTED = 4       /* valid, but beyond what the kernels launch (CUDA's grid limits) */
} trtgn_status_t;

typedef enum trtgn_dtype {
    TRTGN_DTYPE_FLOAT32 = 0,
    TRTGN_DTYPE_FLOAT16 = 1,
    TRTGN_DTYPE_BFLOAT16 = 2
} trtgn_dtype_t;

typedef enum trtgn_layout {
    /* channels last: element (n, h, w, c) at ((n*H + h)*W + w)*channel_stride + c */
    TRTGN_LAYOUT_NHWC = 0,
    /* contiguous NCHW: element (n, c, h, w) at ((n*C + c)*H + h)*W + w;
       channel_stride must equal C */
    TRTGN_LAYOUT_NCHW = 1
} trtgn_layout_t;

typedef enum trtgn_activation {
    TRTGN_ACTIVATION_NONE = 0,
    TRTGN_ACTIVATION_SILU = 1 /* y * sigmoid(y) */
    /* 2 is reserved for GELU */
} trtgn_activation_t;

typedef struct trtgn_params {
    const void* x;          /* input, dtype `dtype`, layout `layout` */
    void* y;                /* output, same dtype/layout/strides as x; may equal x */
    int64_t n, c, h, w;     /* logical sizes */
    int64_t num_groups;     /* G, > 0, divides c */
    int64_t channel_stride; /* NHWC: elements between two pixels, >= c (e.g. round_up(c, 8) for
                               TensorRT's HWC8); padding channels are neither read nor written.
                               NCHW: must be c. */
    trtgn_layout_t layout;
    trtgn_dtype_t dtype;
    trtgn_activation_t activation;
    float epsilon;          /* added to the variance, >= 0 */
    const void* gamma;      /* [c] scale, or NULL for 1 */
    const void* beta;       /* [c] shift, or NULL for 0 */
    trtgn_dtype_t affine_dtype; /* dtype of gamma/beta (and of pre_bias, unless pre_bias_float32):
                                   `dtype` or TRTGN_DTYPE_FLOAT32 */
    /* The pre-add (ABI 4). A zero-initialised struct has none: callers that
     * zero-initialise trtgn_params_t stay correct. */
    const void* pre_bias;       /* NULL, or per-channel bias added to x before the statistics, dtype
                                   affine_dtype (float32 where pre_bias_float32) */
    int64_t pre_bias_n_stride;  /* elements from image n's biases to image n+1's: 0 ([C], shared by
                                   all images) or c ([N, C]: per image, e.g. a UNet's conv bias + time
                                   embedding). Ignored when pre_bias is NULL. */
    const void* residual;       /* NULL, or a tensor added to x before the statistics: same dtype,
                                   shape, layout and channel_stride as x */
    void* sum_out;              /* NULL, or where s is written (dtype, layout and strides of y);
                                   only with pre_bias or residual. sum_out may overlap none of
                                   x, residual and y, and y may not overlap residual (y may
                                   still equal x). */
    int32_t pre_bias_float32;   /* ABI 5: nonzero: pre_bias is float32 whatever affine_dtype is (a
                                   bias summed in fp32, such as a convolution's bias plus a time
                                   embedding, next to gamma/beta of the input dtype: neither is
                                   converted); 0: pre_bias has affine_dtype, as in ABI 4. */
} trtgn_params_t;

/* Bytes of device workspace trtgn_group_norm() needs for these parameters
 * (0 is possible). Validates the parameters like trtgn_group_norm(); `x`, `y`
 * may be NULL here. Makes no CUDA call and does not depend on the GPU, so a
 * size computed when an engine is built holds on any GPU that runs it. The
 * pre-add fields count: give them as the launch will (a pre-add may take
 * another path, whose workspace differs). */
TRTGN_API trtgn_status_t trtgn_workspace_size(const trtgn_params_t* params, size_t* workspace_bytes);

/* Upper bound of trtgn_workspace_size() over every N' <= n, H' <= h, W' <= w
 * with the other parameters fixed: what a TensorRT plugin asks for once per
 * optimisation profile. */
TRTGN_API trtgn_status_t trtgn_workspace_size_max(const trtgn_params_t* params, size_t* workspace_bytes);

/* Enqueue y = act(GroupNorm(x)) on `stream` (a cudaStream_t; NULL = legacy
 * default stream). `workspace` must be 256-byte aligned device memory of at
 * least trtgn_workspace_size() bytes; its content on entry does not matter. */
TRTGN_API trtgn_status_t trtgn_group_norm(const trtgn_params_t* params, void* workspace,
                                          size_t workspace_bytes, void* stream);

/* The virtual architecture (major * 10 + minor) of the PTX that this
 * library's kernels run from on the current device: 90 on an H100 for a build
 * that includes sm_90; 80 on the same GPU for a build for sm_80 alone, whose
 * compute_80 PTX the driver compiles there. Below 90 on a GPU of compute
 * capability 9.0 or later, the paths that need Hopper (clusters of blocks, the
 * on-chip and streaming grids) stay off: the same results, more slowly.
 * Fails with TRTGN_STATUS_CUDA_ERROR where no CUDA device is usable. */
TRTGN_API trtgn_status_t trtgn_kernels_ptx_arch(int* arch);

/* The plan trtgn_group_norm() would run for these parameters on the current
 * device, as one line of space-separated key=value pairs, written into
 * `buffer` (NUL-terminated; 1024 bytes are always enough):
 *   path     clusters | on-chip-grid | streaming-grid | two-pass | none (empty tensor)
 *   kernel   the kernel of the path's main work
 *   vec      elements a thread loads at once
 *   blocks, threads   the main kernel's grid and block size
 *   cluster  blocks a cluster; split: blocks that each hold a whole group
 *   vpt      vectors a thread holds (clusters); slices: channel slices
 *   chunk    pixels (NHWC) or elements (NCHW) a block walks; partials: two-pass NHWC
 *            statistics per group or per channel ("-" elsewhere)
 *   workspace  bytes of workspace the plan uses (at most trtgn_workspace_size())
 *   why      last, to the end of the line: each path's verdict in the order
 *            tried, "; "-separated ("clusters: estimate 9120 not under 8250;
 *            grid: every block's chunk fits its shared memory")
 * Fails with TRTGN_STATUS_NOT_SUPPORTED, and the reason, where no launch fits
 * CUDA's grid limits (as trtgn_group_norm() then does). Validates like trtgn_group_norm() (x and y are needed: their alignment
 * takes part in the choice); launches nothing and needs no workspace. Keys
 * may be added; none is removed or renamed within an ABI version. */
TRTGN_API trtgn_status_t trtgn_describe_plan(const trtgn_params_t* params, char* buffer, size_t size);

/* The message of the last failed call made by this thread ("" after a success). */
TRTGN_API const char* trtgn_last_error_message(void);

/* A fixed name for a status code, e.g. "TRTGN_STATUS_INVALID_ARGUMENT". */
TRTGN_API const char* trtgn_status_name(trtgn_status_t status);

/* TRTGN_ABI_VERSION of the built library. */
TRTGN_API int trtgn_abi_version(void);

#ifdef __cplusplus
}
#endif

#endif /* TRT_GN_GROUP_NORM_H */
