// Fused GAT (v1) attention kernels, instantiated in attention_gat_{forward,backward}.cu.
//
// The logit of edge j -> i at head h is LeakyReLU(alpha_src[j,h] + alpha_dst[i,h] (+
// alpha_edge[e,h])): two scalar loads, no feature dot product. A group of G lanes owns one
// (row, head) pair and each lane K consecutive features of that head (G * K >= D; above
// D = 256, blockIdx.z picks a 256-feature chunk), so a warp serves 32 / G heads of a row with
// one coalesced gather of x_src per edge. Light rows get one warp; heavy rows several, which
// split the edge list and merge through shared memory.
//
// Forward: the G lanes of a head first find its maximum logit over the row's edges (each lane
// a strided share of the scalars), then every edge adds exp(logit - max) x_src[j] to the
// accumulator: no online rescaling, except when the warps of a heavy row merge. Backward
// (see attention_gat.cpp for the formulas): each (row, head) is written by one group, in a
// fixed order: deterministic, no atomics. The scalar alpha-gradient sums are double: their
// terms nearly cancel.
#pragma once

#include <cmath>

#include "attention_dropout.h"
#include "cuda/attention_gat_kernels.h"
#include "cuda/common.cuh"

namespace fastgnn {
namespace cuda {
namespace gat {

constexpr int kWarpsPerBlock = 8;
constexpr int kEdges = 4;  // edges whose gathers are in flight together in the forward

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
  const T* grad_out;
  const acc_t* lse_in;
  const acc_t* delta;
  T* grad_alpha_dst;
  T* grad_x_src;
  T* grad_alpha_src;
  T* grad_alpha_edge;
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
  int warp, lane, member, group_size, chunk;
  int64_t r, h, f0;
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
  const int64_t r = int64_t(blockIdx.x) * (kWarpsPerBlock / s.group_size) + s.warp / s.group_size;
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

// The CSR positions [begin, end) this warp walks: a contiguous share of its row's edges.
template <typename T, typename I>
__device__ __forceinline__ void edge_share(const Args<T, I>& a, const Slot& s, int64_t& begin,
                                           int64_t& end) {
  const int64_t first = a.rowptr[s.r], last = a.rowptr[s.r + 1];
  const int64_t per = (last - first + s.group_size - 1) / s.group_size;
  begin = min(last, first + s.member * per);
  end = min(last, begin + per);
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

template <typename acc_t>
__device__ __forceinline__ acc_t leaky(acc_t v, acc_t slope) { return v > 0 ? v : v * slope; }

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

template <typename T, typename I, int K, int G>
__global__ void __launch_bounds__(kWarpsPerBlock * kWarp) forward_kernel(const Args<T, I> a) {
  using acc_t = typename Scalar<T>::acc;
  __shared__ acc_t sh_acc[kWarpsPerBlock][kWarp][K];
  __shared__ acc_t sh_peak[kWarpsPerBlock][kWarp];
  __shared__ acc_t sh_total[kWarpsPerBlock][kWarp];
  const Slot s = slot_of<K, G>(a);
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
          const acc_t wc = w[u] * a.dropout.template factor<acc_t>(base + t + u, s.h);
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
  const acc_t inv = total > 0 ? acc_t(1) / total : acc_t(0);
  T* out = a.out + (s.r * a.heads + s.h) * a.dim;
#pragma unroll
  for (int k = 0; k < K; ++k)
    if (s.f0 + k < a.dim) out[s.f0 + k] = Scalar<T>::store(acc[k] * inv);
  if (s.leader) a.lse[s.r * a.heads + s.h] = total > 0 ? peak + log(total) : acc_t(-INFINITY);
}

// With do_dst, the walked row n is the destination of edge q (source col[q]): gradients of
// alpha_dst and alpha_edge. With do_src, n is the source of edge src_perm[q] into col[q]:
// gradients of x_src and alpha_src.
template <typename T, typename I, int K, int G>
__global__ void __launch_bounds__(kWarpsPerBlock * kWarp)
    backward_kernel(const Args<T, I> a, bool do_dst, bool do_src) {
  using acc_t = typename Scalar<T>::acc;
  __shared__ acc_t sh_vec[kWarpsPerBlock][kWarp][K];
  __shared__ double sh_dst[kWarpsPerBlock][kWarp];
  __shared__ double sh_src[kWarpsPerBlock][kWarp];
  const Slot s = slot_of<K, G>(a);
  const int64_t n = s.r, h = s.h, heads = a.heads;
  double sum_dst = 0, sum_src = 0;
  acc_t grad_x[K];
#pragma unroll
  for (int k = 0; k < K; ++k) grad_x[k] = 0;
  if (s.valid) {
    acc_t own_dout[K], own_x[K];
    acc_t dst_score = 0, lse_n = 0, delta_n = 0, src_score = 0;
    if (do_dst) {
      load_k<K>(head_row(a.grad_out, n, h, a), s.f0, a.dim, a.aligned, own_dout);
      dst_score = Scalar<T>::load(a.alpha_dst[n * heads + h]);
      lse_n = a.lse_in[n * heads + h];
      delta_n = a.delta[n * heads + h];
    }
    if (do_src) {
      load_k<K>(head_row(a.x_src, n, h, a), s.f0, a.dim, a.aligned, own_x);
      src_score = Scalar<T>::load(a.alpha_src[n * heads + h]);
    }
    int64_t begin, end;
    edge_share(a, s, begin, end);
    for (int64_t base = begin; base < end; base += kWarp) {
      const int count = int(min(int64_t(kWarp), end - base));
      const I col_mine = s.lane < count ? a.col[base + s.lane] : I(0);
      const I perm_mine = do_src && s.lane < count ? a.src_perm[base + s.lane] : I(0);
      for (int t = 0; t < count; ++t) {
        const int64_t m = int64_t(__shfl_sync(0xffffffffu, col_mine, t));
        if (do_dst) {  // edge m -> n at CSR position q
          const int64_t q = base + t;
          acc_t x[K];
          const T* x_row = head_row(a.x_src, m, h, a);
          load_k<K>(x_row, s.f0, a.dim, a.aligned, x);
          acc_t dval = dot<K>(own_dout, x);
          if (a.chunks > 1)
            dval += other_chunks_dot<K, G>(a, s, head_row(a.grad_out, n, h, a), x_row);
          dval = group_sum<G>(dval);
          const acc_t z = pre_activation(a, m, q, h, dst_score);
          const acc_t alpha = exp(leaky(z, a.slope) - lse_n);
          const acc_t wc = alpha * a.dropout.template factor<acc_t>(q, h);
          const double dz = (double(wc) * double(dval) - double(alpha) * double(delta_n)) *
                            double(z > 0 ? acc_t(1) : a.slope);
          sum_dst += dz;
          if (a.grad_alpha_edge && s.leader) {
            const int64_t pos = a.edge_perm ? int64_t(a.edge_perm[q]) : q;
            a.grad_alpha_edge[pos * heads + h] = Scalar<T>::store(acc_t(dz));
          }
        }
        if (do_src) {  // edge n -> m at CSR position e
          const int64_t e = int64_t(__shfl_sync(0xffffffffu, perm_mine, t));
          acc_t dout[K];
          const T* dout_row = head_row(a.grad_out, m, h, a);
          load_k<K>(dout_row, s.f0, a.dim, a.aligned, dout);
          acc_t dval = dot<K>(dout, own_x);
          if (a.chunks > 1)
            dval += other_chunks_dot<K, G>(a, s, dout_row, head_row(a.x_src, n, h, a));
          dval = group_sum<G>(dval);
          // alpha_src[n] + alpha_dst[m] (+ alpha_edge[e]), in the forward's order
          acc_t z = src_score + Scalar<T>::load(a.alpha_dst[m * heads + h]);
          if (a.alpha_edge) {
            const int64_t pos = a.edge_perm ? int64_t(a.edge_perm[e]) : e;
            z += Scalar<T>::load(a.alpha_edge[pos * heads + h]);
          }
          const acc_t alpha = exp(leaky(z, a.slope) - a.lse_in[m * heads + h]);
          const acc_t wc = alpha * a.dropout.template factor<acc_t>(e, h);
          const double delta_m = double(a.delta[m * heads + h]);
          sum_src += (double(wc) * double(dval) - double(alpha) * delta_m) *
                     double(z > 0 ? acc_t(1) : a.slope);
#pragma unroll
          for (int k = 0; k < K; ++k) grad_x[k] += wc * dout[k];
        }
      }
    }
  }
  if (s.group_size > 1) {  // sum the group's partial gradients into its first warp
    const int first = s.warp - s.member;
    sh_dst[s.warp][s.lane] = sum_dst;
    sh_src[s.warp][s.lane] = sum_src;
#pragma unroll
    for (int k = 0; k < K; ++k) sh_vec[s.warp][s.lane][k] = grad_x[k];
    __syncthreads();
    if (s.member == 0) {
      for (int w = 1; w < s.group_size; ++w) {
        sum_dst += sh_dst[first + w][s.lane];
        sum_src += sh_src[first + w][s.lane];
#pragma unroll
        for (int k = 0; k < K; ++k) grad_x[k] += sh_vec[first + w][s.lane][k];
      }
    }
  }
  if (!s.valid || s.member != 0 || !s.head_ok) return;
  if (do_dst && s.leader) a.grad_alpha_dst[n * heads + h] = Scalar<T>::store(acc_t(sum_dst));
  if (do_src) {
    if (s.leader) a.grad_alpha_src[n * heads + h] = Scalar<T>::store(acc_t(sum_src));
    T* gx = a.grad_x_src + (n * heads + h) * a.dim;
#pragma unroll
    for (int k = 0; k < K; ++k)
      if (s.f0 + k < a.dim) gx[s.f0 + k] = Scalar<T>::store(grad_x[k]);
  }
}

// Features per lane K and lanes per head G: G * K covers D up to 256 (chunks above).
struct DimPlan {
  int k, g, chunks;
};

inline DimPlan plan_dim(int64_t dim) {
  if (dim <= 8) return {1, 8, 1};
  if (dim <= 16) return {1, 16, 1};
  if (dim <= 32) return {1, 32, 1};
  if (dim <= 64) return {2, 32, 1};
  if (dim <= 128) return {4, 32, 1};
  return {8, 32, int(ceil_div(dim, 256))};
}

template <typename F>
void dispatch_plan(const DimPlan& plan, F&& f) {
  if (plan.k == 1 && plan.g == 8) return f.template operator()<1, 8>();
  if (plan.k == 1 && plan.g == 16) return f.template operator()<1, 16>();
  if (plan.k == 1) return f.template operator()<1, 32>();
  if (plan.k == 2) return f.template operator()<2, 32>();
  if (plan.k == 4) return f.template operator()<4, 32>();
  return f.template operator()<8, 32>();
}

template <typename T, typename I>
Args<T, I> make_args(const GatParams& p, const RowSet& rows, int chunks) {
  using acc_t = typename Scalar<T>::acc;
  Args<T, I> a;
  a.rowptr = static_cast<const I*>(p.csr.rowptr);
  a.col = static_cast<const I*>(p.csr.col);
  a.src_perm = static_cast<const I*>(p.src_perm);
  a.rows = static_cast<const I*>(rows.rows);
  a.num_rows = rows.num_rows;
  a.warps_per_row = rows.warps_per_row;
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
  a.grad_out = static_cast<const T*>(p.grad_out);
  a.lse_in = static_cast<const acc_t*>(p.lse_in);
  a.delta = static_cast<const acc_t*>(p.delta);
  a.grad_alpha_dst = static_cast<T*>(p.grad_alpha_dst);
  a.grad_x_src = static_cast<T*>(p.grad_x_src);
  a.grad_alpha_src = static_cast<T*>(p.grad_alpha_src);
  a.grad_alpha_edge = static_cast<T*>(p.grad_alpha_edge);
  return a;
}

template <bool kBackward, typename T, typename I>
struct Launcher {
  const Args<T, I>& args;
  dim3 grid;
  bool do_dst, do_src;
  cudaStream_t stream;

  template <int K, int G>
  void operator()() const {
    if constexpr (kBackward)
      backward_kernel<T, I, K, G><<<grid, kWarpsPerBlock * kWarp, 0, stream>>>(args, do_dst,
                                                                               do_src);
    else
      forward_kernel<T, I, K, G><<<grid, kWarpsPerBlock * kWarp, 0, stream>>>(args);
  }
};

template <bool kBackward>
void launch(const GatParams& p, const RowSet& rows, bool do_dst, bool do_src,
            cudaStream_t stream) {
  if (rows.num_rows == 0 || p.heads == 0 || p.dim == 0) return;
  const DimPlan plan = plan_dim(p.dim);
  const int heads_per_warp = kWarp / plan.g;
  const dim3 grid(unsigned(ceil_div(rows.num_rows, kWarpsPerBlock / rows.warps_per_row)),
                  unsigned(ceil_div(p.heads, heads_per_warp)), unsigned(plan.chunks));
  dispatch_float(p.type, [&](auto s) {
    using T = decltype(s);
    dispatch_index(p.csr.index64, [&](auto i) {
      using I = decltype(i);
      const Args<T, I> a = make_args<T, I>(p, rows, plan.chunks);
      dispatch_plan(plan, Launcher<kBackward, T, I>{a, grid, do_dst, do_src, stream});
    });
  });
  check_launch(kBackward ? "gat_backward" : "gat_forward");
}

}  // namespace gat
}  // namespace cuda
}  // namespace fastgnn
