// CPU fused GAT (v1) attention. The logit of edge j -> i at head h is a scalar,
// LeakyReLU(alpha_src[j,h] + alpha_dst[i,h] (+ alpha_edge[e,h])), so each destination takes two
// sweeps over its in-edges: the first computes every logit (scalars only, kept a row at a
// time) and each head's maximum, the second adds exp(logit - max) x_src[j] into the
// accumulator, which therefore never needs the online softmax's rescaling. Only the
// per-(destination, head) log-sum-exp is saved.
//
// Backward, with alpha = exp(logit - lse_i), c the dropout factor and delta_i = <dOut_i, out_i>:
// dLogit = alpha (c <dOut_i, x_j> - delta_i) and dz = dLogit * LeakyReLU'(z). A source pass over
// the transposed CSR (on a symmetric graph the CSR itself) pulls from each source j's
// destinations, no atomics: x_src[j] sums c alpha dOut_i, alpha_src[j] sums dz, and each edge's
// dz is stored ([E, H]). It reads no x_src row but j's own, so it can run on a range of sources
// at a time (gat_source_backward). A destination pass over the CSR then sums dz into
// alpha_dst[i] and copies it to alpha_edge[e].
// The per-node scalar sums are kept in double: they are cheap, and they cancel (sum_j alpha
// (<dOut_i, x_j> - delta_i) is 0 without dropout), so float partial sums would cost accuracy.
// Both read float16/bfloat16 inputs as they are when all have that dtype (as under autocast),
// accumulating in float and writing their feature outputs (out, the x_src gradient) in that
// dtype: the source pass converts its own x_src row once and a destination's grad_out row an
// edge, as it reads them.
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

// Features (feat_t) are float16/bfloat16 as given in the forward, else acc_t.
template <typename acc_t, typename index_t, typename feat_t = acc_t>
struct GatInputs {
  const feat_t* alpha_dst;   // [T, H]
  const feat_t* x_src;       // [S, H, D]
  const feat_t* alpha_src;   // [S, H]
  const feat_t* alpha_edge;  // [E, H] input edge order, or null
  const index_t* edge_perm;  // CSR position -> input position, or null
  acc_t slope;
  int64_t heads, dim;

  FASTGNN_ALWAYS_INLINE int64_t edge_at(int64_t e, int64_t h) const {
    return (edge_perm ? int64_t(edge_perm[e]) : e) * heads + h;
  }
  // Pre-activation of edge j -> i at CSR position e (kIsa: the clone's conversions).
  template <Isa kIsa = Isa::kBaseline>
  FASTGNN_ALWAYS_INLINE acc_t z(int64_t i, int64_t j, int64_t e, int64_t h) const {
    acc_t v = to_acc<kIsa>(alpha_src[j * heads + h]) + to_acc<kIsa>(alpha_dst[i * heads + h]);
    if (alpha_edge) v += to_acc<kIsa>(alpha_edge[edge_at(e, h)]);
    return v;
  }
  FASTGNN_ALWAYS_INLINE acc_t leaky(acc_t v) const { return v > 0 ? v : v * slope; }
  FASTGNN_ALWAYS_INLINE acc_t leaky_slope(acc_t v) const { return v > 0 ? acc_t(1) : slope; }
  FASTGNN_ALWAYS_INLINE const feat_t* row(int64_t j, int64_t h) const {
    return x_src + (j * heads + h) * dim;
  }
};

