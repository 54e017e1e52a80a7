// Torch-facing glue of the WSB Tensor Core Graph Transformer attention: checks, allocation.
#include <torch/library.h>

#include <tuple>

#include "cuda/glue.h"
#include "cuda/wsb_kernels.h"
#include "wsb_checks.h"

namespace fastgnn {
namespace cuda {
namespace {

constexpr const char* kOp = "wsb_graph_attention_forward";

std::tuple<at::Tensor, at::Tensor> wsb_graph_attention_cuda(
    const at::Tensor& tile_ptr, const at::Tensor& tile_cols, const at::Tensor& tile_counts,
    const at::Tensor& work, const at::Tensor& splits, const at::Tensor& q, const at::Tensor& k,
    const at::Tensor& v, double scale,
    // the CSR backward's inputs, kept by autograd and not read here
    const at::Tensor&, const at::Tensor&, const c10::optional<at::Tensor>&,
    const c10::optional<at::Tensor>&, const c10::optional<at::Tensor>&,
    const c10::optional<at::Tensor>&, const c10::optional<at::Tensor>&,
    const c10::optional<at::Tensor>&, int64_t) {
  const c10::cuda::CUDAGuard guard(q.device());
  TORCH_CHECK(q.is_cuda(), kOp, ": q must be a CUDA tensor");
  TORCH_CHECK(q.scalar_type() == at::kHalf || q.scalar_type() == at::kBFloat16, kOp,
              ": the Tensor Core path takes float16 or bfloat16 features, got ", q.scalar_type());
  for (const at::Tensor* t : {&tile_ptr, &tile_cols, &tile_counts, &work, &splits, &k, &v})
    TORCH_CHECK(t->device() == q.device(), kOp, ": every tensor must be on q's GPU");
  for (const at::Tensor* t : {&tile_ptr, &tile_cols, &tile_counts, &work, &splits})
    TORCH_CHECK(t->is_contiguous(), kOp, ": the WSB tensors must be contiguous");
  const int64_t windows = check_wsb_attention(tile_ptr, tile_cols, tile_counts, q, k, v, kOp);
  TORCH_CHECK(work.scalar_type() == at::kInt && work.dim() == 2 && work.size(1) == 4 &&
                  work.size(0) >= windows && splits.scalar_type() == at::kInt &&
                  splits.dim() == 2 && splits.size(1) == 2,
              kOp, ": work and splits must be the layout's attention plan (WSB.attention_plan())");
  const int64_t heads = q.size(1), dim = q.size(2);
  TORCH_CHECK(wsb_attention_dim_supported(dim), kOp,
              ": the Tensor Core path takes head dims 32, 64 or 128, got ", dim);
  check_tensor_cores(q.device(), kOp);
  const at::Tensor qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  for (const at::Tensor* t : {&qc, &kc, &vc, &tile_counts})
    TORCH_CHECK(reinterpret_cast<uintptr_t>(t->data_ptr()) % 16 == 0, kOp,
                ": q, k, v and tile_counts must start on a 16-byte boundary");
  auto out = at::empty({q.size(0), heads, dim}, q.options());
  auto lse = at::empty({q.size(0), heads}, q.options().dtype(at::kFloat));
  // The unnormalised states of the pieces of split windows, 16 rows each.
  auto partials = at::empty({splits.size(0) * 16, heads, dim}, lse.options());
  auto stats = at::empty({splits.size(0) * 16, heads, 2}, lse.options());
  const WsbAttentionView view{tile_cols.data_ptr<int>(), tile_counts.data_ptr(),
                              work.data_ptr<int>(),      splits.data_ptr<int>(),
                              work.size(0),              splits.size(0),
                              q.size(0),                 heads};
  wsb_graph_attention(float_type(q), view, qc.data_ptr(), kc.data_ptr(), vc.data_ptr(), scale,
                      dim, out.data_ptr(), lse.data_ptr<float>(), partials.data_ptr<float>(),
                      stats.data_ptr<float>(), stream());
  return {out, lse};
}

}  // namespace

TORCH_LIBRARY_IMPL(fastgnn, CUDA, m) {
  m.impl("wsb_graph_attention_forward", &wsb_graph_attention_cuda);
}

}  // namespace cuda
}  // namespace fastgnn
