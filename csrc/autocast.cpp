// Autocast policy of the forward ops: under torch.autocast their feature inputs are cast to
// the autocast dtype (float32 and the other half type; float64 is left alone, as autocast
// leaves it), then the op runs below autocast. The kernels read and write float16/bfloat16
// themselves and accumulate in float32, so a model whose linear layers already produce the
// autocast dtype passes its features through with no cast at all. Edge values (spmm's value
// and t_value), which the kernels take in float32, keep their dtype.
//
// One boxed kernel serves every op: the arguments it casts are found by name in the schema.
#include <ATen/autocast_mode.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>
#include <torch/version.h>

#include <array>

namespace fastgnn {
namespace {

// Feature arguments of the forward ops (csrc/ops.cpp); edge_softmax's logits among them, as
// DGL's edge_softmax casts its logits to the autocast dtype too, and minmax_aggregate's edge
// weight, which must keep x's dtype.
constexpr std::array<const char*, 13> kFeatureArguments = {
    "x", "x_dst", "x_src", "att", "q", "k", "v", "edge_term", "alpha_src", "alpha_dst",
    "alpha_edge", "logits", "weight"};

bool is_feature_argument(const std::string& name) {
  for (const char* feature : kFeatureArguments)
    if (name == feature) return true;
  return false;
}

at::ScalarType autocast_dtype(c10::DeviceType device) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  return at::autocast::get_autocast_dtype(device);
#else
  return device == c10::DeviceType::CUDA ? at::autocast::get_autocast_gpu_dtype()
                                         : at::autocast::get_autocast_cpu_dtype();
#endif
}

// Float16 or bfloat16 input in the autocast dtype; anything else (float64, integers, absent
// tensors, another device) as it is.
c10::IValue cast_feature(const c10::IValue& value, c10::DeviceType device, at::ScalarType to) {
  if (!value.isTensor()) return value;
  const at::Tensor& t = value.toTensor();
  if (!t.defined() || t.device().type() != device || !t.is_floating_point() ||
      t.scalar_type() == at::kDouble || t.scalar_type() == to)
    return value;
  return t.to(to);
}

template <c10::DeviceType kDevice>
void autocast_features(const c10::OperatorHandle& op, c10::DispatchKeySet /*keys*/,
                       torch::jit::Stack* stack) {
  const auto& arguments = op.schema().arguments();
  const size_t first = stack->size() - arguments.size();
  const at::ScalarType to = autocast_dtype(kDevice);
  for (size_t i = 0; i < arguments.size(); ++i)
    if (is_feature_argument(arguments[i].name()))
      (*stack)[first + i] = cast_feature((*stack)[first + i], kDevice, to);
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  op.callBoxed(stack);
}

// The ops whose features follow autocast: every forward that takes float features. Their
// backwards are left out: autograd hands them gradients in the dtype of the forward's output.
// maxk_spgemm is left out too: its CBSR values come from maxk, already in the autocast dtype.
constexpr std::array<const char*, 7> kAutocastOps = {
    "spmm", "minmax_aggregate", "gatv2_forward", "graph_attention_forward", "gat_forward",
    "edge_softmax", "maxk"};

template <c10::DeviceType kDevice>
void register_autocast(torch::Library& m) {
  for (const char* name : kAutocastOps)
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&autocast_features<kDevice>>());
}

}  // namespace

TORCH_LIBRARY_IMPL(fastgnn, AutocastCPU, m) { register_autocast<c10::DeviceType::CPU>(m); }
TORCH_LIBRARY_IMPL(fastgnn, AutocastCUDA, m) { register_autocast<c10::DeviceType::CUDA>(m); }

}  // namespace fastgnn