// One destination row of the GAT forward; kIsa: the clone it is compiled for (half source rows
// convert as they are read, float16 by F16C in the AVX2 one).
template <typename acc_t, typename index_t, typename feat_t, Isa kIsa>
FASTGNN_ALWAYS_INLINE void gat_forward_row(const GatInputs<acc_t, index_t, feat_t>& p,
                                           const index_t* rowptr, const index_t* col,
                                           const DropoutSpec& drop, feat_t* out, acc_t* lse,
                                           int64_t i, acc_t* peak, acc_t* total, acc_t* o,
                                           std::vector<acc_t>& logits) {
  const int64_t heads = p.heads, dim = p.dim;
  const acc_t neg_inf = -std::numeric_limits<acc_t>::infinity();
  std::fill(peak, peak + heads, neg_inf);
  std::fill(total, total + heads, acc_t(0));
  std::fill(o, o + heads * dim, acc_t(0));
  const index_t begin = rowptr[i], end = rowptr[i + 1];
  // The first sweep keeps the row's logits for the second (half scores convert once).
  logits.resize(std::max<size_t>(logits.size(), size_t(end - begin) * size_t(heads)));
  acc_t* FASTGNN_RESTRICT logit = logits.data();
  for (index_t e = begin; e < end; ++e) {
    for (int64_t h = 0; h < heads; ++h) {
      const acc_t l = p.leaky(p.template z<kIsa>(i, col[e], e, h));
      logit[(e - begin) * heads + h] = l;
      peak[h] = std::max(peak[h], l);
    }
  }
  for (index_t e = begin; e < end; ++e) {
    const int64_t j = col[e];
    for (int64_t h = 0; h < heads; ++h) {
      const acc_t w = std::exp(logit[(e - begin) * heads + h] - peak[h]);
      total[h] += w;
      const acc_t wc = w * drop.factor<acc_t>(e, h);
      if (wc != 0) add_scaled_as_acc<kIsa>(o + h * dim, wc, p.row(j, h), dim);
    }
  }
  for (int64_t h = 0; h < heads; ++h) {
    const acc_t inv = total[h] > 0 ? acc_t(1) / total[h] : acc_t(0);
    acc_t* oh = o + h * dim;
    for (int64_t d = 0; d < dim; ++d) oh[d] *= inv;
    store_as<kIsa>(oh, dim, out + (i * heads + h) * dim);
    lse[i * heads + h] = total[h] > 0 ? peak[h] + std::log(total[h]) : neg_inf;
  }
}

template <typename acc_t, typename index_t, typename feat_t>
void gat_forward_rows(const GatInputs<acc_t, index_t, feat_t>& p, const index_t* rowptr,
                      const index_t* col, int64_t rows, const DropoutSpec& drop, feat_t* out,
                      acc_t* lse) {
#pragma omp parallel num_threads(num_threads())
  {
    std::vector<acc_t> peak(p.heads), total(p.heads), row(p.heads * p.dim), logits;
#pragma omp for schedule(dynamic, 16)
    for (int64_t i = 0; i < rows; ++i)
      on_avx2_or_baseline<gat_forward_row<acc_t, index_t, feat_t, Isa::kAvx2>,
                          gat_forward_row<acc_t, index_t, feat_t, Isa::kBaseline>>(
          p, rowptr, col, drop, out, lse, i, peak.data(), total.data(), row.data(), logits);
  }
}

constexpr int kPrefetchAhead = 4;  // edges between a prefetch and the use of its rows

// <dout, x>, and gx += w * dout, in one pass over dout (converted as it is read, 8 values at a
// time where AccVec::kVectorConvert).
template <Isa kIsa, typename acc_t, typename feat_t>
FASTGNN_ALWAYS_INLINE acc_t dot_and_add_scaled(const feat_t* FASTGNN_RESTRICT dout,
                                               const acc_t* FASTGNN_RESTRICT x, acc_t w,
                                               acc_t* FASTGNN_RESTRICT gx, int64_t n) {
  acc_t s = 0;
  int64_t d = 0;
  using Vec = RowVec<feat_t, kIsa>;
  if constexpr (Vec::kVectorConvert) {
    typename Vec::type sum = {};
    for (; d + Vec::kLanes <= n; d += Vec::kLanes) {
      const typename Vec::type v = Vec::load(dout + d);
      typename Vec::type xv, gv;
      std::memcpy(&xv, x + d, sizeof(xv));
      std::memcpy(&gv, gx + d, sizeof(gv));
      sum += v * xv;
      gv += w * v;
      std::memcpy(gx + d, &gv, sizeof(gv));
    }
    s = sum_lanes8(sum);
    for (; d < n; ++d) {  // the tail one by one, as in dot_as_acc
      const acc_t v = to_acc<kIsa>(dout[d]);
      s += v * x[d];
      gx[d] += w * v;
    }
    return s;
  }
#pragma omp simd reduction(+ : s)
  for (int64_t t = 0; t < n; ++t) {
    const acc_t v = to_acc<kIsa>(dout[t]);
    s += v * x[t];
    gx[t] += w * v;
  }
  return s;
}

