// Fused GAT (v1) attention kernels, instantiated in attention_gat_{forward,backward}.cu.
//
// The logit of edge j -> i at head h is LeakyReLU(alpha_src[j,h] + alpha_dst[i,h] (+
// alpha_edge[e,h])): two scalar loads, no feature dot product. Two layouts:
// - packed (light rows, where a whole row of every head fits 32 lanes at K = 4 or 8 features a
//   lane): a team of lanes owns a row, several rows share a warp (see Team below);
// - general: a group of G lanes owns one (row, head) pair and each lane K consecutive features
//   of that head (G * K >= D; above D = 256, blockIdx.z picks a 256-feature chunk), so a warp
//   serves 32 / G heads of a row. Heavy rows get several warps, which split the edge list and
//   merge through shared memory. Split rows (more than a block's warps per row) also spread a
//   row over `pieces` blocks: each block writes its partial state to a workspace, and a merge
//   kernel combines the pieces in order (so a hub row no longer sets the kernel's length).
//
// Forward: online softmax statistics per (row, head), saved as lse = max + log(sum).
// Backward (see attention_gat.cpp for the formulas): one pass over the sources (the transposed
// CSR, or the CSR itself on a symmetric graph) gathers dY of each out-edge's destination and
// recomputes its weight from lse, giving d x_src, d alpha_src and the edge's pre-activation
// gradient grad_logit ([E, H] scalars); a scalar pass over the destinations then sums those
// into d alpha_dst. Every output is written by one lane group in a fixed order: deterministic,
// no atomics. The scalar alpha-gradient sums are double: their terms nearly cancel.
#pragma once

#include <algorithm>
#include <cmath>
#include <initializer_list>

#include "attention_dropout.h"
#include "cuda/attention_gat_kernels.h"
#include "cuda/common.cuh"

