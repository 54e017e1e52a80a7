// CPU fused GAT (v1) attention. The logit of edge j -> i at head h is a scalar,
// LeakyReLU(alpha_src[j,h] + alpha_dst[i,h] (+ alpha_edge[e,h])), so each destination takes two
// sweeps over its in-edges: the first finds every head's maximum logit (scalars only), the
// second adds exp(logit - max) x_src[j] into the accumulator, which therefore never needs the
// online softmax's rescaling. Only the per-(destination, head) log-sum-exp is saved.
//
// Backward, with alpha = exp(logit - lse_i), c the dropout factor and delta_i = <dOut_i, out_i>:
// dLogit = alpha (c <dOut_i, x_j> - delta_i) and dz = dLogit * LeakyReLU'(z). alpha_dst[i] sums
// dz over i's in-edges (a pass over the CSR), alpha_src[j] sums dz and x_src[j] sums
// c alpha dOut_i over j's out-edges (a pass over the transposed CSR, pulling from the
// destinations: no atomics), alpha_edge[e] is dz. On a symmetric graph one pass does both.
// The per-node scalar sums are kept in double: they are cheap, and they cancel (sum_j alpha
// (<dOut_i, x_j> - delta_i) is 0 without dropout), so float partial sums would cost accuracy.
#include "attention_seed.h"
#include "cpu/cpu_common.h"

#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

namespace fastgnn {
namespace cpu {
namespace {

template <typename acc_t, typename index_t>
struct GatInputs {
  const acc_t* alpha_dst;   // [T, H]
  const acc_t* x_src;       // [S, H, D]
  const acc_t* alpha_src;   // [S, H]
  const acc_t* alpha_edge;  // [E, H] input edge order, or null
  const index_t* edge_perm; // CSR position -> input position, or null
  acc_t slope;
  int64_t heads, dim;

