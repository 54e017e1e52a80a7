// CPU fused graph attention (GATv2 and dot-product). OpenMP over destinations; each
// destination streams its in-edges once with an online softmax (running max, running sum,
// rescaled accumulator) and saves only its log-sum-exp. The backward recomputes each logit
// from that statistic in a pass over the CSR that gives the destination-side gradients and
// saves each edge's dLogit (and for GATv2 the signs of its pre-activation, a bit per
// feature); a pass over the transposed CSR then pulls the source-side gradients from those
// (no atomics, no second logit). Everything is deterministic for any thread count.
//
// The forwards read float16/bfloat16 features as they are when every input has that dtype (as
// under autocast), accumulating in float and writing the output in that dtype: each
// destination's row is converted once for all its edges, each source row once an edge (GATv2
// keeps it for the value). The backwards read them as they are too, accumulating their
// gradients in float: a destination's features and grad_out row convert once a row, source rows
// (and, in the source pass, destinations' grad_out rows) as they are read. The Tensor Core
// (WSB) backward's CSR passes take float copies (graph_attention_backward_from).
#include "attention_seed.h"
#include "cpu/attention_backward.h"
#include "cpu/cpu_common.h"

#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <limits>
#include <tuple>
#include <vector>

namespace fastgnn {
namespace cpu {
namespace {

// 1 when v > 0, else 0, as integer arithmetic that vectorises: the bits of a positive float
// read as a positive integer; +0 and negatives (sign bit set) do not.
template <typename T>
FASTGNN_ALWAYS_INLINE T positive(T v) {
  using bits_t = std::conditional_t<sizeof(T) == 4, int32_t, int64_t>;
  bits_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  return T(bits > 0);
}

constexpr int kPrefetchAhead = 4;  // edges between a prefetch_row and the use of its row

// edge_term [E, H, D] in input edge order, read at CSR position e through edge_perm.
template <typename feat_t, typename index_t>
struct EdgeTerm {
  const feat_t* data;    // null: no edge term
  const index_t* perm;   // null: CSR order is input order
  int64_t heads, dim;

  FASTGNN_ALWAYS_INLINE int64_t at(int64_t e, int64_t h) const {
    return ((perm ? int64_t(perm[e]) : e) * heads + h) * dim;
  }
  FASTGNN_ALWAYS_INLINE const feat_t* row(int64_t e, int64_t h) const {
    return data ? data + at(e, h) : nullptr;
  }
};

template <typename acc_t>
FASTGNN_ALWAYS_INLINE acc_t dot(const acc_t* FASTGNN_RESTRICT a, const acc_t* FASTGNN_RESTRICT b,
                                int64_t n) {
  acc_t s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t d = 0; d < n; ++d) s += a[d] * b[d];
  return s;
}

// GATv2: logit = att . LeakyReLU(x_dst[i] + x_src[j] (+ edge)); the value is x_src[j]. The
// features (feat_t) are float16/bfloat16 as given in the forward, else acc_t; att is acc_t.
template <typename acc_t, typename index_t, typename feat_t = acc_t>
struct Gatv2 {
  static constexpr bool kEdgeInValues = false;
  const feat_t* x_dst;
  const feat_t* x_src;
  const acc_t* att;
  EdgeTerm<feat_t, index_t> edge;
  acc_t slope;
  int64_t heads, dim;

  FASTGNN_ALWAYS_INLINE void prefetch_source(int64_t j) const {
    prefetch_row(x_src + j * heads * dim, heads * dim);
  }

  // LeakyReLU and its derivative without float compares, which GCC will not vectorise (they
  // may trap). The derivative is PyTorch's: slope at z = 0 of either sign. A float32 sum
  // x_dst + x_src rounds to +0 where the exact one is a tiny value of either sign; taking 1
  // there (as the sign bit would) put GATv2's x gradients 5x further from float64 than stock's.
  FASTGNN_ALWAYS_INLINE acc_t leaky(acc_t v) const {
    return std::max(v, acc_t(0)) + slope * std::min(v, acc_t(0));
  }
  FASTGNN_ALWAYS_INLINE acc_t leaky_slope(acc_t v) const {
    return slope + (acc_t(1) - slope) * positive(v);
  }

  // Destination i's features as acc_t ([H, D]): themselves, or converted into `buffer`.
  template <Isa kIsa>
  FASTGNN_ALWAYS_INLINE const acc_t* destination(int64_t i, acc_t* buffer) const {
    return as_acc<kIsa, acc_t>(x_dst + i * heads * dim, heads * dim, buffer);
  }

  // The logit of a half source row `xs` without edge term: 8 values at a time converted as they
  // are read, the lanes summed as a tree, in the forward and the backward alike (so that the
  // backward recomputes the forward's logit). `keep` receives the converted row (the forward's
  // value) or, with kBackward, z = xd + xs; kBackward also gives <dout, xs> in `value_dot`.
  template <Isa kIsa, bool kBackward>
  FASTGNN_ALWAYS_INLINE acc_t half_logit(const acc_t* FASTGNN_RESTRICT xd,
                                         const feat_t* FASTGNN_RESTRICT xs,
                                         const acc_t* FASTGNN_RESTRICT a,
                                         acc_t* FASTGNN_RESTRICT keep,
                                         const acc_t* FASTGNN_RESTRICT dout,
                                         acc_t* value_dot) const {
    using Vec = RowVec<feat_t, kIsa>;
    using V = typename Vec::type;
    V sum = {}, dsum = {};
    int64_t d = 0;
    for (; d + Vec::kLanes <= dim; d += Vec::kLanes) {
      const V x = Vec::load(xs + d);
      V xdv, av;
      std::memcpy(&xdv, xd + d, sizeof(xdv));
      std::memcpy(&av, a + d, sizeof(av));
      const V v = xdv + x;
      std::memcpy(keep + d, kBackward ? &v : &x, sizeof(v));
      sum += av * (v > 0 ? v : v * slope);
      if constexpr (kBackward) {
        V gv;
        std::memcpy(&gv, dout + d, sizeof(gv));
        dsum += gv * x;
      }
    }
    acc_t s = sum_lanes8(sum), dv = kBackward ? sum_lanes8(dsum) : acc_t(0);
    for (; d < dim; ++d) {
      const acc_t x = to_acc<kIsa>(xs[d]);
      const acc_t v = xd[d] + x;
      keep[d] = kBackward ? v : x;
      s += a[d] * leaky(v);
      if constexpr (kBackward) dv += dout[d] * x;
    }
    if constexpr (kBackward) *value_dot = dv;
    return s;
  }