// The source pass's inputs and outputs; grad_out and the x_src gradient are in the features'
// dtype (feat_t), the rest in acc_t.
template <typename acc_t, typename feat_t>
struct GatSourceGrads {
  const feat_t* grad_out;  // [T, H, D]
  const acc_t* lse;        // [T, H]
  const acc_t* delta;      // [T, H]
  acc_t* grad_logit;       // [E, H] forward CSR order: d loss / d pre-activation
  feat_t* x_src;           // [rows, H, D]
  acc_t* alpha_src;        // [rows, H]
};

// One thread's buffers: the row's x_src gradient and x_src row (as acc_t), and the per-head
// sums.
template <typename acc_t>
struct GatSourceScratch {
  std::vector<acc_t> grad_x, x;
  std::vector<double> sum_src;
  GatSourceScratch(int64_t heads, int64_t dim)
      : grad_x(heads * dim), x(heads * dim), sum_src(heads) {}
};

// Source row n of the pass below; kIsa: the clone it is compiled for (half rows convert as
// they are read, float16 by F16C in the AVX2 one).
template <typename acc_t, typename index_t, typename feat_t, Isa kIsa>
FASTGNN_ALWAYS_INLINE void gat_source_row(const GatInputs<acc_t, index_t, feat_t>& p,
                                          const index_t* rowptr, const index_t* col,
                                          const index_t* src_perm, const index_t* logit_slot,
                                          const DropoutSpec& drop,
                                          const GatSourceGrads<acc_t, feat_t>& g,
                                          GatSourceScratch<acc_t>& s, int64_t n) {
  const int64_t heads = p.heads, dim = p.dim;
  std::fill(s.sum_src.begin(), s.sum_src.end(), 0.0);
  acc_t* gx_row = s.grad_x.data();
  std::fill(gx_row, gx_row + heads * dim, acc_t(0));
  const acc_t* x_row = as_acc<kIsa, acc_t>(p.x_src + n * heads * dim, heads * dim, s.x.data());
  for (index_t q = rowptr[n]; q < rowptr[n + 1]; ++q) {
    if (q + kPrefetchAhead < rowptr[n + 1]) {  // a later destination's rows, each a cache miss
      const int64_t next = col[q + kPrefetchAhead];
      prefetch_row(g.grad_out + next * heads * dim, heads * dim);
      prefetch_row(g.lse + next * heads, heads);
      prefetch_row(g.delta + next * heads, heads);
      prefetch_row(p.alpha_dst + next * heads, heads);
    }
    const int64_t m = col[q], e = src_perm[q];
    acc_t* logit_row = g.grad_logit + (logit_slot ? int64_t(logit_slot[q]) : e) * heads;
    for (int64_t h = 0; h < heads; ++h) {  // edge n -> m at forward CSR position e
      const acc_t z = p.template z<kIsa>(m, n, e, h);
      const acc_t alpha = std::exp(p.leaky(z) - g.lse[m * heads + h]);
      const acc_t wc = alpha * drop.factor<acc_t>(e, h);
      const double dval =
          wc != 0 ? double(dot_and_add_scaled<kIsa>(g.grad_out + (m * heads + h) * dim,
                                                    x_row + h * dim, wc, gx_row + h * dim, dim))
                  : 0.0;
      const double dz = (double(wc) * dval - double(alpha) * double(g.delta[m * heads + h])) *
                        double(p.leaky_slope(z));
      s.sum_src[h] += dz;
      logit_row[h] = acc_t(dz);
    }
  }
  for (int64_t h = 0; h < heads; ++h) g.alpha_src[n * heads + h] = acc_t(s.sum_src[h]);
  store_as<kIsa>(gx_row, heads * dim, g.x_src + n * heads * dim);
}