  int64_t edge_at(int64_t e, int64_t h) const {
    return (edge_perm ? int64_t(edge_perm[e]) : e) * heads + h;
  }
  // Pre-activation of edge j -> i at CSR position e.
  acc_t z(int64_t i, int64_t j, int64_t e, int64_t h) const {
    acc_t v = alpha_src[j * heads + h] + alpha_dst[i * heads + h];
    if (alpha_edge) v += alpha_edge[edge_at(e, h)];
    return v;
  }
  acc_t leaky(acc_t v) const { return v > 0 ? v : v * slope; }
  acc_t leaky_slope(acc_t v) const { return v > 0 ? acc_t(1) : slope; }
  const acc_t* row(int64_t j, int64_t h) const { return x_src + (j * heads + h) * dim; }
};

template <typename acc_t>
acc_t dot(const acc_t* __restrict__ a, const acc_t* __restrict__ b, int64_t n) {
  acc_t s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t d = 0; d < n; ++d) s += a[d] * b[d];
  return s;
}

template <typename acc_t, typename index_t>
void gat_forward_rows(const GatInputs<acc_t, index_t>& p, const index_t* rowptr,
                      const index_t* col, int64_t rows, const DropoutSpec& drop, acc_t* out,
                      acc_t* lse) {
  const int64_t heads = p.heads, dim = p.dim;
  const acc_t neg_inf = -std::numeric_limits<acc_t>::infinity();
#pragma omp parallel num_threads(num_threads())
  {
    std::vector<acc_t> peak(heads), total(heads);
#pragma omp for schedule(dynamic, 16)
    for (int64_t i = 0; i < rows; ++i) {
      std::fill(peak.begin(), peak.end(), neg_inf);
      std::fill(total.begin(), total.end(), acc_t(0));
      acc_t* o = out + i * heads * dim;
      std::fill(o, o + heads * dim, acc_t(0));
      for (index_t e = rowptr[i]; e < rowptr[i + 1]; ++e)
        for (int64_t h = 0; h < heads; ++h)
          peak[h] = std::max(peak[h], p.leaky(p.z(i, col[e], e, h)));
      for (index_t e = rowptr[i]; e < rowptr[i + 1]; ++e) {
        const int64_t j = col[e];
        for (int64_t h = 0; h < heads; ++h) {
          const acc_t w = std::exp(p.leaky(p.z(i, j, e, h)) - peak[h]);
          total[h] += w;
          const acc_t wc = w * drop.factor<acc_t>(e, h);
          if (wc == 0) continue;
          const acc_t* __restrict__ x = p.row(j, h);
          acc_t* __restrict__ oh = o + h * dim;
#pragma omp simd
          for (int64_t d = 0; d < dim; ++d) oh[d] += wc * x[d];
        }
      }
      for (int64_t h = 0; h < heads; ++h) {
        const acc_t inv = total[h] > 0 ? acc_t(1) / total[h] : acc_t(0);
        acc_t* oh = o + h * dim;
        for (int64_t d = 0; d < dim; ++d) oh[d] *= inv;
        lse[i * heads + h] = total[h] > 0 ? peak[h] + std::log(total[h]) : neg_inf;
      }
    }
  }
}

template <typename acc_t>
struct GatGrads {
  const acc_t* grad_out;  // [T, H, D]
  const acc_t* lse;       // [T, H]
  const acc_t* delta;     // [T, H]
  acc_t* alpha_dst;       // [T, H]
  acc_t* x_src;           // [S, H, D]
  acc_t* alpha_src;       // [S, H]
  acc_t* alpha_edge;      // [E, H] input edge order, or null
};

// One pass over the rows of (rowptr, col): with do_dst row n is a destination and edge q
// comes from col[q]; with do_src row n is the source of edge src_perm[q] into col[q].
template <typename acc_t, typename index_t>
void gat_backward_pass(const GatInputs<acc_t, index_t>& p, const index_t* rowptr,
                       const index_t* col, const index_t* src_perm, int64_t rows, bool do_dst,
                       bool do_src, const DropoutSpec& drop, const GatGrads<acc_t>& g) {
  const int64_t heads = p.heads, dim = p.dim;
  // dz and c alpha of edge j -> i at CSR position e, head h.
  auto edge_grad = [&](int64_t i, int64_t j, int64_t e, int64_t h, acc_t& wc) {
    const acc_t z = p.z(i, j, e, h);
    const acc_t alpha = std::exp(p.leaky(z) - g.lse[i * heads + h]);
    wc = alpha * drop.factor<acc_t>(e, h);
    const acc_t* dout = g.grad_out + (i * heads + h) * dim;
    const double dval = wc != 0 ? double(dot(dout, p.row(j, h), dim)) : 0.0;
    return (double(wc) * dval - double(alpha) * double(g.delta[i * heads + h])) *
           double(p.leaky_slope(z));
  };
#pragma omp parallel num_threads(num_threads())
  {
    std::vector<double> sum_dst(heads), sum_src(heads);
#pragma omp for schedule(dynamic, 16)
    for (int64_t n = 0; n < rows; ++n) {
      std::fill(sum_dst.begin(), sum_dst.end(), 0.0);
      std::fill(sum_src.begin(), sum_src.end(), 0.0);
      for (index_t q = rowptr[n]; q < rowptr[n + 1]; ++q) {
        const int64_t m = col[q];
        for (int64_t h = 0; h < heads && do_dst; ++h) {  // edge m -> n at CSR position q
          acc_t wc;
          const double dz = edge_grad(n, m, q, h, wc);
          sum_dst[h] += dz;
          if (g.alpha_edge) g.alpha_edge[p.edge_at(q, h)] = acc_t(dz);
        }
        for (int64_t h = 0; h < heads && do_src; ++h) {  // edge n -> m at src_perm[q]
          acc_t wc;
          sum_src[h] += edge_grad(m, n, src_perm[q], h, wc);
          if (wc == 0) continue;
          const acc_t* __restrict__ dout = g.grad_out + (m * heads + h) * dim;
          acc_t* __restrict__ gx = g.x_src + (n * heads + h) * dim;
#pragma omp simd
          for (int64_t d = 0; d < dim; ++d) gx[d] += wc * dout[d];
        }
      }
      for (int64_t h = 0; h < heads; ++h) {
        if (do_dst) g.alpha_dst[n * heads + h] = acc_t(sum_dst[h]);
        if (do_src) g.alpha_src[n * heads + h] = acc_t(sum_src[h]);
      }
    }
  }
}

// ---- torch-facing glue ---------------------------------------------------------------------

struct Prepared {
  at::Tensor alpha_dst, x_src, alpha_src, alpha_edge, edge_perm;
  at::ScalarType acc;
  int64_t rows, heads, dim;

