// The CUDA and AutogradCUDA kernels of torch.ops.trt_gn.group_norm_act and group_norm_act_add, in C++.
//
// trt_gn/ops.py defines the ops (schemas, CPU reference, fake implementations, Python CUDA kernels)
// and builds this file against the running torch (trt_gn/_cpp_op.py). trt_gn_torch_register()
// then registers these kernels at the CUDA and AutogradCUDA keys, which take precedence over the
// Python kernels at CompositeExplicitAutograd and Autograd: a CUDA call runs no Python at all.
//
// The kernels library is reached through the function pointers trt_gn/abi.py loaded (one library,
// one ABI check). Bad arguments are detected here with the conditions of ops.check_inputs (and
// ops.check_add_inputs), and the exception is raised by the Python op trt_gn::_group_norm_act_check
// (_group_norm_act_add_check), so its type and message are the Python implementation's to the
// letter; likewise a status the kernels library returns is raised as trt_gn.abi.TrtGnError by
// trt_gn::_group_norm_act_failed, and a library too old for the pre-add by
// trt_gn::_group_norm_act_add_unsupported (abi.require_pre_add's error).
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
#include <initializer_list>
#include <optional>
#include <tuple>

#include "trt_gn/group_norm.h"

namespace {

using OptTensor = std::optional<at::Tensor>;

struct Kernels {
  trtgn_status_t (*workspace_size)(const trtgn_params_t*, size_t*);
  trtgn_status_t (*group_norm)(const trtgn_params_t*, void*, size_t, void*);
  const char* (*last_error_message)();
  int abi_version;  // the library's: below 4 it would ignore the pre-add fields
};
Kernels g_kernels{};  // set once, before the kernels below are registered

constexpr const char* kNamespace = "trt_gn";
// spec.ACTIVATIONS, compared as string_views on both sides: the comparison every torch's
// c10::string_view has (not all compare with a const char*).
const c10::string_view kSilu("silu");
const c10::string_view kNone("none");
constexpr const char* kOp = "trt_gn::group_norm_act";
constexpr const char* kAddOp = "trt_gn::group_norm_act_add";
// The words of the Python implementation's autograd (torch.library.custom_op without a formula).
constexpr const char* kNoBackward =
    "Trying to backward through trt_gn.group_norm_act.default but no autograd formula was registered. "
    "Please use register_autograd to add one.";
constexpr const char* kNoBackwardAdd =
    "Trying to backward through trt_gn.group_norm_act_add.default but no autograd formula was registered. "
    "Please use register_autograd to add one.";

bool supported_dtype(c10::ScalarType t) {
  return t == at::kFloat || t == at::kHalf || t == at::kBFloat16;
}

bool present(const OptTensor& t) {
  return t.has_value() && t->defined();
}

// ops._check_per_channel: x's dtype or float32, x's device.
bool per_channel_valid(const at::Tensor& a, const at::Tensor& x) {
  return (a.scalar_type() == x.scalar_type() || a.scalar_type() == at::kFloat) && a.device() == x.device();
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
    if (!per_channel_valid(a, x)) return false;
  }
  return true;
}