  // The forward's logit, from the destination's head-h row `xd` (from destination()). With
  // half features it leaves the source row, converted, in `source` for add_value().
  template <Isa kIsa>
  FASTGNN_ALWAYS_INLINE acc_t forward_logit(const acc_t* FASTGNN_RESTRICT xd, int64_t j,
                                            int64_t e, int64_t h,
                                            acc_t* FASTGNN_RESTRICT source) const {
    const feat_t* FASTGNN_RESTRICT xs = x_src + (j * heads + h) * dim;
    const acc_t* FASTGNN_RESTRICT a = att + h * dim;
    const feat_t* FASTGNN_RESTRICT ed = edge.row(e, h);
    constexpr bool kConverts = !std::is_same_v<feat_t, acc_t>;
    using Vec = RowVec<feat_t, kIsa>;
    acc_t s = 0;
    // Half rows only: float32 ones keep the loop below, whose sums the backward's recomputed
    // logits track closely enough (the tree's order put GATv2's fc_dst.bias gradient at 2.15x
    // DGL's float32 error, against the 2x bound of tests/test_dgl_layers.py).
    if constexpr (Vec::kVectorConvert) {
      if (!ed) return half_logit<kIsa, false>(xd, xs, a, source, nullptr, nullptr);
    }
    if (ed) {
#pragma omp simd reduction(+ : s)
      for (int64_t d = 0; d < dim; ++d) {
        const acc_t x = acc_t(xs[d]);
        if constexpr (kConverts) source[d] = x;
        s += a[d] * leaky(xd[d] + x + acc_t(ed[d]));
      }
    } else {
#pragma omp simd reduction(+ : s)
      for (int64_t d = 0; d < dim; ++d) {
        const acc_t x = acc_t(xs[d]);
        if constexpr (kConverts) source[d] = x;
        s += a[d] * leaky(xd[d] + x);
      }
    }
    return s;
  }

  // The forward's out += w * value, after forward_logit (which converted it, for half
  // features).
  template <Isa kIsa>
  FASTGNN_ALWAYS_INLINE void add_value(acc_t* out, acc_t w, int64_t j, int64_t /*e*/, int64_t h,
                                       const acc_t* source, acc_t* /*scratch*/) const {
    if constexpr (std::is_same_v<feat_t, acc_t>) {
      add_scaled_as_acc<kIsa>(out, w, x_src + (j * heads + h) * dim, dim);
    } else {
      add_scaled_as_acc<kIsa>(out, w, source, dim);
    }
  }

  // The backward's members. Destination rows (`xd`, `dout`) come converted, from
  // destination() and the caller; source rows and edge terms convert here as they are read.
  // The backward's logit (leaving z) and <dout, value>, in one pass over the source row.
  template <Isa kIsa>
  FASTGNN_ALWAYS_INLINE acc_t logit_and_dot(const acc_t* FASTGNN_RESTRICT xd, int64_t j,
                                            int64_t e, int64_t h,
                                            const acc_t* FASTGNN_RESTRICT dout,
                                            acc_t* FASTGNN_RESTRICT z,
                                            acc_t* FASTGNN_RESTRICT scratch,
                                            acc_t& value_dot) const {
    const acc_t* FASTGNN_RESTRICT a = att + h * dim;
    const feat_t* ed = edge.row(e, h);
    using Vec = RowVec<feat_t, kIsa>;
    if constexpr (Vec::kVectorConvert) {
      if (!ed) return half_logit<kIsa, true>(xd, x_src + (j * heads + h) * dim, a, z, dout,
                                             &value_dot);
    }
    const acc_t* FASTGNN_RESTRICT xs =
        as_acc<kIsa, acc_t>(x_src + (j * heads + h) * dim, dim, scratch);
    acc_t s = 0, dv = 0;
    if (ed) {
#pragma omp simd reduction(+ : s, dv)
      for (int64_t d = 0; d < dim; ++d) {
        const acc_t v = xd[d] + xs[d] + to_acc<kIsa>(ed[d]);
        z[d] = v;
        s += a[d] * leaky(v);
        dv += dout[d] * xs[d];
      }
    } else {
#pragma omp simd reduction(+ : s, dv)
      for (int64_t d = 0; d < dim; ++d) {
        const acc_t v = xd[d] + xs[d];
        z[d] = v;
        s += a[d] * leaky(v);
        dv += dout[d] * xs[d];
      }
    }
    value_dot = dv;
    return s;
  }

  // Destination side of dLogit = g: x_dst and edge_term get dz, att gets g * LeakyReLU(z), and
  // `signs` what the source side needs of z: which entries are positive (bit d % 32 of word
  // d / 32).
  static constexpr bool kSavesSigns = true;
  FASTGNN_ALWAYS_INLINE void dst_grad(const acc_t* /*xd*/, int64_t h,
                                      const acc_t* FASTGNN_RESTRICT z, acc_t g,
                                      acc_t* FASTGNN_RESTRICT grad_dst,
                                      acc_t* FASTGNN_RESTRICT grad_att,
                                      acc_t* FASTGNN_RESTRICT grad_edge,
                                      uint32_t* FASTGNN_RESTRICT signs) const {
    const acc_t* FASTGNN_RESTRICT a = att + h * dim;
    for (int64_t w = 0; w * 32 < dim; ++w) {
      const int64_t base = w * 32, n = std::min<int64_t>(32, dim - base);
      uint32_t bits = 0;
#pragma omp simd reduction(| : bits)
      for (int64_t d = 0; d < n; ++d) {
        const acc_t zd = z[base + d];
        grad_dst[base + d] += g * a[base + d] * leaky_slope(zd);
        grad_att[base + d] += g * leaky(zd);
        bits |= uint32_t(positive(zd)) << d;
      }
      signs[w] = bits;
    }
    if (grad_edge) {
#pragma omp simd
      for (int64_t d = 0; d < dim; ++d) grad_edge[d] = g * a[d] * leaky_slope(z[d]);
    }
  }

  // Source side: x_src gets dz (its value gradient is added by the caller).
  template <Isa kIsa>
  FASTGNN_ALWAYS_INLINE void src_grad(int64_t /*i*/, int64_t h,
                                      const uint32_t* FASTGNN_RESTRICT signs, acc_t g,
                                      acc_t* FASTGNN_RESTRICT grad_key) const {
    const acc_t* FASTGNN_RESTRICT a = att + h * dim;
    for (int64_t w = 0; w * 32 < dim; ++w) {
      const uint32_t bits = signs[w];
      const int64_t n = std::min<int64_t>(32, dim - w * 32);
      const acc_t* FASTGNN_RESTRICT aw = a + w * 32;
      acc_t* FASTGNN_RESTRICT gw = grad_key + w * 32;
#pragma omp simd
      for (int64_t d = 0; d < n; ++d)
        gw[d] += g * aw[d] * (slope + (acc_t(1) - slope) * acc_t(int32_t((bits >> d) & 1u)));
    }
  }
  // The source side reads no destination features, only grad_out.
  FASTGNN_ALWAYS_INLINE void prefetch_destination(int64_t /*i*/) const {}
};

// Dot product: logit = scale * <q[i], k[j] (+ edge)>; the value is v[j] (+ edge). The
// features (feat_t) are float16/bfloat16 as given in the forward, else acc_t.
template <typename acc_t, typename index_t, typename feat_t = acc_t>
struct DotProduct {
  static constexpr bool kEdgeInValues = true;
  const feat_t* q;
  const feat_t* k;
  const feat_t* v;
  EdgeTerm<feat_t, index_t> edge;
  acc_t scale;
  int64_t heads, dim;

  FASTGNN_ALWAYS_INLINE void prefetch_source(int64_t j) const {
    prefetch_row(k + j * heads * dim, heads * dim);
    prefetch_row(v + j * heads * dim, heads * dim);
  }
  FASTGNN_ALWAYS_INLINE void prefetch_destination(int64_t i) const {
    prefetch_row(q + i * heads * dim, heads * dim);
  }

  // Destination i's queries as acc_t ([H, D]): themselves, or converted into `buffer`.
  template <Isa kIsa>
  FASTGNN_ALWAYS_INLINE const acc_t* destination(int64_t i, acc_t* buffer) const {
    return as_acc<kIsa, acc_t>(q + i * heads * dim, heads * dim, buffer);
  }

