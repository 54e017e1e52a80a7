// Fused attention kernels, instantiated in attention_{gatv2,dot}_{forward,backward}.cu (one
// instantiation set per file so they compile in parallel).
//
// A group of warps_per_row warps owns one (row, head) pair (two heads, 16 lanes each, in the
// forward at D = 64 and 128 and in the backward at D = 64): light rows get one warp, heavy rows several that split the edge
// list into contiguous shares and merge through shared memory. A warp reads the source indices
// of 32 edges with one load and passes them round by shuffles. Lane l holds K consecutive
// features [32K * chunk + lK, +K) in registers (vector loads on the fast paths D = 16, 32, 64,
// 128, 256); any other D uses guarded loads and, above 256, blockIdx.z picks a 256-feature
// chunk while logits are summed over every chunk. Accumulation and statistics are float
// (double for double).
#pragma once

#include <cmath>

#include "attention_dropout.h"
#include "cuda/attention_kernels.h"
#include "cuda/common.cuh"

namespace fastgnn {
namespace cuda {
namespace attention {

constexpr int kWarpsPerBlock = 8;
// Register cap of the backward kernels, which hold many fragments: enough resident blocks to
// hide the latency of its gathers, without spilling the K = 8 fragments.
constexpr int backward_blocks_per_sm(int k) { return k >= 8 ? 1 : k >= 4 ? 3 : 4; }

template <typename T, typename I>
struct Args {
  using acc_t = typename Scalar<T>::acc;
  const I* rowptr;
  const I* col;
  const I* src_perm;
  const I* rows;
  int64_t num_rows;
  int warps_per_row;
  const I* edge_perm;
  const T* a;
  const T* b;
  const T* c;
  const T* edge;
  acc_t coef;
  int64_t heads, dim;
  int64_t row_stride;  // heads * dim
  uint32_t row_bytes;  // row_stride * sizeof(T)
  int chunks;
  DropoutSpec dropout;
  T* out;
  acc_t* lse;
  const T* grad_out;
  const T* saved_out;
  const acc_t* lse_in;
  T* grad_a;
  T* grad_b;
  T* grad_c;
  T* grad_edge;
  acc_t* att_partial;
  int64_t partial_offset;
  acc_t* scores;
  uint32_t* sign_bits;
  int64_t num_edges;
};

// K values of a row starting at feature f0 (zeros past the end). kD != 0: the fast path,
// where f0 is a multiple of K and rows are aligned, so whole packs load at once.
template <typename T, int K>
struct alignas(sizeof(T) * K) Pack {
  T v[K];
};

template <int K, int kD, typename T, typename acc_t>
__device__ __forceinline__ void load_frag(const T* __restrict__ frag, int64_t f0, int64_t dim,
                                          acc_t (&out)[K]) {
  if constexpr (kD != 0) {
    constexpr int kVec = (16 / int(sizeof(T))) < K ? (16 / int(sizeof(T))) : K;
    if (32 * K <= kD || f0 < kD) {  // only D = 16 leaves lanes without features
#pragma unroll
      for (int c = 0; c < K; c += kVec) {
        const Pack<T, kVec> pk = *reinterpret_cast<const Pack<T, kVec>*>(frag + c);
#pragma unroll
        for (int k = 0; k < kVec; ++k) out[c + k] = Scalar<T>::load(pk.v[k]);
      }
    } else {
#pragma unroll
      for (int k = 0; k < K; ++k) out[k] = acc_t(0);
    }
  } else {
#pragma unroll
    for (int k = 0; k < K; ++k) out[k] = f0 + k < dim ? Scalar<T>::load(frag[k]) : acc_t(0);
  }
}

template <int K, typename T, typename acc_t>
__device__ __forceinline__ void store_frag(T* __restrict__ row, int64_t f0, int64_t dim,
                                           const acc_t (&v)[K]) {
#pragma unroll
  for (int k = 0; k < K; ++k)
    if (f0 + k < dim) row[f0 + k] = Scalar<T>::store(v[k]);
}

template <int K, typename acc_t>
__device__ __forceinline__ void zero(acc_t (&v)[K]) {
#pragma unroll
  for (int k = 0; k < K; ++k) v[k] = acc_t(0);
}

template <typename acc_t>
__device__ __forceinline__ acc_t leaky(acc_t v, acc_t slope) { return v > 0 ? v : v * slope; }

template <typename acc_t>
__device__ __forceinline__ acc_t exp_acc(acc_t v) { return exp(v); }
// One multiply and the hardware exp2, flushing results below 2^-126 to zero: weights that
// small vanish beside the running maximum's weight of 1 anyway (__expf adds a denormal fixup).
template <>
__device__ __forceinline__ float exp_acc<float>(float v) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v * 1.4426950408889634f));
  return r;
}

// Where this lane's fragment (head h, features from f0) starts in each operand: node j's is
// at ptr + j * row_stride. With 32-bit indices that is one unsigned wide multiply-add per
// gather (H * D * sizeof(T) fits 32 bits, the host checks). For GATv2, c is att [H, D], whose
// fragment is c itself.
template <typename T>
struct LaneView {
  const T *a, *b, *c, *edge, *grad_out;
  int64_t f0;
};

template <typename T, typename I>
__device__ __forceinline__ LaneView<T> lane_view(const Args<T, I>& a, int64_t h, int64_t f0) {
  const int64_t off = h * a.dim + f0;
  return {a.a + off, a.b + off, a.c + off, a.edge ? a.edge + off : nullptr,
          a.grad_out ? a.grad_out + off : nullptr, f0};
}

