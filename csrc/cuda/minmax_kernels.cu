// Min/max aggregation CUDA kernels: a light path (lanes over features, a sequential scan of
// each row's edges), a heavy path (edge chunks merged by 64-bit atomics on packed
// (order key, source) words) and the two backwards (atomic scatter, deterministic pull).
//
// Every comparison follows one order: the float order with -0 == +0 and NaN beyond every
// number. The light kernel compares messages with PTX float comparisons that flush nothing (the
// file is built with --use_fast_math, whose flush-to-zero would merge subnormals with zero);
// packed words carry order_key(), an integer key of that order. Ties keep the earliest edge
// (strict comparisons over ascending sources) and, across chunks, the smaller source through
// the packed word's low half. With edge weights
// (kWeighted) every message is x[col[e], f] * weight[perm[e], f / span] rounded to the feature
// type, and the CSR position e takes the source's place everywhere (arg, packed words): ties
// then go to the smallest position, the smallest source and then the earliest duplicate.
// With kLastWins (light path only) an equal message replaces the held one: the row's latest
// equal message wins (DGL's rule on a CSR whose rows hold their edges in edge-id order). With
// kIgnoreNaN (light path only; DGL's CUDA rule: its kernels start each entry from the identity
// with no winner and compare with <, false for NaN) an entry starts from -inf (max; +inf for
// min) with no source and NaN messages are skipped, so rows no message won keep the identity.
#include "cuda/common.cuh"
#include "cuda/minmax_kernels.h"

#include <algorithm>
#include <limits>
#include <type_traits>