// Source side of the backward over `rows` rows of the walked CSR (the transposed CSR, or on a
// symmetric graph the CSR itself): row n is the source of edge src_perm[q] into col[q], and
// `p`'s x_src and alpha_src start at row n = 0. Writes each walked edge's dz into grad_logit
// (at its CSR position, or at logit_slot[q]) and the gradients of the rows' x_src and
// alpha_src; reads x_src of its own row only.
template <typename acc_t, typename index_t, typename feat_t>
void gat_source_pass(const GatInputs<acc_t, index_t, feat_t>& p, const index_t* rowptr,
                     const index_t* col, const index_t* src_perm, const index_t* logit_slot,
                     int64_t rows, const DropoutSpec& drop,
                     const GatSourceGrads<acc_t, feat_t>& g) {
#pragma omp parallel num_threads(num_threads())
  {
    GatSourceScratch<acc_t> scratch(p.heads, p.dim);
#pragma omp for schedule(dynamic, 16)
    for (int64_t n = 0; n < rows; ++n)
      on_avx2_or_baseline<gat_source_row<acc_t, index_t, feat_t, Isa::kAvx2>,
                          gat_source_row<acc_t, index_t, feat_t, Isa::kBaseline>>(
          p, rowptr, col, src_perm, logit_slot, drop, g, scratch, n);
  }
}

// Destination side: each forward CSR row sums its in-edges' grad_logit (in double) into
// grad_alpha_dst, and grad_alpha_edge (input edge order, or null) copies them.
template <typename acc_t, typename index_t>
void gat_destination_pass(const index_t* rowptr, const index_t* edge_perm, int64_t rows,
                          int64_t heads, const acc_t* grad_logit, acc_t* grad_alpha_dst,
                          acc_t* grad_alpha_edge) {
#pragma omp parallel num_threads(num_threads())
  {
    std::vector<double> sum(heads);
#pragma omp for schedule(dynamic, 64)
    for (int64_t i = 0; i < rows; ++i) {
      std::fill(sum.begin(), sum.end(), 0.0);
      for (index_t q = rowptr[i]; q < rowptr[i + 1]; ++q) {
        const acc_t* g = grad_logit + int64_t(q) * heads;
        for (int64_t h = 0; h < heads; ++h) sum[h] += double(g[h]);
        if (grad_alpha_edge) {
          acc_t* to = grad_alpha_edge + (edge_perm ? int64_t(edge_perm[q]) : int64_t(q)) * heads;
          std::copy(g, g + heads, to);
        }
      }
      for (int64_t h = 0; h < heads; ++h) grad_alpha_dst[i * heads + h] = acc_t(sum[h]);
    }
  }
}

// ---- torch-facing glue ---------------------------------------------------------------------

struct Prepared {
  at::Tensor alpha_dst, x_src, alpha_src, alpha_edge, edge_perm;  // in `read`
  at::ScalarType acc;
  at::ScalarType read;  // what the kernels read features in: acc, or their float16/bfloat16
  int64_t heads, dim;

  template <typename acc_t, typename index_t, typename feat_t = acc_t>
  GatInputs<acc_t, index_t, feat_t> view(double slope) const {
    return {alpha_dst.data_ptr<feat_t>(), x_src.data_ptr<feat_t>(), alpha_src.data_ptr<feat_t>(),
            alpha_edge.defined() ? alpha_edge.data_ptr<feat_t>() : nullptr,
            edge_perm.defined() ? edge_perm.data_ptr<index_t>() : nullptr, acc_t(slope), heads,
            dim};
  }
};