template <typename T, typename I>
__device__ __forceinline__ const T* at_row(const T* frag, int64_t node, const Args<T, I>& a) {
  if constexpr (sizeof(I) == 4) {  // node ids are then non-negative 32-bit values
    const char* bytes = reinterpret_cast<const char*>(frag);
    return reinterpret_cast<const T*>(bytes + uint64_t(uint32_t(node)) * uint32_t(a.row_bytes));
  } else {
    return frag + node * a.row_stride;
  }
}

// Input position of the edge at CSR position e (edge features are in input order).
template <typename T, typename I>
__device__ __forceinline__ int64_t edge_pos(const Args<T, I>& a, int64_t e) {
  return a.edge_perm ? int64_t(a.edge_perm[e]) : e;
}

// This lane's operands of edge j -> i at CSR position e: z (the GATv2 pre-activation
// dst + x_src (+ edge), or the key (+ edge)) and the value (x_src, or v (+ edge)).
template <AttentionKind kKind, int K, int kD, typename T, typename I, typename acc_t>
__device__ __forceinline__ void edge_operands(const Args<T, I>& a, const LaneView<T>& v,
                                              int64_t j, int64_t e, const acc_t (&dst)[K],
                                              acc_t (&z)[K], acc_t (&val)[K]) {
  acc_t bf[K];
  load_frag<K, kD>(at_row(v.b, j, a), v.f0, a.dim, bf);
  if constexpr (kKind == AttentionKind::kGatv2) {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      z[k] = dst[k] + bf[k];
      val[k] = bf[k];
    }
  } else {
    load_frag<K, kD>(at_row(v.c, j, a), v.f0, a.dim, val);
#pragma unroll
    for (int k = 0; k < K; ++k) z[k] = bf[k];
  }
  if (a.edge) {  // GATv2: inside the LeakyReLU; dot product: on the key and the value
    acc_t ef[K];
    load_frag<K, kD>(at_row(v.edge, edge_pos(a, e), a), v.f0, a.dim, ef);
#pragma unroll
    for (int k = 0; k < K; ++k) {
      z[k] += ef[k];
      if (kKind == AttentionKind::kDotProduct) val[k] += ef[k];
    }
  }
}

template <int K, typename acc_t>
__device__ __forceinline__ acc_t dot(const acc_t (&x)[K], const acc_t (&y)[K]) {
  acc_t sum = 0;
#pragma unroll
  for (int k = 0; k < K; ++k) sum += x[k] * y[k];
  return sum;
}

// This lane's part of an edge's logit: att . LeakyReLU(z), or dst . z (unscaled).
template <AttentionKind kKind, int K, typename acc_t>
__device__ __forceinline__ acc_t logit_part(const acc_t (&dst)[K], const acc_t (&att)[K],
                                            const acc_t (&z)[K], acc_t slope) {
  if constexpr (kKind == AttentionKind::kGatv2) {
    acc_t sum = 0;
#pragma unroll
    for (int k = 0; k < K; ++k) sum += att[k] * leaky(z[k], slope);
    return sum;
  } else {
    return dot<K>(dst, z);
  }
}

// Partial (this lane's features of one chunk) logit and <dout, value> of edge j -> i, added to
// logit and dval, with z and the value.
template <AttentionKind kKind, int K, int kD, typename T, typename I, typename acc_t>
__device__ __forceinline__ void chunk_terms(const Args<T, I>& a, const LaneView<T>& v, int64_t j,
                                            int64_t e, const acc_t (&dst)[K],
                                            const acc_t (&att)[K], const acc_t (&dout)[K],
                                            acc_t (&z)[K], acc_t (&val)[K], acc_t& logit,
                                            acc_t& dval) {
  edge_operands<kKind, K, kD>(a, v, j, e, dst, z, val);
  logit += logit_part<kKind, K>(dst, att, z, acc_t(a.coef));
  dval += dot<K>(dout, val);
}

// The attention vector's fragment (GATv2; zeros for the dot product).
template <AttentionKind kKind, int K, int kD, typename T, typename I, typename acc_t>
__device__ __forceinline__ void load_att(const Args<T, I>& a, const LaneView<T>& v,
                                         acc_t (&att)[K]) {
  if (kKind == AttentionKind::kGatv2)
    load_frag<K, kD>(v.c, v.f0, a.dim, att);
  else
    zero<K>(att);
}

// Loads the destination-side fragments of node i: dst row and (if wanted) dout.
template <int K, int kD, typename T, typename I, typename acc_t>
__device__ __forceinline__ void load_dst_side(const Args<T, I>& a, const LaneView<T>& v,
                                              int64_t i, bool want_dout, acc_t (&dst)[K],
                                              acc_t (&dout)[K]) {
  load_frag<K, kD>(at_row(v.a, i, a), v.f0, a.dim, dst);
  if (want_dout)
    load_frag<K, kD>(at_row(v.grad_out, i, a), v.f0, a.dim, dout);
  else
    zero<K>(dout);
}