// ops.check_add_inputs' conditions (after check_inputs').
bool add_arguments_valid(const at::Tensor& x, const OptTensor& pre_bias, const OptTensor& residual) {
  if (!present(pre_bias) && !present(residual)) return false;
  if (present(pre_bias)) {
    const at::Tensor& p = *pre_bias;
    const bool per_channel = p.dim() == 1 && p.size(0) == x.size(1);
    const bool per_image = p.dim() == 2 && p.size(0) == x.size(0) && p.size(1) == x.size(1);
    if (!(per_channel || per_image) || !per_channel_valid(p, x)) return false;
  }
  if (present(residual)) {
    const at::Tensor& r = *residual;
    if (r.sizes() != x.sizes() || r.scalar_type() != x.scalar_type() || r.device() != x.device()) return false;
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

[[noreturn]] void raise_bad_add_arguments(const at::Tensor& x, const OptTensor& weight, const OptTensor& bias,
                                          int64_t num_groups, double eps, c10::string_view activation,
                                          const OptTensor& pre_bias, const OptTensor& residual, bool write_sum) {
  c10::Dispatcher::singleton()
      .findSchemaOrThrow("trt_gn::_group_norm_act_add_check", "")
      .typed<void(const at::Tensor&, const OptTensor&, const OptTensor&, int64_t, double, c10::string_view,
                  const OptTensor&, const OptTensor&, bool)>()
      .call(x, weight, bias, num_groups, eps, activation, pre_bias, residual, write_sum);
  TORCH_CHECK(false, "group_norm_act_add: the C++ op rejected arguments that trt_gn.ops.check_add_inputs accepts "
                     "(a bug in trt_gn; TRT_GN_TORCH_OP=python runs the Python implementation)");
}

[[noreturn]] void raise_pre_add_unsupported(const at::Tensor& x) {
  c10::Dispatcher::singleton()
      .findSchemaOrThrow("trt_gn::_group_norm_act_add_unsupported", "")
      .typed<void(const at::Tensor&)>()
      .call(x);
  TORCH_CHECK(false, "group_norm_act_add: the kernels library has ABI version ", g_kernels.abi_version,
              "; a pre-add (pre_bias, residual) needs 4: rebuild the library");
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

// ops._supported_layout: contiguous NCHW or channels_last as they are, any other strides copied.
at::Tensor supported_layout(const at::Tensor& x) {
  return x.is_contiguous() || x.is_contiguous(at::MemoryFormat::ChannelsLast) ? x : x.contiguous();
}

// ops.affine_for_abi's dtype: x's, or float32 where any of the per-channel tensors differs from it.
c10::ScalarType affine_dtype_for(const at::Tensor& x, std::initializer_list<const OptTensor*> tensors) {
  for (const OptTensor* t : tensors) {
    if (present(*t) && (*t)->scalar_type() != x.scalar_type()) return at::kFloat;
  }
  return x.scalar_type();
}

// ops.abi_params without the pre-add fields (zero: none).
trtgn_params_t params_for(const at::Tensor& x, const at::Tensor& y, int64_t num_groups, double eps,
                          c10::string_view activation, const at::Tensor& gamma, const at::Tensor& beta,
                          c10::ScalarType affine_dtype) {
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
  return p;
}

// ops._launch: the workspace of its size, x's device and current stream.
void launch(const trtgn_params_t& p, const at::Tensor& x) {
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
}

at::Tensor group_norm_act_cuda(const at::Tensor& x_in, const OptTensor& weight, const OptTensor& bias,
                               int64_t num_groups, double eps, c10::string_view activation) {
  if (!arguments_valid(x_in, weight, bias, num_groups, eps, activation)) {
    raise_bad_arguments(x_in, weight, bias, num_groups, eps, activation);
  }
  const at::Tensor x = supported_layout(x_in);
  at::Tensor y = at::empty_like(x);  // preserves x's strides: the same memory format
  if (x.numel() == 0) return y;

  const c10::ScalarType affine_dtype = affine_dtype_for(x, {&weight, &bias});
  const at::Tensor gamma = affine_for_abi(weight, affine_dtype);
  const at::Tensor beta = affine_for_abi(bias, affine_dtype);
  launch(params_for(x, y, num_groups, eps, activation, gamma, beta, affine_dtype), x);
  return y;
}

std::tuple<at::Tensor, at::Tensor> group_norm_act_add_cuda(const at::Tensor& x_in, const OptTensor& weight,
                                                           const OptTensor& bias, int64_t num_groups, double eps,
                                                           c10::string_view activation, const OptTensor& pre_bias,
                                                           const OptTensor& residual, bool write_sum) {
  if (!arguments_valid(x_in, weight, bias, num_groups, eps, activation) ||
      !add_arguments_valid(x_in, pre_bias, residual)) {
    raise_bad_add_arguments(x_in, weight, bias, num_groups, eps, activation, pre_bias, residual, write_sum);
  }
  // ops._add_outputs: y and a written s in x's memory format, an unwritten s empty.
  const at::Tensor x = supported_layout(x_in);
  at::Tensor y = at::empty_like(x);
  at::Tensor s = write_sum ? at::empty_like(x) : at::empty({0}, x.options());
  if (x.numel() == 0) return {y, s};
  if (g_kernels.abi_version < 4) raise_pre_add_unsupported(x);  // where abi_params calls require_pre_add

  // ops.affine_for_abi: a float32 pre_bias stays float32 beside gamma/beta of x's dtype where the
  // library reads pre_bias_float32 (ABI 5); else all three take one dtype.
  const bool bias_float32 =
      present(pre_bias) && pre_bias->scalar_type() == at::kFloat && g_kernels.abi_version >= 5;
  const c10::ScalarType affine_dtype =
      bias_float32 ? affine_dtype_for(x, {&weight, &bias}) : affine_dtype_for(x, {&weight, &bias, &pre_bias});
  const at::Tensor gamma = affine_for_abi(weight, affine_dtype);
  const at::Tensor beta = affine_for_abi(bias, affine_dtype);
  const at::Tensor pre = affine_for_abi(pre_bias, bias_float32 ? at::kFloat : affine_dtype);
  // ops._layout_like: x's memory format (NCHW-contiguous wins a tie, as the layout below does).
  at::Tensor r;
  if (present(residual)) {
    r = x.is_contiguous() ? residual->contiguous() : residual->contiguous(at::MemoryFormat::ChannelsLast);
  }
  trtgn_params_t p = params_for(x, y, num_groups, eps, activation, gamma, beta, affine_dtype);
  p.pre_bias = pre.defined() ? pre.data_ptr() : nullptr;
  p.pre_bias_n_stride = pre.defined() && pre.dim() == 2 ? p.c : 0;
  p.pre_bias_float32 = bias_float32 && affine_dtype != at::kFloat ? 1 : 0;
  p.residual = r.defined() ? r.data_ptr() : nullptr;
  p.sum_out = write_sum ? s.data_ptr() : nullptr;
  launch(p, x);
  return {y, s};
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

std::tuple<at::Tensor, at::Tensor> call_add_below_autograd(const at::Tensor& x, const OptTensor& weight,
                                                           const OptTensor& bias, int64_t num_groups, double eps,
                                                           c10::string_view activation, const OptTensor& pre_bias,
                                                           const OptTensor& residual, bool write_sum) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow(kAddOp, "")
                             .typed<std::tuple<at::Tensor, at::Tensor>(
                                 const at::Tensor&, const OptTensor&, const OptTensor&, int64_t, double,
                                 c10::string_view, const OptTensor&, const OptTensor&, bool)>();
  const at::AutoDispatchBelowADInplaceOrView below_autograd;
  return op.call(x, weight, bias, num_groups, eps, activation, pre_bias, residual, write_sum);
}

struct NoBackwardAdd : public torch::autograd::Function<NoBackwardAdd> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext*, const at::Tensor& x,
                                                const OptTensor& weight, const OptTensor& bias, int64_t num_groups,
                                                double eps, c10::string_view activation, const OptTensor& pre_bias,
                                                const OptTensor& residual, bool write_sum) {
    auto [y, s] = call_add_below_autograd(x, weight, bias, num_groups, eps, activation, pre_bias, residual, write_sum);
    return {y, s};
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*,
                                                 torch::autograd::variable_list) {
    TORCH_CHECK(false, kNoBackwardAdd);
  }
};

std::tuple<at::Tensor, at::Tensor> group_norm_act_add_autograd(const at::Tensor& x, const OptTensor& weight,
                                                               const OptTensor& bias, int64_t num_groups, double eps,
                                                               c10::string_view activation, const OptTensor& pre_bias,
                                                               const OptTensor& residual, bool write_sum) {
  if (torch::autograd::compute_requires_grad(x, weight, bias, pre_bias, residual)) {
    const auto out =
        NoBackwardAdd::apply(x, weight, bias, num_groups, eps, activation, pre_bias, residual, write_sum);
    return {out[0], out[1]};
  }
  return call_add_below_autograd(x, weight, bias, num_groups, eps, activation, pre_bias, residual, write_sum);
}

}  // namespace