  // The forward's logit, from the destination's head-h query `qi` (from destination());
  // `source` takes the key.
  template <Isa kIsa>
  FASTGNN_ALWAYS_INLINE acc_t forward_logit(const acc_t* qi, int64_t j, int64_t e, int64_t h,
                                            acc_t* source) const {
    if (!edge.data) return dot_as_acc<kIsa>(qi, k + (j * heads + h) * dim, dim) * scale;
    return logit_at<kIsa>(qi, j, e, h, source);
  }

  // <qi, k[j] (+ edge)> * scale, leaving the key in `z`.
  template <Isa kIsa>
  FASTGNN_ALWAYS_INLINE acc_t logit_at(const acc_t* FASTGNN_RESTRICT qi, int64_t j, int64_t e,
                                       int64_t h, acc_t* FASTGNN_RESTRICT z) const {
    const feat_t* FASTGNN_RESTRICT kj = k + (j * heads + h) * dim;
    const feat_t* FASTGNN_RESTRICT ed = edge.row(e, h);
    acc_t s = 0;
    if (ed) {
#pragma omp simd reduction(+ : s)
      for (int64_t d = 0; d < dim; ++d) {
        z[d] = to_acc<kIsa>(kj[d]) + to_acc<kIsa>(ed[d]);
        s += qi[d] * z[d];
      }
    } else {  // the forward's sum (dot_as_acc), so that the backward recomputes its logit
      s = dot_as_acc<kIsa, true>(qi, kj, dim, z);
    }
    return s * scale;
  }

  // The forward's out += w * value.
  template <Isa kIsa>
  FASTGNN_ALWAYS_INLINE void add_value(acc_t* out, acc_t w, int64_t j, int64_t e, int64_t h,
                                       const acc_t* /*source*/, acc_t* scratch) const {
    const feat_t* vj = v + (j * heads + h) * dim;
    if (!edge.data) return add_scaled_as_acc<kIsa>(out, w, vj, dim);
    add_scaled_as_acc<kIsa>(out, w, value<kIsa>(j, e, h, scratch), dim);
  }

  // v[j] + edge as acc_t, in `scratch` (or v[j] itself for float features).
  template <Isa kIsa>
  FASTGNN_ALWAYS_INLINE const acc_t* value(int64_t j, int64_t e, int64_t h,
                                           acc_t* FASTGNN_RESTRICT scratch) const {
    const feat_t* FASTGNN_RESTRICT vj = v + (j * heads + h) * dim;
    const feat_t* FASTGNN_RESTRICT ed = edge.row(e, h);
    if (!ed) return as_acc<kIsa, acc_t>(vj, dim, scratch);
#pragma omp simd
    for (int64_t d = 0; d < dim; ++d) scratch[d] = to_acc<kIsa>(vj[d]) + to_acc<kIsa>(ed[d]);
    return scratch;
  }

  // The backward's members. The destination's query (`qi`) and `dout` come converted, from
  // destination() and the caller; keys and values convert here as they are read.
  template <Isa kIsa>
  FASTGNN_ALWAYS_INLINE acc_t logit_and_dot(const acc_t* qi, int64_t j, int64_t e, int64_t h,
                                            const acc_t* dout, acc_t* z, acc_t* scratch,
                                            acc_t& value_dot) const {
    value_dot = edge.data ? dot(dout, value<kIsa>(j, e, h, scratch), dim)
                          : dot_as_acc<kIsa>(dout, v + (j * heads + h) * dim, dim);
    return logit_at<kIsa>(qi, j, e, h, z);
  }

  FASTGNN_ALWAYS_INLINE void dst_grad(const acc_t* qi, int64_t /*h*/, const acc_t* z, acc_t g,
                                      acc_t* grad_q, acc_t* /*att*/, acc_t* grad_edge,
                                      uint32_t* /*signs*/) const {
    const acc_t gs = g * scale;
#pragma omp simd
    for (int64_t d = 0; d < dim; ++d) grad_q[d] += gs * z[d];
    if (grad_edge) {
#pragma omp simd
      for (int64_t d = 0; d < dim; ++d) grad_edge[d] = gs * qi[d];
    }
  }

  static constexpr bool kSavesSigns = false;

  // Source side: k gets g scale q[i] (q[i] converted as it is read).
  template <Isa kIsa>
  FASTGNN_ALWAYS_INLINE void src_grad(int64_t i, int64_t h, const uint32_t* /*signs*/, acc_t g,
                                      acc_t* grad_k) const {
    add_scaled_as_acc<kIsa>(grad_k, g * scale, q + (i * heads + h) * dim, dim);
  }
};

// One thread's buffers for the forward pass.
template <typename acc_t>
struct ForwardScratch {
  std::vector<acc_t> acc, destination, source, value, logit, peak, total;
  ForwardScratch(int64_t heads, int64_t dim)
      : acc(heads * dim), destination(heads * dim), source(heads * dim), value(dim),
        logit(heads), peak(heads), total(heads) {}
};

template <typename acc_t, typename index_t, typename Policy, typename out_t, Isa kIsa>
FASTGNN_ALWAYS_INLINE void forward_rows(const Policy& p, const index_t* rowptr,
                                        const index_t* col, const DropoutSpec& drop, out_t* out,
                                        acc_t* lse, ForwardScratch<acc_t>& scratch,
                                        int64_t begin, int64_t end) {
  const int64_t heads = p.heads, dim = p.dim;
  const acc_t neg_inf = -std::numeric_limits<acc_t>::infinity();
  acc_t* FASTGNN_RESTRICT acc = scratch.acc.data();
  acc_t* peak = scratch.peak.data();
  acc_t* total = scratch.total.data();
  acc_t* logits = scratch.logit.data();
  acc_t* source = scratch.source.data();
  acc_t* value = scratch.value.data();
  for (int64_t i = begin; i < end; ++i) {
    std::fill(acc, acc + heads * dim, acc_t(0));
    std::fill(peak, peak + heads, neg_inf);
    std::fill(total, total + heads, acc_t(0));
    const acc_t* dst = p.template destination<kIsa>(i, scratch.destination.data());
    for (index_t e = rowptr[i]; e < rowptr[i + 1]; ++e) {
      const int64_t j = col[e];
      if (e + kPrefetchAhead < rowptr[i + 1]) p.prefetch_source(col[e + kPrefetchAhead]);
      // Every head's logit before any exp: independent chains the core overlaps, where one
      // head at a time waited for its logit, then its exp call, then the next head's logit.
      for (int64_t h = 0; h < heads; ++h)
        logits[h] = p.template forward_logit<kIsa>(dst + h * dim, j, e, h, source + h * dim);
      for (int64_t h = 0; h < heads; ++h) {
        const acc_t logit = logits[h];
        acc_t* FASTGNN_RESTRICT a = acc + h * dim;
        if (logit > peak[h]) {  // new running max: rescale what was accumulated so far
          const acc_t corr = std::exp(peak[h] - logit);
          total[h] *= corr;
#pragma omp simd
          for (int64_t d = 0; d < dim; ++d) a[d] *= corr;
          peak[h] = logit;
        }
        const acc_t w = std::exp(logit - peak[h]);
        total[h] += w;
        const acc_t wc = w * drop.factor<acc_t>(e, h);
        if (wc != 0) p.template add_value<kIsa>(a, wc, j, e, h, source + h * dim, value);
      }
    }
    for (int64_t h = 0; h < heads; ++h) {
      out_t* o = out + (i * heads + h) * dim;
      acc_t* a = acc + h * dim;
      const acc_t inv = total[h] > 0 ? acc_t(1) / total[h] : acc_t(0);
      for (int64_t d = 0; d < dim; ++d) a[d] *= inv;
      store_as<kIsa>(a, dim, o);
      lse[i * heads + h] = total[h] > 0 ? peak[h] + std::log(total[h]) : neg_inf;
    }
  }
}

constexpr int64_t kRowChunk = 16;  // rows a thread takes at a time

template <typename acc_t, typename index_t, typename Policy, typename out_t>
void attention_forward(const Policy& p, const index_t* rowptr, const index_t* col, int64_t rows,
                       const DropoutSpec& drop, out_t* out, acc_t* lse) {
  const int64_t chunks = (rows + kRowChunk - 1) / kRowChunk;
#pragma omp parallel num_threads(num_threads())
  {
    ForwardScratch<acc_t> scratch(p.heads, p.dim);
#pragma omp for schedule(dynamic, 1)
    for (int64_t c = 0; c < chunks; ++c) {
      on_avx2_or_baseline<forward_rows<acc_t, index_t, Policy, out_t, Isa::kAvx2>,
                          forward_rows<acc_t, index_t, Policy, out_t, Isa::kBaseline>>(
          p, rowptr, col, drop, out, lse, scratch, c * kRowChunk,
          std::min(rows, (c + 1) * kRowChunk));
    }
  }
}

// Per-destination statistics, gradient outputs, and what the destination pass leaves per
// (CSR position, head) for the source pass. grad_out is in the features' dtype (feat_t).
template <typename acc_t, typename feat_t>
struct BackwardBuffers {
  const feat_t* grad_out;  // [T, H, D]
  const acc_t* lse;       // [T, H]
  const acc_t* delta;     // [T, H]: <grad_out[i], out[i]> = sum_j alpha_ij c_ij <dOut_i, v_j>
  acc_t* grad_dst;        // x_dst or q, [T, H, D]
  acc_t* grad_key;        // x_src or k, [S, H, D]
  acc_t* grad_value;      // x_src or v, [S, H, D]
  double* grad_att;       // [chunks, H, D] per-chunk partials (GATv2), or null
  acc_t* grad_edge;       // [E, H, D] input edge order, or null
  // What the destination pass leaves per (edge, head) for the source pass, one record each
  // (so the source pass, which visits the edges in transposed order, misses one cache line
  // an edge rather than one per array): dLogit, alpha c, then for policies that need it the
  // signs of z, sign_words words of one bit per feature.
  unsigned char* saved;
  int64_t saved_bytes;  // a record's size
  int64_t sign_words;