// Full logit and <dout_i, value_j> of edge j -> i (warp-uniform results), with this lane's
// own-chunk z and value. Chunks other than the lane's own are reloaded (general path only).
template <AttentionKind kKind, int K, int kD, typename T, typename I, typename acc_t>
__device__ __forceinline__ void edge_eval(const Args<T, I>& a, const LaneView<T>& v, int64_t i,
                                          int64_t j, int64_t e, int64_t h, int lane, int chunk,
                                          bool want_dval, const acc_t (&dst)[K],
                                          const acc_t (&att)[K], const acc_t (&dout)[K],
                                          acc_t (&z)[K], acc_t (&val)[K], acc_t& logit,
                                          acc_t& dval) {
  logit = 0;
  dval = 0;
  chunk_terms<kKind, K, kD>(a, v, j, e, dst, att, dout, z, val, logit, dval);
  const int chunks = kD != 0 ? 1 : a.chunks;
  for (int c = 0; c < chunks; ++c) {
    if (c == chunk) continue;
    const LaneView<T> vc = lane_view(a, h, int64_t(c) * 32 * K + lane * K);
    acc_t dc[K], ac[K], oc[K], zc[K], valc[K];
    load_dst_side<K, kD>(a, vc, i, want_dval, dc, oc);
    load_att<kKind, K, kD>(a, vc, ac);
    chunk_terms<kKind, K, kD>(a, vc, j, e, dc, ac, oc, zc, valc, logit, dval);
  }
  logit = warp_sum(logit);
  if (want_dval) dval = warp_sum(dval);
  if (kKind == AttentionKind::kDotProduct) logit *= a.coef;
}

// The (row, head, chunk) this warp works on and its place in its group.
struct Slot {
  int warp, lane, member, group_size;
  int64_t r;
  bool valid;
};

template <typename T, typename I>
__device__ __forceinline__ Slot slot_of(const Args<T, I>& a) {
  Slot s;
  s.warp = threadIdx.x / kWarp;
  s.lane = threadIdx.x % kWarp;
  s.group_size = a.warps_per_row;
  s.member = s.warp % s.group_size;
  const int groups = int(blockDim.x / kWarp) / s.group_size;
  const int64_t r = int64_t(blockIdx.x) * groups + s.warp / s.group_size;
  s.valid = r < a.num_rows;
  s.r = s.valid ? (a.rows ? int64_t(a.rows[r]) : r) : 0;
  return s;
}

// The CSR positions [begin, end) this warp walks: a contiguous share of its row's edges.
struct EdgeShare {
  int64_t begin, end;
};

template <typename T, typename I>
__device__ __forceinline__ EdgeShare edge_share(const Args<T, I>& a, const Slot& s) {
  const int64_t first = a.rowptr[s.r], last = a.rowptr[s.r + 1];
  if (s.group_size == 1) return {first, last};
  const int64_t per = (last - first + s.group_size - 1) / s.group_size;
  const int64_t begin = min(last, first + s.member * per);
  return {begin, min(last, begin + per)};
}

// Source index of the edge at `slot` of a window whose col entries the lanes loaded one each
// (one coalesced load per 32 edges instead of one dependent load per edge).
template <typename I>
__device__ __forceinline__ int64_t window_col(I mine, int slot) {
  return int64_t(__shfl_sync(0xffffffffu, mine, slot % kWarp));
}

// Sums v over the warps of this warp's group into the group's first warp (shared memory
// `buf` of 32K values per warp). Every thread of the block must call it.
template <int K, typename acc_t>
__device__ __forceinline__ void group_sum(acc_t (&v)[K], const Slot& s, acc_t* buf) {
  __syncthreads();
#pragma unroll
  for (int k = 0; k < K; ++k) buf[s.warp * 32 * K + s.lane * K + k] = v[k];
  __syncthreads();
  if (s.member == 0)
    for (int w = 1; w < s.group_size; ++w)
#pragma unroll
      for (int k = 0; k < K; ++k) v[k] += buf[(s.warp + w) * 32 * K + s.lane * K + k];
}