// Called once by trt_gn/_cpp_op.py with the kernels library's functions and ABI version: stores
// them, then registers the kernels. Returns 0, or 1 with the reason in `error` (NUL-terminated).
extern "C" __attribute__((visibility("default"))) int trt_gn_torch_register(void* workspace_size,
                                                                             void* group_norm,
                                                                             void* last_error_message,
                                                                             int abi_version, char* error,
                                                                             size_t error_size) {
  static bool registered = false;
  try {
    TORCH_CHECK(!registered, "the C++ kernels of ", kOp, " are registered already");
    TORCH_CHECK(workspace_size && group_norm && last_error_message, "a kernels library function is missing");
    g_kernels.workspace_size = reinterpret_cast<decltype(g_kernels.workspace_size)>(workspace_size);
    g_kernels.group_norm = reinterpret_cast<decltype(g_kernels.group_norm)>(group_norm);
    g_kernels.last_error_message = reinterpret_cast<decltype(g_kernels.last_error_message)>(last_error_message);
    g_kernels.abi_version = abi_version;
    // Held for the life of the process, as TORCH_LIBRARY_IMPL's static objects are.
    auto* cuda = new torch::Library(torch::Library::IMPL, kNamespace, c10::DispatchKey::CUDA, __FILE__, __LINE__);
    cuda->impl("group_norm_act", TORCH_FN(group_norm_act_cuda));
    cuda->impl("group_norm_act_add", TORCH_FN(group_norm_act_add_cuda));
    auto* autograd =
        new torch::Library(torch::Library::IMPL, kNamespace, c10::DispatchKey::AutogradCUDA, __FILE__, __LINE__);
    autograd->impl("group_norm_act", TORCH_FN(group_norm_act_autograd));
    autograd->impl("group_norm_act_add", TORCH_FN(group_norm_act_add_autograd));
    registered = true;
    return 0;
  } catch (const c10::Error& e) {
    std::snprintf(error, error_size, "%s", e.what_without_backtrace());
  } catch (const std::exception& e) {
    std::snprintf(error, error_size, "%s", e.what());
  }
  return 1;
}