namespace fastgnn {
namespace cuda {
namespace {

constexpr int kLightPerLane = 4;  // features per lane per pass of the light kernel

// v + 0 (max) or 0 - v (min) in IEEE arithmetic without flush-to-zero (this file is built
// with --use_fast_math): -0 becomes +0 and subnormals stay apart from zero.
template <bool kMax>
__device__ __forceinline__ float key_operand(float v) {
  float r;
  if constexpr (kMax) asm("add.rn.f32 %0, %1, 0f00000000;" : "=f"(r) : "f"(v));
  else asm("sub.rn.f32 %0, 0f00000000, %1;" : "=f"(r) : "f"(v));
  return r;
}

// Whether v is NaN (a PTX test, which no fast-math flag can fold away).
__device__ __forceinline__ bool is_nan(float v) {
  uint32_t r;
  asm("{ .reg .pred p; testp.notanumber.f32 p, %1; selp.u32 %0, 1, 0, p; }" : "=r"(r) : "f"(v));
  return r;
}
__device__ __forceinline__ bool is_nan(double v) {
  uint32_t r;
  asm("{ .reg .pred p; testp.notanumber.f64 p, %1; selp.u32 %0, 1, 0, p; }" : "=r"(r) : "d"(v));
  return r;
}

// Order-preserving key of the packed words, branch-free (the heavy kernel takes one per
// message): the bits of key_operand(v), negative ones inverted and the others with their sign
// bit set, follow v's order unsigned (reversed for min, hence the final inversion). Zeros share
// one key; NaN takes the key that wins the reduction (0 for min, all ones for max), which no
// number reaches.
template <bool kMax>
__device__ __forceinline__ uint32_t order_key(float v) {
  const uint32_t u = __float_as_uint(key_operand<kMax>(v));
  const uint32_t nan = is_nan(v) ? ~0u : 0u;
  const uint32_t ordered = (u ^ (uint32_t(int32_t(u) >> 31) | 0x80000000u)) | nan;
  return kMax ? ordered : ~ordered;
}

// The light kernel compares the messages themselves, in PTX so that no fast-math flag flushes
// subnormals to zero. first_wins: (high > low or unordered) and held is a number;
// last_wins: (high >= low or unordered) and (held is a number or a is NaN).
#define FASTGNN_MINMAX_COMPARE(TYPE, SUFFIX, REG)                                              \
  __device__ __forceinline__ bool first_wins(TYPE high, TYPE low, TYPE held) {                \
    uint32_t r;                                                                                \
    asm("{ .reg .pred g, t; testp.number." SUFFIX " g, %3; setp.gtu.and." SUFFIX               \
        " t, %1, %2, g; selp.u32 %0, 1, 0, t; }"                                              \
        : "=r"(r) : REG(high), REG(low), REG(held));                                           \
    return r;                                                                                  \
  }                                                                                            \
  __device__ __forceinline__ bool last_wins(TYPE high, TYPE low, TYPE held, TYPE a) {         \
    uint32_t r;                                                                                \
    asm("{ .reg .pred g, n, t; testp.number." SUFFIX " g, %3; testp.notanumber." SUFFIX        \
        " n, %4; or.pred g, g, n; setp.geu.and." SUFFIX " t, %1, %2, g; selp.u32 %0, 1, 0, t; }" \
        : "=r"(r) : REG(high), REG(low), REG(held), REG(a));                                  \
    return r;                                                                                  \
  }
FASTGNN_MINMAX_COMPARE(float, "f32", "f")
FASTGNN_MINMAX_COMPARE(double, "f64", "d")
#undef FASTGNN_MINMAX_COMPARE

// Whether message a, met after the held message b, takes its place, in order_key's order
// (-0 == +0, NaN beyond every number): strictly better, or with kLastWins equal too (NaNs are
// equal to each other, as the CPU's last NaN wins). Min compares with the operands swapped.
template <bool kMax, bool kLastWins, typename acc_t>
__device__ __forceinline__ bool takes(acc_t a, acc_t b) {
  const acc_t high = kMax ? a : b, low = kMax ? b : a;
  if constexpr (kLastWins)
    return last_wins(high, low, b, a);
  else
    return first_wins(high, low, b);
}

// Packed word for the heavy merge: key in the high half, the source in the low half, stored
// inverted for max so that the larger word is the larger value, then the smaller source.
template <bool kMax>
__device__ __forceinline__ unsigned long long pack(float v, uint32_t source) {
  return (static_cast<unsigned long long>(order_key<kMax>(v)) << 32) |
         (kMax ? ~source : source);
}

template <bool kMax>
__device__ __forceinline__ uint32_t packed_source(unsigned long long word) {
  const uint32_t low = static_cast<uint32_t>(word);
  return kMax ? ~low : low;
}

template <bool kMax>
__device__ __forceinline__ unsigned long long packed_identity() {
  return kMax ? 0ull : ~0ull;
}

template <bool kMax>
__device__ __forceinline__ void atomic_merge(unsigned long long* address, unsigned long long w) {
  if (kMax) atomicMax(address, w); else atomicMin(address, w);
}

// The weight of CSR position p for one head: weights in input edge order, perm mapping
// positions to input edges (null: the same order).
template <typename scalar_t, typename index_t>
__device__ __forceinline__ scalar_t edge_weight(const scalar_t* __restrict__ weight,
                                                const index_t* __restrict__ perm, int64_t p,
                                                int64_t heads, int64_t head) {
  return weight[(perm ? int64_t(perm[p]) : p) * heads + head];
}

// The message of CSR position e for feature value v: v itself, or v times the edge's weight in
// the feature type (the product rounded as a framework multiplying in that type would round
// it).
template <bool kWeighted, typename scalar_t, typename index_t>
__device__ __forceinline__ scalar_t message(scalar_t v, const scalar_t* __restrict__ weight,
                                            const index_t* __restrict__ perm, int64_t e,
                                            int64_t heads, int64_t head) {
  if constexpr (kWeighted)
    return Scalar<scalar_t>::store(Scalar<scalar_t>::load(v) *
                                   Scalar<scalar_t>::load(edge_weight(weight, perm, e, heads,
                                                                      head)));
  else
    return v;
}

int log2_lanes(int64_t width, int max_lanes) {
  int lanes_log2 = 0;
  while ((1 << lanes_log2) < max_lanes && (int64_t(1) << lanes_log2) < width) ++lanes_log2;
  return lanes_log2;
}

// The kLightPerLane features a lane holds in one pass, from its first feature `base`: strided
// by the group's lane count (kVector = false) or contiguous (kVector = true: float32 or half
// rows whose width is a multiple of 4, fetched with one 16- or 8-byte load).
template <bool kVector>
__device__ __forceinline__ int64_t lane_feature(int64_t base, int u, int64_t lanes) {
  return kVector ? base + u : base + u * lanes;
}

// Whether the lane's feature u exists: always with kVector (base < width, a multiple of 4),
// which keeps the check out of the edge loop.
template <bool kVector>
__device__ __forceinline__ bool in_row(int64_t base, int u, int64_t lanes, int64_t width) {
  return kVector || lane_feature<kVector>(base, u, lanes) < width;
}

template <bool kVector, typename scalar_t>
__device__ __forceinline__ void load_lane(const scalar_t* __restrict__ row, int64_t base,
                                          int64_t lanes, int64_t width,
                                          scalar_t (&v)[kLightPerLane]) {
  if constexpr (kVector) {
    static_assert(!std::is_same_v<scalar_t, double>, "float32 and half rows only");
    using Lanes = Packet<scalar_t, kLightPerLane>;
    const Lanes q = *reinterpret_cast<const Lanes*>(row + base);  // base < width here
#pragma unroll
    for (int u = 0; u < kLightPerLane; ++u) v[u] = q.v[u];
  } else {
#pragma unroll
    for (int u = 0; u < kLightPerLane; ++u) {
      const int64_t f = lane_feature<kVector>(base, u, lanes);
      if (f < width) v[u] = row[f];
    }
  }
}

// The ordinal k of the split row owning slot: split_first[k] <= slot < split_first[k + 1].
template <typename index_t>
__device__ __forceinline__ int64_t split_ordinal(const SplitWorkView& work, int64_t slot) {
  const auto* first = static_cast<const index_t*>(work.split_first);
  int64_t lo = 0, hi = work.split_rows;  // first[lo] <= slot < first[hi]
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    if (first[mid] <= slot) lo = mid; else hi = mid;
  }
  return lo;
}

// One group of 2^lanes_log2 lanes per destination row, or per work item when work has items
// (num_rows is then the item count); each lane holds kLightPerLane running (key, value,
// source) triples and scans the edges once per pass over the features. With work items, a
// launch with packed set does only the items of split rows, merging their winners into
// packed[k, f] (k: the split row's ordinal) by 64-bit atomics; one without does the rest.
template <typename scalar_t, typename index_t, bool kMax, bool kVector, bool kWeighted,
          bool kLastWins, bool kIgnoreNaN>
__global__ void minmax_light_kernel(const index_t* __restrict__ rowptr,
                                    const index_t* __restrict__ col,
                                    const index_t* __restrict__ rows, int64_t num_rows,
                                    SplitWorkView work, const scalar_t* __restrict__ x,
                                    const scalar_t* __restrict__ weight,
                                    const index_t* __restrict__ perm, int64_t heads,
                                    int64_t span, scalar_t* __restrict__ out,
                                    index_t* __restrict__ arg,
                                    unsigned long long* __restrict__ packed, int64_t width,
                                    int lanes_log2) {
  using acc_t = typename Scalar<scalar_t>::acc;
  const int64_t lanes = int64_t(1) << lanes_log2;
  const int64_t group = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> lanes_log2;
  const int64_t lane = threadIdx.x & (lanes - 1);
  if (group >= num_rows) return;
  int64_t row, merge_row = -1;
  index_t begin, end;
  if (work.item_row) {
    const int64_t slot = static_cast<const index_t*>(work.item_slot)[group];
    if ((slot >= 0) != (packed != nullptr)) return;  // the other launch's item (whole group)
    row = static_cast<const index_t*>(work.item_row)[group];
    begin = static_cast<const index_t*>(work.item_start)[group];
    end = index_t(min(int64_t(begin) + work.chunk, int64_t(rowptr[row + 1])));
    if (slot >= 0) merge_row = split_ordinal<index_t>(work, slot);
  } else {
    row = rows ? int64_t(rows[group]) : group;
    begin = rowptr[row];
    end = rowptr[row + 1];
  }
  const int64_t first = kVector ? lane * kLightPerLane : lane;
  for (int64_t base = first; base < width; base += lanes * kLightPerLane) {
    scalar_t value[kLightPerLane];  // the held message
    index_t source[kLightPerLane];  // weighted: the CSR position
    int64_t head[kLightPerLane];    // the weight column of each feature (weighted)
    // the value an entry no message wins keeps: 0, or the identity under kIgnoreNaN, which then
    // starts the comparisons (an equal message wins it only with kLastWins)
    constexpr acc_t kInf = std::numeric_limits<acc_t>::infinity();
    const acc_t unwon = kIgnoreNaN ? (kMax ? -kInf : kInf) : acc_t(0);
#pragma unroll
    for (int u = 0; u < kLightPerLane; ++u) {
      value[u] = Scalar<scalar_t>::store(unwon);
      source[u] = index_t(-1);
      head[u] = kWeighted ? min(lane_feature<kVector>(base, u, lanes), width - 1) / span : 0;
    }
    // The row's first message is held as it is (first), so that every later one compares with
    // a message rather than a sentinel that a message could equal; under kIgnoreNaN the
    // identity is that sentinel, as in DGL.
    auto consider = [&](int u, index_t e, index_t j, scalar_t v, bool first) {
      const scalar_t m = message<kWeighted>(v, weight, perm, e, heads, head[u]);
      if (kIgnoreNaN && is_nan(Scalar<scalar_t>::load(m))) return;
      if (first || takes<kMax, kLastWins>(Scalar<scalar_t>::load(m),
                                          Scalar<scalar_t>::load(value[u]))) {
        value[u] = m;
        source[u] = kWeighted ? e : j;
      }
    };
    auto single_edge = [&](index_t e, bool first) {
      const index_t j = col[e];
      scalar_t v[kLightPerLane];
      load_lane<kVector>(x + int64_t(j) * width, base, lanes, width, v);
#pragma unroll
      for (int u = 0; u < kLightPerLane; ++u)
        if (in_row<kVector>(base, u, lanes, width)) consider(u, e, j, v[u], first);
    };
    index_t e = begin;
    if (!kIgnoreNaN && e < end) single_edge(e++, true);
    // Edges in pairs: both rows' loads are issued before either is compared (more loads in
    // flight), and the comparisons still run in edge order.
    for (; e + 1 < end; e += 2) {
      const index_t j0 = col[e], j1 = col[e + 1];
      scalar_t v0[kLightPerLane], v1[kLightPerLane];
      load_lane<kVector>(x + int64_t(j0) * width, base, lanes, width, v0);
      load_lane<kVector>(x + int64_t(j1) * width, base, lanes, width, v1);
#pragma unroll
      for (int u = 0; u < kLightPerLane; ++u) {
        if (in_row<kVector>(base, u, lanes, width)) {
          consider(u, e, j0, v0[u], false);
          consider(u, e + 1, j1, v1[u], false);
        }
      }
    }
    if (e < end) single_edge(e, false);
#pragma unroll
    for (int u = 0; u < kLightPerLane; ++u) {
      const int64_t f = lane_feature<kVector>(base, u, lanes);
      if (f >= width) continue;
      if (merge_row < 0) {
        out[row * width + f] = value[u];
        arg[row * width + f] = source[u];
      } else if constexpr (!std::is_same_v<acc_t, double>) {  // float64 never merges
        if (source[u] >= 0)
          atomic_merge<kMax>(packed + merge_row * width + f,
                             pack<kMax>(Scalar<scalar_t>::load(value[u]), uint32_t(source[u])));
      }
    }
  }
}

// blockIdx.x: heavy row h; blockIdx.y: its edge chunks y, y + gridDim.y, ... Threads form
// groups of 2^lanes_log2 feature lanes; the groups split a chunk's edges, merge in shared
// memory, and one thread per feature merges the chunk's word into packed[h, f].
template <typename scalar_t, typename index_t, bool kMax, bool kWeighted>
__global__ void minmax_heavy_kernel(const index_t* __restrict__ rowptr,
                                    const index_t* __restrict__ col,
                                    const index_t* __restrict__ heavy_rows,
                                    const scalar_t* __restrict__ x,
                                    const scalar_t* __restrict__ weight,
                                    const index_t* __restrict__ perm, int64_t heads,
                                    int64_t span, unsigned long long* __restrict__ packed,
                                    int64_t width, int edges_per_block, int lanes_log2) {
  extern __shared__ unsigned long long chunk_best[];
  const int lanes = 1 << lanes_log2;
  const int groups = blockDim.x >> lanes_log2;
  const int lane = threadIdx.x & (lanes - 1), group = threadIdx.x >> lanes_log2;
  const int64_t h = blockIdx.x;
  const int64_t row = heavy_rows[h];
  const int64_t begin = rowptr[row], end = rowptr[row + 1];
  const int64_t stride = int64_t(gridDim.y) * edges_per_block;
  for (int64_t c0 = begin + int64_t(blockIdx.y) * edges_per_block; c0 < end; c0 += stride) {
    const int64_t c1 = c0 + edges_per_block < end ? c0 + edges_per_block : end;
    for (int64_t f0 = 0; f0 < width; f0 += lanes) {
      const int64_t f = f0 + lane;
      const int64_t head = kWeighted && f < width ? f / span : 0;
      unsigned long long best = packed_identity<kMax>();
      if (f < width) {
        for (int64_t e = c0 + group; e < c1; e += groups) {
          const index_t j = col[e];
          const scalar_t m =
              message<kWeighted>(x[int64_t(j) * width + f], weight, perm, e, heads, head);
          const unsigned long long w =
              pack<kMax>(Scalar<scalar_t>::load(m), uint32_t(kWeighted ? e : int64_t(j)));
          best = kMax ? (w > best ? w : best) : (w < best ? w : best);
        }
      }
      if (groups > 1) {
        if (group == 0) chunk_best[lane] = packed_identity<kMax>();
        __syncthreads();
        if (f < width && best != packed_identity<kMax>())
          atomic_merge<kMax>(chunk_best + lane, best);
        __syncthreads();
        best = chunk_best[lane];
        __syncthreads();  // chunk_best is reset for the next features
      }
      if (group == 0 && f < width && best != packed_identity<kMax>())
        atomic_merge<kMax>(packed + h * width + f, best);
    }
  }
}

// Coalesced unpack of the heavy rows' sources (-1 where a row had no edges).
template <typename index_t, bool kMax>
__global__ void minmax_unpack_kernel(const index_t* __restrict__ heavy_rows, int64_t num_heavy,
                                     const unsigned long long* __restrict__ packed,
                                     index_t* __restrict__ arg, int64_t width) {
  const int64_t total = num_heavy * width;
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < total;
       k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t h = k / width, f = k - h * width;
    const unsigned long long word = packed[k];
    arg[int64_t(heavy_rows[h]) * width + f] =
        word == packed_identity<kMax>() ? index_t(-1) : index_t(packed_source<kMax>(word));
  }
}

// out of the heavy rows, re-read from x at the winning source: the exact input value (sign
// of zero, NaN payload), 0 where there is none. Weighted: the winning position's message,
// recomputed as the forward computed it.
template <typename scalar_t, typename index_t, bool kWeighted>
__global__ void minmax_gather_kernel(const index_t* __restrict__ heavy_rows, int64_t num_heavy,
                                     const index_t* __restrict__ arg,
                                     const index_t* __restrict__ col,
                                     const scalar_t* __restrict__ x,
                                     const scalar_t* __restrict__ weight,
                                     const index_t* __restrict__ perm, int64_t heads,
                                     int64_t span, scalar_t* __restrict__ out, int64_t width) {
  const int64_t total = num_heavy * width;
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < total;
       k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t h = k / width, f = k - h * width;
    const int64_t at = int64_t(heavy_rows[h]) * width + f;
    const int64_t p = arg[at];
    if (p < 0) {
      out[at] = Scalar<scalar_t>::store(0.f);
    } else if constexpr (kWeighted) {
      out[at] = message<kWeighted>(x[int64_t(col[p]) * width + f], weight, perm, p, heads,
                                   f / span);
    } else {
      out[at] = x[p * width + f];
    }
  }
}

