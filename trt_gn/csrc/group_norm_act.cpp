// The CUDA and AutogradCUDA kernels of torch.ops.trt_gn.group_norm_act, in C++.
//
// trt_gn/ops.py defines the op (schema, CPU reference, fake implementation, a Python CUDA kernel)
// and builds this file against the running torch (trt_gn/_cpp_op.py). trt_gn_torch_register()
// then registers these kernels at the CUDA and AutogradCUDA keys, which take precedence over the
// Python kernels at CompositeExplicitAutograd and Autograd: a CUDA call runs no Python at all.
//
// The kernels library is reached through the function pointers trt_gn/_lib.py loaded (one library,
// one ABI check). Bad arguments are detected here with the conditions of ops.check_inputs, and the
// exception is raised by the Python op trt_gn::_group_norm_act_check, so its type and message are
// the Python implementation's to the letter; likewise a status the kernels library returns is
// raised as trt_gn._lib.TrtGnError by trt_gn::_group_norm_act_failed.
//
// Only device-generic torch APIs are used (DeviceGuard, the stream's native handle, the caching
// allocator through at::empty): the file builds against any torch, CUDA headers or not.

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/library.h>

#include <cmath>
#include <cstdio>
#include <exception>
#include <optional>

#include "trt_gn/group_norm.h"

namespace {

using OptTensor = std::optional<at::Tensor>;

struct Kernels {
  trtgn_status_t (*workspace_size)(const trtgn_params_t*, size_t*);
  trtgn_status_t (*group_norm)(const trtgn_params_t*, void*, size_t, void*);
  const char* (*last_error_message)();
};
Kernels g_kernels{};  // set once, before the kernels below are registered

constexpr const char* kNamespace = "trt_gn";
// spec.ACTIVATIONS, compared as string_views on both sides: the comparison every torch's
// c10::string_view has (not all compare with a const char*).
const c10::string_view kSilu("silu");
const c10::string_view kNone("none");
constexpr const char* kOp = "trt_gn::group_norm_act";
// The words of the Python implementation's autograd (torch.library.custom_op without a formula).
constexpr const char* kNoBackward =
    "Trying to backward through trt_gn.group_norm_act.default but no autograd formula was registered. "
    "Please use register_autograd to add one.";

bool supported_dtype(c10::ScalarType t) {
  return t == at::kFloat || t == at::kHalf || t == at::kBFloat16;
}

bool present(const OptTensor& t) {
  return t.has_value() && t->defined();
}

// ops.check_inputs' conditions; the message of a failure is the Python op's (raise_bad_arguments).
bool arguments_valid(const at::Tensor& x, const OptTensor& weight, const OptTensor& bias, int64_t num_groups,
                     double eps, c10::string_view activation) {
  if (x.dim() != 4 || !supported_dtype(x.scalar_type()) || num_groups <= 0) return false;
  const int64_t c = x.size(1);
  if (c % num_groups != 0 || !(eps >= 0.0 && std::isfinite(eps))) return false;
  if (activation != kNone && activation != kSilu) return false;
  for (const OptTensor* t : {&weight, &bias}) {
    if (!present(*t)) continue;
    const at::Tensor& a = **t;
    if (a.dim() != 1 || a.size(0) != c) return false;
    if (a.scalar_type() != x.scalar_type() && a.scalar_type() != at::kFloat) return false;
    if (a.device() != x.device()) return false;
  }
  return true;
}

[[noreturn]] void raise_bad_arguments(const at::Tensor& x, const OptTensor& weight, const OptTensor& bias,
                                      int64_t num_groups, double eps, c10::string_view activation) {
  c10::Dispatcher::singleton()
      .findSchemaOrThrow("trt_gn::_group_norm_act_check", "")
      .typed<void(const at::Tensor&, const OptTensor&, const OptTensor&, int64_t, double, c10::string_view)>()
      .call(x, weight, bias, num_groups, eps, activation);
  TORCH_CHECK(false, "group_norm_act: the C++ op rejected arguments that trt_gn.ops.check_inputs accepts "
                     "(a bug in trt_gn; TRT_GN_TORCH_OP=python runs the Python implementation)");
}

void check_status(trtgn_status_t status, const at::Tensor& x) {
  if (status == TRTGN_STATUS_SUCCESS) return;
  // Read on this thread, right away: the library keeps the message per thread.
  const std::string message = g_kernels.last_error_message();
  c10::Dispatcher::singleton()
      .findSchemaOrThrow("trt_gn::_group_norm_act_failed", "")
      .typed<void(const at::Tensor&, int64_t, c10::string_view)>()
      .call(x, static_cast<int64_t>(status), message);
  TORCH_CHECK(false, "trtgn status ", static_cast<int>(status), ": ", message);
}

trtgn_dtype_t abi_dtype(c10::ScalarType t) {
  switch (t) {
    case at::kHalf: return TRTGN_DTYPE_FLOAT16;
    case at::kBFloat16: return TRTGN_DTYPE_BFLOAT16;
    default: return TRTGN_DTYPE_FLOAT32;
  }
}

// ops.affine_for_abi: contiguous, one dtype for both (float32 where one differs from x's).
at::Tensor affine_for_abi(const OptTensor& t, c10::ScalarType dtype) {
  return present(t) ? t->to(dtype).contiguous() : at::Tensor();
}

at::Tensor group_norm_act_cuda(const at::Tensor& x_in, const OptTensor& weight, const OptTensor& bias,
                               int64_t num_groups, double eps, c10::string_view activation) {
  if (!arguments_valid(x_in, weight, bias, num_groups, eps, activation)) {
    raise_bad_arguments(x_in, weight, bias, num_groups, eps, activation);
  }
  // ops._supported_layout: contiguous NCHW or channels_last as they are, any other strides copied.
  const at::Tensor x = x_in.is_contiguous() || x_in.is_contiguous(at::MemoryFormat::ChannelsLast)
                           ? x_in
                           : x_in.contiguous();
  at::Tensor y = at::empty_like(x);  // preserves x's strides: the same memory format
  if (x.numel() == 0) return y;

  const bool mixed = (present(weight) && weight->scalar_type() != x.scalar_type()) ||
                     (present(bias) && bias->scalar_type() != x.scalar_type());
  const c10::ScalarType affine_dtype = mixed ? at::kFloat : x.scalar_type();
  const at::Tensor gamma = affine_for_abi(weight, affine_dtype);
  const at::Tensor beta = affine_for_abi(bias, affine_dtype);

  trtgn_params_t p{};
  p.x = x.data_ptr();
  p.y = y.data_ptr();
  p.n = x.size(0);
  p.c = x.size(1);
  p.h = x.size(2);
  p.w = x.size(3);
  p.num_groups = num_groups;
  p.channel_stride = p.c;
  p.layout = x.is_contiguous() ? TRTGN_LAYOUT_NCHW : TRTGN_LAYOUT_NHWC;
  p.dtype = abi_dtype(x.scalar_type());
  p.activation = activation == kSilu ? TRTGN_ACTIVATION_SILU : TRTGN_ACTIVATION_NONE;
  p.epsilon = static_cast<float>(eps);
  p.gamma = gamma.defined() ? gamma.data_ptr() : nullptr;
  p.beta = beta.defined() ? beta.data_ptr() : nullptr;
  p.affine_dtype = abi_dtype(affine_dtype);

  const c10::DeviceGuard guard(x.device());
  size_t nbytes = 0;
  check_status(g_kernels.workspace_size(&p, &nbytes), x);  // validates p: makes no CUDA call
  TORCH_CHECK(x.is_cuda(), "group_norm_act: the CUDA kernel was given a tensor on ", x.device());
  // The caching allocator ties the block to the current stream (and to the graph pool while
  // capturing), so the workspace is safe to reuse as soon as this launch is done.
  const at::Tensor workspace =
      nbytes ? at::empty({static_cast<int64_t>(nbytes)}, x.options().dtype(at::kByte)) : at::Tensor();
  const c10::Stream stream = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(x.device());
  check_status(g_kernels.group_norm(&p, workspace.defined() ? workspace.data_ptr() : nullptr, nbytes,
                                    stream.native_handle()),
               x);
  return y;
}

at::Tensor call_below_autograd(const at::Tensor& x, const OptTensor& weight, const OptTensor& bias,
                               int64_t num_groups, double eps, c10::string_view activation) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow(kOp, "")
                             .typed<at::Tensor(const at::Tensor&, const OptTensor&, const OptTensor&, int64_t,
                                               double, c10::string_view)>();
  const at::AutoDispatchBelowADInplaceOrView below_autograd;
  return op.call(x, weight, bias, num_groups, eps, activation);
}