// kHeads heads per warp (fast path only): each gets kWarp / kHeads lanes, and the edge
// window, its shuffles and the slot bookkeeping serve all of them.
template <AttentionKind kKind, int K, int kD, int kHeads, int kEdges, typename T, typename I>
__global__ void __launch_bounds__(kWarpsPerBlock * kWarp)
    forward_kernel(const Args<T, I> a) {
  using acc_t = typename Scalar<T>::acc;
  constexpr int kLanes = kWarp / kHeads;
  static_assert(kHeads == 1 || kD != 0, "several heads per warp on the fast path only");
  extern __shared__ unsigned char smem_raw[];
  acc_t* smem = reinterpret_cast<acc_t*>(smem_raw);
  const Slot s = slot_of(a);
  const int sub = s.lane / kLanes, flane = s.lane % kLanes;  // head within the warp, its lane
  const int64_t h = int64_t(blockIdx.y) * kHeads + sub;
  const int chunk = blockIdx.z;
  const int64_t f0 = int64_t(chunk) * 32 * K + flane * K;
  const int64_t i = s.r;
  const DropoutSpec dropout = a.dropout.resolved();

  acc_t dst[K], att[K], no_dout[K], acc[K];
  zero<K>(acc);
  acc_t peak = -INFINITY, total = 0;
  if (s.valid) {
    const LaneView<T> v = lane_view(a, h, f0);
    load_dst_side<K, kD>(a, v, i, false, dst, no_dout);
    load_att<kKind, K, kD>(a, v, att);
    // The fast GATv2 logit: att . LeakyReLU(z) = sum att_pos z + att_abs |z|, two FMAs a feature.
    // Only here: in the backward (logit_part) the two hoisted coefficient fragments raise the
    // spills of its 80-register cap (H100, tolokers H=8: backward 3.86 against 3.23 ms).
    acc_t att_pos[K], att_abs[K];
#pragma unroll
    for (int k = 0; k < K; ++k) {
      att_pos[k] = att[k] * (acc_t(0.5) + acc_t(0.5) * acc_t(a.coef));
      att_abs[k] = att[k] * (acc_t(0.5) - acc_t(0.5) * acc_t(a.coef));
    }
    const EdgeShare share = edge_share(a, s);
    for (int64_t base = share.begin; base < share.end; base += kWarp) {
      const int n = int(min(int64_t(kWarp), share.end - base));
      const I mine = s.lane < n ? a.col[base + s.lane] : I(0);
      for (int t = 0; t < n; t += kEdges) {
        acc_t val[kEdges][K], logit[kEdges];
#pragma unroll
        for (int u = 0; u < kEdges; ++u) {
          // Slots past n (fast path only) repeat the last edge, without branching, and get
          // no weight below.
          const int slot = min(t + u, n - 1);
          const int64_t j = window_col(mine, slot);
          const int64_t e = base + slot;
          acc_t z[K];
          if constexpr (kD != 0) {
            edge_operands<kKind, K, kD>(a, v, j, e, dst, z, val[u]);
            logit[u] = 0;
            if constexpr (kKind == AttentionKind::kGatv2) {
#pragma unroll
              for (int k = 0; k < K; ++k) logit[u] += att_pos[k] * z[k] + att_abs[k] * fabs(z[k]);
            } else {
              logit[u] = dot<K>(dst, z);
            }
          } else {
            acc_t unused;
            edge_eval<kKind, K, kD>(a, v, i, j, e, h, s.lane, chunk, false, dst, att, no_dout,
                                    z, val[u], logit[u], unused);
          }
        }
        if constexpr (kD != 0) {
          warp_sum_each<kEdges, kLanes>(logit);
#pragma unroll
          for (int u = 0; u < kEdges; ++u) {
            if (kKind == AttentionKind::kDotProduct) logit[u] *= a.coef;
            if (t + u >= n) logit[u] = -INFINITY;
          }
        }
        acc_t top = peak;
#pragma unroll
        for (int u = 0; u < kEdges; ++u) top = max(top, logit[u]);
        if (top > peak) {  // new running max: rescale what was accumulated so far
          const acc_t corr = exp_acc(peak - top);
          total *= corr;
#pragma unroll
          for (int k = 0; k < K; ++k) acc[k] *= corr;
          peak = top;
        }
#pragma unroll
        for (int u = 0; u < kEdges; ++u) {
          const acc_t w = exp_acc(logit[u] - peak);
          total += w;
          const acc_t wc = w * dropout.template factor<acc_t>(base + t + u, h);
#pragma unroll
          for (int k = 0; k < K; ++k) acc[k] += wc * val[u][k];
        }
      }
    }
  }
  if (s.group_size > 1) {  // merge the group's softmax states into its first warp
    // [peaks | totals], one per (warp, head of the warp)
    acc_t* peaks = smem + kWarpsPerBlock * 32 * K;
    acc_t* totals = peaks + kWarpsPerBlock * kHeads;
    const int first = (s.warp - s.member) * kHeads + sub;
    if (flane == 0) peaks[s.warp * kHeads + sub] = peak;
    __syncthreads();
    acc_t top = -INFINITY;
    for (int w = 0; w < s.group_size; ++w) top = max(top, peaks[first + w * kHeads]);
    const acc_t rescale = peak == -INFINITY ? acc_t(0) : exp_acc(peak - top);
    total *= rescale;
#pragma unroll
    for (int k = 0; k < K; ++k) acc[k] *= rescale;
    if (flane == 0) totals[s.warp * kHeads + sub] = total;
    group_sum<K>(acc, s, smem);  // its barriers also publish the totals
    if (s.member == 0) {
      total = 0;
      for (int w = 0; w < s.group_size; ++w) total += totals[first + w * kHeads];
      peak = top;
    }
  }
  if (!s.valid || s.member != 0) return;
  const acc_t inv = total > 0 ? acc_t(1) / total : acc_t(0);
#pragma unroll
  for (int k = 0; k < K; ++k) acc[k] *= inv;
  store_frag<K>(a.out + (i * a.heads + h) * a.dim, f0, a.dim, acc);
  if (chunk == 0 && flane == 0)
    a.lse[i * a.heads + h] = total > 0 ? peak + log(total) : acc_t(-INFINITY);
}

// The backward in two passes, each (row, head) written by one group: no atomics anywhere.
//
// Destination pass (the forward CSR; row i is the destination of edge q, source col[q]):
// recomputes the logits kEdges edges a step, alpha = exp(logit - lse_i) and, with c the dropout
// factor, g = dLogit = alpha (c <dOut_i, value_j> - delta_i), where delta_i = <dOut_i, out_i> is
// computed in place. It writes the gradients of a (x_dst / q), att (block partials) and
// edge_term, and each edge's (g, c alpha) into `scores` ([H, E] pairs, CSR order).
//
// Source pass (transposed CSR, or the CSR itself on a symmetric graph; row j is the source of
// the edge into col[q] at CSR position src_perm[q]): gradients of b (x_src / k) and c (v) from
// the stored scores, with no logit recomputed and no warp reduction.

// delta_i = <dOut_i, out_i> over every chunk of head h, on every lane of the head's kLanes.
template <int K, int kD, int kLanes, typename T, typename I,
          typename acc_t = typename Scalar<T>::acc>