// One thread per (row, feature): acc[j, f] += grad_out[i, f] at the winning source j = arg[i, f]
// (j < 0: no source, nothing to add). Weighted: arg holds the winning CSR position p, whose
// source is col[p] and whose gradient is scaled by weight[p, head of f]. A block spans the
// features of one row (of several rows when narrow) and its threads' atomics all stay in flight:
// measured against packets of features and runs of rows that merge repeated sources, this was
// faster on every graph and input tried (ReLU ties included; see docs/minmax.md).
template <typename scalar_t, typename index_t, bool kWeighted>
__global__ void minmax_scatter_kernel(const index_t* __restrict__ arg,
                                      const scalar_t* __restrict__ grad_out,
                                      const index_t* __restrict__ col,
                                      const scalar_t* __restrict__ weight,
                                      const index_t* __restrict__ perm, int64_t heads,
                                      int64_t span,
                                      typename Scalar<scalar_t>::acc* __restrict__ acc,
                                      int64_t rows, int64_t width) {
  using acc_t = typename Scalar<scalar_t>::acc;
  const int64_t f = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (f >= width) return;
  for (int64_t i = int64_t(blockIdx.y) * blockDim.y + threadIdx.y; i < rows;
       i += int64_t(gridDim.y) * blockDim.y) {
    const int64_t at = i * width + f;
    const int64_t p = arg[at];
    if (p < 0) continue;
    acc_t g = Scalar<scalar_t>::load(grad_out[at]);
    int64_t j = p;
    if constexpr (kWeighted) {
      g *= Scalar<scalar_t>::load(edge_weight(weight, perm, p, heads, f / span));
      j = col[p];
    }
    atomicAdd(acc + j * width + f, g);
  }
}