// Inference only, as the Python implementation: the forward runs, a backward through it raises.
struct NoBackward : public torch::autograd::Function<NoBackward> {
  static at::Tensor forward(torch::autograd::AutogradContext*, const at::Tensor& x, const OptTensor& weight,
                            const OptTensor& bias, int64_t num_groups, double eps, c10::string_view activation) {
    return call_below_autograd(x, weight, bias, num_groups, eps, activation);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*,
                                                 torch::autograd::variable_list) {
    TORCH_CHECK(false, kNoBackward);
  }
};

at::Tensor group_norm_act_autograd(const at::Tensor& x, const OptTensor& weight, const OptTensor& bias,
                                   int64_t num_groups, double eps, c10::string_view activation) {
  if (torch::autograd::compute_requires_grad(x, weight, bias)) {
    return NoBackward::apply(x, weight, bias, num_groups, eps, activation);
  }
  return call_below_autograd(x, weight, bias, num_groups, eps, activation);
}

}  // namespace

// Called once by trt_gn/_cpp_op.py with the kernels library's functions: stores them, then
// registers the kernels. Returns 0, or 1 with the reason in `error` (NUL-terminated).
extern "C" __attribute__((visibility("default"))) int trt_gn_torch_register(void* workspace_size,
                                                                             void* group_norm,
                                                                             void* last_error_message,
                                                                             char* error, size_t error_size) {
  static bool registered = false;
  try {
    TORCH_CHECK(!registered, "the C++ kernels of ", kOp, " are registered already");
    TORCH_CHECK(workspace_size && group_norm && last_error_message, "a kernels library function is missing");
    g_kernels.workspace_size = reinterpret_cast<decltype(g_kernels.workspace_size)>(workspace_size);
    g_kernels.group_norm = reinterpret_cast<decltype(g_kernels.group_norm)>(group_norm);
    g_kernels.last_error_message = reinterpret_cast<decltype(g_kernels.last_error_message)>(last_error_message);
    // Held for the life of the process, as TORCH_LIBRARY_IMPL's static objects are.
    auto* cuda = new torch::Library(torch::Library::IMPL, kNamespace, c10::DispatchKey::CUDA, __FILE__, __LINE__);
    cuda->impl("group_norm_act", TORCH_FN(group_norm_act_cuda));
    auto* autograd =
        new torch::Library(torch::Library::IMPL, kNamespace, c10::DispatchKey::AutogradCUDA, __FILE__, __LINE__);
    autograd->impl("group_norm_act", TORCH_FN(group_norm_act_autograd));
    registered = true;
    return 0;
  } catch (const c10::Error& e) {
    std::snprintf(error, error_size, "%s", e.what_without_backtrace());
  } catch (const std::exception& e) {
    std::snprintf(error, error_size, "%s", e.what());
  }
  return 1;
}