// Checks and views of the features: as given when they are float16/bfloat16 and alpha_edge has
// their dtype too, else in float (double for double); `dst_rows` destinations, `col` the edges.
Prepared prepare(int64_t dst_rows, const at::Tensor& col,
                 const c10::optional<at::Tensor>& edge_perm, const at::Tensor& alpha_dst,
                 const at::Tensor& x_src, const at::Tensor& alpha_src,
                 const c10::optional<at::Tensor>& alpha_edge, const char* op) {
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
  Prepared r;
  const at::ScalarType features = x_src.scalar_type();
  r.acc = features == at::kDouble ? at::kDouble : at::kFloat;
  r.read = read_type(
      features, !alpha_edge.has_value() || alpha_edge->scalar_type() == features,
      r.acc);
  r.heads = heads;
  r.dim = x_src.size(2);
  r.alpha_dst = as_type(alpha_dst, r.read);
  r.x_src = as_type(x_src, r.read);
  r.alpha_src = as_type(alpha_src, r.read);
  if (alpha_edge.has_value()) {
    TORCH_CHECK(alpha_edge->dim() == 2 && alpha_edge->size(0) == col.numel() &&
                    alpha_edge->size(1) == heads,
                op, ": alpha_edge must be [E, H]");
    r.alpha_edge = as_type(*alpha_edge, r.read);
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
  check_csr(rowptr, col, "gat_forward");
  const int64_t rows = rowptr.numel() - 1;
  const Prepared r =
      prepare(rows, col, edge_perm, alpha_dst, x_src, alpha_src, alpha_edge, "gat_forward");
  auto out = at::empty({rows, r.heads, r.dim}, at::TensorOptions().dtype(r.read));
  auto lse = at::empty({rows, r.heads}, at::TensorOptions().dtype(r.acc));
  const DropoutSpec drop = attention_dropout(dropout, seed, seed_tensor, offset, r.heads,
                                             x_src.device(), "gat_forward");
  dispatch(r, col, "gat_forward", [&](auto a, auto i) {
    using acc_t = decltype(a);
    using index_t = decltype(i);
    dispatch_read<acc_t>(r.read, [&](auto feat) {
      using feat_t = decltype(feat);
      gat_forward_rows<acc_t, index_t, feat_t>(
          r.view<acc_t, index_t, feat_t>(negative_slope), rowptr.data_ptr<index_t>(),
          col.data_ptr<index_t>(), rows, drop, out.data_ptr<feat_t>(), lse.data_ptr<acc_t>());
    });
  });
  return {as_type(out, x_src.scalar_type()), lse};
}

// logit_slot must be a contiguous [E] tensor of the index dtype whose walked rows' entries
// are rows of a `slots`-row grad_logit.
void check_logit_slots(const at::Tensor& logit_slot, const at::Tensor& rowptr,
                       const at::Tensor& col, int64_t row_begin, int64_t rows, int64_t slots,
                       const char* op) {
  TORCH_CHECK(logit_slot.scalar_type() == col.scalar_type() && logit_slot.is_contiguous() &&
                  logit_slot.numel() == col.numel(),
              op, ": logit_slot must be a contiguous [E] tensor of the index dtype");
  FASTGNN_DISPATCH_INDEX(col.scalar_type(), op, [&] {
    const index_t* ptr = rowptr.data_ptr<index_t>();
    const index_t* slot = logit_slot.data_ptr<index_t>();
    for (int64_t q = ptr[row_begin]; q < ptr[row_begin + rows]; ++q)
      TORCH_CHECK(slot[q] >= 0 && slot[q] < slots, op, ": logit_slot[", q, "] = ", slot[q],
                  " is outside grad_logit's ", slots, " rows");
  });
}

// The source pass over rows [row_begin, row_begin + x_src.size(0)) of the walked CSR (rowptr,
// col, src_perm); x_src and alpha_src hold those rows. Fills grad_logit at the walked edges and
// returns the rows' gradients in the statistics dtype.
std::tuple<at::Tensor, at::Tensor> source_pass(
    const Prepared& r, const at::Tensor& grad_out, const at::Tensor& lse,
    const at::Tensor& delta, const at::Tensor& rowptr, const at::Tensor& col,
    const at::Tensor& src_perm, int64_t row_begin, double negative_slope,
    const DropoutSpec& drop, const at::Tensor& grad_logit,
    const c10::optional<at::Tensor>& logit_slot, const char* op) {
  check_csr(rowptr, col, op);
  const int64_t rows = r.x_src.size(0);
  TORCH_CHECK(row_begin >= 0 && row_begin + rows <= rowptr.numel() - 1, op,
              ": rows [", row_begin, ", ", row_begin + rows, ") outside the walked CSR");
  TORCH_CHECK(src_perm.numel() == col.numel() && src_perm.scalar_type() == col.scalar_type(), op,
              ": the source permutation must have one entry per edge and the index dtype");
  TORCH_CHECK(grad_logit.scalar_type() == r.acc && grad_logit.is_contiguous() &&
                  grad_logit.dim() == 2 && grad_logit.size(1) == r.heads,
              op, ": grad_logit must be a contiguous [n, H] tensor of the statistics dtype");
  if (logit_slot.has_value())
    check_logit_slots(*logit_slot, rowptr, col, row_begin, rows, grad_logit.size(0), op);
  else
    TORCH_CHECK(grad_logit.size(0) == col.numel(), op, ": grad_logit must be [E, H]");
  auto opts = at::TensorOptions().dtype(r.acc);
  auto gout = as_type(grad_out, r.read);
  auto lse_c = as_type(lse, r.acc);
  auto delta_c = as_type(delta, r.acc);
  auto perm = src_perm.contiguous();
  auto grad_x = at::empty(r.x_src.sizes(), opts.dtype(r.read));
  auto grad_src = at::empty(r.alpha_src.sizes(), opts);
  dispatch(r, col, op, [&](auto a, auto i) {
    using acc_t = decltype(a);
    using index_t = decltype(i);
    dispatch_read<acc_t>(r.read, [&](auto feat) {
      using feat_t = decltype(feat);
      const GatSourceGrads<acc_t, feat_t> g{
          gout.data_ptr<feat_t>(), lse_c.data_ptr<acc_t>(), delta_c.data_ptr<acc_t>(),
          grad_logit.data_ptr<acc_t>(), grad_x.data_ptr<feat_t>(), grad_src.data_ptr<acc_t>()};
      gat_source_pass<acc_t, index_t, feat_t>(
          r.view<acc_t, index_t, feat_t>(negative_slope), rowptr.data_ptr<index_t>() + row_begin,
          col.data_ptr<index_t>(), perm.data_ptr<index_t>(),
          logit_slot.has_value() ? logit_slot->data_ptr<index_t>() : nullptr, rows, drop, g);
    });
  });
  return {grad_x, grad_src};
}

std::tuple<at::Tensor, at::Tensor> destination_pass(const at::Tensor& rowptr,
                                                    const at::Tensor& grad_logit,
                                                    const c10::optional<at::Tensor>& edge_perm,
                                                    bool with_edge, at::ScalarType dtype,
                                                    const char* op) {
  TORCH_CHECK(rowptr.dim() == 1 && rowptr.numel() >= 1 && rowptr.is_contiguous(), op,
              ": bad rowptr");
  TORCH_CHECK(grad_logit.dim() == 2 && grad_logit.is_contiguous() &&
                  (grad_logit.scalar_type() == at::kFloat ||
                   grad_logit.scalar_type() == at::kDouble),
              op, ": grad_logit must be a contiguous float [E, H] tensor");
  const int64_t rows = rowptr.numel() - 1, edges = grad_logit.size(0), heads = grad_logit.size(1);
  auto opts = grad_logit.options();
  auto grad_dst = at::empty({rows, heads}, opts);
  auto grad_edge = with_edge ? at::empty({edges, heads}, opts) : at::empty({0}, opts);
  auto perm = edge_perm.has_value() ? edge_perm->contiguous() : at::Tensor();
  FASTGNN_DISPATCH_INDEX(rowptr.scalar_type(), op, [&] {
    const index_t* pm = perm.defined() ? perm.data_ptr<index_t>() : nullptr;
    AT_DISPATCH_FLOATING_TYPES(grad_logit.scalar_type(), "gat_destination_backward", [&] {
      gat_destination_pass<scalar_t, index_t>(
          rowptr.data_ptr<index_t>(), pm, rows, heads, grad_logit.data_ptr<scalar_t>(),
          grad_dst.data_ptr<scalar_t>(), with_edge ? grad_edge.data_ptr<scalar_t>() : nullptr);
    });
  });
  return {grad_dst.to(dtype), grad_edge.to(dtype)};
}

// <grad_out, out> of rows [begin, end) (a row: one (destination, head)), summed in double;
// half rows convert as they are read (kIsa: the clone's conversions).
template <typename acc_t, typename feat_t, typename out_t, Isa kIsa>
FASTGNN_ALWAYS_INLINE void delta_rows(const feat_t* grad_out, const out_t* out, acc_t* delta,
                                      int64_t begin, int64_t end, int64_t dim, acc_t* g_row,
                                      acc_t* o_row) {
  for (int64_t i = begin; i < end; ++i) {
    const acc_t* g = as_acc<kIsa, acc_t>(grad_out + i * dim, dim, g_row);
    const acc_t* o = as_acc<kIsa, acc_t>(out + i * dim, dim, o_row);
    double sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t d = 0; d < dim; ++d) sum += double(g[d]) * double(o[d]);
    delta[i] = acc_t(sum);
  }
}