// One group of lanes per source j over its out-edges (transposed CSR, destinations ascending):
// a duplicate edge (same destination as the previous one) is skipped so each (i, f) counts once
// (weighted too: one position wins (i, f), and it counts when its source is j).
template <typename scalar_t, typename index_t, bool kWeighted>
__global__ void minmax_pull_kernel(const index_t* __restrict__ t_rowptr,
                                   const index_t* __restrict__ t_col, int64_t num_src,
                                   const index_t* __restrict__ arg,
                                   const scalar_t* __restrict__ grad_out,
                                   const index_t* __restrict__ col,
                                   const scalar_t* __restrict__ weight,
                                   const index_t* __restrict__ perm, int64_t heads,
                                   int64_t span, scalar_t* __restrict__ grad_x, int64_t width,
                                   int lanes_log2) {
  using acc_t = typename Scalar<scalar_t>::acc;
  const int64_t lanes = int64_t(1) << lanes_log2;
  const int64_t j = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> lanes_log2;
  const int64_t lane = threadIdx.x & (lanes - 1);
  if (j >= num_src) return;
  const index_t begin = t_rowptr[j], end = t_rowptr[j + 1];
  for (int64_t f0 = lane; f0 < width; f0 += lanes * kLightPerLane) {
    acc_t sum[kLightPerLane];
#pragma unroll
    for (int u = 0; u < kLightPerLane; ++u) sum[u] = acc_t(0);
    for (index_t p = begin; p < end; ++p) {
      const index_t i = t_col[p];
      if (p > begin && t_col[p - 1] == i) continue;
#pragma unroll
      for (int u = 0; u < kLightPerLane; ++u) {
        const int64_t f = f0 + u * lanes;
        if (f >= width) continue;
        const int64_t a = arg[int64_t(i) * width + f];
        if constexpr (kWeighted) {
          if (a >= 0 && int64_t(col[a]) == j)
            sum[u] += Scalar<scalar_t>::load(grad_out[int64_t(i) * width + f]) *
                      Scalar<scalar_t>::load(edge_weight(weight, perm, a, heads, f / span));
        } else if (a == j) {
          sum[u] += Scalar<scalar_t>::load(grad_out[int64_t(i) * width + f]);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kLightPerLane; ++u) {
      const int64_t f = f0 + u * lanes;
      if (f < width) grad_x[j * width + f] = Scalar<scalar_t>::store(sum[u]);
    }
  }
}

// One thread per (row i, head h), over the head's features in order: runs of features won by
// one position p are summed in a register and added to grad_w[p, h] once. The thread owns the
// entries of its row's positions for its head: no atomics, a fixed order.
template <typename scalar_t, typename index_t>
__global__ void minmax_weight_grad_kernel(const index_t* __restrict__ col,
                                          const index_t* __restrict__ perm,
                                          const index_t* __restrict__ arg,
                                          const scalar_t* __restrict__ grad_out,
                                          const scalar_t* __restrict__ x,
                                          typename Scalar<scalar_t>::acc* __restrict__ grad_w,
                                          int64_t rows, int64_t width, int64_t heads) {
  using acc_t = typename Scalar<scalar_t>::acc;
  const int64_t span = width / heads;
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < rows * heads;
       k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = k / heads, h = k - i * heads;
    int64_t run = -1;
    acc_t sum = acc_t(0);
    for (int64_t f = h * span; f < (h + 1) * span; ++f) {
      const int64_t p = arg[i * width + f];
      if (p != run) {
        if (run >= 0) grad_w[(perm ? int64_t(perm[run]) : run) * heads + h] += sum;
        run = p;
        sum = acc_t(0);
      }
      if (p >= 0)
        sum += Scalar<scalar_t>::load(grad_out[i * width + f]) *
               Scalar<scalar_t>::load(x[int64_t(col[p]) * width + f]);
    }
    if (run >= 0) grad_w[(perm ? int64_t(perm[run]) : run) * heads + h] += sum;
  }
}

template <typename F>
void dispatch_bool(bool flag, F&& f) {
  if (flag) f(std::true_type{}); else f(std::false_type{});
}

template <typename F>
void dispatch_reduce(bool is_max, F&& f) {
  dispatch_bool(is_max, f);
}

template <typename F>
void dispatch_weighted(const EdgeWeights& weights, F&& f) {
  if (weights.values) f(std::true_type{}); else f(std::false_type{});
}

// The features of one weight column (the width when unweighted).
int64_t head_span(const EdgeWeights& weights, int64_t width) {
  return weights.values ? width / weights.heads : width;
}

}  // namespace