__device__ __forceinline__ acc_t row_delta(const Args<T, I>& a, int64_t i, int64_t h, int flane) {
  acc_t sum[1] = {0};
  const int chunks = kD != 0 ? 1 : a.chunks;
  for (int c = 0; c < chunks; ++c) {
    const int64_t f0 = int64_t(c) * 32 * K + flane * K;
    const int64_t off = (i * a.heads + h) * a.dim + f0;
    acc_t out[K], dout[K];
    load_frag<K, kD>(a.saved_out + off, f0, a.dim, out);
    load_frag<K, kD>(a.grad_out + off, f0, a.dim, dout);
    sum[0] += dot<K>(out, dout);
  }
  warp_sum_each<1, kLanes>(sum);
  return sum[0];
}

template <typename acc_t>
__device__ __forceinline__ Packet<acc_t, 2>* score_at(acc_t* scores, int64_t edges, int64_t h,
                                                      int64_t e) {
  return reinterpret_cast<Packet<acc_t, 2>*>(scores + 2 * (h * edges + e));
}

// The GATv2 fast path keeps one bit per feature of each (edge, head): z > 0. A warp keeps K
// words per edge for its heads (one, or two at D = 64): word k is the warp's ballot of its
// lanes' k-th features (bit = lane), stored as it comes, with no per-head shifts. Both passes
// launch one blockIdx.y per group of a warp's heads, which indexes the words here.
template <int K, typename T, typename I>
__device__ __forceinline__ uint32_t* sign_words_at(const Args<T, I>& a, int64_t e) {
  return a.sign_bits + (int64_t(blockIdx.y) * a.num_edges + e) * K;
}

// This lane's signs of edge e (bit k: its k-th feature's z > 0).
template <int K, typename T, typename I>
__device__ __forceinline__ uint32_t load_signs(const Args<T, I>& a, int64_t e, int lane) {
  const Pack<uint32_t, K> words = *reinterpret_cast<const Pack<uint32_t, K>*>(
      sign_words_at<K>(a, e));
  uint32_t signs = 0;
#pragma unroll
  for (int k = 0; k < K; ++k) signs |= ((words.v[k] >> lane) & 1u) << k;
  return signs;
}

// kHeads heads a warp (fast path only), kWarp / kHeads lanes each, as in the forward.
template <AttentionKind kKind, int K, int kD, int kHeads, int kEdges, typename T, typename I>
__global__ void __launch_bounds__(kWarpsPerBlock * kWarp, backward_blocks_per_sm(K))
    backward_dst_kernel(const Args<T, I> a) {
  using acc_t = typename Scalar<T>::acc;
  constexpr bool kGat = kKind == AttentionKind::kGatv2;
  constexpr int kLanes = kWarp / kHeads;
  static_assert(kEdges == 1 || kD != 0, "several edges a step on the fast path only");
  static_assert(kHeads == 1 || kD != 0, "several heads per warp on the fast path only");
  static_assert(!kGat || kD == 0 || K == kHeads * sign_words_for_dim(kD),
                "a warp's sign words per edge are the host's words for its heads");
  extern __shared__ unsigned char smem_raw[];
  acc_t* smem = reinterpret_cast<acc_t*>(smem_raw);
  const Slot s = slot_of(a);
  const int sub = s.lane / kLanes, flane = s.lane % kLanes;  // head within the warp, its lane
  const int64_t h = int64_t(blockIdx.y) * kHeads + sub;
  const int chunk = blockIdx.z;
  const int64_t f0 = int64_t(chunk) * 32 * K + flane * K;
  const int64_t i = s.r;
  const DropoutSpec dropout = a.dropout.resolved();
  const acc_t slope = a.coef;

  acc_t grad_dst[K], grad_att[K];
  zero<K>(grad_dst);
  zero<K>(grad_att);
  if (s.valid) {
    const LaneView<T> v = lane_view(a, h, f0);
    acc_t dst[K], att[K], dout[K];
    load_att<kKind, K, kD>(a, v, att);
    load_dst_side<K, kD>(a, v, i, true, dst, dout);
    const acc_t lse_i = a.lse_in[i * a.heads + h];
    const acc_t delta_i = row_delta<K, kD, kLanes>(a, i, h, flane);
    const EdgeShare share = edge_share(a, s);
    for (int64_t base = share.begin; base < share.end; base += kWarp) {
      const int count = int(min(int64_t(kWarp), share.end - base));
      const I col_mine = s.lane < count ? a.col[base + s.lane] : I(0);
      for (int t = 0; t < count; t += kEdges) {
        // sums[u]: edge u's logit; sums[kEdges + u]: <dOut_i, value_j>
        acc_t z[kEdges][K], sums[2 * kEdges];
#pragma unroll
        for (int u = 0; u < kEdges; ++u) {
          // Slots past count (fast path only) repeat the last edge and are skipped below.
          const int slot = min(t + u, count - 1);
          const int64_t j = window_col(col_mine, slot);
          const int64_t q = base + slot;
          acc_t val[K];
          if constexpr (kD != 0) {
            edge_operands<kKind, K, kD>(a, v, j, q, dst, z[u], val);
            sums[u] = logit_part<kKind, K>(dst, att, z[u], slope);
            sums[kEdges + u] = dot<K>(dout, val);
          } else {
            edge_eval<kKind, K, kD>(a, v, i, j, q, h, s.lane, chunk, true, dst, att, dout, z[u],
                                    val, sums[u], sums[kEdges + u]);
          }
        }
        if constexpr (kD != 0) {
          warp_sum_each<2 * kEdges, kLanes>(sums);
          if (kKind == AttentionKind::kDotProduct)
#pragma unroll
            for (int u = 0; u < kEdges; ++u) sums[u] *= a.coef;
        }
#pragma unroll
        for (int u = 0; u < kEdges; ++u) {
          if (t + u >= count) break;  // warp-uniform
          const int64_t q = base + t + u;
          const acc_t alpha = exp_acc(sums[u] - lse_i);
          const acc_t wc = alpha * dropout.template factor<acc_t>(q, h);
          const acc_t g = wc * sums[kEdges + u] - alpha * delta_i;
          const acc_t g_neg = g * slope;  // g times LeakyReLU's slope where z <= 0
          acc_t edge_grad[K];
          Pack<uint32_t, K> signs;
#pragma unroll
          for (int k = 0; k < K; ++k) {
            if (kGat) {
              const bool positive = z[u][k] > 0;
              const acc_t gs = positive ? g : g_neg;
              edge_grad[k] = gs * att[k];
              grad_dst[k] += edge_grad[k];
              grad_att[k] += gs * z[u][k];
              if constexpr (kD != 0) signs.v[k] = __ballot_sync(0xffffffffu, positive);
            } else {
              grad_dst[k] += g * slope * z[u][k];
              edge_grad[k] = g * slope * dst[k] + wc * dout[k];
            }
          }
          if (a.grad_edge)
            store_frag<K>(a.grad_edge + h * a.dim + edge_pos(a, q) * a.row_stride, f0, a.dim,
                          edge_grad);
          if constexpr (kGat && kD != 0)
            if (s.lane == 0) *reinterpret_cast<Pack<uint32_t, K>*>(sign_words_at<K>(a, q)) = signs;
          if (flane == 0 && chunk == 0) *score_at(a.scores, a.num_edges, h, q) = {g, wc};
        }
      }
    }
  }
  if (s.group_size > 1) group_sum<K>(grad_dst, s, smem);
  if (s.valid && s.member == 0)
    store_frag<K>(a.grad_a + (i * a.heads + h) * a.dim, f0, a.dim, grad_dst);
  if (kGat) {  // this block's att-gradient partial: sum over its warps
    __syncthreads();
#pragma unroll
    for (int k = 0; k < K; ++k) smem[s.warp * 32 * K + s.lane * K + k] = grad_att[k];
    __syncthreads();
    if (s.warp == 0) {
      for (int w = 1; w < int(blockDim.x / kWarp); ++w)
#pragma unroll
        for (int k = 0; k < K; ++k) grad_att[k] += smem[w * 32 * K + s.lane * K + k];
      acc_t* row = a.att_partial + ((a.partial_offset + blockIdx.x) * a.heads + h) * a.dim;
#pragma unroll
      for (int k = 0; k < K; ++k)
        if (f0 + k < a.dim) row[f0 + k] = grad_att[k];
    }
  }
}