template <typename acc_t, typename feat_t, typename out_t>
void delta_all_rows(const feat_t* grad_out, const out_t* out, acc_t* delta, int64_t rows,
                    int64_t dim) {
  constexpr int64_t kRows = 64;
#pragma omp parallel num_threads(num_threads())
  {
    std::vector<acc_t> g_row(dim), o_row(dim);
#pragma omp for schedule(static)
    for (int64_t b = 0; b < rows; b += kRows)
      on_avx2_or_baseline<delta_rows<acc_t, feat_t, out_t, Isa::kAvx2>,
                          delta_rows<acc_t, feat_t, out_t, Isa::kBaseline>>(
          grad_out, out, delta, b, std::min(rows, b + kRows), dim, g_row.data(), o_row.data());
  }
}

}  // namespace

// <grad_out, out> per (destination, head), reading both as they are (no [T, H, D] copy).
at::Tensor attention_delta_cpu(const at::Tensor& grad_out, const at::Tensor& out) {
  TORCH_CHECK(grad_out.dim() == 3 && grad_out.sizes() == out.sizes(),
              "attention_delta_backward: grad_out and out must both be [T, H, D]");
  const auto acc = out.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  auto delta = at::empty({out.size(0), out.size(1)}, out.options().dtype(acc));
  auto readable = [&](const at::Tensor& t) {  // float16/bfloat16 as they are under float stats
    const bool half = t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16;
    return as_type(t, half && acc == at::kFloat ? t.scalar_type() : acc);
  };
  const auto g = readable(grad_out), o = readable(out);
  AT_DISPATCH_FLOATING_TYPES(acc, "attention_delta_backward", [&] {
    using acc_t = scalar_t;
    dispatch_read<acc_t>(g.scalar_type(), [&](auto gf) {
      dispatch_read<acc_t>(o.scalar_type(), [&](auto of) {
        using feat_t = decltype(gf);
        using out_t = decltype(of);
        delta_all_rows(static_cast<const feat_t*>(g.data_ptr()),
                       static_cast<const out_t*>(o.data_ptr()), delta.data_ptr<acc_t>(),
                       delta.numel(), out.size(2));
      });
    });
  });
  return delta;
}