namespace {

void launch_light(FloatType type, CsrView csr, const void* rows, int64_t num_rows,
                  SplitWorkView work, const void* x, EdgeWeights weights, void* out, void* arg,
                  unsigned long long* packed, int64_t width, bool is_max, bool last_wins,
                  bool ignore_nan, int warps, cudaStream_t stream) {
  const int threads = warps * kWarp;
  const int lanes_log2 = log2_lanes(ceil_div(width, kLightPerLane), kWarp);
  const int64_t blocks = ceil_div(num_rows << lanes_log2, threads);
  const int64_t span = head_span(weights, width);
  dispatch_float(type, [&](auto s) {
    using scalar_t = decltype(s);
    dispatch_index(csr.index64, [&](auto i) {
      using index_t = decltype(i);
      dispatch_reduce(is_max, [&](auto m) {
        constexpr bool kMax = decltype(m)::value;
        dispatch_weighted(weights, [&](auto w) {
          constexpr bool kWeighted = decltype(w)::value;
          dispatch_bool(last_wins, [&](auto t) {
            dispatch_bool(ignore_nan, [&](auto n) {
              constexpr bool kLastWins = decltype(t)::value;
              constexpr bool kIgnoreNaN = decltype(n)::value;
              auto launch = [&](auto kernel) {
                kernel<<<unsigned(blocks), threads, 0, stream>>>(
                    static_cast<const index_t*>(csr.rowptr), static_cast<const index_t*>(csr.col),
                    static_cast<const index_t*>(rows), num_rows, work,
                    static_cast<const scalar_t*>(x), static_cast<const scalar_t*>(weights.values),
                    static_cast<const index_t*>(weights.perm), weights.heads, span,
                    static_cast<scalar_t*>(out), static_cast<index_t*>(arg),
                    packed, width, lanes_log2);
              };
              // float32 and half rows of a multiple of 4 features, aligned to 4 features, take
              // one load per lane: half rows read feature by feature took 1.2-1.8x float32's
              // time (H200, tolokers, widths 64 and 256).
              if constexpr (!std::is_same_v<scalar_t, double>) {
                using Lanes = Packet<scalar_t, kLightPerLane>;
                if (width % kLightPerLane == 0 &&
                    reinterpret_cast<uintptr_t>(x) % sizeof(Lanes) == 0) {
                  launch(minmax_light_kernel<scalar_t, index_t, kMax, true, kWeighted, kLastWins,
                                             kIgnoreNaN>);
                  return;
                }
              }
              launch(minmax_light_kernel<scalar_t, index_t, kMax, false, kWeighted, kLastWins,
                                         kIgnoreNaN>);
            });
          });
        });
      });
    });
  });
}

}  // namespace

