// Torch-facing glue of the CUDA min/max aggregation: checks, stream, allocation, path choice.
#include <torch/library.h>

#include <limits>

#include "cuda/glue.h"
#include "minmax_checks.h"
#include "cuda/minmax_kernels.h"
#include "cuda/spmm_split_work.h"

namespace fastgnn {
namespace cuda {
namespace {

constexpr int kDefaultWarps = 4;
constexpr int kDefaultEdgesPerBlock = 128;

// The tuner's config int: warps per block in bits 0-7, edges per heavy block in bits 8-31,
// edges per work item of the load-balanced path in bits 32-47 (0: degree buckets instead).
struct LaunchConfig {
  int warps;
  int edges_per_block;
  int64_t split_chunk;
};

LaunchConfig decode(int64_t config) {
  TORCH_CHECK(config >= 0, "minmax_aggregate: config must be non-negative, got ", config);
  const int64_t warps = config & 0xff, edges = (config >> 8) & 0xffffff;
  const int64_t chunk = config >> 32;
  TORCH_CHECK(warps <= 32 && chunk <= 0xffff, "minmax_aggregate: config asks for ", warps,
              " warps and ", chunk, " edges per item (at most 32 warps and 65535 edges)");
  return {warps ? int(warps) : kDefaultWarps, edges ? int(edges) : kDefaultEdgesPerBlock, chunk};
}

void check_rows(const at::Tensor& rows, const at::Tensor& col, const char* name) {
  TORCH_CHECK(rows.is_cuda() && rows.dim() == 1 && rows.is_contiguous() &&
                  rows.scalar_type() == col.scalar_type(),
              "minmax_aggregate: ", name, " must be a contiguous 1-D GPU tensor of col's dtype");
}

// [rows, width] 64-bit words for the packed merge, in out's memory when it fits (the words
// are dead before out is written), so the forward needs no memory beyond its outputs.
void* borrowed_scratch(at::Tensor& out, int64_t rows, int64_t width, at::Tensor& own) {
  if (out.nbytes() >= size_t(rows * width) * sizeof(unsigned long long)) return out.data_ptr();
  own = at::empty({rows, width}, out.options().dtype(at::kLong));
  return own.data_ptr();
}

std::tuple<at::Tensor, at::Tensor> minmax_aggregate_cuda(
    const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& x, bool is_max,
    const c10::optional<at::Tensor>& light_rows, const c10::optional<at::Tensor>& heavy_rows,
    int64_t max_degree, int64_t config, const c10::optional<at::Tensor>& /*t_rowptr*/,
    const c10::optional<at::Tensor>& /*t_col*/, int64_t graph_key,
    const c10::optional<at::Tensor>& weight, const c10::optional<at::Tensor>& edge_perm,
    bool last_wins, bool ignore_nan) {
  const c10::cuda::CUDAGuard guard(x.device());
  const CsrView csr = csr_view(rowptr, col, "minmax_aggregate");
  TORCH_CHECK(x.dim() == 2 && x.is_cuda(),
              "minmax_aggregate: x must be a 2-D [num_src, F] GPU tensor, got ", x.dim(), " dims");
  const LaunchConfig launch = decode(config);
  const int64_t width = x.size(1);
  const int64_t heads = check_minmax_weight(weight, edge_perm, col, x, "minmax_aggregate");
  // the packed merges of the heavy and load-balanced paths keep the earliest of equal words
  // and let NaN win
  TORCH_CHECK(!(last_wins || ignore_nan) || (launch.split_chunk == 0 && !heavy_rows.has_value()),
              "minmax_aggregate: last_wins and ignore_nan take the light path only (no "
              "heavy_rows, no load-balanced config)");
  auto xc = x.contiguous();
  auto wc = heads > 0 ? weight->contiguous() : at::Tensor();
  const EdgeWeights weights{heads > 0 ? wc.data_ptr() : nullptr, heads,
                            heads > 0 && edge_perm.has_value() ? edge_perm->data_ptr() : nullptr};
  auto out = at::empty({csr.rows, width}, x.options());
  auto arg = at::empty({csr.rows, width}, x.options().dtype(col.scalar_type()));
  if (csr.rows == 0 || width == 0) return {out, arg};
  const FloatType type = float_type(x);
  // Packed words hold a float32 key and a 32-bit source (weighted: CSR position): other inputs
  // take the light path.
  const int64_t indices = heads > 0 ? csr.nnz : x.size(0);
  const bool packable = type != FloatType::kDouble &&
                        indices <= std::numeric_limits<int32_t>::max();
  if (launch.split_chunk > 0) {
    TORCH_CHECK(packable, "minmax_aggregate: the load-balanced path takes float32/16/bf16 "
                "features and fewer than 2^31 sources (with weights: edges)");
    const auto work = split_work(rowptr, graph_key, 0, launch.split_chunk);
    at::Tensor own_scratch;
    void* scratch = borrowed_scratch(out, work->split_rows, width, own_scratch);
    minmax_split(type, csr, work->view(), xc.data_ptr(), weights, out.data_ptr(),
                 arg.data_ptr(), static_cast<unsigned long long*>(scratch), width, is_max,
                 launch.warps, stream());
    return {out, arg};
  }
  const bool use_heavy = heavy_rows.has_value() && heavy_rows->numel() > 0 && packable;
  if (use_heavy) {
    check_rows(*heavy_rows, col, "heavy_rows");
    const int64_t num_heavy = heavy_rows->numel();
    at::Tensor own_scratch;
    void* scratch = borrowed_scratch(out, num_heavy, width, own_scratch);
    minmax_heavy_args(type, csr, heavy_rows->data_ptr(), num_heavy, max_degree, xc.data_ptr(),
                      weights, arg.data_ptr(), static_cast<unsigned long long*>(scratch), width,
                      is_max, launch.warps, launch.edges_per_block, stream());
  }
  const at::Tensor* light = use_heavy && light_rows.has_value() ? &*light_rows : nullptr;
  if (light) check_rows(*light, col, "light_rows");
  minmax_light(type, csr, light ? light->data_ptr() : nullptr, light ? light->numel() : csr.rows,
               xc.data_ptr(), weights, out.data_ptr(), arg.data_ptr(), width, is_max, last_wins,
               ignore_nan, launch.warps, stream());
  if (use_heavy)
    minmax_heavy_values(type, csr, heavy_rows->data_ptr(), heavy_rows->numel(), xc.data_ptr(),
                        weights, arg.data_ptr(), out.data_ptr(), width, stream());
  return {out, arg};
}

at::Tensor minmax_aggregate_backward_cuda(const at::Tensor& arg, const at::Tensor& grad_out,
                                          int64_t num_src,
                                          const c10::optional<at::Tensor>& t_rowptr,
                                          const c10::optional<at::Tensor>& t_col,
                                          const c10::optional<at::Tensor>& col,
                                          const c10::optional<at::Tensor>& weight,
                                          const c10::optional<at::Tensor>& edge_perm) {
  const c10::cuda::CUDAGuard guard(grad_out.device());
  TORCH_CHECK(arg.dim() == 2 && grad_out.sizes() == arg.sizes() && arg.is_cuda() &&
                  grad_out.is_cuda(),
              "minmax_aggregate_backward: grad_out and arg must be [T, F] GPU tensors of one "
              "shape");
  TORCH_CHECK(arg.scalar_type() == at::kInt || arg.scalar_type() == at::kLong,
              "minmax_aggregate_backward: arg must be int32 or int64");
  TORCH_CHECK(num_src >= 0, "minmax_aggregate_backward: num_src must be non-negative");
  const FloatType type = float_type(grad_out);
  const int64_t heads = check_backward_weight(arg, grad_out, col, weight, edge_perm);
  TORCH_CHECK(heads == 0 || (col->is_cuda() && weight->is_cuda()),
              "minmax_aggregate_backward: col and weight must be GPU tensors");
  auto ac = arg.contiguous(), gc = grad_out.contiguous();
  auto cc = heads > 0 ? col->contiguous() : at::Tensor();
  auto wc = heads > 0 ? weight->contiguous() : at::Tensor();
  const void* col_ptr = heads > 0 ? cc.data_ptr() : nullptr;
  const EdgeWeights weights{heads > 0 ? wc.data_ptr() : nullptr, heads,
                            heads > 0 && edge_perm.has_value() ? edge_perm->data_ptr() : nullptr};
  const int64_t width = arg.size(1);
  if (t_rowptr.has_value() && t_col.has_value()) {
    const CsrView t_csr = csr_view(*t_rowptr, *t_col, "minmax_aggregate_backward");
    TORCH_CHECK(t_csr.rows == num_src && t_col->scalar_type() == arg.scalar_type(),
                "minmax_aggregate_backward: the transposed CSR must have num_src rows and "
                "arg's dtype");
    auto grad_x = at::empty({num_src, width}, grad_out.options());
    minmax_pull(type, t_csr, ac.data_ptr(), gc.data_ptr(), col_ptr, weights, grad_x.data_ptr(),
                width, stream());
    return grad_x;
  }
  at::globalContext().alertNotDeterministic(
      "fastgnn minmax_aggregate_backward without the transposed CSR (atomic scatter)");
  auto acc = at::zeros({num_src, width}, grad_out.options().dtype(acc_type(grad_out)));
  minmax_scatter_atomic(type, arg.scalar_type() == at::kLong, ac.data_ptr(), gc.data_ptr(),
                        col_ptr, weights, acc.data_ptr(), arg.size(0), width, stream());
  return acc.scalar_type() == grad_out.scalar_type() ? acc : acc.to(grad_out.scalar_type());
}

at::Tensor minmax_weight_backward_cuda(const at::Tensor& rowptr, const at::Tensor& col,
                                       const at::Tensor& arg, const at::Tensor& grad_out,
                                       const at::Tensor& x, int64_t heads,
                                       const c10::optional<at::Tensor>& edge_perm) {
  const c10::cuda::CUDAGuard guard(grad_out.device());
  const CsrView csr = csr_view(rowptr, col, "minmax_weight_backward");
  check_weight_backward(col, arg, grad_out, x, heads, csr.rows, edge_perm);
  TORCH_CHECK(arg.is_cuda() && grad_out.is_cuda() && x.is_cuda(),
              "minmax_weight_backward: arg, grad_out and x must be GPU tensors");
  auto ac = arg.contiguous(), gc = grad_out.contiguous(), xc = x.contiguous();
  auto grad_w = at::zeros({csr.nnz, heads}, grad_out.options().dtype(acc_type(grad_out)));
  minmax_weight_grad(float_type(grad_out), csr,
                     edge_perm.has_value() ? edge_perm->data_ptr() : nullptr, ac.data_ptr(),
                     gc.data_ptr(), xc.data_ptr(), grad_w.data_ptr(), arg.size(1), heads,
                     stream());
  return grad_w.scalar_type() == grad_out.scalar_type() ? grad_w
                                                        : grad_w.to(grad_out.scalar_type());
}

}  // namespace

TORCH_LIBRARY_IMPL(fastgnn, CUDA, m) {
  m.impl("minmax_aggregate", &minmax_aggregate_cuda);
  m.impl("minmax_aggregate_backward", &minmax_aggregate_backward_cuda);
  m.impl("minmax_weight_backward", &minmax_weight_backward_cuda);
}

}  // namespace cuda
}  // namespace fastgnn