namespace {

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
  check_csr(rowptr, col, op);
  const int64_t rows = rowptr.numel() - 1;
  const Prepared r = prepare(rows, col, edge_perm, alpha_dst, x_src, alpha_src, alpha_edge, op);
  TORCH_CHECK(t_rowptr.has_value() == t_col.has_value(), op,
              ": give both t_rowptr and t_col, or neither (symmetric graph)");
  const bool symmetric = !t_rowptr.has_value();
  TORCH_CHECK(!symmetric || x_src.size(0) == rows, op, ": a symmetric graph must be square");
  const auto delta = attention_delta_cpu(grad_out, out);
  auto grad_logit = at::empty({col.numel(), r.heads}, at::TensorOptions().dtype(r.acc));
  const DropoutSpec drop =
      attention_dropout(dropout, seed, seed_tensor, offset, r.heads, x_src.device(), op);
  auto [grad_x, grad_src] =
      source_pass(r, grad_out, lse, delta, symmetric ? rowptr : *t_rowptr,
                  symmetric ? col : *t_col, t_perm, 0, negative_slope, drop, grad_logit,
                  c10::nullopt, op);
  const auto type = x_src.scalar_type();
  auto [grad_dst, grad_edge] =
      destination_pass(rowptr, grad_logit, edge_perm, r.alpha_edge.defined(), type, op);
  return {grad_dst, grad_x.to(type), grad_src.to(type),
          grad_edge.to(alpha_edge.has_value() ? alpha_edge->scalar_type() : type)};
}