void minmax_light(FloatType type, CsrView csr, const void* rows, int64_t num_rows,
                  const void* x, EdgeWeights weights, void* out, void* arg, int64_t width,
                  bool is_max, bool last_wins, bool ignore_nan, int warps, cudaStream_t stream) {
  if (num_rows == 0 || width == 0) return;
  launch_light(type, csr, rows, num_rows, SplitWorkView{}, x, weights, out, arg, nullptr, width,
               is_max, last_wins, ignore_nan, warps, stream);
  check_launch("minmax_light");
}

void minmax_split(FloatType type, CsrView csr, SplitWorkView work, const void* x,
                  EdgeWeights weights, void* out, void* arg, unsigned long long* packed,
                  int64_t width, bool is_max, int warps, cudaStream_t stream) {
  if (work.items == 0 || width == 0) return;
  if (type == FloatType::kDouble)
    throw std::runtime_error("minmax_split: float64 takes the light path");
  if (work.split_rows > 0) {
    cudaMemsetAsync(packed, is_max ? 0x00 : 0xff,
                    work.split_rows * width * sizeof(unsigned long long), stream);
    launch_light(type, csr, nullptr, work.items, work, x, weights, out, arg, packed, width,
                 is_max, false, false, warps, stream);
    dispatch_index(csr.index64, [&](auto i) {
      using index_t = decltype(i);
      dispatch_reduce(is_max, [&](auto m) {
        minmax_unpack_kernel<index_t, decltype(m)::value>
            <<<grid_for(work.split_rows * width, 256), 256, 0, stream>>>(
                static_cast<const index_t*>(work.split_row), work.split_rows, packed,
                static_cast<index_t*>(arg), width);
      });
    });
  }
  // packed may live in out's memory: the other rows are written only once it is read.
  launch_light(type, csr, nullptr, work.items, work, x, weights, out, arg, nullptr, width,
               is_max, false, false, warps, stream);
  check_launch("minmax_split");
  minmax_heavy_values(type, csr, work.split_row, work.split_rows, x, weights, arg, out, width,
                      stream);
}

