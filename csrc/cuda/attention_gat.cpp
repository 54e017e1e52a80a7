// Torch-facing glue of the fused GAT (v1) CUDA op: checks, allocation, degree buckets and the
// backward's source traversal (transposed CSR, or the CSR itself on a symmetric graph).
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <tuple>
#include <vector>

#include "attention_seed.h"
#include "cuda/attention_gat_kernels.h"
#include "cuda/attention_kernels.h"
#include "cuda/glue.h"

namespace fastgnn {
namespace cuda {
namespace {

// Warps a heavy row may get: 8 blocks' worth (split rows, merged through a workspace).
constexpr int64_t kMaxWarpsPerRow = 64;

bool aligned16(const at::Tensor& t) {
  return !t.defined() || reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
}

struct Prepared {
  at::Tensor alpha_dst, x_src, alpha_src, alpha_edge, edge_perm;
  GatParams p{};
  std::vector<RowSet> dst_sets;  // light and heavy rows, or every row
  at::ScalarType acc;
};

// Workspaces of the row sets whose rows are split over several blocks, into `p`'s part_*
// pointers; `with_src`: the backward's double alpha_src partials too. Returned to be kept alive
// while the kernels are queued (the caching allocator reuses them in stream order).
std::vector<at::Tensor> split_workspace(GatParams& p, const std::vector<RowSet>& sets,
                                        const at::TensorOptions& acc_options, bool with_src) {
  int64_t slots = 0;
  for (const RowSet& rows : sets)
    if (rows.warps_per_row > gat::kWarpsPerBlock)
      slots = std::max(slots, rows.num_rows * (rows.warps_per_row / gat::kWarpsPerBlock));
  if (slots == 0) return {};
  const int64_t pairs = slots * p.heads;
  std::vector<at::Tensor> keep{at::empty({pairs * (p.dim + 2)}, acc_options)};
  char* base = static_cast<char*>(keep[0].data_ptr());
  const int64_t size = keep[0].element_size();
  p.part_acc = base;
  p.part_peak = base + pairs * p.dim * size;
  p.part_total = base + pairs * (p.dim + 1) * size;
  if (with_src) {
    keep.push_back(at::empty({pairs}, acc_options.dtype(at::kDouble)));
    p.part_src = keep[1].data_ptr<double>();
  }
  return keep;
}

Prepared prepare(const at::Tensor& rowptr, const at::Tensor& col,
                 const c10::optional<at::Tensor>& edge_perm, const at::Tensor& alpha_dst,
                 const at::Tensor& x_src, const at::Tensor& alpha_src,
                 const c10::optional<at::Tensor>& alpha_edge, double slope, double dropout,
                 int64_t seed, const c10::optional<at::Tensor>& seed_tensor, int64_t offset,
                 const c10::optional<at::Tensor>& light_rows,
                 const c10::optional<at::Tensor>& heavy_rows, int64_t heavy_warps,
                 const char* op) {
  Prepared r;
  r.p.csr = csr_view(rowptr, col, op);
  TORCH_CHECK(x_src.is_cuda() && alpha_src.is_cuda() && alpha_dst.is_cuda(), op,
              ": features must be on the GPU");
  TORCH_CHECK(x_src.dim() == 3, op, ": x_src must be [S, H, D]");
  const int64_t heads = x_src.size(1);
  TORCH_CHECK(alpha_src.dim() == 2 && alpha_src.size(0) == x_src.size(0) &&
                  alpha_src.size(1) == heads,
              op, ": alpha_src must be [S, H]");
  TORCH_CHECK(alpha_dst.dim() == 2 && alpha_dst.size(0) == r.p.csr.rows &&
                  alpha_dst.size(1) == heads,
              op, ": alpha_dst must be [T, H] with one row per CSR row");
  TORCH_CHECK(alpha_dst.scalar_type() == x_src.scalar_type() &&
                  alpha_src.scalar_type() == x_src.scalar_type(),
              op, ": feature dtypes differ");
  r.alpha_dst = alpha_dst.contiguous();
  r.x_src = x_src.contiguous();
  r.alpha_src = alpha_src.contiguous();
  if (alpha_edge.has_value()) {
    TORCH_CHECK(alpha_edge->dim() == 2 && alpha_edge->size(0) == r.p.csr.nnz &&
                    alpha_edge->size(1) == heads,
                op, ": alpha_edge must be [E, H]");
    r.alpha_edge = alpha_edge->to(x_src.scalar_type()).contiguous();
  }
  if (edge_perm.has_value()) {
    TORCH_CHECK(edge_perm->scalar_type() == col.scalar_type() && edge_perm->numel() == col.numel(),
                op, ": edge_perm must match col");
    r.edge_perm = edge_perm->contiguous();
  }
  r.acc = acc_type(x_src);
  r.p.type = float_type(x_src);
  r.p.edge_perm = data_or_null(r.edge_perm);
  r.p.alpha_dst = r.alpha_dst.data_ptr();
  r.p.x_src = r.x_src.data_ptr();
  r.p.alpha_src = r.alpha_src.data_ptr();
  r.p.alpha_edge = data_or_null(r.alpha_edge);
  r.p.slope = slope;
  r.p.heads = heads;
  r.p.dim = x_src.size(2);
  r.p.dropout =
      attention_dropout(dropout, seed, seed_tensor, offset, heads, x_src.device(), op);
  r.p.aligned = aligned16(r.x_src);
  if (light_rows.has_value() && heavy_rows.has_value()) {
    TORCH_CHECK(light_rows->scalar_type() == col.scalar_type() &&
                    heavy_rows->scalar_type() == col.scalar_type(),
                op, ": row buckets must have the index dtype");
    int warps = 1;  // a power of two up to kMaxWarpsPerRow; above a block's 8, rows are split
    while (warps * 2 <= std::min<int64_t>(heavy_warps, kMaxWarpsPerRow)) warps *= 2;
    r.dst_sets.push_back({light_rows->data_ptr(), light_rows->numel(), 1});
    r.dst_sets.push_back({heavy_rows->data_ptr(), heavy_rows->numel(), warps});
  } else {
    r.dst_sets.push_back({nullptr, r.p.csr.rows, 1});
  }
  return r;
}

std::tuple<at::Tensor, at::Tensor> gat_forward_cuda(
    const at::Tensor& rowptr, const at::Tensor& col, const c10::optional<at::Tensor>& edge_perm,
    const c10::optional<at::Tensor>& /*t_rowptr*/, const c10::optional<at::Tensor>& /*t_col*/,
    const c10::optional<at::Tensor>& /*t_perm*/, const at::Tensor& alpha_dst,
    const at::Tensor& x_src, const at::Tensor& alpha_src,
    const c10::optional<at::Tensor>& alpha_edge, double negative_slope, double dropout,
    int64_t seed, const c10::optional<at::Tensor>& seed_tensor, int64_t offset,
    const c10::optional<at::Tensor>& light_rows, const c10::optional<at::Tensor>& heavy_rows,
    int64_t heavy_warps) {
  const c10::cuda::CUDAGuard guard(x_src.device());
  Prepared r = prepare(rowptr, col, edge_perm, alpha_dst, x_src, alpha_src, alpha_edge,
                       negative_slope, dropout, seed, seed_tensor, offset, light_rows,
                       heavy_rows, heavy_warps, "gat_forward");
  auto out = at::empty({r.p.csr.rows, r.p.heads, r.p.dim}, r.x_src.options());
  auto lse = at::empty({r.p.csr.rows, r.p.heads}, r.x_src.options().dtype(r.acc));
  r.p.out = out.data_ptr();
  r.p.lse = lse.data_ptr();
  const auto workspace = split_workspace(r.p, r.dst_sets, lse.options(), false);
  for (const RowSet& rows : r.dst_sets) gat_forward(r.p, rows, stream());
  return {out, lse};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> gat_backward_cuda(
    const at::Tensor& grad_out, const at::Tensor& out, const at::Tensor& lse,
    const at::Tensor& rowptr, const at::Tensor& col, const c10::optional<at::Tensor>& edge_perm,
    const c10::optional<at::Tensor>& t_rowptr, const c10::optional<at::Tensor>& t_col,
    const at::Tensor& t_perm, const at::Tensor& alpha_dst, const at::Tensor& x_src,
    const at::Tensor& alpha_src, const c10::optional<at::Tensor>& alpha_edge,
    double negative_slope, double dropout, int64_t seed,
    const c10::optional<at::Tensor>& seed_tensor, int64_t offset,
    const c10::optional<at::Tensor>& light_rows, const c10::optional<at::Tensor>& heavy_rows,
    int64_t heavy_warps) {
  const char* op = "gat_backward";
  const c10::cuda::CUDAGuard guard(x_src.device());
  Prepared r = prepare(rowptr, col, edge_perm, alpha_dst, x_src, alpha_src, alpha_edge,
                       negative_slope, dropout, seed, seed_tensor, offset, light_rows,
                       heavy_rows, heavy_warps, op);
  TORCH_CHECK(t_rowptr.has_value() == t_col.has_value(), op,
              ": give both t_rowptr and t_col, or neither (symmetric graph)");
  TORCH_CHECK(t_perm.is_cuda() &&
                  t_perm.scalar_type() == (r.p.csr.index64 ? at::kLong : at::kInt),
              op, ": t_perm must be a GPU tensor of the index dtype");
  TORCH_CHECK(t_perm.numel() == r.p.csr.nnz, op, ": t_perm must have one entry per edge");
  const bool symmetric = !t_rowptr.has_value();
  TORCH_CHECK(!symmetric || r.x_src.size(0) == r.p.csr.rows, op, ": a symmetric graph is square");
  auto gout = grad_out.to(r.x_src.scalar_type()).contiguous();
  auto out_c = out.to(r.x_src.scalar_type()).contiguous();
  auto lse_c = lse.to(r.acc).contiguous();
  auto delta = at::empty({r.p.csr.rows, r.p.heads}, r.x_src.options().dtype(r.acc));
  attention_delta(r.p.type, gout.data_ptr(), out_c.data_ptr(), delta.data_ptr(),
                  r.p.csr.rows * r.p.heads, r.p.dim, stream());
  auto t_perm_c = t_perm.contiguous();
  auto grad_dst = at::empty_like(r.alpha_dst);
  auto grad_x = at::empty_like(r.x_src);
  auto grad_src = at::empty_like(r.alpha_src);
  auto grad_edge = r.alpha_edge.defined() ? at::empty_like(r.alpha_edge)
                                          : at::empty({0}, r.x_src.options());
  auto grad_logit = at::empty({r.p.csr.nnz, r.p.heads}, r.x_src.options().dtype(r.acc));
  r.p.grad_logit = grad_logit.data_ptr();
  r.p.grad_out = gout.data_ptr();
  r.p.lse_in = lse_c.data_ptr();
  r.p.delta = delta.data_ptr();
  r.p.grad_alpha_dst = grad_dst.data_ptr();
  r.p.grad_x_src = grad_x.data_ptr();
  r.p.grad_alpha_src = grad_src.data_ptr();
  r.p.grad_alpha_edge = r.alpha_edge.defined() ? grad_edge.data_ptr() : nullptr;
  r.p.src_perm = t_perm_c.data_ptr();
  r.p.aligned = r.p.aligned && aligned16(gout);
  if (symmetric) {  // the CSR is its own transpose: its rows are the sources too
    const auto workspace = split_workspace(r.p, r.dst_sets, delta.options(), true);
    for (const RowSet& rows : r.dst_sets) gat_backward(r.p, rows, stream());
  } else {
    GatParams t = r.p;
    t.csr = csr_view(*t_rowptr, *t_col, op);
    TORCH_CHECK(t.csr.index64 == r.p.csr.index64, op, ": transposed CSR index dtype differs");
    gat_backward(t, RowSet{nullptr, t.csr.rows, 1}, stream());
  }
  for (const RowSet& rows : r.dst_sets) gat_backward_dst(r.p, rows, stream());
  if (alpha_edge.has_value()) grad_edge = grad_edge.to(alpha_edge->scalar_type());
  return {grad_dst, grad_x, grad_src, grad_edge};
}

}  // namespace

TORCH_LIBRARY_IMPL(fastgnn, CUDA, m) {
  m.impl("gat_forward", &gat_forward_cuda);
  m.impl("gat_backward", &gat_backward_cuda);
}

}  // namespace cuda
}  // namespace fastgnn