std::tuple<at::Tensor, at::Tensor> gat_source_backward_cpu(
    const at::Tensor& grad_out, const at::Tensor& lse, const at::Tensor& delta,
    const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& src_perm,
    const c10::optional<at::Tensor>& edge_perm, const at::Tensor& alpha_dst,
    const at::Tensor& x_rows, const at::Tensor& alpha_src_rows,
    const c10::optional<at::Tensor>& alpha_edge, double negative_slope, double dropout,
    int64_t seed, const c10::optional<at::Tensor>& seed_tensor, int64_t offset, int64_t row_begin,
    const c10::optional<at::Tensor>& /*light_rows*/,
    const c10::optional<at::Tensor>& /*heavy_rows*/, int64_t /*heavy_warps*/,
    const at::Tensor& grad_logit, const c10::optional<at::Tensor>& logit_slot) {
  const char* op = "gat_source_backward";
  const Prepared r = prepare(alpha_dst.size(0), col, edge_perm, alpha_dst, x_rows,
                             alpha_src_rows, alpha_edge, op);
  const DropoutSpec drop =
      attention_dropout(dropout, seed, seed_tensor, offset, r.heads, x_rows.device(), op);
  auto [grad_x, grad_src] = source_pass(r, grad_out, lse, delta, rowptr, col, src_perm,
                                        row_begin, negative_slope, drop, grad_logit, logit_slot,
                                        op);
  return {grad_x.to(x_rows.scalar_type()), grad_src.to(x_rows.scalar_type())};
}

std::tuple<at::Tensor, at::Tensor> gat_destination_backward_cpu(
    const at::Tensor& rowptr, const at::Tensor& grad_logit,
    const c10::optional<at::Tensor>& edge_perm, bool with_edge, at::ScalarType dtype,
    const c10::optional<at::Tensor>& /*light_rows*/,
    const c10::optional<at::Tensor>& /*heavy_rows*/, int64_t /*heavy_warps*/) {
  return destination_pass(rowptr, grad_logit, edge_perm, with_edge, dtype,
                          "gat_destination_backward");
}

}  // namespace

TORCH_LIBRARY_IMPL(fastgnn, CPU, m) {
  m.impl("attention_delta_backward", &attention_delta_cpu);
  m.impl("gat_forward", &gat_forward_cpu);
  m.impl("gat_backward", &gat_backward_cpu);
  m.impl("gat_source_backward", &gat_source_backward_cpu);
  m.impl("gat_destination_backward", &gat_destination_backward_cpu);
}

}  // namespace cpu
}  // namespace fastgnn