void minmax_heavy_args(FloatType type, CsrView csr, const void* heavy_rows, int64_t num_heavy,
                       int64_t max_degree, const void* x, EdgeWeights weights, void* arg,
                       unsigned long long* packed, int64_t width, bool is_max, int warps,
                       int edges_per_block, cudaStream_t stream) {
  if (num_heavy == 0 || width == 0) return;
  if (type == FloatType::kDouble)
    throw std::runtime_error("minmax_heavy_args: float64 takes the light path");
  const int threads = warps * kWarp;
  const int lanes_log2 = log2_lanes(width, threads);
  const int lanes = 1 << lanes_log2;
  const size_t shared = threads > lanes ? lanes * sizeof(unsigned long long) : 0;
  const int64_t chunks = ceil_div(max_degree > 0 ? max_degree : 1, edges_per_block);
  const dim3 grid(unsigned(num_heavy), unsigned(std::min(chunks, kMaxGridY)));
  const int64_t span = head_span(weights, width);
  cudaMemsetAsync(packed, is_max ? 0x00 : 0xff, num_heavy * width * sizeof(unsigned long long),
                  stream);
  dispatch_float(type, [&](auto s) {
    using scalar_t = decltype(s);
    if constexpr (!std::is_same_v<scalar_t, double>) {
      dispatch_index(csr.index64, [&](auto i) {
        using index_t = decltype(i);
        dispatch_reduce(is_max, [&](auto m) {
          constexpr bool kMax = decltype(m)::value;
          const auto* rows = static_cast<const index_t*>(heavy_rows);
          dispatch_weighted(weights, [&](auto w) {
            minmax_heavy_kernel<scalar_t, index_t, kMax, decltype(w)::value>
                <<<grid, threads, shared, stream>>>(
                    static_cast<const index_t*>(csr.rowptr),
                    static_cast<const index_t*>(csr.col), rows, static_cast<const scalar_t*>(x),
                    static_cast<const scalar_t*>(weights.values),
                    static_cast<const index_t*>(weights.perm), weights.heads, span, packed,
                    width, edges_per_block, lanes_log2);
          });
          minmax_unpack_kernel<index_t, kMax>
              <<<grid_for(num_heavy * width, 256), 256, 0, stream>>>(
                  rows, num_heavy, packed, static_cast<index_t*>(arg), width);
        });
      });
    }
  });
  check_launch("minmax_heavy_args");
}

