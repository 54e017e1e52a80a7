// Torch-facing glue of the fused CUDA attention ops: checks, allocation, degree buckets and
// the backward's two passes (destinations, then sources over the transposed CSR, or over the
// CSR itself on a symmetric graph).
#include <torch/library.h>

#include <cstdint>
#include <tuple>
#include <vector>

#include "attention_seed.h"
#include "cuda/attention_glue.h"
#include "cuda/attention_kernels.h"
#include "cuda/glue.h"

namespace fastgnn {
namespace cuda {
namespace {

bool aligned16(const at::Tensor& t) {
  return !t.defined() || reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
}

// Inputs made contiguous (kept alive here) and the parameters the kernels read.
struct Prepared {
  at::Tensor a, b, c, edge, edge_perm;
  AttentionParams p{};
  std::vector<RowSet> dst_sets;  // light and heavy rows, or every row
  at::ScalarType acc;
};

Prepared prepare(AttentionKind kind, const at::Tensor& rowptr, const at::Tensor& col,
                 const c10::optional<at::Tensor>& edge_perm, const at::Tensor& a,
                 const at::Tensor& b, const at::Tensor& c,
                 const c10::optional<at::Tensor>& edge_term, double coef, double dropout,
                 int64_t seed, const c10::optional<at::Tensor>& seed_tensor, int64_t offset,
                 const c10::optional<at::Tensor>& light_rows,
                 const c10::optional<at::Tensor>& heavy_rows, int64_t heavy_warps,
                 const char* op) {
  Prepared r;
  r.p.csr = csr_view(rowptr, col, op);
  TORCH_CHECK(a.is_cuda() && b.is_cuda() && c.is_cuda(), op, ": features must be on the GPU");
  TORCH_CHECK(a.dim() == 3 && b.dim() == 3 && a.size(1) == b.size(1) && a.size(2) == b.size(2),
              op, ": features must be [N, H, D] with matching H and D");
  TORCH_CHECK(a.size(0) == r.p.csr.rows, op, ": destination features need one row per CSR row");
  TORCH_CHECK(a.scalar_type() == b.scalar_type() && c.scalar_type() == b.scalar_type(), op,
              ": feature dtypes differ");
  const int64_t heads = b.size(1), dim = b.size(2);
  TORCH_CHECK(heads * dim * int64_t(b.element_size()) <= UINT32_MAX, op,
              ": a node's features (heads * head dim) must fit 4 GB");
  if (kind == AttentionKind::kGatv2) {
    TORCH_CHECK(c.dim() == 2 && c.size(0) == heads && c.size(1) == dim, op,
                ": att must be [H, D]");
  } else {
    TORCH_CHECK(c.sizes() == b.sizes(), op, ": v must match k");
  }
  r.a = a.contiguous();
  r.b = b.contiguous();
  r.c = c.contiguous();
  if (edge_term.has_value()) {
    TORCH_CHECK(edge_term->dim() == 3 && edge_term->size(0) == r.p.csr.nnz &&
                    edge_term->size(1) == heads && edge_term->size(2) == dim,
                op, ": edge_term must be [E, H, D]");
    r.edge = edge_term->to(b.scalar_type()).contiguous();
  }
  if (edge_perm.has_value()) {
    TORCH_CHECK(edge_perm->scalar_type() == col.scalar_type() && edge_perm->numel() == col.numel(),
                op, ": edge_perm must match col");
    r.edge_perm = edge_perm->contiguous();
  }
  r.acc = acc_type(b);
  r.p.kind = kind;
  r.p.type = float_type(b);
  r.p.edge_perm = data_or_null(r.edge_perm);
  r.p.a = r.a.data_ptr();
  r.p.b = r.b.data_ptr();
  r.p.c = r.c.data_ptr();
  r.p.edge = data_or_null(r.edge);
  r.p.coef = coef;
  r.p.heads = heads;
  r.p.dim = dim;
  r.p.dropout = attention_dropout(dropout, seed, seed_tensor, offset, heads, b.device(), op);
  r.p.aligned = aligned16(r.a) && aligned16(r.b) && aligned16(r.c) && aligned16(r.edge);
  if (light_rows.has_value() && heavy_rows.has_value()) {
    TORCH_CHECK(light_rows->scalar_type() == col.scalar_type() &&
                    heavy_rows->scalar_type() == col.scalar_type(),
                op, ": row buckets must have the index dtype");
    const int warps = heavy_warps >= 8 ? 8 : heavy_warps >= 4 ? 4 : heavy_warps >= 2 ? 2 : 1;
    r.dst_sets.push_back({light_rows->data_ptr(), light_rows->numel(), 1});
    r.dst_sets.push_back({heavy_rows->data_ptr(), heavy_rows->numel(), warps});
  } else {
    r.dst_sets.push_back({nullptr, r.p.csr.rows, 1});
  }
  return r;
}

std::tuple<at::Tensor, at::Tensor> forward(Prepared& r) {
  auto out = at::empty({r.p.csr.rows, r.p.heads, r.p.dim}, r.b.options());
  auto lse = at::empty({r.p.csr.rows, r.p.heads}, r.b.options().dtype(r.acc));
  r.p.out = out.data_ptr();
  r.p.lse = lse.data_ptr();
  for (const RowSet& rows : r.dst_sets) attention_forward(r.p, rows, stream());
  return {out, lse};
}

// Runs the backward passes (the destination pass given, or the CSR one); returns (grad_a,
// grad_b, grad_c or att gradient, grad_edge).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> backward(
    Prepared& r, const at::Tensor& grad_out, const at::Tensor& out, const at::Tensor& lse,
    const c10::optional<at::Tensor>& t_rowptr, const c10::optional<at::Tensor>& t_col,
    const at::Tensor& t_perm, const char* op, const DestinationPass& destination = nullptr) {
  TORCH_CHECK(t_rowptr.has_value() == t_col.has_value(), op,
              ": give both t_rowptr and t_col, or neither (symmetric graph)");
  TORCH_CHECK(t_perm.is_cuda() &&
                  t_perm.scalar_type() == (r.p.csr.index64 ? at::kLong : at::kInt),
              op, ": t_perm must be a GPU tensor of the index dtype");
  TORCH_CHECK(t_perm.numel() == r.p.csr.nnz, op, ": t_perm must have one entry per edge");
  const bool gat = r.p.kind == AttentionKind::kGatv2;
  auto gout = grad_out.to(r.b.scalar_type()).contiguous();
  auto lse_c = lse.to(r.acc).contiguous();
  auto out_c = out.to(r.b.scalar_type()).contiguous();
  // E x H pairs of scalars (the destination pass's dLogit and weight of each edge), so the
  // source pass recomputes no logits: 8 bytes per (edge, head), no E x D tensor. GATv2's fast
  // path adds z's signs, D bits per (edge, head), so that pass reads no x_dst row either.
  auto scores = at::empty({r.p.heads, r.p.csr.nnz, 2}, r.b.options().dtype(r.acc));
  auto t_perm_c = t_perm.contiguous();
  auto grad_a = at::empty_like(r.a);
  auto grad_b = at::empty_like(r.b);
  auto grad_c = gat ? at::empty({0}, r.b.options()) : at::empty_like(r.c);
  auto grad_edge = r.edge.defined() ? at::empty_like(r.edge) : at::empty({0}, r.b.options());
  int64_t partial_rows = 0;
  for (const RowSet& rows : r.dst_sets) partial_rows += attention_partial_rows(rows);
  auto partial = gat ? at::empty({partial_rows, r.p.heads, r.p.dim}, r.b.options().dtype(r.acc))
                     : at::Tensor();
  r.p.grad_out = gout.data_ptr();
  r.p.saved_out = out_c.data_ptr();
  r.p.lse_in = lse_c.data_ptr();
  r.p.scores = scores.data_ptr();
  r.p.grad_a = grad_a.data_ptr();
  r.p.grad_b = grad_b.data_ptr();
  r.p.grad_c = gat ? nullptr : grad_c.data_ptr();
  r.p.grad_edge = r.edge.defined() ? grad_edge.data_ptr() : nullptr;
  r.p.att_partial = partial.defined() ? partial.data_ptr() : nullptr;
  r.p.src_perm = t_perm_c.data_ptr();
  r.p.aligned = r.p.aligned && aligned16(gout) && aligned16(out_c) && aligned16(grad_a) &&
                aligned16(grad_b) && aligned16(grad_c);
  at::Tensor sign_bits;  // GATv2's fast path only (r.p.sign_bits stays null otherwise)
  if (const int sign_words = attention_sign_words(r.p)) {
    sign_bits = at::empty({r.p.heads * r.p.csr.nnz * sign_words}, r.b.options().dtype(at::kInt));
    r.p.sign_bits = sign_bits.data_ptr();
  }
  const bool symmetric = !t_rowptr.has_value();
  TORCH_CHECK(!symmetric || r.b.size(0) == r.p.csr.rows, op, ": a symmetric graph is square");
  if (destination) {
    destination(r.p);
  } else {
    int64_t offset = 0;
    for (const RowSet& rows : r.dst_sets) {
      attention_backward_dst(r.p, rows, offset, stream());
      offset += attention_partial_rows(rows);
    }
  }
  if (symmetric) {  // the CSR is its own transpose: sources have the destinations' buckets
    for (const RowSet& rows : r.dst_sets) attention_backward_src(r.p, rows, stream());
  } else {
    AttentionParams t = r.p;
    t.csr = csr_view(*t_rowptr, *t_col, op);
    TORCH_CHECK(t.csr.index64 == r.p.csr.index64, op, ": transposed CSR index dtype differs");
    TORCH_CHECK(t.csr.nnz == r.p.csr.nnz, op, ": transposed CSR has a different edge count");
    attention_backward_src(t, RowSet{nullptr, t.csr.rows, 1}, stream());
  }
  if (gat) {
    auto grad_att = at::empty({r.p.heads, r.p.dim}, r.b.options().dtype(r.acc));
    attention_reduce_partials(r.acc == at::kDouble ? FloatType::kDouble : FloatType::kFloat,
                              partial.data_ptr(), partial_rows, r.p.heads * r.p.dim,
                              grad_att.data_ptr(), stream());
    grad_c = grad_att.to(r.c.scalar_type());
  }
  return {grad_a, grad_b, grad_c, grad_edge};
}

std::tuple<at::Tensor, at::Tensor> gatv2_forward_cuda(
    const at::Tensor& rowptr, const at::Tensor& col, const c10::optional<at::Tensor>& edge_perm,
    const c10::optional<at::Tensor>& /*t_rowptr*/, const c10::optional<at::Tensor>& /*t_col*/,
    const c10::optional<at::Tensor>& /*t_perm*/, const at::Tensor& x_dst, const at::Tensor& x_src,
    const at::Tensor& att, const c10::optional<at::Tensor>& edge_term, double negative_slope,
    double dropout, int64_t seed, const c10::optional<at::Tensor>& seed_tensor, int64_t offset,
    const c10::optional<at::Tensor>& light_rows, const c10::optional<at::Tensor>& heavy_rows,
    int64_t heavy_warps) {
  const c10::cuda::CUDAGuard guard(x_src.device());
  Prepared r = prepare(AttentionKind::kGatv2, rowptr, col, edge_perm, x_dst, x_src, att,
                       edge_term, negative_slope, dropout, seed, seed_tensor, offset, light_rows,
                       heavy_rows, heavy_warps, "gatv2_forward");
  return forward(r);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> gatv2_backward_cuda(
    const at::Tensor& grad_out, const at::Tensor& out, const at::Tensor& lse,
    const at::Tensor& rowptr, const at::Tensor& col, const c10::optional<at::Tensor>& edge_perm,
    const c10::optional<at::Tensor>& t_rowptr, const c10::optional<at::Tensor>& t_col,
    const at::Tensor& t_perm, const at::Tensor& x_dst, const at::Tensor& x_src,
    const at::Tensor& att, const c10::optional<at::Tensor>& edge_term, double negative_slope,
    double dropout, int64_t seed, const c10::optional<at::Tensor>& seed_tensor, int64_t offset,
    const c10::optional<at::Tensor>& light_rows, const c10::optional<at::Tensor>& heavy_rows,
    int64_t heavy_warps) {
  const c10::cuda::CUDAGuard guard(x_src.device());
  Prepared r = prepare(AttentionKind::kGatv2, rowptr, col, edge_perm, x_dst, x_src, att,
                       edge_term, negative_slope, dropout, seed, seed_tensor, offset, light_rows,
                       heavy_rows, heavy_warps, "gatv2_backward");
  return backward(r, grad_out, out, lse, t_rowptr, t_col, t_perm, "gatv2_backward");
}

std::tuple<at::Tensor, at::Tensor> graph_attention_forward_cuda(
    const at::Tensor& rowptr, const at::Tensor& col, const c10::optional<at::Tensor>& edge_perm,
    const c10::optional<at::Tensor>& /*t_rowptr*/, const c10::optional<at::Tensor>& /*t_col*/,
    const c10::optional<at::Tensor>& /*t_perm*/, const at::Tensor& q, const at::Tensor& k,
    const at::Tensor& v, const c10::optional<at::Tensor>& edge_term, double scale,
    double dropout, int64_t seed, const c10::optional<at::Tensor>& seed_tensor, int64_t offset,
    const c10::optional<at::Tensor>& light_rows, const c10::optional<at::Tensor>& heavy_rows,
    int64_t heavy_warps) {
  const c10::cuda::CUDAGuard guard(q.device());
  Prepared r = prepare(AttentionKind::kDotProduct, rowptr, col, edge_perm, q, k, v, edge_term,
                       scale, dropout, seed, seed_tensor, offset, light_rows, heavy_rows,
                       heavy_warps, "graph_attention_forward");
  return forward(r);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> graph_attention_backward_cuda(
    const at::Tensor& grad_out, const at::Tensor& out, const at::Tensor& lse,
    const at::Tensor& rowptr, const at::Tensor& col, const c10::optional<at::Tensor>& edge_perm,
    const c10::optional<at::Tensor>& t_rowptr, const c10::optional<at::Tensor>& t_col,
    const at::Tensor& t_perm, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const c10::optional<at::Tensor>& edge_term, double scale, double dropout, int64_t seed,
    const c10::optional<at::Tensor>& seed_tensor, int64_t offset,
    const c10::optional<at::Tensor>& light_rows, const c10::optional<at::Tensor>& heavy_rows,
    int64_t heavy_warps) {
  const c10::cuda::CUDAGuard guard(q.device());
  Prepared r = prepare(AttentionKind::kDotProduct, rowptr, col, edge_perm, q, k, v, edge_term,
                       scale, dropout, seed, seed_tensor, offset, light_rows, heavy_rows,
                       heavy_warps, "graph_attention_backward");
  return backward(r, grad_out, out, lse, t_rowptr, t_col, t_perm, "graph_attention_backward");
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor> graph_attention_backward_from(
    const DestinationPass& destination, const at::Tensor& grad_out, const at::Tensor& out,
    const at::Tensor& lse, const at::Tensor& rowptr, const at::Tensor& col,
    const c10::optional<at::Tensor>& t_rowptr, const c10::optional<at::Tensor>& t_col,
    const at::Tensor& t_perm, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    double scale, const c10::optional<at::Tensor>& light_rows,
    const c10::optional<at::Tensor>& heavy_rows, int64_t heavy_warps, const char* op) {
  const c10::cuda::CUDAGuard guard(q.device());
  Prepared r = prepare(AttentionKind::kDotProduct, rowptr, col, c10::nullopt, q, k, v,
                       c10::nullopt, scale, 0.0, 0, c10::nullopt, 0, light_rows, heavy_rows,
                       heavy_warps, op);
  auto grads = backward(r, grad_out, out, lse, t_rowptr, t_col, t_perm, op, destination);
  return {std::get<0>(grads), std::get<1>(grads), std::get<2>(grads)};
}

TORCH_LIBRARY_IMPL(fastgnn, CUDA, m) {
  m.impl("gatv2_forward", &gatv2_forward_cuda);
  m.impl("gatv2_backward", &gatv2_backward_cuda);
  m.impl("graph_attention_forward", &graph_attention_forward_cuda);
  m.impl("graph_attention_backward", &graph_attention_backward_cuda);
}

}  // namespace cuda
}  // namespace fastgnn