  template <typename acc_t, typename index_t>
  GatInputs<acc_t, index_t> view(double slope) const {
    return {alpha_dst.data_ptr<acc_t>(), x_src.data_ptr<acc_t>(), alpha_src.data_ptr<acc_t>(),
            alpha_edge.defined() ? alpha_edge.data_ptr<acc_t>() : nullptr,
            edge_perm.defined() ? edge_perm.data_ptr<index_t>() : nullptr, acc_t(slope), heads,
            dim};
  }
};

Prepared prepare(const at::Tensor& rowptr, const at::Tensor& col,
                 const c10::optional<at::Tensor>& edge_perm, const at::Tensor& alpha_dst,
                 const at::Tensor& x_src, const at::Tensor& alpha_src,
                 const c10::optional<at::Tensor>& alpha_edge, const char* op) {
  check_csr(rowptr, col, op);
  TORCH_CHECK(x_src.dim() == 3, op, ": x_src must be [S, H, D]");
  const int64_t heads = x_src.size(1);
  TORCH_CHECK(alpha_src.dim() == 2 && alpha_src.size(0) == x_src.size(0) &&
                  alpha_src.size(1) == heads,
              op, ": alpha_src must be [S, H]");
  TORCH_CHECK(alpha_dst.dim() == 2 && alpha_dst.size(0) == rowptr.numel() - 1 &&
                  alpha_dst.size(1) == heads,
              op, ": alpha_dst must be [T, H] with one row per CSR row");
  TORCH_CHECK(alpha_dst.scalar_type() == x_src.scalar_type() &&
                  alpha_src.scalar_type() == x_src.scalar_type(),
              op, ": feature dtypes differ");
  Prepared r;
  r.acc = x_src.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  r.rows = rowptr.numel() - 1;
  r.heads = heads;
  r.dim = x_src.size(2);
  r.alpha_dst = alpha_dst.to(r.acc).contiguous();
  r.x_src = x_src.to(r.acc).contiguous();
  r.alpha_src = alpha_src.to(r.acc).contiguous();
  if (alpha_edge.has_value()) {
    TORCH_CHECK(alpha_edge->dim() == 2 && alpha_edge->size(0) == col.numel() &&
                    alpha_edge->size(1) == heads,
                op, ": alpha_edge must be [E, H]");
    r.alpha_edge = alpha_edge->to(r.acc).contiguous();
  }
  if (edge_perm.has_value()) {
    TORCH_CHECK(edge_perm->scalar_type() == col.scalar_type() && edge_perm->numel() == col.numel(),
                op, ": edge_perm must match col");
    r.edge_perm = edge_perm->contiguous();
  }
  return r;
}

template <typename F>
void dispatch(const Prepared& r, const at::Tensor& col, const char* op, F&& f) {
  FASTGNN_DISPATCH_INDEX(col.scalar_type(), op, [&] {
    if (r.acc == at::kDouble)
      f(double{}, index_t{});
    else
      f(float{}, index_t{});
  });
}

std::tuple<at::Tensor, at::Tensor> gat_forward_cpu(
    const at::Tensor& rowptr, const at::Tensor& col, const c10::optional<at::Tensor>& edge_perm,
    const c10::optional<at::Tensor>& /*t_rowptr*/, const c10::optional<at::Tensor>& /*t_col*/,
    const c10::optional<at::Tensor>& /*t_perm*/, const at::Tensor& alpha_dst,
    const at::Tensor& x_src, const at::Tensor& alpha_src,
    const c10::optional<at::Tensor>& alpha_edge, double negative_slope, double dropout,
    int64_t seed, const c10::optional<at::Tensor>& seed_tensor, int64_t offset,
    const c10::optional<at::Tensor>& /*light_rows*/,
    const c10::optional<at::Tensor>& /*heavy_rows*/, int64_t /*heavy_warps*/) {
  const Prepared r = prepare(rowptr, col, edge_perm, alpha_dst, x_src, alpha_src, alpha_edge,
                             "gat_forward");
  auto opts = at::TensorOptions().dtype(r.acc);
  auto out = at::empty({r.rows, r.heads, r.dim}, opts);
  auto lse = at::empty({r.rows, r.heads}, opts);
  const DropoutSpec drop = attention_dropout(dropout, seed, seed_tensor, offset, r.heads,
                                             x_src.device(), "gat_forward");
  dispatch(r, col, "gat_forward", [&](auto a, auto i) {
    using acc_t = decltype(a);
    using index_t = decltype(i);
    gat_forward_rows<acc_t, index_t>(r.view<acc_t, index_t>(negative_slope),
                                     rowptr.data_ptr<index_t>(), col.data_ptr<index_t>(), r.rows,
                                     drop, out.data_ptr<acc_t>(), lse.data_ptr<acc_t>());
  });
  return {out.to(x_src.scalar_type()), lse};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> gat_backward_cpu(
    const at::Tensor& grad_out, const at::Tensor& out, const at::Tensor& lse,
    const at::Tensor& rowptr, const at::Tensor& col, const c10::optional<at::Tensor>& edge_perm,
    const c10::optional<at::Tensor>& t_rowptr, const c10::optional<at::Tensor>& t_col,
    const at::Tensor& t_perm, const at::Tensor& alpha_dst, const at::Tensor& x_src,
    const at::Tensor& alpha_src, const c10::optional<at::Tensor>& alpha_edge,
    double negative_slope, double dropout, int64_t seed,
    const c10::optional<at::Tensor>& seed_tensor, int64_t offset,
    const c10::optional<at::Tensor>& /*light*/, const c10::optional<at::Tensor>& /*heavy*/,
    int64_t /*heavy_warps*/) {
  const char* op = "gat_backward";
  const Prepared r = prepare(rowptr, col, edge_perm, alpha_dst, x_src, alpha_src, alpha_edge, op);
  TORCH_CHECK(t_rowptr.has_value() == t_col.has_value(), op,
              ": give both t_rowptr and t_col, or neither (symmetric graph)");
  TORCH_CHECK(t_perm.numel() == col.numel() && t_perm.scalar_type() == col.scalar_type(), op,
              ": t_perm must have one entry per edge and the index dtype");
  const bool symmetric = !t_rowptr.has_value();
  TORCH_CHECK(!symmetric || x_src.size(0) == r.rows, op, ": a symmetric graph must be square");
  if (!symmetric) check_csr(*t_rowptr, *t_col, op);
  auto opts = at::TensorOptions().dtype(r.acc);
  auto gout = grad_out.to(r.acc).contiguous();
  auto lse_c = lse.to(r.acc).contiguous();
  auto delta = (gout * out.to(r.acc)).sum(-1).contiguous();
  auto perm = t_perm.contiguous();
  auto grad_dst = at::empty(r.alpha_dst.sizes(), opts);
  auto grad_x = at::zeros(r.x_src.sizes(), opts);
  auto grad_src = at::empty(r.alpha_src.sizes(), opts);
  auto grad_edge = r.alpha_edge.defined() ? at::empty(r.alpha_edge.sizes(), opts)
                                          : at::empty({0}, opts);
  const DropoutSpec drop =
      attention_dropout(dropout, seed, seed_tensor, offset, r.heads, x_src.device(), op);
  dispatch(r, col, op, [&](auto a, auto i) {
    using acc_t = decltype(a);
    using index_t = decltype(i);
    const auto p = r.view<acc_t, index_t>(negative_slope);
    const GatGrads<acc_t> g{gout.data_ptr<acc_t>(), lse_c.data_ptr<acc_t>(),
                            delta.data_ptr<acc_t>(), grad_dst.data_ptr<acc_t>(),
                            grad_x.data_ptr<acc_t>(), grad_src.data_ptr<acc_t>(),
                            r.alpha_edge.defined() ? grad_edge.data_ptr<acc_t>() : nullptr};
    const index_t* rp = rowptr.data_ptr<index_t>();
    const index_t* cl = col.data_ptr<index_t>();
    const index_t* pm = perm.data_ptr<index_t>();
    if (symmetric) {
      gat_backward_pass<acc_t, index_t>(p, rp, cl, pm, r.rows, true, true, drop, g);
      return;
    }
    gat_backward_pass<acc_t, index_t>(p, rp, cl, pm, r.rows, true, false, drop, g);
    gat_backward_pass<acc_t, index_t>(p, t_rowptr->data_ptr<index_t>(),
                                      t_col->data_ptr<index_t>(), pm, x_src.size(0), false, true,
                                      drop, g);
  });
  const auto type = x_src.scalar_type();
  return {grad_dst.to(type), grad_x.to(type), grad_src.to(type),
          grad_edge.to(alpha_edge.has_value() ? alpha_edge->scalar_type() : type)};
}

}  // namespace

TORCH_LIBRARY_IMPL(fastgnn, CPU, m) {
  m.impl("gat_forward", &gat_forward_cpu);
  m.impl("gat_backward", &gat_backward_cpu);
}

}  // namespace cpu
}  // namespace fastgnn
