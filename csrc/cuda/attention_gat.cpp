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

// Light and heavy row buckets (indices in the CSR's dtype), or every one of `rows` rows.
std::vector<RowSet> row_sets(const c10::optional<at::Tensor>& light_rows,
                             const c10::optional<at::Tensor>& heavy_rows, int64_t heavy_warps,
                             at::ScalarType index_type, int64_t rows, const char* op) {
  if (!light_rows.has_value() || !heavy_rows.has_value()) return {RowSet{nullptr, rows, 1}};
  TORCH_CHECK(light_rows->scalar_type() == index_type && heavy_rows->scalar_type() == index_type,
              op, ": row buckets must have the index dtype");
  int warps = 1;  // a power of two up to kMaxWarpsPerRow; above a block's 8, rows are split
  while (warps * 2 <= std::min<int64_t>(heavy_warps, kMaxWarpsPerRow)) warps *= 2;
  return {RowSet{light_rows->data_ptr(), light_rows->numel(), 1},
          RowSet{heavy_rows->data_ptr(), heavy_rows->numel(), warps}};
}

// `csr`: the CSR walked (its col's dtype in `index_type`); `dst_rows`: the destinations.
Prepared prepare(const CsrView& csr, at::ScalarType index_type, int64_t dst_rows,
                 const c10::optional<at::Tensor>& edge_perm, const at::Tensor& alpha_dst,
                 const at::Tensor& x_src, const at::Tensor& alpha_src,
                 const c10::optional<at::Tensor>& alpha_edge, double slope, double dropout,
                 int64_t seed, const c10::optional<at::Tensor>& seed_tensor, int64_t offset,
                 const c10::optional<at::Tensor>& light_rows,
                 const c10::optional<at::Tensor>& heavy_rows, int64_t heavy_warps,
                 const char* op) {
  Prepared r;
  r.p.csr = csr;
  TORCH_CHECK(x_src.is_cuda() && alpha_src.is_cuda() && alpha_dst.is_cuda(), op,
              ": features must be on the GPU");
  TORCH_CHECK(x_src.dim() == 3, op, ": x_src must be [S, H, D]");
  const int64_t heads = x_src.size(1);
  TORCH_CHECK(alpha_src.dim() == 2 && alpha_src.size(0) == x_src.size(0) &&
                  alpha_src.size(1) == heads,
              op, ": alpha_src must be [S, H]");
  TORCH_CHECK(alpha_dst.dim() == 2 && alpha_dst.size(0) == dst_rows &&
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
    TORCH_CHECK(edge_perm->scalar_type() == index_type && edge_perm->numel() == csr.nnz,
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
  r.dst_sets = row_sets(light_rows, heavy_rows, heavy_warps, index_type, r.p.csr.rows, op);
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
  const char* op = "gat_forward";
  const c10::cuda::CUDAGuard guard(x_src.device());
  const CsrView csr = csr_view(rowptr, col, op);
  Prepared r = prepare(csr, col.scalar_type(), csr.rows, edge_perm, alpha_dst, x_src, alpha_src,
                       alpha_edge, negative_slope, dropout, seed, seed_tensor, offset,
                       light_rows, heavy_rows, heavy_warps, op);
  auto out = at::empty({r.p.csr.rows, r.p.heads, r.p.dim}, r.x_src.options());
  auto lse = at::empty({r.p.csr.rows, r.p.heads}, r.x_src.options().dtype(r.acc));
  r.p.out = out.data_ptr();
  r.p.lse = lse.data_ptr();
  const auto workspace = split_workspace(r.p, r.dst_sets, lse.options(), false);
  for (const RowSet& rows : r.dst_sets) gat_forward(r.p, rows, stream());
  return {out, lse};
}

// The source side's inputs and outputs, in `p`. gout is grad_out in the feature dtype.
void bind_source(GatParams& p, const at::Tensor& gout, const at::Tensor& lse,
                 const at::Tensor& delta, const at::Tensor& src_perm,
                 const at::Tensor& grad_logit, const at::Tensor& grad_x,
                 const at::Tensor& grad_src) {
  p.grad_out = gout.data_ptr();
  p.lse_in = lse.data_ptr();
  p.delta = delta.data_ptr();
  p.src_perm = src_perm.data_ptr();
  p.grad_logit = grad_logit.data_ptr();
  p.grad_x_src = grad_x.data_ptr();
  p.grad_alpha_src = grad_src.data_ptr();
  p.aligned = p.aligned && aligned16(gout);
}

void source_pass(GatParams p, const std::vector<RowSet>& sets, const at::TensorOptions& acc) {
  const auto workspace = split_workspace(p, sets, acc, true);
  for (const RowSet& rows : sets) gat_backward(p, rows, stream());
}

void check_source_perm(const at::Tensor& src_perm, const CsrView& walked, const char* op) {
  TORCH_CHECK(src_perm.is_cuda() &&
                  src_perm.scalar_type() == (walked.index64 ? at::kLong : at::kInt),
              op, ": the source permutation must be a GPU tensor of the index dtype");
  TORCH_CHECK(src_perm.numel() == walked.nnz, op,
              ": the source permutation needs one entry per edge");
}

// grad_alpha_dst [rows, H] in `dtype` (and grad_alpha_edge, input edge order) from grad_logit,
// over the CSR rows of `sets`.
std::tuple<at::Tensor, at::Tensor> destination_pass(GatParams p, const std::vector<RowSet>& sets,
                                                    const at::Tensor& grad_logit, bool with_edge,
                                                    at::ScalarType dtype) {
  auto options = grad_logit.options().dtype(dtype);
  auto grad_dst = at::empty({p.csr.rows, p.heads}, options);
  auto grad_edge = with_edge ? at::empty({p.csr.nnz, p.heads}, options) : at::empty({0}, options);
  p.type = float_type(grad_dst);
  p.grad_logit = grad_logit.data_ptr();
  p.grad_alpha_dst = grad_dst.data_ptr();
  p.grad_alpha_edge = with_edge ? grad_edge.data_ptr() : nullptr;
  for (const RowSet& rows : sets) gat_backward_dst(p, rows, stream());
  return {grad_dst, grad_edge};
}

// <grad_out, out> per (destination, head), in the statistics dtype.
at::Tensor attention_delta_cuda(const at::Tensor& grad_out, const at::Tensor& out) {
  TORCH_CHECK(grad_out.dim() == 3 && grad_out.sizes() == out.sizes(),
              "attention_delta_backward: grad_out and out must both be [T, H, D]");
  const c10::cuda::CUDAGuard guard(out.device());
  const auto g = grad_out.to(out.scalar_type()).contiguous(), o = out.contiguous();
  auto delta = at::empty({out.size(0), out.size(1)}, o.options().dtype(acc_type(o)));
  attention_delta(float_type(o), g.data_ptr(), o.data_ptr(), delta.data_ptr(), delta.numel(),
                  out.size(2), stream());
  return delta;
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
  const CsrView csr = csr_view(rowptr, col, op);
  Prepared r = prepare(csr, col.scalar_type(), csr.rows, edge_perm, alpha_dst, x_src, alpha_src,
                       alpha_edge, negative_slope, dropout, seed, seed_tensor, offset,
                       light_rows, heavy_rows, heavy_warps, op);
  TORCH_CHECK(t_rowptr.has_value() == t_col.has_value(), op,
              ": give both t_rowptr and t_col, or neither (symmetric graph)");
  check_source_perm(t_perm, csr, op);
  const bool symmetric = !t_rowptr.has_value();
  TORCH_CHECK(!symmetric || r.x_src.size(0) == r.p.csr.rows, op, ": a symmetric graph is square");
  auto gout = grad_out.to(r.x_src.scalar_type()).contiguous();
  auto lse_c = lse.to(r.acc).contiguous();
  auto delta = attention_delta_cuda(gout, out.to(r.x_src.scalar_type()));
  auto t_perm_c = t_perm.contiguous();
  auto grad_x = at::empty_like(r.x_src);
  auto grad_src = at::empty_like(r.alpha_src);
  auto grad_logit = at::empty({r.p.csr.nnz, r.p.heads}, delta.options());
  bind_source(r.p, gout, lse_c, delta, t_perm_c, grad_logit, grad_x, grad_src);
  if (symmetric) {  // the CSR is its own transpose: its rows are the sources too
    source_pass(r.p, r.dst_sets, delta.options());
  } else {
    GatParams t = r.p;
    t.csr = csr_view(*t_rowptr, *t_col, op);
    TORCH_CHECK(t.csr.index64 == r.p.csr.index64, op, ": transposed CSR index dtype differs");
    source_pass(t, {RowSet{nullptr, t.csr.rows, 1}}, delta.options());
  }
  auto [grad_dst, grad_edge] = destination_pass(r.p, r.dst_sets, grad_logit,
                                                r.alpha_edge.defined(), r.x_src.scalar_type());
  if (alpha_edge.has_value()) grad_edge = grad_edge.to(alpha_edge->scalar_type());
  return {grad_dst, grad_x, grad_src, grad_edge};
}

std::tuple<at::Tensor, at::Tensor> gat_source_backward_cuda(
    const at::Tensor& grad_out, const at::Tensor& lse, const at::Tensor& delta,
    const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& src_perm,
    const c10::optional<at::Tensor>& edge_perm, const at::Tensor& alpha_dst,
    const at::Tensor& x_rows, const at::Tensor& alpha_src_rows,
    const c10::optional<at::Tensor>& alpha_edge, double negative_slope, double dropout,
    int64_t seed, const c10::optional<at::Tensor>& seed_tensor, int64_t offset, int64_t row_begin,
    const c10::optional<at::Tensor>& light_rows, const c10::optional<at::Tensor>& heavy_rows,
    int64_t heavy_warps, const at::Tensor& grad_logit,
    const c10::optional<at::Tensor>& logit_slot) {
  const char* op = "gat_source_backward";
  const c10::cuda::CUDAGuard guard(x_rows.device());
  TORCH_CHECK(x_rows.dim() == 3, op, ": x_rows must be [rows, H, D]");
  const int64_t rows = x_rows.size(0);
  TORCH_CHECK(rowptr.dim() == 1 && row_begin >= 0 && row_begin + rows <= rowptr.numel() - 1, op,
              ": rows [", row_begin, ", ", row_begin + rows, ") outside the walked CSR");
  // The walked rows' pointers: every per-row array below starts at row_begin.
  const CsrView walked = csr_view(rowptr.narrow(0, row_begin, rows + 1), col, op);
  Prepared r = prepare(walked, col.scalar_type(), alpha_dst.size(0), edge_perm, alpha_dst,
                       x_rows, alpha_src_rows, alpha_edge, negative_slope, dropout, seed,
                       seed_tensor, offset, light_rows, heavy_rows, heavy_warps, op);
  check_source_perm(src_perm, walked, op);
  TORCH_CHECK(grad_logit.is_cuda() && grad_logit.scalar_type() == r.acc &&
                  grad_logit.is_contiguous(),
              op, ": grad_logit must be a contiguous GPU tensor of the statistics dtype");
  at::Tensor slot;
  if (logit_slot.has_value()) {  // its values are trusted, as src_perm's are
    TORCH_CHECK(grad_logit.dim() == 2 && grad_logit.size(1) == r.p.heads, op,
                ": grad_logit must be [n, H]");
    TORCH_CHECK(logit_slot->is_cuda() && logit_slot->scalar_type() == col.scalar_type() &&
                    logit_slot->numel() == walked.nnz,
                op, ": logit_slot must be an [E] GPU tensor of the index dtype");
    slot = logit_slot->contiguous();
  } else {
    TORCH_CHECK(grad_logit.numel() == walked.nnz * r.p.heads, op, ": grad_logit must be [E, H]");
  }
  TORCH_CHECK(delta.scalar_type() == r.acc && delta.is_contiguous() &&
                  delta.numel() == alpha_dst.size(0) * r.p.heads,
              op, ": delta must be a contiguous [T, H] tensor of the statistics dtype");
  auto gout = grad_out.to(r.x_src.scalar_type()).contiguous();
  auto lse_c = lse.to(r.acc).contiguous();
  auto perm = src_perm.contiguous();
  auto grad_x = at::empty_like(r.x_src);
  auto grad_src = at::empty_like(r.alpha_src);
  bind_source(r.p, gout, lse_c, delta, perm, grad_logit, grad_x, grad_src);
  r.p.logit_slot = slot.defined() ? slot.data_ptr() : nullptr;
  source_pass(r.p, r.dst_sets, delta.options());
  return {grad_x, grad_src};
}

std::tuple<at::Tensor, at::Tensor> gat_destination_backward_cuda(
    const at::Tensor& rowptr, const at::Tensor& grad_logit,
    const c10::optional<at::Tensor>& edge_perm, bool with_edge, at::ScalarType dtype,
    const c10::optional<at::Tensor>& light_rows, const c10::optional<at::Tensor>& heavy_rows,
    int64_t heavy_warps) {
  const char* op = "gat_destination_backward";
  const c10::cuda::CUDAGuard guard(grad_logit.device());
  TORCH_CHECK(rowptr.is_cuda() && rowptr.dim() == 1 && rowptr.numel() >= 1 &&
                  rowptr.is_contiguous() &&
                  (rowptr.scalar_type() == at::kInt || rowptr.scalar_type() == at::kLong),
              op, ": rowptr must be a contiguous int32/int64 GPU tensor");
  const bool index64 = rowptr.scalar_type() == at::kLong;
  TORCH_CHECK(grad_logit.is_cuda() && grad_logit.dim() == 2 && grad_logit.is_contiguous() &&
                  grad_logit.scalar_type() == (dtype == at::kDouble ? at::kDouble : at::kFloat),
              op, ": grad_logit must be a contiguous [E, H] GPU tensor of dtype's statistics type");
  GatParams p{};
  p.csr = CsrView{rowptr.data_ptr(), nullptr, rowptr.numel() - 1, grad_logit.size(0), index64};
  p.heads = grad_logit.size(1);
  at::Tensor perm;
  if (edge_perm.has_value()) {
    TORCH_CHECK(edge_perm->scalar_type() == rowptr.scalar_type() &&
                    edge_perm->numel() == grad_logit.size(0),
                op, ": edge_perm must match the edges");
    perm = edge_perm->contiguous();
    p.edge_perm = perm.data_ptr();
  }
  return destination_pass(p, row_sets(light_rows, heavy_rows, heavy_warps,
                                       rowptr.scalar_type(), p.csr.rows, op),
                          grad_logit, with_edge, dtype);
}

}  // namespace

TORCH_LIBRARY_IMPL(fastgnn, CUDA, m) {
  m.impl("attention_delta_backward", &attention_delta_cuda);
  m.impl("gat_forward", &gat_forward_cuda);
  m.impl("gat_backward", &gat_backward_cuda);
  m.impl("gat_source_backward", &gat_source_backward_cuda);
  m.impl("gat_destination_backward", &gat_destination_backward_cuda);
}

}  // namespace cuda
}  // namespace fastgnn