void minmax_heavy_values(FloatType type, CsrView csr, const void* heavy_rows,
                         int64_t num_heavy, const void* x, EdgeWeights weights, const void* arg,
                         void* out, int64_t width, cudaStream_t stream) {
  if (num_heavy == 0 || width == 0) return;
  const int64_t span = head_span(weights, width);
  dispatch_float(type, [&](auto s) {
    using scalar_t = decltype(s);
    dispatch_index(csr.index64, [&](auto i) {
      using index_t = decltype(i);
      dispatch_weighted(weights, [&](auto w) {
        minmax_gather_kernel<scalar_t, index_t, decltype(w)::value>
            <<<grid_for(num_heavy * width, 256), 256, 0, stream>>>(
            static_cast<const index_t*>(heavy_rows), num_heavy, static_cast<const index_t*>(arg),
            static_cast<const index_t*>(csr.col), static_cast<const scalar_t*>(x),
            static_cast<const scalar_t*>(weights.values),
            static_cast<const index_t*>(weights.perm), weights.heads, span,
            static_cast<scalar_t*>(out), width);
      });
    });
  });
  check_launch("minmax_heavy_values");
}

void minmax_scatter_atomic(FloatType type, bool index64, const void* arg, const void* grad_out,
                           const void* col, EdgeWeights weights, void* acc, int64_t rows,
                           int64_t width, cudaStream_t stream) {
  if (rows == 0 || width == 0) return;
  constexpr int kThreads = 256;
  // A row's features, up to the block; the block's rest takes more rows.
  const int threads_x = 1 << log2_lanes(width, kThreads);
  const dim3 block(threads_x, kThreads / threads_x);
  const dim3 grid(unsigned(ceil_div(width, threads_x)),
                  unsigned(std::min<int64_t>(ceil_div(rows, block.y), kMaxGridY)));
  const int64_t span = head_span(weights, width);
  dispatch_float(type, [&](auto s) {
    using scalar_t = decltype(s);
    using acc_t = typename Scalar<scalar_t>::acc;
    dispatch_index(index64, [&](auto i) {
      using index_t = decltype(i);
      dispatch_weighted(weights, [&](auto w) {
        minmax_scatter_kernel<scalar_t, index_t, decltype(w)::value>
            <<<grid, block, 0, stream>>>(
                static_cast<const index_t*>(arg), static_cast<const scalar_t*>(grad_out),
                static_cast<const index_t*>(col), static_cast<const scalar_t*>(weights.values),
                static_cast<const index_t*>(weights.perm), weights.heads, span,
                static_cast<acc_t*>(acc), rows, width);
      });
    });
  });
  check_launch("minmax_scatter_atomic");
}

void minmax_pull(FloatType type, CsrView t_csr, const void* arg, const void* grad_out,
                 const void* col, EdgeWeights weights, void* grad_x, int64_t width,
                 cudaStream_t stream) {
  if (t_csr.rows == 0 || width == 0) return;
  constexpr int kThreads = 256;
  const int lanes_log2 = log2_lanes(ceil_div(width, kLightPerLane), kWarp);
  const int64_t blocks = ceil_div(t_csr.rows << lanes_log2, kThreads);
  const int64_t span = head_span(weights, width);
  dispatch_float(type, [&](auto s) {
    using scalar_t = decltype(s);
    dispatch_index(t_csr.index64, [&](auto i) {
      using index_t = decltype(i);
      dispatch_weighted(weights, [&](auto w) {
        minmax_pull_kernel<scalar_t, index_t, decltype(w)::value>
            <<<unsigned(blocks), kThreads, 0, stream>>>(
            static_cast<const index_t*>(t_csr.rowptr), static_cast<const index_t*>(t_csr.col),
            t_csr.rows, static_cast<const index_t*>(arg), static_cast<const scalar_t*>(grad_out),
            static_cast<const index_t*>(col), static_cast<const scalar_t*>(weights.values),
            static_cast<const index_t*>(weights.perm), weights.heads, span,
            static_cast<scalar_t*>(grad_x), width, lanes_log2);
      });
    });
  });
  check_launch("minmax_pull");
}

void minmax_weight_grad(FloatType type, CsrView csr, const void* perm, const void* arg,
                        const void* grad_out, const void* x, void* grad_w, int64_t width,
                        int64_t heads, cudaStream_t stream) {
  if (csr.rows == 0 || width == 0) return;
  constexpr int kThreads = 256;
  dispatch_float(type, [&](auto s) {
    using scalar_t = decltype(s);
    using acc_t = typename Scalar<scalar_t>::acc;
    dispatch_index(csr.index64, [&](auto i) {
      using index_t = decltype(i);
      minmax_weight_grad_kernel<scalar_t, index_t>
          <<<grid_for(csr.rows * heads, kThreads), kThreads, 0, stream>>>(
          static_cast<const index_t*>(csr.col), static_cast<const index_t*>(perm),
          static_cast<const index_t*>(arg), static_cast<const scalar_t*>(grad_out),
          static_cast<const scalar_t*>(x), static_cast<acc_t*>(grad_w), csr.rows, width, heads);
    });
  });
  check_launch("minmax_weight_grad");
}

}  // namespace cuda
}  // namespace fastgnn