namespace fastgnn {
namespace cuda {
namespace gat {

constexpr int kEdges = 4;  // edges whose gathers are in flight together in the forward
constexpr int kMergeThreads = 256;

template <typename T, typename I>
struct Args {
  using acc_t = typename Scalar<T>::acc;
  const I* rowptr;
  const I* col;
  const I* src_perm;
  const I* logit_slot;
  const I* rows;
  int64_t num_rows;
  int warps_per_row;   // of one block: the group that owns a row (or a row's piece)
  int pieces;          // blocks sharing a row (1: the group owns the whole row)
  int lanes_per_head;  // packed kernels
  const I* edge_perm;
  const T* alpha_dst;
  const T* x_src;
  const T* alpha_src;
  const T* alpha_edge;
  acc_t slope;
  int64_t heads, dim;
  int chunks;
  bool aligned;
  DropoutSpec dropout;
  T* out;
  acc_t* lse;
  acc_t* grad_logit;
  const T* grad_out;
  const acc_t* lse_in;
  const acc_t* delta;
  T* grad_alpha_dst;
  T* grad_x_src;
  T* grad_alpha_src;
  T* grad_alpha_edge;
  // split rows: per (row of the set, piece, head) partial states, in the statistics type
  acc_t* part_acc;    // [.., D] weighted sums (forward) or x_src gradients (backward)
  acc_t* part_peak;   // forward: the piece's largest logit
  acc_t* part_total;  // forward: its sum of exp(logit - peak)
  double* part_src;   // backward: its alpha_src gradient sum
};

template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

// K features of a head's row from feature f0 (zeros past the end); 16-byte loads when the
// row layout allows them.
template <int K, typename T, typename acc_t>
__device__ __forceinline__ void load_k(const T* __restrict__ head_row, int64_t f0, int64_t dim,
                                       bool aligned, acc_t (&out)[K]) {
  constexpr int kVec = (16 / int(sizeof(T))) < K ? (16 / int(sizeof(T))) : K;
  if (aligned && dim % kVec == 0 && f0 + K <= dim) {
#pragma unroll
    for (int c = 0; c < K; c += kVec) {
      const Pack<T, kVec> pk = *reinterpret_cast<const Pack<T, kVec>*>(head_row + f0 + c);
#pragma unroll
      for (int k = 0; k < kVec; ++k) out[c + k] = Scalar<T>::load(pk.v[k]);
    }
  } else {
#pragma unroll
    for (int k = 0; k < K; ++k)
      out[k] = f0 + k < dim ? Scalar<T>::load(head_row[f0 + k]) : acc_t(0);
  }
}

template <int G, typename V>
__device__ __forceinline__ V group_sum(V v) {
#pragma unroll
  for (int o = G / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <int G, typename V>
__device__ __forceinline__ V group_max(V v) {
#pragma unroll
  for (int o = G / 2; o > 0; o /= 2) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// The (row, head, features) this lane works on and its warp's place in its group.
struct Slot {
  int warp, lane, member, group_size, chunk, piece;
  int64_t index, r, h, f0;  // index: the row's position in the row set; r: the row
  bool valid;    // the warp has a row (uniform over the warp)
  bool head_ok;  // the lane has a head (lanes past H shadow head 0 and write nothing)
  bool leader;   // first lane of its head group in chunk 0: writes the per-(row, head) scalars
};

template <int K, int G, typename T, typename I>
__device__ __forceinline__ Slot slot_of(const Args<T, I>& a) {
  Slot s;
  s.warp = threadIdx.x / kWarp;
  s.lane = threadIdx.x % kWarp;
  s.group_size = a.warps_per_row;
  s.member = s.warp % s.group_size;
  s.piece = int(blockIdx.x % unsigned(a.pieces));
  const int64_t r = int64_t(blockIdx.x / unsigned(a.pieces)) * (kWarpsPerBlock / s.group_size) +
                    s.warp / s.group_size;
  s.index = r;
  s.valid = r < a.num_rows;
  s.r = s.valid ? (a.rows ? int64_t(a.rows[r]) : r) : 0;
  const int64_t h = int64_t(blockIdx.y) * (kWarp / G) + s.lane / G;
  s.head_ok = h < a.heads;
  s.h = s.head_ok ? h : 0;
  s.chunk = blockIdx.z;
  s.f0 = int64_t(s.chunk) * G * K + (s.lane % G) * K;
  s.leader = s.head_ok && s.chunk == 0 && s.lane % G == 0;
  return s;
}

// The CSR positions [begin, end) this warp walks: a contiguous share of its row's edges, the
// row split into pieces x group_size shares.
template <typename T, typename I>
__device__ __forceinline__ void edge_share(const Args<T, I>& a, const Slot& s, int64_t& begin,
                                           int64_t& end) {
  const int64_t first = a.rowptr[s.r], last = a.rowptr[s.r + 1];
  const int64_t shares = int64_t(s.group_size) * a.pieces;
  const int64_t per = (last - first + shares - 1) / shares;
  begin = min(last, first + (int64_t(s.piece) * s.group_size + s.member) * per);
  end = min(last, begin + per);
}

// Where a split row's piece keeps its per-(row, head) partials.
template <typename T, typename I>
__device__ __forceinline__ int64_t piece_slot(const Args<T, I>& a, const Slot& s) {
  return (s.index * a.pieces + s.piece) * a.heads + s.h;
}

template <typename T, typename I>
__device__ __forceinline__ const T* head_row(const T* base, int64_t node, int64_t h,
                                             const Args<T, I>& a) {
  return base + (node * a.heads + h) * a.dim;
}

// Pre-activation alpha_src[j] + alpha_dst[i] (+ alpha_edge[e]) with alpha_dst[i] given.
template <typename T, typename I, typename acc_t>
__device__ __forceinline__ acc_t pre_activation(const Args<T, I>& a, int64_t j, int64_t e,
                                                int64_t h, acc_t dst_score) {
  acc_t z = Scalar<T>::load(a.alpha_src[j * a.heads + h]) + dst_score;
  if (a.alpha_edge) {
    const int64_t pos = a.edge_perm ? int64_t(a.edge_perm[e]) : e;
    z += Scalar<T>::load(a.alpha_edge[pos * a.heads + h]);
  }
  return z;
}

// Pre-activation of edge n -> m seen from its source n: alpha_src[n] + alpha_dst[m]
// (+ alpha_edge at forward CSR position e), in the forward's order of additions.
template <typename T, typename I, typename acc_t>
__device__ __forceinline__ acc_t source_pre_activation(const Args<T, I>& a, acc_t src_score,
                                                       int64_t m, int64_t e, int64_t h) {
  acc_t z = src_score + Scalar<T>::load(a.alpha_dst[m * a.heads + h]);
  if (a.alpha_edge) {
    const int64_t pos = a.edge_perm ? int64_t(a.edge_perm[e]) : e;
    z += Scalar<T>::load(a.alpha_edge[pos * a.heads + h]);
  }
  return z;
}

template <typename acc_t>
__device__ __forceinline__ acc_t leaky(acc_t v, acc_t slope) { return v > 0 ? v : v * slope; }

// d loss / d pre-activation of edge n -> m: (wc <dY_m, x_n> - alpha delta_m) LeakyReLU'(z),
// in double (its two terms nearly cancel).
template <typename T, typename I, typename acc_t>
__device__ __forceinline__ double logit_grad(const Args<T, I>& a, acc_t z, acc_t alpha, acc_t wc,
                                             acc_t dval, int64_t m, int64_t h) {
  return (double(wc) * double(dval) - double(alpha) * double(a.delta[m * a.heads + h])) *
         double(z > 0 ? acc_t(1) : a.slope);
}

template <int K, typename acc_t>
__device__ __forceinline__ acc_t dot(const acc_t (&x)[K], const acc_t (&y)[K]) {
  acc_t sum = 0;
#pragma unroll
  for (int k = 0; k < K; ++k) sum += x[k] * y[k];
  return sum;
}

// <u_row, v_row> over the head's features outside this lane's chunk (D > 256 only), this
// lane's share; the caller group-sums.
template <int K, int G, typename T, typename I>
__device__ __forceinline__ typename Scalar<T>::acc other_chunks_dot(const Args<T, I>& a,
                                                                    const Slot& s, const T* u,
                                                                    const T* v) {
  using acc_t = typename Scalar<T>::acc;
  acc_t sum = 0;
  for (int c = 0; c < a.chunks; ++c) {
    if (c == s.chunk) continue;
    const int64_t f = int64_t(c) * G * K + (s.lane % G) * K;
    acc_t x[K], y[K];
    load_k<K>(u, f, a.dim, a.aligned, x);
    load_k<K>(v, f, a.dim, a.aligned, y);
    sum += dot<K>(x, y);
  }
  return sum;
}

// A forward row's result at (row r, head h), this lane's K features from f0: the normalised
// sum, and (leader) the log-sum-exp the backward recomputes the weights from.
template <int K, typename T, typename I, typename acc_t>
__device__ __forceinline__ void store_softmax(const Args<T, I>& a, int64_t r, int64_t h,
                                              int64_t f0, bool leader, const acc_t (&acc)[K],
                                              acc_t peak, acc_t total) {
  const acc_t inv = total > 0 ? acc_t(1) / total : acc_t(0);
  T* out = a.out + (r * a.heads + h) * a.dim;
#pragma unroll
  for (int k = 0; k < K; ++k)
    if (f0 + k < a.dim) out[f0 + k] = Scalar<T>::store(acc[k] * inv);
  if (leader) a.lse[r * a.heads + h] = total > 0 ? peak + log(total) : acc_t(-INFINITY);
}

template <typename T, typename I, int K, int G>
__global__ void __launch_bounds__(kWarpsPerBlock * kWarp) forward_kernel(const Args<T, I> a) {
  using acc_t = typename Scalar<T>::acc;
  __shared__ acc_t sh_acc[kWarpsPerBlock][kWarp][K];
  __shared__ acc_t sh_peak[kWarpsPerBlock][kWarp];
  __shared__ acc_t sh_total[kWarpsPerBlock][kWarp];
  const Slot s = slot_of<K, G>(a);
  const DropoutSpec dropout = a.dropout.resolved();
  acc_t acc[K];
#pragma unroll
  for (int k = 0; k < K; ++k) acc[k] = 0;
  acc_t peak = -INFINITY, total = 0;
  if (s.valid) {
    const acc_t dst_score = Scalar<T>::load(a.alpha_dst[s.r * a.heads + s.h]);
    int64_t begin, end;
    edge_share(a, s, begin, end);
    // Pass 1: the head's maximum logit, the G lanes taking every G-th edge.
    for (int64_t e = begin + s.lane % G; e < end; e += G)
      peak = max(peak, leaky(pre_activation(a, int64_t(a.col[e]), e, s.h, dst_score), a.slope));
    peak = group_max<G>(peak);
    // Pass 2: weights and the weighted sum of x_src, kEdges gathers in flight.
    for (int64_t base = begin; base < end; base += kWarp) {
      const int n = int(min(int64_t(kWarp), end - base));
      const I mine = s.lane < n ? a.col[base + s.lane] : I(0);
      for (int t = 0; t < n; t += kEdges) {
        acc_t val[kEdges][K], w[kEdges];
#pragma unroll
        for (int u = 0; u < kEdges; ++u) {
          const int slot = min(t + u, n - 1);  // past n: repeat the last edge, weight 0
          const int64_t j = int64_t(__shfl_sync(0xffffffffu, mine, slot));
          load_k<K>(head_row(a.x_src, j, s.h, a), s.f0, a.dim, a.aligned, val[u]);
          const acc_t logit = leaky(pre_activation(a, j, base + slot, s.h, dst_score), a.slope);
          w[u] = t + u < n ? exp(logit - peak) : acc_t(0);
        }
#pragma unroll
        for (int u = 0; u < kEdges; ++u) {
          total += w[u];
          const acc_t wc = w[u] * dropout.template factor<acc_t>(base + t + u, s.h);
#pragma unroll
          for (int k = 0; k < K; ++k) acc[k] += wc * val[u][k];
        }
      }
    }
  }
  if (s.group_size > 1) {  // merge the group's softmax states into its first warp
    const int first = s.warp - s.member;
    sh_peak[s.warp][s.lane] = peak;
    __syncthreads();
    acc_t top = -INFINITY;
    for (int w = 0; w < s.group_size; ++w) top = max(top, sh_peak[first + w][s.lane]);
    const acc_t rescale = peak == -INFINITY ? acc_t(0) : exp(peak - top);
    sh_total[s.warp][s.lane] = total * rescale;
#pragma unroll
    for (int k = 0; k < K; ++k) sh_acc[s.warp][s.lane][k] = acc[k] * rescale;
    __syncthreads();
    if (s.member == 0) {
      total = 0;
#pragma unroll
      for (int k = 0; k < K; ++k) acc[k] = 0;
      for (int w = 0; w < s.group_size; ++w) {
        total += sh_total[first + w][s.lane];
#pragma unroll
        for (int k = 0; k < K; ++k) acc[k] += sh_acc[first + w][s.lane][k];
      }
      peak = top;
    }
  }
  if (!s.valid || s.member != 0 || !s.head_ok) return;
  if (a.pieces > 1) {  // a piece of a split row: its softmax state, merged by forward_merge_kernel
    const int64_t slot = piece_slot(a, s);
#pragma unroll
    for (int k = 0; k < K; ++k)
      if (s.f0 + k < a.dim) a.part_acc[slot * a.dim + s.f0 + k] = acc[k];
    if (s.leader) {
      a.part_peak[slot] = peak;
      a.part_total[slot] = total;
    }
    return;
  }
  store_softmax<K>(a, s.r, s.h, s.f0, s.leader, acc, peak, total);
}

// A merge kernel thread's (row of the set, head, feature), and where the row's first piece
// keeps that head's partials (piece p's are p * heads further).
struct MergeItem {
  bool valid;
  int64_t f, h, index, first;
};

template <typename T, typename I>
__device__ __forceinline__ MergeItem merge_item(const Args<T, I>& a) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  MergeItem m;
  m.valid = i < a.num_rows * a.heads * a.dim;
  m.f = i % a.dim;
  const int64_t pair = i / a.dim;
  m.h = pair % a.heads;
  m.index = pair / a.heads;
  m.first = m.index * a.pieces * a.heads + m.h;
  return m;
}

// Split rows' forward results: a thread per (row, head, feature) combines the row's pieces in
// piece order, as the block merge does its warps.
template <typename T, typename I>
__global__ void forward_merge_kernel(const Args<T, I> a) {
  using acc_t = typename Scalar<T>::acc;
  const MergeItem m = merge_item(a);
  if (!m.valid) return;
  acc_t top = -INFINITY;
  for (int p = 0; p < a.pieces; ++p) top = max(top, a.part_peak[m.first + p * a.heads]);
  acc_t total = 0, sum = 0;
  for (int p = 0; p < a.pieces; ++p) {
    const int64_t slot = m.first + p * a.heads;
    const acc_t peak = a.part_peak[slot];
    const acc_t rescale = peak == -INFINITY ? acc_t(0) : exp(peak - top);
    total += a.part_total[slot] * rescale;
    sum += a.part_acc[slot * a.dim + m.f] * rescale;
  }
  const int64_t r = a.rows ? int64_t(a.rows[m.index]) : m.index;
  const acc_t inv = total > 0 ? acc_t(1) / total : acc_t(0);
  a.out[(r * a.heads + m.h) * a.dim + m.f] = Scalar<T>::store(sum * inv);
  if (m.f == 0) a.lse[r * a.heads + m.h] = total > 0 ? top + log(total) : acc_t(-INFINITY);
}

// The grad_logit row of walked edge q, at forward CSR position e.
template <typename T, typename I>
__device__ __forceinline__ int64_t logit_row(const Args<T, I>& a, int64_t q, int64_t e) {
  return a.logit_slot ? int64_t(a.logit_slot[q]) : e;
}

// Source side of the backward: the walked row n is the source of edge src_perm[q] into col[q].
// Gradients of x_src and alpha_src, and grad_logit of each walked edge (its leader lane).
template <typename T, typename I, int K, int G>
__global__ void __launch_bounds__(kWarpsPerBlock * kWarp) backward_kernel(const Args<T, I> a) {
  using acc_t = typename Scalar<T>::acc;
  __shared__ acc_t sh_vec[kWarpsPerBlock][kWarp][K];
  __shared__ double sh_src[kWarpsPerBlock][kWarp];
  const Slot s = slot_of<K, G>(a);
  const DropoutSpec dropout = a.dropout.resolved();
  const int64_t n = s.r, h = s.h, heads = a.heads;
  double sum_src = 0;
  acc_t grad_x[K];
#pragma unroll
  for (int k = 0; k < K; ++k) grad_x[k] = 0;
  if (s.valid) {
    acc_t own_x[K];
    load_k<K>(head_row(a.x_src, n, h, a), s.f0, a.dim, a.aligned, own_x);
    const acc_t src_score = Scalar<T>::load(a.alpha_src[n * heads + h]);
    int64_t begin, end;
    edge_share(a, s, begin, end);
    for (int64_t base = begin; base < end; base += kWarp) {
      const int count = int(min(int64_t(kWarp), end - base));
      const I col_mine = s.lane < count ? a.col[base + s.lane] : I(0);
      const I perm_mine = s.lane < count ? a.src_perm[base + s.lane] : I(0);
      for (int t = 0; t < count; ++t) {  // edge n -> m at forward CSR position e
        const int64_t m = int64_t(__shfl_sync(0xffffffffu, col_mine, t));
        const int64_t e = int64_t(__shfl_sync(0xffffffffu, perm_mine, t));
        acc_t dout[K];
        const T* dout_row = head_row(a.grad_out, m, h, a);
        load_k<K>(dout_row, s.f0, a.dim, a.aligned, dout);
        acc_t dval = dot<K>(dout, own_x);
        if (a.chunks > 1)
          dval += other_chunks_dot<K, G>(a, s, dout_row, head_row(a.x_src, n, h, a));
        dval = group_sum<G>(dval);
        const acc_t z = source_pre_activation(a, src_score, m, e, h);
        const acc_t alpha = exp(leaky(z, a.slope) - a.lse_in[m * heads + h]);
        const acc_t wc = alpha * dropout.template factor<acc_t>(e, h);
        const double dz = logit_grad(a, z, alpha, wc, dval, m, h);
        sum_src += dz;
        if (s.leader) a.grad_logit[logit_row(a, base + t, e) * heads + h] = acc_t(dz);
#pragma unroll
        for (int k = 0; k < K; ++k) grad_x[k] += wc * dout[k];
      }
    }
  }
  if (s.group_size > 1) {  // sum the group's partial gradients into its first warp
    const int first = s.warp - s.member;
    sh_src[s.warp][s.lane] = sum_src;
#pragma unroll
    for (int k = 0; k < K; ++k) sh_vec[s.warp][s.lane][k] = grad_x[k];
    __syncthreads();
    if (s.member == 0) {
      for (int w = 1; w < s.group_size; ++w) {
        sum_src += sh_src[first + w][s.lane];
#pragma unroll
        for (int k = 0; k < K; ++k) grad_x[k] += sh_vec[first + w][s.lane][k];
      }
    }
  }
  if (!s.valid || s.member != 0 || !s.head_ok) return;
  if (a.pieces > 1) {  // a piece of a split row: its sums, added up by backward_merge_kernel
    const int64_t slot = piece_slot(a, s);
#pragma unroll
    for (int k = 0; k < K; ++k)
      if (s.f0 + k < a.dim) a.part_acc[slot * a.dim + s.f0 + k] = grad_x[k];
    if (s.leader) a.part_src[slot] = sum_src;
    return;
  }
  if (s.leader) a.grad_alpha_src[n * heads + h] = Scalar<T>::store(acc_t(sum_src));
  T* gx = a.grad_x_src + (n * heads + h) * a.dim;
#pragma unroll
  for (int k = 0; k < K; ++k)
    if (s.f0 + k < a.dim) gx[s.f0 + k] = Scalar<T>::store(grad_x[k]);
}

// Split rows' source-side gradients: a thread per (row, head, feature) adds the row's pieces in
// piece order.
template <typename T, typename I>
__global__ void backward_merge_kernel(const Args<T, I> a) {
  using acc_t = typename Scalar<T>::acc;
  const MergeItem m = merge_item(a);
  if (!m.valid) return;
  acc_t sum = 0;
  double src = 0;
  for (int p = 0; p < a.pieces; ++p) {
    sum += a.part_acc[(m.first + p * a.heads) * a.dim + m.f];
    if (m.f == 0) src += a.part_src[m.first + p * a.heads];
  }
  const int64_t n = a.rows ? int64_t(a.rows[m.index]) : m.index;
  a.grad_x_src[(n * a.heads + m.h) * a.dim + m.f] = Scalar<T>::store(sum);
  if (m.f == 0) a.grad_alpha_src[n * a.heads + m.h] = Scalar<T>::store(acc_t(src));
}

// ---- packed rows: a team of heads * lanes_per_head lanes owns a whole row, every head ----------
// Lane (h, l) holds features [lK, lK + K) of head h; 32 / team rows share a warp, so low-degree
// graphs keep every lane busy, and each lane walks its row's edges U at a time with their
// gathers in flight together. Per-head dot products reduce over the lanes_per_head lanes of the
// head (a power of two); the team's lanes run the same loop, so shuffles take the team's mask.
struct Team {
  int64_t r, h, f0;
  bool valid;
  bool leader;  // first lane of its head: writes the per-(row, head) scalars
  unsigned mask;
};

template <int K, typename T, typename I>
__device__ __forceinline__ Team team_of(const Args<T, I>& a) {
  const int size = int(a.heads) * a.lanes_per_head;
  const int per_warp = kWarp / size;
  const int lane = threadIdx.x % kWarp, team = lane / size, member = lane % size;
  const int64_t index =
      (int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp) * per_warp + team;
  Team t;
  t.valid = team < per_warp && index < a.num_rows;
  t.r = t.valid ? (a.rows ? int64_t(a.rows[index]) : index) : 0;
  t.h = member / a.lanes_per_head;
  t.f0 = int64_t(member % a.lanes_per_head) * K;
  t.leader = member % a.lanes_per_head == 0;
  t.mask = size == kWarp ? 0xffffffffu : ((1u << size) - 1u) << (team * size);
  return t;
}

template <typename V>
__device__ __forceinline__ V head_sum(V v, unsigned mask, int lanes_per_head) {
  for (int o = lanes_per_head / 2; o > 0; o /= 2) v += __shfl_xor_sync(mask, v, o);
  return v;
}

// Edges a lane walks at once: enough gathers in flight, within the register budget.
template <int K>
constexpr int packed_edges() { return K >= 16 ? 2 : K >= 8 ? 4 : 8; }

// Forward over destination rows: an online softmax per lane (the lanes of a head see the same
// logits, so no reduction), rescaled once per U edges.
template <typename T, typename I, int K>
__global__ void __launch_bounds__(kWarpsPerBlock * kWarp) forward_packed_kernel(const Args<T, I> a) {
  using acc_t = typename Scalar<T>::acc;
  constexpr int U = packed_edges<K>();
  const Team t = team_of<K>(a);
  if (!t.valid) return;
  const DropoutSpec dropout = a.dropout.resolved();
  const acc_t dst_score = Scalar<T>::load(a.alpha_dst[t.r * a.heads + t.h]);
  const int64_t begin = a.rowptr[t.r], end = a.rowptr[t.r + 1];
  acc_t acc[K];
#pragma unroll
  for (int k = 0; k < K; ++k) acc[k] = 0;
  acc_t peak = -INFINITY, total = 0;
  for (int64_t base = begin; base < end; base += U) {
    acc_t val[U][K], logit[U];
    acc_t top = peak;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t e = min(base + u, end - 1);  // past end: repeat the last edge, weight 0
      const int64_t j = int64_t(a.col[e]);
      load_k<K>(head_row(a.x_src, j, t.h, a), t.f0, a.dim, a.aligned, val[u]);
      logit[u] = base + u < end ? leaky(pre_activation(a, j, e, t.h, dst_score), a.slope)
                                : acc_t(-INFINITY);
      top = max(top, logit[u]);
    }
    const acc_t rescale = peak == -INFINITY ? acc_t(0) : exp(peak - top);
    total *= rescale;
#pragma unroll
    for (int k = 0; k < K; ++k) acc[k] *= rescale;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const acc_t w = base + u < end ? exp(logit[u] - top) : acc_t(0);
      total += w;
      const acc_t wc = w * dropout.template factor<acc_t>(base + u, t.h);
#pragma unroll
      for (int k = 0; k < K; ++k) acc[k] += wc * val[u][k];
    }
    peak = top;
  }
  store_softmax<K>(a, t.r, t.h, t.f0, t.leader, acc, peak, total);
}

// Source side of the backward (as backward_kernel) over packed rows, U edges at once.
template <typename T, typename I, int K>
__global__ void __launch_bounds__(kWarpsPerBlock * kWarp)
    backward_packed_kernel(const Args<T, I> a) {
  using acc_t = typename Scalar<T>::acc;
  constexpr int U = packed_edges<K>();
  const Team t = team_of<K>(a);
  if (!t.valid) return;
  const DropoutSpec dropout = a.dropout.resolved();
  const int64_t n = t.r, h = t.h, heads = a.heads;
  acc_t own_x[K], grad_x[K];
  load_k<K>(head_row(a.x_src, n, h, a), t.f0, a.dim, a.aligned, own_x);
#pragma unroll
  for (int k = 0; k < K; ++k) grad_x[k] = 0;
  const acc_t src_score = Scalar<T>::load(a.alpha_src[n * heads + h]);
  double sum_src = 0;
  const int64_t begin = a.rowptr[n], end = a.rowptr[n + 1];
  for (int64_t base = begin; base < end; base += U) {
    acc_t dout[U][K], z[U], lse[U];
    int64_t m[U], e[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {  // edge n -> m[u] at forward CSR position e[u]
      const int64_t q = min(base + u, end - 1);  // past end: repeat the last edge, weight 0
      m[u] = int64_t(a.col[q]);
      e[u] = int64_t(a.src_perm[q]);
      load_k<K>(head_row(a.grad_out, m[u], h, a), t.f0, a.dim, a.aligned, dout[u]);
      z[u] = source_pre_activation(a, src_score, m[u], e[u], h);
      lse[u] = a.lse_in[m[u] * heads + h];
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const acc_t dval = head_sum(dot<K>(dout[u], own_x), t.mask, a.lanes_per_head);
      if (base + u >= end) continue;
      const acc_t alpha = exp(leaky(z[u], a.slope) - lse[u]);
      const acc_t wc = alpha * dropout.template factor<acc_t>(e[u], h);
      const double dz = logit_grad(a, z[u], alpha, wc, dval, m[u], h);
      sum_src += dz;
      if (t.leader) a.grad_logit[logit_row(a, base + u, e[u]) * heads + h] = acc_t(dz);
#pragma unroll
      for (int k = 0; k < K; ++k) grad_x[k] += wc * dout[u][k];
    }
  }
  if (t.leader) a.grad_alpha_src[n * heads + h] = Scalar<T>::store(acc_t(sum_src));
  T* gx = a.grad_x_src + (n * heads + h) * a.dim;
#pragma unroll
  for (int k = 0; k < K; ++k)
    if (t.f0 + k < a.dim) gx[t.f0 + k] = Scalar<T>::store(grad_x[k]);
}

// Destination side of the backward: a group of warps_per_row warps per forward CSR row (one for
// light rows) sums its edges' grad_logit per head, in double, and copies them to
// grad_alpha_edge in input edge order. Each warp takes a contiguous share of the row; within it
// lane l takes head l % heads and every (32 / heads)-th edge. Partial sums combine in lane
// order, then in warp order: deterministic.
template <typename T, typename I>
__global__ void __launch_bounds__(kWarpsPerBlock * kWarp) backward_dst_kernel(const Args<T, I> a) {
  using acc_t = typename Scalar<T>::acc;
  __shared__ double sh_sum[kWarpsPerBlock][kWarp];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, group = a.warps_per_row;
  const int member = warp % group;
  const int64_t index = int64_t(blockIdx.x) * (kWarpsPerBlock / group) + warp / group;
  const bool valid = index < a.num_rows;  // uniform over the group
  if (group == 1 && !valid) return;  // no block barrier below when a warp owns its row
  const int64_t r = valid ? (a.rows ? int64_t(a.rows[index]) : index) : 0;
  int64_t begin = 0, end = 0;
  if (valid) {
    const int64_t first = a.rowptr[r], last = a.rowptr[r + 1];
    const int64_t per = (last - first + group - 1) / group;
    begin = min(last, first + member * per);
    end = min(last, begin + per);
  }
  const int64_t heads = a.heads;
  for (int64_t h0 = 0; h0 < heads; h0 += kWarp) {
    const int span = int(min(int64_t(kWarp), heads - h0));
    const int stride = kWarp / span, offset = lane / span;
    const int64_t h = h0 + lane % span;
    double sum = 0;
    if (offset < stride) {
      for (int64_t q = begin + offset; q < end; q += stride) {
        const acc_t g = a.grad_logit[q * heads + h];
        sum += double(g);
        if (a.grad_alpha_edge) {
          const int64_t pos = a.edge_perm ? int64_t(a.edge_perm[q]) : q;
          a.grad_alpha_edge[pos * heads + h] = Scalar<T>::store(g);
        }
      }
    }
    double total = 0;
    for (int w = 0; w < stride; ++w)
      total += __shfl_sync(0xffffffffu, sum, int(h - h0) + w * span);
    if (group > 1) {  // the group's warps, in order, into its first warp
      sh_sum[warp][lane] = total;
      __syncthreads();
      if (member == 0)
        for (int w = 1; w < group; ++w) total += sh_sum[warp + w][lane];
      __syncthreads();
    }
    if (valid && member == 0 && offset == 0)
      a.grad_alpha_dst[r * heads + h] = Scalar<T>::store(acc_t(total));
  }
}

// Features per lane K and lanes per head G: G * K covers D up to 256 (chunks above).
struct DimPlan {
  int k, g, chunks;
};

inline DimPlan plan_dim(int64_t dim) {
  if (dim <= 8) return {1, 8, 1};
  // 2 features a lane: a warp holds 4 heads of a row, not 2 (H200, tolokers 4 x 16: forward
  // 1.6x and backward 1.8x faster than at 1 a lane in float32, 1.4x and 1.6x in half).
  if (dim <= 16) return {2, 8, 1};
  if (dim <= 32) return {1, 32, 1};
  if (dim <= 64) return {2, 32, 1};
  if (dim <= 128) return {4, 32, 1};
  return {8, 32, int(ceil_div(dim, 256))};
}

template <typename F>
void dispatch_plan(const DimPlan& plan, F&& f) {
  if (plan.k == 1 && plan.g == 8) return f.template operator()<1, 8>();
  if (plan.k == 1) return f.template operator()<1, 32>();
  if (plan.k == 2 && plan.g == 8) return f.template operator()<2, 8>();
  if (plan.k == 2) return f.template operator()<2, 32>();
  if (plan.k == 4) return f.template operator()<4, 32>();
  return f.template operator()<8, 32>();
}

inline int split_pieces(const RowSet& rows) {
  return std::max(1, rows.warps_per_row / kWarpsPerBlock);
}

template <typename T, typename I>
Args<T, I> make_args(const GatParams& p, const RowSet& rows, int chunks, int lanes_per_head) {
  using acc_t = typename Scalar<T>::acc;
  Args<T, I> a;
  a.rowptr = static_cast<const I*>(p.csr.rowptr);
  a.col = static_cast<const I*>(p.csr.col);
  a.src_perm = static_cast<const I*>(p.src_perm);
  a.logit_slot = static_cast<const I*>(p.logit_slot);
  a.rows = static_cast<const I*>(rows.rows);
  a.num_rows = rows.num_rows;
  a.warps_per_row = std::min(rows.warps_per_row, kWarpsPerBlock);
  a.pieces = split_pieces(rows);
  a.lanes_per_head = lanes_per_head;
  a.edge_perm = static_cast<const I*>(p.edge_perm);
  a.alpha_dst = static_cast<const T*>(p.alpha_dst);
  a.x_src = static_cast<const T*>(p.x_src);
  a.alpha_src = static_cast<const T*>(p.alpha_src);
  a.alpha_edge = static_cast<const T*>(p.alpha_edge);
  a.slope = acc_t(p.slope);
  a.heads = p.heads;
  a.dim = p.dim;
  a.chunks = chunks;
  a.aligned = p.aligned;
  a.dropout = p.dropout;
  a.out = static_cast<T*>(p.out);
  a.lse = static_cast<acc_t*>(p.lse);
  a.grad_logit = static_cast<acc_t*>(p.grad_logit);
  a.grad_out = static_cast<const T*>(p.grad_out);
  a.lse_in = static_cast<const acc_t*>(p.lse_in);
  a.delta = static_cast<const acc_t*>(p.delta);
  a.grad_alpha_dst = static_cast<T*>(p.grad_alpha_dst);
  a.grad_x_src = static_cast<T*>(p.grad_x_src);
  a.grad_alpha_src = static_cast<T*>(p.grad_alpha_src);
  a.grad_alpha_edge = static_cast<T*>(p.grad_alpha_edge);
  a.part_acc = static_cast<acc_t*>(p.part_acc);
  a.part_peak = static_cast<acc_t*>(p.part_peak);
  a.part_total = static_cast<acc_t*>(p.part_total);
  a.part_src = p.part_src;
  return a;
}

template <bool kBackward, typename T, typename I>
struct Launcher {
  const Args<T, I>& args;
  dim3 grid;
  cudaStream_t stream;

  template <int K, int G>
  void operator()() const {
    if constexpr (kBackward)
      backward_kernel<T, I, K, G><<<grid, kWarpsPerBlock * kWarp, 0, stream>>>(args);
    else
      forward_kernel<T, I, K, G><<<grid, kWarpsPerBlock * kWarp, 0, stream>>>(args);
  }

  template <int K>
  void packed() const {
    if constexpr (kBackward)
      backward_packed_kernel<T, I, K><<<grid, kWarpsPerBlock * kWarp, 0, stream>>>(args);
    else
      forward_packed_kernel<T, I, K><<<grid, kWarpsPerBlock * kWarp, 0, stream>>>(args);
  }
};

// Packed rows: K features per lane and a power-of-two number of lanes per head, the whole row
// within 32 lanes. Float32 takes K = 4, else 8. Half lanes load 16 bytes at least, as a
// float32 lane does at K = 4: the forward K = 8 (2.4x faster than K = 4 on tolokers 4 x 16),
// the backward K = 16, which halves the lanes that repeat each edge's scalar work (H200,
// ogbn-arxiv: 1.31x faster than K = 8 at 4 x 16, 1.44x at 4 x 64; the forward gained nothing
// at 4 x 64 and lost 12% at 4 x 16). A smaller K never fits where a larger one does not.
// False where the row does not fit.
struct PackPlan {
  int k, lanes_per_head, team;
};

inline bool plan_packed(int64_t heads, int64_t dim, bool half, bool backward, PackPlan& plan) {
  const std::initializer_list<int> half_forward{8}, half_backward{16}, single{4, 8};
  for (int k : half ? (backward ? half_backward : half_forward) : single) {
    int lanes = 1;
    while (lanes < ceil_div(dim, k)) lanes *= 2;
    if (heads * lanes <= kWarp) {
      plan = {k, lanes, int(heads) * lanes};
      return true;
    }
  }
  return false;
}

template <bool kBackward>
void launch(const GatParams& p, const RowSet& rows, cudaStream_t stream) {
  if (rows.num_rows == 0 || p.heads == 0 || p.dim == 0) return;
  PackPlan pack{};
  const bool half = p.type == FloatType::kHalf || p.type == FloatType::kBFloat16;
  const bool packed =
      rows.warps_per_row == 1 && plan_packed(p.heads, p.dim, half, kBackward, pack);
  const DimPlan plan = plan_dim(p.dim);
  const dim3 grid =
      packed ? dim3(unsigned(ceil_div(rows.num_rows, kWarpsPerBlock * (kWarp / pack.team))))
             : dim3(unsigned(ceil_div(rows.num_rows,
                                      kWarpsPerBlock / std::min(rows.warps_per_row,
                                                                kWarpsPerBlock)) *
                             split_pieces(rows)),
                    unsigned(ceil_div(p.heads, kWarp / plan.g)), unsigned(plan.chunks));
  dispatch_float(p.type, [&](auto s) {
    using T = decltype(s);
    dispatch_index(p.csr.index64, [&](auto i) {
      using I = decltype(i);
      const Args<T, I> a = make_args<T, I>(p, rows, plan.chunks, pack.lanes_per_head);
      const Launcher<kBackward, T, I> launcher{a, grid, stream};
      if (!packed)
        dispatch_plan(plan, launcher);
      else if (pack.k == 4)
        launcher.template packed<4>();
      else if (pack.k == 8)
        launcher.template packed<8>();
      else if constexpr (kBackward && sizeof(T) == 2)
        launcher.template packed<16>();
      if (a.pieces > 1) {
        const unsigned blocks = unsigned(ceil_div(rows.num_rows * p.heads * p.dim, kMergeThreads));
        if constexpr (kBackward)
          backward_merge_kernel<T, I><<<blocks, kMergeThreads, 0, stream>>>(a);
        else
          forward_merge_kernel<T, I><<<blocks, kMergeThreads, 0, stream>>>(a);
      }
    });
  });
  check_launch(kBackward ? "gat_backward" : "gat_forward");
}

inline void launch_dst(const GatParams& p, const RowSet& rows, cudaStream_t stream) {
  if (rows.num_rows == 0 || p.heads == 0) return;
  const int group = std::min(rows.warps_per_row, kWarpsPerBlock);  // split rows: a whole block
  dispatch_float(p.type, [&](auto s) {
    using T = decltype(s);
    dispatch_index(p.csr.index64, [&](auto i) {
      using I = decltype(i);
      Args<T, I> a = make_args<T, I>(p, rows, 1, 1);
      a.pieces = 1;
      backward_dst_kernel<T, I><<<unsigned(ceil_div(rows.num_rows, kWarpsPerBlock / group)),
                                  kWarpsPerBlock * kWarp, 0, stream>>>(a);
    });
  });
  check_launch("gat_backward");
}

}  // namespace gat
}  // namespace cuda
}  // namespace fastgnn
