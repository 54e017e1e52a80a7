// Torch-facing glue of the WSB Tensor Core Graph Transformer attention: checks, allocation;
// the backward's destination pass on the layout inside the CSR backward's glue.
#include <torch/library.h>

#include <tuple>

#include "cuda/attention_glue.h"
#include "cuda/glue.h"
#include "cuda/wsb_kernels.h"
#include "wsb_checks.h"

namespace fastgnn {
namespace cuda {
namespace {

constexpr const char* kOp = "wsb_graph_attention_forward";
constexpr const char* kBackwardOp = "wsb_graph_attention_backward";

bool aligned16(const at::Tensor& t) {
  return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
}

// Checks what the forward and the backward's destination pass share; returns the plan's view
// (features' sizes, the plan's sizes).
WsbAttentionView checked_view(const at::Tensor& tile_ptr, const at::Tensor& tile_cols,
                              const at::Tensor& tile_counts, const at::Tensor& work,
                              const at::Tensor& splits, const at::Tensor& q, const at::Tensor& k,
                              const at::Tensor& v, const char* op) {
  TORCH_CHECK(q.is_cuda(), op, ": q must be a CUDA tensor");
  TORCH_CHECK(q.scalar_type() == at::kHalf || q.scalar_type() == at::kBFloat16, op,
              ": the Tensor Core path takes float16 or bfloat16 features, got ", q.scalar_type());
  for (const at::Tensor* t : {&tile_ptr, &tile_cols, &tile_counts, &work, &splits, &k, &v})
    TORCH_CHECK(t->device() == q.device(), op, ": every tensor must be on q's GPU");
  for (const at::Tensor* t : {&tile_ptr, &tile_cols, &tile_counts, &work, &splits})
    TORCH_CHECK(t->is_contiguous(), op, ": the WSB tensors must be contiguous");
  const int64_t windows = check_wsb_attention(tile_ptr, tile_cols, tile_counts, q, k, v, op);
  TORCH_CHECK(work.scalar_type() == at::kInt && work.dim() == 2 && work.size(1) == 4 &&
                  work.size(0) >= windows && splits.scalar_type() == at::kInt &&
                  splits.dim() == 2 && splits.size(1) == 2,
              op, ": work and splits must be the layout's attention plan (WSB.attention_plan())");
  TORCH_CHECK(wsb_attention_dim_supported(q.size(2)), op,
              ": the Tensor Core path takes head dims 32, 64 or 128, got ", q.size(2));
  check_tensor_cores(q.device(), op);
  TORCH_CHECK(aligned16(tile_counts), op, ": tile_counts must start on a 16-byte boundary");
  return WsbAttentionView{tile_cols.data_ptr<int>(), tile_counts.data_ptr(), work.data_ptr<int>(),
                          splits.data_ptr<int>(),    work.size(0),          splits.size(0),
                          q.size(0),                 q.size(1)};
}

std::tuple<at::Tensor, at::Tensor> wsb_graph_attention_cuda(
    const at::Tensor& tile_ptr, const at::Tensor& tile_cols, const at::Tensor& tile_counts,
    const at::Tensor& work, const at::Tensor& splits,
    const c10::optional<at::Tensor>& /*edge_starts: the backward's*/, const at::Tensor& q,
    const at::Tensor& k, const at::Tensor& v, double scale,
    // the CSR backward's inputs, kept by autograd and not read here
    const at::Tensor&, const at::Tensor&, const c10::optional<at::Tensor>&,
    const c10::optional<at::Tensor>&, const c10::optional<at::Tensor>&,
    const c10::optional<at::Tensor>&, const c10::optional<at::Tensor>&,
    const c10::optional<at::Tensor>&, int64_t) {
  const c10::cuda::CUDAGuard guard(q.device());
  const WsbAttentionView view =
      checked_view(tile_ptr, tile_cols, tile_counts, work, splits, q, k, v, kOp);
  const int64_t heads = q.size(1), dim = q.size(2);
  const at::Tensor qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  for (const at::Tensor* t : {&qc, &kc, &vc})
    TORCH_CHECK(aligned16(*t), kOp, ": q, k and v must start on a 16-byte boundary");
  auto out = at::empty({q.size(0), heads, dim}, q.options());
  auto lse = at::empty({q.size(0), heads}, q.options().dtype(at::kFloat));
  // The unnormalised states of the pieces of split windows, 16 rows each.
  auto partials = at::empty({splits.size(0) * 16, heads, dim}, lse.options());
  auto stats = at::empty({splits.size(0) * 16, heads, 2}, lse.options());
  wsb_graph_attention(float_type(q), view, qc.data_ptr(), kc.data_ptr(), vc.data_ptr(), scale,
                      dim, out.data_ptr(), lse.data_ptr<float>(), partials.data_ptr<float>(),
                      stats.data_ptr<float>(), stream());
  return {out, lse};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> wsb_graph_attention_backward_cuda(
    const at::Tensor& grad_out, const at::Tensor& out, const at::Tensor& lse,
    const at::Tensor& tile_ptr, const at::Tensor& tile_cols, const at::Tensor& tile_counts,
    const at::Tensor& work, const at::Tensor& splits, const at::Tensor& edge_starts,
    const at::Tensor& rowptr, const at::Tensor& col, const c10::optional<at::Tensor>& t_rowptr,
    const c10::optional<at::Tensor>& t_col, const at::Tensor& t_perm, const at::Tensor& q,
    const at::Tensor& k, const at::Tensor& v, double scale,
    const c10::optional<at::Tensor>& light_rows, const c10::optional<at::Tensor>& heavy_rows,
    int64_t heavy_warps) {
  const c10::cuda::CUDAGuard guard(q.device());
  const WsbAttentionView view =
      checked_view(tile_ptr, tile_cols, tile_counts, work, splits, q, k, v, kBackwardOp);
  TORCH_CHECK_VALUE(
      edge_starts.device() == q.device() && edge_starts.scalar_type() == at::kInt &&
          edge_starts.is_contiguous() && edge_starts.numel() == work.size(0) * 16,
      kBackwardOp,
      ": edge_starts must be the layout's WSB.attention_edge_starts() (int32, 16 a piece)");
  TORCH_CHECK_VALUE(col.numel() <= INT32_MAX, kBackwardOp, ": the edge cursors are int32");
  // The kernel reads grad_out and out 4 bytes at a time and k, v 16: copies of unaligned
  // gradients are aligned (q, k, v and out are the forward's, which it checked).
  const auto aligned_copy = [](const at::Tensor& t) { return aligned16(t) ? t : t.clone(); };
  auto partials = at::empty({splits.size(0) * 16, q.size(1), q.size(2)},
                            q.options().dtype(at::kFloat));
  const auto destination = [&](const AttentionParams& p) {
    TORCH_CHECK(p.aligned, kBackwardOp, ": q, k, v and grad_out must start on a 16-byte boundary");
    const WsbAttentionBackward bwd{p.grad_out,          p.saved_out,
                                   static_cast<const float*>(p.lse_in),
                                   edge_starts.data_ptr<int>(),
                                   p.csr.nnz,           p.grad_a,
                                   static_cast<float*>(p.scores),
                                   partials.data_ptr<float>()};
    wsb_graph_attention_backward(p.type, view, bwd, p.a, p.b, p.c, scale, p.dim, stream());
  };
  return graph_attention_backward_from(destination, aligned_copy(grad_out.contiguous()), out,
                                       lse, rowptr, col, t_rowptr, t_col, t_perm, q, k, v, scale,
                                       light_rows, heavy_rows, heavy_warps, kBackwardOp);
}

}  // namespace

TORCH_LIBRARY_IMPL(fastgnn, CUDA, m) {
  m.impl("wsb_graph_attention_forward", &wsb_graph_attention_cuda);
  m.impl("wsb_graph_attention_backward", &wsb_graph_attention_backward_cuda);
}

}  // namespace cuda
}  // namespace fastgnn