template <AttentionKind kKind, int K, int kD, int kHeads, int kEdges, typename T, typename I>
__global__ void __launch_bounds__(kWarpsPerBlock * kWarp, backward_blocks_per_sm(K))
    backward_src_kernel(const Args<T, I> a) {
  using acc_t = typename Scalar<T>::acc;
  constexpr bool kGat = kKind == AttentionKind::kGatv2;
  constexpr int kLanes = kWarp / kHeads;
  static_assert(kHeads == 1 || kD != 0, "several heads per warp on the fast path only");
  extern __shared__ unsigned char smem_raw[];
  acc_t* smem = reinterpret_cast<acc_t*>(smem_raw);
  const Slot s = slot_of(a);
  const int64_t h = int64_t(blockIdx.y) * kHeads + s.lane / kLanes;
  const int chunk = blockIdx.z;
  const int64_t f0 = int64_t(chunk) * 32 * K + (s.lane % kLanes) * K;
  const int64_t j = s.r;
  const acc_t slope = a.coef;

  // grad_src: x_src's gradient (GATv2, key and value terms together) or k's; grad_val: v's.
  // GATv2's fast path reads z's signs from the destination pass's bits; elsewhere z is
  // rebuilt from x_dst[i] (+ edge term) and the source's own row.
  constexpr bool kSigns = kGat && kD != 0;
  acc_t grad_src[K], grad_val[K];
  zero<K>(grad_src);
  zero<K>(grad_val);
  if (s.valid) {
    const LaneView<T> v = lane_view(a, h, f0);
    acc_t att[K], own[K];
    load_att<kKind, K, kD>(a, v, att);
    if (kGat && !kSigns)
      load_frag<K, kD>(at_row(v.b, j, a), f0, a.dim, own);
    else
      zero<K>(own);
    const EdgeShare share = edge_share(a, s);
    for (int64_t base = share.begin; base < share.end; base += kWarp) {
      const int count = int(min(int64_t(kWarp), share.end - base));
      const I col_mine = s.lane < count ? a.col[base + s.lane] : I(0);
      const I perm_mine = s.lane < count ? a.src_perm[base + s.lane] : I(0);
      for (int t = 0; t < count; t += kEdges) {
        // Edge u runs j -> i at CSR position e; dst[u] holds x_dst[i] (+ edge term) or q[i]
        // (unused with signs: their bits stand for z).
        acc_t dst[kEdges][K], dout[kEdges][K], g[kEdges], w[kEdges];
        uint32_t signs[kEdges];
#pragma unroll
        for (int u = 0; u < kEdges; ++u) {
          // Slots past count repeat the last edge with zero scores.
          const int slot = min(t + u, count - 1);
          const int64_t i = window_col(col_mine, slot);
          const int64_t e = window_col(perm_mine, slot);
          if constexpr (kSigns) {
            load_frag<K, kD>(at_row(v.grad_out, i, a), f0, a.dim, dout[u]);
            signs[u] = load_signs<K>(a, e, s.lane);
          } else {
            load_dst_side<K, kD>(a, v, i, true, dst[u], dout[u]);
          }
          const Packet<acc_t, 2> score = *score_at(a.scores, a.num_edges, h, e);
          const bool live = t + u < count;
          g[u] = live ? score.v[0] : acc_t(0);
          w[u] = live ? score.v[1] : acc_t(0);
          if (kGat && !kSigns && a.edge) {
            acc_t ef[K];
            load_frag<K, kD>(at_row(v.edge, edge_pos(a, e), a), f0, a.dim, ef);
#pragma unroll
            for (int k = 0; k < K; ++k) dst[u][k] += ef[k];
          }
        }
#pragma unroll
        for (int u = 0; u < kEdges; ++u) {
          const acc_t g_neg = g[u] * slope;
#pragma unroll
          for (int k = 0; k < K; ++k) {
            if (kGat) {
              const bool positive = kSigns ? (signs[u] >> k) & 1u : dst[u][k] + own[k] > 0;
              const acc_t gs = positive ? g[u] : g_neg;
              grad_src[k] += gs * att[k] + w[u] * dout[u][k];
            } else {
              grad_src[k] += g[u] * slope * dst[u][k];
              grad_val[k] += w[u] * dout[u][k];
            }
          }
        }
      }
    }
  }
  if (s.group_size > 1) {
    group_sum<K>(grad_src, s, smem);
    if (!kGat) group_sum<K>(grad_val, s, smem);
  }
  if (s.valid && s.member == 0) {
    store_frag<K>(a.grad_b + (j * a.heads + h) * a.dim, f0, a.dim, grad_src);
    if (!kGat) store_frag<K>(a.grad_c + (j * a.heads + h) * a.dim, f0, a.dim, grad_val);
  }
}