  FASTGNN_ALWAYS_INLINE acc_t* record(int64_t e, int64_t heads, int64_t h) const {
    return reinterpret_cast<acc_t*>(saved + (e * heads + h) * saved_bytes);
  }
  FASTGNN_ALWAYS_INLINE uint32_t* signs(acc_t* record) const {
    return reinterpret_cast<uint32_t*>(record + 2);
  }
};

// A record's size: two acc_t and the sign words, padded to keep the next record's acc_t
// aligned.
template <typename acc_t>
int64_t saved_record_bytes(int64_t sign_words) {
  const int64_t signs = sign_words * int64_t(sizeof(uint32_t));
  return 2 * int64_t(sizeof(acc_t)) + (signs + sizeof(acc_t) - 1) / sizeof(acc_t) * sizeof(acc_t);
}

// One thread's buffers. A row's gradients sum in double, then round once: a destination's
// terms nearly cancel (sum_j alpha_ij (<dOut_i, v_j> - delta_i) = 0), so float sums over a
// whole row lose accuracy. The terms of up to kBlockEdges edges are added in acc_t first (at
// the features' vector width, no conversions), each block's sum then joins the row's doubles.
// `destination` and `dout` hold a destination's features and grad_out row as acc_t (half ones
// converted once a row).
template <typename acc_t>
struct BackwardScratch {
  std::vector<acc_t> z, value, destination, dout, block_dst, block_att, block_key, block_value;
  std::vector<double> row_dst, row_att, row_key, row_value, alpha_sum;
  BackwardScratch(int64_t heads, int64_t dim)
      : z(dim), value(dim), destination(heads * dim), dout(heads * dim),
        block_dst(heads * dim), block_att(heads * dim), block_key(heads * dim),
        block_value(heads * dim), row_dst(heads * dim), row_att(heads * dim),
        row_key(heads * dim), row_value(heads * dim), alpha_sum(heads) {}
};

constexpr int64_t kBlockEdges = 16;

// Adds a block's sums into a row's double sums and clears the block.
template <typename acc_t>
FASTGNN_ALWAYS_INLINE void add_block(std::vector<acc_t>& block, std::vector<double>& sums) {
#pragma omp simd
  for (size_t k = 0; k < sums.size(); ++k) sums[k] += double(block[k]);
  std::fill(block.begin(), block.end(), acc_t(0));
}

// Adds a row's double sums into a gradient buffer and clears them.
template <typename acc_t>
FASTGNN_ALWAYS_INLINE void flush_row(std::vector<double>& sums, acc_t* out) {
#pragma omp simd
  for (size_t k = 0; k < sums.size(); ++k) out[k] += acc_t(sums[k]);
  std::fill(sums.begin(), sums.end(), 0.0);
}

// The saved lse is rounded to acc_t, so a row's recomputed alphas sum to 1 + O(|lse| eps)
// rather than 1, an error that dominated the x_src bias gradient. Everything the row gave is
// linear in its alphas, so dividing it by their sum (in double) removes that error: the row's
// x_dst and att sums, its saved dLogits and alpha c, and its edge-term gradients.
template <typename acc_t, typename index_t, typename Policy, typename feat_t>
FASTGNN_ALWAYS_INLINE void normalize_row(const Policy& p, const index_t* rowptr, int64_t i,
                                         const BackwardBuffers<acc_t, feat_t>& b,
                                         BackwardScratch<acc_t>& s, double* att_part) {
  const int64_t heads = p.heads, dim = p.dim;
  for (int64_t h = 0; h < heads; ++h) {
    const double inv = s.alpha_sum[h] > 0 ? 1.0 / s.alpha_sum[h] : 0.0;
    s.alpha_sum[h] = inv;  // from here on, the factor the row's edges get
    double* dst = s.row_dst.data() + h * dim;
    double* att = s.row_att.data() + h * dim;
#pragma omp simd
    for (int64_t d = 0; d < dim; ++d) dst[d] *= inv;
    if (att_part) {
#pragma omp simd
      for (int64_t d = 0; d < dim; ++d) att_part[h * dim + d] += att[d] * inv;
    }
    std::fill(att, att + dim, 0.0);
  }
  for (index_t e = rowptr[i]; e < rowptr[i + 1]; ++e) {
    for (int64_t h = 0; h < heads; ++h) {
      const double inv = s.alpha_sum[h];
      acc_t* saved = b.record(e, heads, h);
      saved[0] = acc_t(saved[0] * inv);
      saved[1] = acc_t(saved[1] * inv);
      if (b.grad_edge) {
        acc_t* ged = b.grad_edge + p.edge.at(e, h);
        for (int64_t d = 0; d < dim; ++d) ged[d] = acc_t(ged[d] * inv);
      }
    }
  }
}

// Destination pass over CSR rows [begin, end): recomputes each in-edge's logit from the saved
// log-sum-exp, gives the destination-side gradients, and saves dLogit, alpha c and the signs
// for the source pass. att_part receives this chunk's share of the att gradient, or is null.
// kIsa: the clone it is compiled for (half rows convert as they are read).
template <typename acc_t, typename index_t, typename Policy, typename feat_t, Isa kIsa>
FASTGNN_ALWAYS_INLINE void destination_rows(const Policy& p, const index_t* rowptr,
                                            const index_t* col, const DropoutSpec& drop,
                                            const BackwardBuffers<acc_t, feat_t>& b,
                                            BackwardScratch<acc_t>& s, double* att_part,
                                            int64_t begin, int64_t end) {
  const int64_t heads = p.heads, dim = p.dim;
  for (int64_t i = begin; i < end; ++i) {
    std::fill(s.alpha_sum.begin(), s.alpha_sum.end(), 0.0);
    const acc_t* dst = p.template destination<kIsa>(i, s.destination.data());
    const acc_t* dout_row =
        as_acc<kIsa, acc_t>(b.grad_out + i * heads * dim, heads * dim, s.dout.data());
    for (index_t e = rowptr[i]; e < rowptr[i + 1]; ++e) {
      const int64_t j = col[e];
      if (e + kPrefetchAhead < rowptr[i + 1]) p.prefetch_source(col[e + kPrefetchAhead]);
      for (int64_t h = 0; h < heads; ++h) {
        const acc_t* dout = dout_row + h * dim;
        acc_t dval;
        const acc_t logit = p.template logit_and_dot<kIsa>(dst + h * dim, j, e, h, dout,
                                                           s.z.data(), s.value.data(), dval);
        // alpha, alpha c and dLogit in double, kept so for both passes: dLogit's two terms
        // nearly cancel, and so do a destination's dLogits (their sum is 0 without dropout).
        const double alpha = std::exp(double(logit) - double(b.lse[i * heads + h]));
        s.alpha_sum[h] += alpha;
        const double wc = alpha * drop.factor<double>(e, h);
        // a dropped edge's value takes no part (not even a non-finite one)
        const double g =
            (wc != 0 ? wc * double(dval) : 0.0) - alpha * double(b.delta[i * heads + h]);
        acc_t* saved = b.record(e, heads, h);
        saved[0] = acc_t(g);
        saved[1] = acc_t(wc);
        acc_t* ged = b.grad_edge ? b.grad_edge + p.edge.at(e, h) : nullptr;
        p.dst_grad(dst + h * dim, h, s.z.data(), acc_t(g), s.block_dst.data() + h * dim,
                   s.block_att.data() + h * dim, ged,
                   Policy::kSavesSigns ? b.signs(saved) : nullptr);
        if (Policy::kEdgeInValues && ged) {
#pragma omp simd
          for (int64_t d = 0; d < dim; ++d) ged[d] += wc * dout[d];
        }
      }
      if ((e + 1 - rowptr[i]) % kBlockEdges == 0 || e + 1 == rowptr[i + 1]) {
        add_block(s.block_dst, s.row_dst);
        add_block(s.block_att, s.row_att);
      }
    }
    normalize_row(p, rowptr, i, b, s, att_part);
    flush_row(s.row_dst, b.grad_dst + i * heads * dim);
  }
}

// Source pass over the rows [begin, end) of the transposed CSR (t_rowptr, t_col; the CSR
// itself for a symmetric graph): row j's out-edge j -> i sits at CSR position t_perm[q], and
// its saved dLogit and alpha c give the key and value gradients of j, pulled from the
// destinations (no atomics). kIsa: as in destination_rows.
template <typename acc_t, typename index_t, typename Policy, typename feat_t, Isa kIsa>
FASTGNN_ALWAYS_INLINE void source_rows(const Policy& p, const index_t* t_rowptr,
                                       const index_t* t_col, const index_t* t_perm,
                                       const BackwardBuffers<acc_t, feat_t>& b,
                                       BackwardScratch<acc_t>& s, int64_t begin, int64_t end) {
  const int64_t heads = p.heads, dim = p.dim;
  for (int64_t j = begin; j < end; ++j) {
    for (index_t q = t_rowptr[j]; q < t_rowptr[j + 1]; ++q) {
      if (q + kPrefetchAhead < t_rowptr[j + 1]) {
        const int64_t next = t_col[q + kPrefetchAhead];
        p.prefetch_destination(next);
        prefetch_row(b.grad_out + next * heads * dim, heads * dim);
        prefetch_row(reinterpret_cast<const unsigned char*>(
                         b.record(t_perm[q + kPrefetchAhead], heads, 0)),
                     heads * b.saved_bytes);
      }
      const int64_t i = t_col[q], e = t_perm[q];
      for (int64_t h = 0; h < heads; ++h) {
        acc_t* saved = b.record(e, heads, h);
        p.template src_grad<kIsa>(i, h, Policy::kSavesSigns ? b.signs(saved) : nullptr,
                                  saved[0], s.block_key.data() + h * dim);
        const acc_t wc = saved[1];
        if (wc != 0) {
          add_scaled_as_acc<kIsa>(s.block_value.data() + h * dim, wc,
                                  b.grad_out + (i * heads + h) * dim, dim);
        }
      }
      if ((q + 1 - t_rowptr[j]) % kBlockEdges == 0 || q + 1 == t_rowptr[j + 1]) {
        add_block(s.block_key, s.row_key);
        add_block(s.block_value, s.row_value);
      }
    }
    if (b.grad_key == b.grad_value) {  // GATv2: one x_src gradient, rounded once
      for (int64_t k = 0; k < heads * dim; ++k) s.row_key[k] += s.row_value[k];
      std::fill(s.row_value.begin(), s.row_value.end(), 0.0);
      flush_row(s.row_key, b.grad_key + j * heads * dim);
    } else {
      flush_row(s.row_key, b.grad_key + j * heads * dim);
      flush_row(s.row_value, b.grad_value + j * heads * dim);
    }
  }
}

// The backward: the destination pass over the CSR (unless another one ran), then the source
// pass over its transpose. Each row is written by one thread, so the result is the same for
// any thread count.
template <typename acc_t, typename index_t, typename Policy, typename feat_t>
void attention_backward(const Policy& p, const index_t* rowptr, const index_t* col, int64_t rows,
                        const index_t* t_rowptr, const index_t* t_col, const index_t* t_perm,
                        int64_t sources, int64_t chunk_rows, const DropoutSpec& drop,
                        const BackwardBuffers<acc_t, feat_t>& b, bool destination_pass) {
  const int64_t chunks = destination_pass ? (rows + chunk_rows - 1) / chunk_rows : 0;
  const int64_t source_chunks = (sources + kRowChunk - 1) / kRowChunk;
#pragma omp parallel num_threads(num_threads())
  {
    BackwardScratch<acc_t> scratch(p.heads, p.dim);
#pragma omp for schedule(dynamic, 1)
    for (int64_t c = 0; c < chunks; ++c) {
      double* att_part = b.grad_att ? b.grad_att + c * p.heads * p.dim : nullptr;
      on_avx2_or_baseline<destination_rows<acc_t, index_t, Policy, feat_t, Isa::kAvx2>,
                          destination_rows<acc_t, index_t, Policy, feat_t, Isa::kBaseline>>(
          p, rowptr, col, drop, b, scratch, att_part, c * chunk_rows,
          std::min(rows, (c + 1) * chunk_rows));
    }  // the implicit barrier: every edge's dLogit is saved before the source pass reads it
#pragma omp for schedule(dynamic, 1)
    for (int64_t c = 0; c < source_chunks; ++c) {
      on_avx2_or_baseline<source_rows<acc_t, index_t, Policy, feat_t, Isa::kAvx2>,
                          source_rows<acc_t, index_t, Policy, feat_t, Isa::kBaseline>>(
          p, t_rowptr, t_col, t_perm, b, scratch, c * kRowChunk,
          std::min(sources, (c + 1) * kRowChunk));
    }
  }
}

// ---- torch-facing glue ---------------------------------------------------------------------

struct Inputs {
  at::Tensor rowptr, col, edge_perm, edge_term;  // edge_term in `read`
  at::ScalarType acc;
  at::ScalarType read;  // what the kernels read features in: acc, or their float16/bfloat16
  int64_t rows, heads, dim;
};

// read_half: the caller's kernels read float16/bfloat16 features as they are, which they then
// do when every feature input (`others` too) has the source side's dtype.
Inputs prepare(const at::Tensor& rowptr, const at::Tensor& col,
               const c10::optional<at::Tensor>& edge_perm, const at::Tensor& dst_side,
               const at::Tensor& src_side, const c10::optional<at::Tensor>& edge_term,
               const char* op, bool read_half = false,
               std::initializer_list<at::Tensor> others = {}) {
  check_csr(rowptr, col, op);
  TORCH_CHECK(dst_side.dim() == 3 && src_side.dim() == 3 &&
                  dst_side.size(1) == src_side.size(1) && dst_side.size(2) == src_side.size(2),
              op, ": features must be [N, H, D] with matching H and D");
  const int64_t rows = rowptr.numel() - 1;
  TORCH_CHECK(dst_side.size(0) == rows, op, ": destination features need one row per CSR row");
  TORCH_CHECK(dst_side.scalar_type() == src_side.scalar_type(), op, ": feature dtypes differ");
  Inputs in;
  in.rowptr = rowptr;
  in.col = col;
  in.acc = dst_side.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const at::ScalarType features = src_side.scalar_type();
  bool same = read_half && (!edge_term.has_value() || edge_term->scalar_type() == features);
  for (const auto& t : others) same = same && t.scalar_type() == features;
  in.read = read_type(features, same, in.acc);
  in.rows = rows;
  in.heads = src_side.size(1);
  in.dim = src_side.size(2);
  if (edge_perm.has_value()) {
    TORCH_CHECK(edge_perm->scalar_type() == col.scalar_type() && edge_perm->numel() == col.numel(),
                op, ": edge_perm must match col");
    in.edge_perm = edge_perm->contiguous();
  }
  if (edge_term.has_value()) {
    TORCH_CHECK(edge_term->dim() == 3 && edge_term->size(0) == col.numel() &&
                    edge_term->size(1) == in.heads && edge_term->size(2) == in.dim,
                op, ": edge_term must be [E, H, D]");
    in.edge_term = as_type(*edge_term, in.read);
  }
  return in;
}

template <typename feat_t, typename index_t>
EdgeTerm<feat_t, index_t> edge_view(const Inputs& in) {
  return {in.edge_term.defined() ? in.edge_term.data_ptr<feat_t>() : nullptr,
          in.edge_perm.defined() ? in.edge_perm.data_ptr<index_t>() : nullptr, in.heads, in.dim};
}

// Calls f(acc_t{}, index_t{}) for the inputs' accumulation and index types.
template <typename F>
void dispatch(const Inputs& in, const char* op, F&& f) {
  FASTGNN_DISPATCH_INDEX(in.col.scalar_type(), op, [&] {
    if (in.acc == at::kDouble)
      f(double{}, index_t{});
    else
      f(float{}, index_t{});
  });
}

// make_policy(acc_t{}, index_t{}, feat_t{}) gives the policy over features in `in.read`
// (feat_t: acc_t, or the float16/bfloat16 type); the output comes in that dtype, converted to
// out_type where it differs.
template <typename MakePolicy>
std::tuple<at::Tensor, at::Tensor> run_forward(const Inputs& in, at::ScalarType out_type,
                                               const DropoutSpec& drop, const char* op,
                                               MakePolicy&& make_policy) {
  auto out = at::empty({in.rows, in.heads, in.dim}, at::TensorOptions().dtype(in.read));
  auto lse = at::empty({in.rows, in.heads}, at::TensorOptions().dtype(in.acc));
  dispatch(in, op, [&](auto a, auto i) {
    using acc_t = decltype(a);
    using index_t = decltype(i);
    dispatch_read<acc_t>(in.read, [&](auto f) {
      using feat_t = decltype(f);
      attention_forward<acc_t, index_t>(make_policy(acc_t{}, index_t{}, feat_t{}),
                                        in.rowptr.data_ptr<index_t>(), in.col.data_ptr<index_t>(),
                                        in.rows, drop, out.data_ptr<feat_t>(),
                                        lse.data_ptr<acc_t>());
    });
  });
  return {as_type(out, out_type), lse};
}

// Gradient buffers in the accumulation type; key and value alias for GATv2 (both x_src).
struct Grads {
  at::Tensor dst, key, value, att_partial, edge;
};

// The Graph Transformer's gradient buffers of q, k and v, zeroed, in the accumulation dtype.
Grads dot_product_grads(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                        at::ScalarType acc) {
  const auto opts = at::TensorOptions().dtype(acc);
  Grads grads;
  grads.dst = at::zeros(q.sizes(), opts);
  grads.key = at::zeros(k.sizes(), opts);
  grads.value = at::zeros(v.sizes(), opts);
  return grads;
}

// make_policy(acc_t{}, index_t{}, feat_t{}) gives the policy over features in `in.read`, which
// grad_out is read in too. destination: the Graph Transformer's destination pass to run
// instead of the CSR one, or null (it takes its buffers in the accumulation dtype).
template <typename MakePolicy>
void run_backward(const Inputs& in, const at::Tensor& grad_out, const at::Tensor& out,
                  const at::Tensor& lse, const c10::optional<at::Tensor>& t_rowptr,
                  const c10::optional<at::Tensor>& t_col, const at::Tensor& t_perm,
                  int64_t num_src, const DropoutSpec& drop, Grads& grads, const char* op,
                  MakePolicy&& make_policy, const DestinationPass* destination = nullptr) {
  TORCH_CHECK(t_rowptr.has_value() == t_col.has_value(), op,
              ": give both t_rowptr and t_col, or neither (symmetric graph)");
  TORCH_CHECK(t_perm.numel() == in.col.numel() && t_perm.scalar_type() == in.col.scalar_type(),
              op, ": t_perm must have one entry per edge and the index dtype");
  const bool symmetric = !t_rowptr.has_value();
  TORCH_CHECK(!symmetric || num_src == in.rows, op, ": a symmetric graph must be square");
  if (!symmetric) check_csr(*t_rowptr, *t_col, op);
  TORCH_CHECK(!destination || in.read == in.acc, op,
              ": a destination pass takes features in the accumulation dtype");
  auto gout = as_type(grad_out, in.read);
  auto lse_c = lse.to(in.acc).contiguous();
  const auto delta = attention_delta_cpu(gout, out);
  auto t_perm_c = t_perm.contiguous();
  const int64_t chunk_rows = std::max<int64_t>(64, (in.rows + 511) / 512);
  dispatch(in, op, [&](auto a, auto i) {
    dispatch_read<decltype(a)>(in.read, [&](auto f) {
      using acc_t = decltype(a);
      using index_t = decltype(i);
      using feat_t = decltype(f);
      const auto policy = make_policy(acc_t{}, index_t{}, feat_t{});
      using Policy = std::decay_t<decltype(policy)>;
      const int64_t sign_words = Policy::kSavesSigns ? (in.dim + 31) / 32 : 0;
      const int64_t record_bytes = saved_record_bytes<acc_t>(sign_words);
      auto saved = at::empty({in.col.numel() * in.heads * record_bytes},
                             at::TensorOptions().dtype(at::kByte));
      auto ptr = [](at::Tensor& t) { return t.defined() ? t.data_ptr<acc_t>() : nullptr; };
      double* att = grads.att_partial.defined() ? grads.att_partial.data_ptr<double>() : nullptr;
      const BackwardBuffers<acc_t, feat_t> bufs{
          gout.data_ptr<feat_t>(), lse_c.data_ptr<acc_t>(), delta.data_ptr<acc_t>(),
          ptr(grads.dst), ptr(grads.key), ptr(grads.value), att, ptr(grads.edge),
          saved.data_ptr<uint8_t>(), record_bytes, sign_words};
      if (destination) {  // a Graph Transformer record is its two acc_t: [E, H, 2]
        TORCH_CHECK(sign_words == 0, op, ": this destination pass saves no signs");
        DestinationBuffers buffers;  // the features: the caller's to add
        buffers.grad_out = gout;
        buffers.lse = lse_c;
        buffers.delta = delta;
        buffers.grad_q = grads.dst;
        buffers.scores = saved.view(in.acc).view({in.col.numel(), in.heads, 2});
        (*destination)(buffers);
      }
      const index_t* rowptr = in.rowptr.data_ptr<index_t>();
      const index_t* col = in.col.data_ptr<index_t>();
      attention_backward<acc_t, index_t>(
          policy, rowptr, col, in.rows, symmetric ? rowptr : t_rowptr->data_ptr<index_t>(),
          symmetric ? col : t_col->data_ptr<index_t>(), t_perm_c.data_ptr<index_t>(), num_src,
          chunk_rows, drop, bufs, destination == nullptr);
    });
  });
}

int64_t att_chunks(int64_t rows) {
  const int64_t chunk_rows = std::max<int64_t>(64, (rows + 511) / 512);
  return std::max<int64_t>(1, (rows + chunk_rows - 1) / chunk_rows);
}

at::Tensor edge_grad_buffer(const Inputs& in) {
  return in.edge_term.defined() ? at::zeros({in.col.numel(), in.heads, in.dim},
                                            at::TensorOptions().dtype(in.acc))
                                : at::empty({0}, at::TensorOptions().dtype(in.acc));
}

std::tuple<at::Tensor, at::Tensor> gatv2_forward_cpu(
    const at::Tensor& rowptr, const at::Tensor& col, const c10::optional<at::Tensor>& edge_perm,
    const c10::optional<at::Tensor>& /*t_rowptr*/, const c10::optional<at::Tensor>& /*t_col*/,
    const c10::optional<at::Tensor>& /*t_perm*/,
    const at::Tensor& x_dst, const at::Tensor& x_src, const at::Tensor& att,
    const c10::optional<at::Tensor>& edge_term, double negative_slope, double dropout,
    int64_t seed, const c10::optional<at::Tensor>& seed_tensor, int64_t offset,
    const c10::optional<at::Tensor>& /*light_rows*/,
    const c10::optional<at::Tensor>& /*heavy_rows*/, int64_t /*heavy_warps*/) {
  const Inputs in = prepare(rowptr, col, edge_perm, x_dst, x_src, edge_term, "gatv2_forward",
                            true, {att});
  TORCH_CHECK(att.dim() == 2 && att.size(0) == in.heads && att.size(1) == in.dim,
              "gatv2_forward: att must be [H, D]");
  auto xd = as_type(x_dst, in.read), xs = as_type(x_src, in.read), a = as_type(att, in.read);
  const DropoutSpec drop = attention_dropout(dropout, seed, seed_tensor, offset, in.heads,
                                             x_src.device(), "gatv2_forward");
  std::vector<float> att_float;  // att for half features, converted here (H x D values)
  return run_forward(in, x_src.scalar_type(), drop, "gatv2_forward",
                           [&](auto acc, auto idx, auto feat) {
    using acc_t = decltype(acc);
    using index_t = decltype(idx);
    using feat_t = decltype(feat);
    const acc_t* att_acc;
    if constexpr (std::is_same_v<feat_t, acc_t>) {
      att_acc = a.data_ptr<acc_t>();
    } else {
      const feat_t* given = a.data_ptr<feat_t>();
      att_float.assign(given, given + a.numel());
      att_acc = att_float.data();
    }
    return Gatv2<acc_t, index_t, feat_t>{xd.data_ptr<feat_t>(), xs.data_ptr<feat_t>(), att_acc,
                                         edge_view<feat_t, index_t>(in), acc_t(negative_slope),
                                         in.heads, in.dim};
  });
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> gatv2_backward_cpu(
    const at::Tensor& grad_out, const at::Tensor& out, const at::Tensor& lse,
    const at::Tensor& rowptr, const at::Tensor& col, const c10::optional<at::Tensor>& edge_perm,
    const c10::optional<at::Tensor>& t_rowptr, const c10::optional<at::Tensor>& t_col,
    const at::Tensor& t_perm, const at::Tensor& x_dst, const at::Tensor& x_src,
    const at::Tensor& att, const c10::optional<at::Tensor>& edge_term, double negative_slope,
    double dropout, int64_t seed, const c10::optional<at::Tensor>& seed_tensor, int64_t offset,
    const c10::optional<at::Tensor>& /*light*/, const c10::optional<at::Tensor>& /*heavy*/,
    int64_t /*heavy_warps*/) {
  const Inputs in = prepare(rowptr, col, edge_perm, x_dst, x_src, edge_term, "gatv2_backward",
                            true, {att});
  const DropoutSpec drop = attention_dropout(dropout, seed, seed_tensor, offset, in.heads,
                                             x_src.device(), "gatv2_backward");
  auto xd = as_type(x_dst, in.read), xs = as_type(x_src, in.read), a = as_type(att, in.acc);
  auto opts = at::TensorOptions().dtype(in.acc);
  Grads grads;
  grads.dst = at::zeros(xd.sizes(), opts);
  grads.key = grads.value = at::zeros(xs.sizes(), opts);
  grads.att_partial =  // summed in double, like every row's gradients
      at::zeros({att_chunks(in.rows), in.heads, in.dim}, opts.dtype(at::kDouble));
  grads.edge = edge_grad_buffer(in);
  run_backward(in, grad_out, out, lse, t_rowptr, t_col, t_perm, x_src.size(0), drop, grads,
               "gatv2_backward", [&](auto acc, auto idx, auto feat) {
                 using acc_t = decltype(acc);
                 using index_t = decltype(idx);
                 using feat_t = decltype(feat);
                 return Gatv2<acc_t, index_t, feat_t>{
                     xd.data_ptr<feat_t>(), xs.data_ptr<feat_t>(), a.data_ptr<acc_t>(),
                     edge_view<feat_t, index_t>(in), acc_t(negative_slope), in.heads, in.dim};
               });
  const auto type = x_src.scalar_type();
  return {grads.dst.to(type), grads.key.to(type), grads.att_partial.sum(0).to(att.scalar_type()),
          grads.edge.to(edge_term.has_value() ? edge_term->scalar_type() : type)};
}

std::tuple<at::Tensor, at::Tensor> graph_attention_forward_cpu(
    const at::Tensor& rowptr, const at::Tensor& col, const c10::optional<at::Tensor>& edge_perm,
    const c10::optional<at::Tensor>& /*t_rowptr*/, const c10::optional<at::Tensor>& /*t_col*/,
    const c10::optional<at::Tensor>& /*t_perm*/,
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const c10::optional<at::Tensor>& edge_term, double scale, double dropout, int64_t seed,
    const c10::optional<at::Tensor>& seed_tensor, int64_t offset,
    const c10::optional<at::Tensor>& /*light_rows*/,
    const c10::optional<at::Tensor>& /*heavy_rows*/, int64_t /*heavy_warps*/) {
  const Inputs in = prepare(rowptr, col, edge_perm, q, k, edge_term, "graph_attention_forward",
                            true, {v});
  TORCH_CHECK(v.sizes() == k.sizes() && v.scalar_type() == k.scalar_type(),
              "graph_attention_forward: v must match k");
  auto qc = as_type(q, in.read), kc = as_type(k, in.read), vc = as_type(v, in.read);
  const DropoutSpec drop = attention_dropout(dropout, seed, seed_tensor, offset, in.heads,
                                             q.device(), "graph_attention_forward");
  return run_forward(in, v.scalar_type(), drop, "graph_attention_forward",
                           [&](auto acc, auto idx, auto feat) {
                             using acc_t = decltype(acc);
                             using index_t = decltype(idx);
                             using feat_t = decltype(feat);
                             return DotProduct<acc_t, index_t, feat_t>{
                                 qc.data_ptr<feat_t>(), kc.data_ptr<feat_t>(),
                                 vc.data_ptr<feat_t>(), edge_view<feat_t, index_t>(in),
                                 acc_t(scale), in.heads, in.dim};
                           });
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> graph_attention_backward_cpu(
    const at::Tensor& grad_out, const at::Tensor& out, const at::Tensor& lse,
    const at::Tensor& rowptr, const at::Tensor& col, const c10::optional<at::Tensor>& edge_perm,
    const c10::optional<at::Tensor>& t_rowptr, const c10::optional<at::Tensor>& t_col,
    const at::Tensor& t_perm, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const c10::optional<at::Tensor>& edge_term, double scale, double dropout, int64_t seed,
    const c10::optional<at::Tensor>& seed_tensor, int64_t offset,
    const c10::optional<at::Tensor>& /*light*/, const c10::optional<at::Tensor>& /*heavy*/,
    int64_t /*heavy_warps*/) {
  const Inputs in = prepare(rowptr, col, edge_perm, q, k, edge_term, "graph_attention_backward",
                            true, {v});
  const DropoutSpec drop = attention_dropout(dropout, seed, seed_tensor, offset, in.heads,
                                             q.device(), "graph_attention_backward");
  auto qc = as_type(q, in.read), kc = as_type(k, in.read), vc = as_type(v, in.read);
  Grads grads = dot_product_grads(qc, kc, vc, in.acc);
  grads.edge = edge_grad_buffer(in);
  run_backward(in, grad_out, out, lse, t_rowptr, t_col, t_perm, k.size(0), drop, grads,
               "graph_attention_backward", [&](auto acc, auto idx, auto feat) {
                 using acc_t = decltype(acc);
                 using index_t = decltype(idx);
                 using feat_t = decltype(feat);
                 return DotProduct<acc_t, index_t, feat_t>{
                     qc.data_ptr<feat_t>(), kc.data_ptr<feat_t>(), vc.data_ptr<feat_t>(),
                     edge_view<feat_t, index_t>(in), acc_t(scale), in.heads, in.dim};
               });
  return {grads.dst.to(q.scalar_type()), grads.key.to(k.scalar_type()),
          grads.value.to(v.scalar_type()),
          grads.edge.to(edge_term.has_value() ? edge_term->scalar_type() : v.scalar_type())};
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor> graph_attention_backward_from(
    const DestinationPass& destination, const at::Tensor& grad_out, const at::Tensor& out,
    const at::Tensor& lse, const at::Tensor& rowptr, const at::Tensor& col,
    const c10::optional<at::Tensor>& t_rowptr, const c10::optional<at::Tensor>& t_col,
    const at::Tensor& t_perm, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    double scale, const char* op) {
  const Inputs in = prepare(rowptr, col, c10::nullopt, q, k, c10::nullopt, op);
  TORCH_CHECK(v.sizes() == k.sizes() && v.scalar_type() == k.scalar_type(), op,
              ": v must match k");
  auto qc = as_type(q, in.acc), kc = as_type(k, in.acc), vc = as_type(v, in.acc);
  Grads grads = dot_product_grads(qc, kc, vc, in.acc);
  const DestinationPass with_features = [&](const DestinationBuffers& buffers) {
    DestinationBuffers full = buffers;
    full.q = qc;
    full.k = kc;
    full.v = vc;
    destination(full);
  };
  const DropoutSpec none = make_dropout(0.0, 0, nullptr, 0, in.heads);
  run_backward(
      in, grad_out, out, lse, t_rowptr, t_col, t_perm, k.size(0), none, grads, op,
      [&](auto acc, auto idx, auto /*feat: acc_t here*/) {
        using acc_t = decltype(acc);
        using index_t = decltype(idx);
        return DotProduct<acc_t, index_t>{qc.data_ptr<acc_t>(), kc.data_ptr<acc_t>(),
                                          vc.data_ptr<acc_t>(), edge_view<acc_t, index_t>(in),
                                          acc_t(scale), in.heads, in.dim};
      },
      &with_features);
  return {grads.dst.to(q.scalar_type()), grads.key.to(k.scalar_type()),
          grads.value.to(v.scalar_type())};
}

namespace {

at::Tensor attention_dropout_mask_cpu(const at::Tensor& col, int64_t heads, double dropout,
                                      int64_t seed, int64_t offset) {
  const DropoutSpec drop = make_dropout(dropout, seed, nullptr, offset, heads);
  auto mask = at::empty({col.numel(), heads}, col.options().dtype(at::kBool));
  bool* m = mask.data_ptr<bool>();
  const int64_t total = col.numel() * heads;
#pragma omp parallel for num_threads(num_threads()) schedule(static)
  for (int64_t k = 0; k < total; ++k) m[k] = !drop.active() || drop.keep(k / heads, k % heads);
  return mask;
}

}  // namespace

TORCH_LIBRARY_IMPL(fastgnn, CPU, m) {
  m.impl("gatv2_forward", &gatv2_forward_cpu);
  m.impl("gatv2_backward", &gatv2_backward_cpu);
  m.impl("graph_attention_forward", &graph_attention_forward_cpu);
  m.impl("graph_attention_backward", &graph_attention_backward_cpu);
  m.impl("attention_dropout_mask", &attention_dropout_mask_cpu);
}

}  // namespace cpu
}  // namespace fastgnn