// grad[col] = sum over rows of partial[row, col]: one warp per 32 columns per row stripe,
// then a fixed-order sum of the stripes (deterministic).
template <typename acc_t>
__global__ void reduce_partials_kernel(const acc_t* __restrict__ partial, int64_t rows,
                                       int64_t width, acc_t* __restrict__ out) {
  __shared__ acc_t buf[kWarpsPerBlock][kWarp];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t col = int64_t(blockIdx.x) * kWarp + lane;
  acc_t sum = 0;
  if (col < width)
    for (int64_t r = warp; r < rows; r += kWarpsPerBlock) sum += partial[r * width + col];
  buf[warp][lane] = sum;
  __syncthreads();
  if (warp == 0 && col < width) {
    for (int w = 1; w < kWarpsPerBlock; ++w) sum += buf[w][lane];
    out[col] = sum;
  }
}

inline int groups_per_block(int warps_per_row) { return kWarpsPerBlock / warps_per_row; }

// Fragment width per lane for a head dimension, the fast-path dimension (0: general), and
// the number of 32K-feature chunks.
struct DimPlan {
  int k, fast_dim, chunks;
};

// Vector loads need 16-byte aligned rows; double has no fast path.
inline bool fast_path_ok(const AttentionParams& p) {
  return p.aligned && p.type != FloatType::kDouble;
}

inline DimPlan plan_dim(int64_t dim, bool fast_ok) {
  if (fast_ok && (dim == 16 || dim == 32)) return {1, int(dim), 1};
  if (fast_ok && (dim == 64 || dim == 128 || dim == 256)) return {int(dim / 32), int(dim), 1};
  const int k = dim <= 32 ? 1 : dim <= 64 ? 2 : dim <= 128 ? 4 : 8;
  return {k, 0, int(ceil_div(dim, 32 * k))};
}

// Calls f.template operator()<K, kD>() for the plan.
template <typename F>
void dispatch_plan(const DimPlan& plan, F&& f) {
  switch (plan.fast_dim) {
    case 16: f.template operator()<1, 16>(); return;
    case 32: f.template operator()<1, 32>(); return;
    case 64: f.template operator()<2, 64>(); return;
    case 128: f.template operator()<4, 128>(); return;
    case 256: f.template operator()<8, 256>(); return;
    default: break;
  }
  switch (plan.k) {
    case 1: f.template operator()<1, 0>(); return;
    case 2: f.template operator()<2, 0>(); return;
    case 4: f.template operator()<4, 0>(); return;
    default: f.template operator()<8, 0>(); return;
  }
}

template <typename T, typename I>
Args<T, I> make_args(const AttentionParams& p, const RowSet& rows, int chunks) {
  using acc_t = typename Scalar<T>::acc;
  Args<T, I> a;
  a.rowptr = static_cast<const I*>(p.csr.rowptr);
  a.col = static_cast<const I*>(p.csr.col);
  a.src_perm = static_cast<const I*>(p.src_perm);
  a.rows = static_cast<const I*>(rows.rows);
  a.num_rows = rows.num_rows;
  a.warps_per_row = rows.warps_per_row;
  a.edge_perm = static_cast<const I*>(p.edge_perm);
  a.a = static_cast<const T*>(p.a);
  a.b = static_cast<const T*>(p.b);
  a.c = static_cast<const T*>(p.c);
  a.edge = static_cast<const T*>(p.edge);
  a.coef = acc_t(p.coef);
  a.heads = p.heads;
  a.dim = p.dim;
  a.row_stride = p.heads * p.dim;
  a.row_bytes = uint32_t(a.row_stride * int64_t(sizeof(T)));
  a.chunks = chunks;
  a.dropout = p.dropout;
  a.out = static_cast<T*>(p.out);
  a.lse = static_cast<acc_t*>(p.lse);
  a.grad_out = static_cast<const T*>(p.grad_out);
  a.saved_out = static_cast<const T*>(p.saved_out);
  a.lse_in = static_cast<const acc_t*>(p.lse_in);
  a.grad_a = static_cast<T*>(p.grad_a);
  a.grad_b = static_cast<T*>(p.grad_b);
  a.grad_c = static_cast<T*>(p.grad_c);
  a.grad_edge = static_cast<T*>(p.grad_edge);
  a.att_partial = static_cast<acc_t*>(p.att_partial);
  a.partial_offset = 0;
  a.scores = static_cast<acc_t*>(p.scores);
  a.sign_bits = static_cast<uint32_t*>(p.sign_bits);
  a.num_edges = p.csr.nnz;
  return a;
}

// Launches the forward or backward kernel of one attention kind, for the plan's K and D.
template <AttentionKind kKind, bool kBackward, typename T, typename I>
struct Launcher {
  using acc_t = typename Scalar<T>::acc;
  const Args<T, I>& args;
  dim3 grid;
  bool source_pass;  // backward: the source pass, else the destination pass
  cudaStream_t stream;

  // The fast path takes kEdges edges a step, their loads and warp reductions interleaved (and
  // in the forward one rescale for all): one edge's reduction latency no longer holds up the
  // next edge's loads.
  template <int K, int kD, int kHeads = 1, int kEdges = kD == 0 ? 1 : K >= 8 ? 2 : 4>
  void operator()() const {
    const size_t smem =
        (size_t(kWarpsPerBlock) * 32 * K + 2 * kWarpsPerBlock * kHeads) * sizeof(acc_t);
    if constexpr (kBackward) {
      if (source_pass)
        backward_src_kernel<kKind, K, kD, kHeads, kEdges, T, I>
            <<<grid, kWarpsPerBlock * kWarp, smem, stream>>>(args);
      else
        backward_dst_kernel<kKind, K, kD, kHeads, kEdges, T, I>
            <<<grid, kWarpsPerBlock * kWarp, smem, stream>>>(args);
    } else
      forward_kernel<kKind, K, kD, kHeads, kEdges, T, I>
          <<<grid, kWarpsPerBlock * kWarp, smem, stream>>>(args);
  }
};

// The kernels of one (kind, direction) for every dtype, index type and width plan. Each of the
// four combinations is instantiated in its own attention_<kind>_<direction>.cu, so they compile
// in parallel; everyone else sees them through the extern declarations below.
template <AttentionKind kKind, bool kBackward>
void launch(const AttentionParams& p, const RowSet& rows, bool source_pass,
            int64_t partial_offset, cudaStream_t stream) {
  if (rows.num_rows == 0 || p.heads == 0 || p.dim == 0) return;
  const DimPlan plan = plan_dim(p.dim, fast_path_ok(p));
  // The forward serves two heads a warp at D = 64 and 128 (16 lanes of 2K features each), the
  // backward at D = 64 (at 128 its 8 features a lane would need more registers than its cap).
  const bool pair = (plan.fast_dim == 64 || (!kBackward && plan.fast_dim == 128)) &&
                    p.heads % 2 == 0;
  const dim3 grid(unsigned(ceil_div(rows.num_rows, groups_per_block(rows.warps_per_row))),
                  unsigned(pair ? p.heads / 2 : p.heads), unsigned(plan.chunks));
  dispatch_float(p.type, [&](auto s) {
    using T = decltype(s);
    dispatch_index(p.csr.index64, [&](auto i) {
      using I = decltype(i);
      Args<T, I> a = make_args<T, I>(p, rows, plan.chunks);
      a.partial_offset = partial_offset;
      const Launcher<kKind, kBackward, T, I> launcher{a, grid, source_pass, stream};
      if constexpr (!kBackward) {
        // GATv2 keeps 4 edges in flight there too (H100, tolokers H=8: 0.79 against 0.83 ms);
        // the dot product, with two rows an edge, does as well with 2.
        constexpr int kPairEdges = kKind == AttentionKind::kGatv2 ? 4 : 2;
        if (pair && plan.fast_dim == 128)
          return launcher.template operator()<8, 128, 2, kPairEdges>();
      }
      if (pair) return launcher.template operator()<4, 64, 2>();
      dispatch_plan(plan, launcher);
    });
  });
  check_launch(kBackward ? "attention_backward" : "attention_forward");
}

#define FASTGNN_ATTENTION_LAUNCH(prefix, kind, backward)                                   \
  prefix template void launch<kind, backward>(const AttentionParams&, const RowSet&, bool, \
                                              int64_t, cudaStream_t);
FASTGNN_ATTENTION_LAUNCH(extern, AttentionKind::kGatv2, false)
FASTGNN_ATTENTION_LAUNCH(extern, AttentionKind::kGatv2, true)
FASTGNN_ATTENTION_LAUNCH(extern, AttentionKind::kDotProduct, false)
FASTGNN_ATTENTION_LAUNCH(extern, AttentionKind::kDotProduct, true)

}  // namespace attention
}  // namespace cuda
}  // namespace fastgnn
