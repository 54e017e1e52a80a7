// Edge softmax CUDA kernels. A lane reads kVec consecutive columns (a packet: 4, 2 or 1, the
// widest the width and alignment allow) with one load, so half logits move as many loads as
// float32 ones. Light rows take a warp each: its lanes split into 2^column_bits packet
// columns x the remaining edge slots: a lane reads one packet of every (32 >> column_bits)-th
// edge of the row, so the lanes of one edge read its contiguous columns; rows wider than 32
// packets take several passes. Heavy rows (long ones, e.g. a hub's in-edges) take a block of
// kHeavyWarps warps each, split the same way with the warps' edge slots side by side. The
// forward keeps an online (maximum, sum) per lane and merges the lanes of a column by
// shuffles, then (heavy rows) the warps' partials through shared memory in warp order, then
// writes exp(logit - maximum) / sum; the backward sums out * grad the same way, then writes
// the gradients. Fixed merge orders: deterministic.
#include "cuda/common.cuh"
#include "cuda/edge_softmax_kernels.h"

#include <algorithm>
#include <limits>
#include <type_traits>

namespace fastgnn {
namespace cuda {
namespace {

constexpr int kWarpsPerBlock = 8;  // light rows: a warp each
constexpr int kHeavyWarps = 16;     // heavy rows: a block of this many warps each

template <typename acc_t>
__device__ __forceinline__ acc_t infinity() { return std::numeric_limits<acc_t>::infinity(); }

template <typename index_t>
__device__ __forceinline__ int64_t edge_at(const index_t* perm, int64_t p) {
  return perm ? int64_t(perm[p]) : p;
}

// A lane's place in its row's group (a warp, or the block of a heavy row): its column within
// a pass and its first edge slot; the group's slots: a warp's slots times its warps.
struct LaneSplit {
  int column, slot, column_lanes, slots;
  __device__ LaneSplit(int column_bits, bool block_per_row) {
    const int lane = threadIdx.x % kWarp;
    column_lanes = 1 << column_bits;
    slots = kWarp >> column_bits;
    column = lane & (column_lanes - 1);
    slot = lane >> column_bits;
    if (block_per_row) {
      slot += int(threadIdx.x / kWarp) * slots;
      slots *= int(blockDim.x / kWarp);
    }
  }
};

// Calls body(begin, end, c) for each row of this group (warp, or block for kBlockPerRow) and
// each pass over its packets: the row's positions [begin, end) and this lane's packet c, which
// is past the last packet (c >= packets) on idle lanes of the last pass: they still take part
// in the body's merges. The rows are row_list[0, rows) (row_list null: 0 .. rows - 1).
// Grid-stride, every lane of a group on the same rows.
template <bool kBlockPerRow, typename index_t, typename Body>
__device__ __forceinline__ void for_each_row_pass(const index_t* rowptr, const index_t* row_list,
                                                  int64_t rows, int64_t packets,
                                                  const LaneSplit& lanes, const Body& body) {
  const int64_t groups = kBlockPerRow ? 1 : blockDim.x / kWarp;
  const int64_t stride = int64_t(gridDim.x) * groups;
  for (int64_t i = int64_t(blockIdx.x) * groups + (kBlockPerRow ? 0 : threadIdx.x / kWarp);
       i < rows; i += stride) {
    const int64_t row = row_list ? int64_t(row_list[i]) : i;
    const int64_t begin = rowptr[row], end = rowptr[row + 1];
    for (int64_t c0 = 0; c0 < packets; c0 += lanes.column_lanes)
      body(begin, end, c0 + lanes.column);
  }
}

// Calls f(at) for the entries of packet c this lane owns in the row, at = the edge's input
// position * width + c * kVec, its first column (none past the last packet).
template <int kVec, typename index_t, typename F>
__device__ __forceinline__ void for_each_lane_entry(const index_t* perm, int64_t begin,
                                                    int64_t end, int64_t width, int64_t c,
                                                    const LaneSplit& lanes, const F& f) {
  if (c * kVec >= width) return;
#pragma unroll 4
  for (int64_t p = begin + lanes.slot; p < end; p += lanes.slots)
    f(edge_at(perm, p) * width + c * kVec);
}

// Online softmax state of one lane: the largest logit seen and the sum of exp(logit - peak).
template <typename acc_t>
struct SoftmaxState {
  acc_t peak = -infinity<acc_t>(), total = 0;

  // A -inf logit adds nothing (exp(-inf - peak) is NaN while peak is -inf); a NaN adds NaN.
  __device__ void add(acc_t v) {
    if (v > peak) {
      total = total * exp(peak - v) + acc_t(1);
      peak = v;
    } else if (v != -infinity<acc_t>()) {
      total += exp(v - peak);
    }
  }

  // A total whose peak is -inf is 0, or NaN after a NaN logit: it is kept as it is.
  __device__ static acc_t rescaled(acc_t total, acc_t peak, acc_t top) {
    return peak == -infinity<acc_t>() ? total : total * exp(peak - top);
  }

  __device__ void merge(acc_t other_peak, acc_t other_total) {
    const acc_t top = peak > other_peak ? peak : other_peak;
    total = rescaled(total, peak, top) + rescaled(other_total, other_peak, top);
    peak = top;
  }
  __device__ void merge(const SoftmaxState& other) { merge(other.peak, other.total); }

  __device__ SoftmaxState shuffled(int offset) const {
    SoftmaxState other;
    other.peak = __shfl_xor_sync(0xffffffffu, peak, offset);
    other.total = __shfl_xor_sync(0xffffffffu, total, offset);
    return other;
  }

  // 1 / sum, or NaN where the row's maximum is +-inf (DGL's result: inf - inf).
  __device__ acc_t scale() const {
    const bool finite = peak > -infinity<acc_t>() && peak < infinity<acc_t>();
    return finite ? acc_t(1) / total : std::numeric_limits<acc_t>::quiet_NaN();
  }
};

// A sum's partial of one lane.
template <typename acc_t>
struct SumState {
  acc_t sum = 0;
  __device__ void merge(const SumState& other) { sum += other.sum; }
  __device__ SumState shuffled(int offset) const {
    SumState other;
    other.sum = __shfl_xor_sync(0xffffffffu, sum, offset);
    return other;
  }
};

// Shared memory of a heavy row's block: one partial per warp and lane (raw bytes: the states
// have initialisers, which __shared__ variables may not).
template <typename State, bool kBlockPerRow>
struct MergeScratch {
  static constexpr int kSlots = kBlockPerRow ? kHeavyWarps * kWarp : 1;
  alignas(16) unsigned char bytes[kSlots * sizeof(State)];
  __device__ State* states() { return reinterpret_cast<State*>(bytes); }
};

// Merges the partials of this lane's column over its group, every lane of the column left
// with the same result: shuffles across the warp's edge slots, then (kBlockPerRow) the
// warps' results through shared memory, in warp order. Every thread of the group calls it.
template <bool kBlockPerRow, typename State>
__device__ __forceinline__ void merge_column(State& state, const LaneSplit& lanes,
                                             MergeScratch<State, kBlockPerRow>& scratch) {
  for (int offset = lanes.column_lanes; offset < kWarp; offset *= 2)
    state.merge(state.shuffled(offset));
  if constexpr (kBlockPerRow) {
    State* partial = scratch.states();
    const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
    if (lane < lanes.column_lanes) partial[warp * kWarp + lane] = state;
    __syncthreads();
    state = partial[lanes.column];
    for (int w = 1; w < int(blockDim.x / kWarp); ++w)
      state.merge(partial[w * kWarp + lanes.column]);
    __syncthreads();  // the next pass rewrites the partials
  }
}

template <bool kBlockPerRow>
constexpr int threads_per_block() {
  return kBlockPerRow ? kHeavyWarps * kWarp : kWarpsPerBlock * kWarp;
}

template <int kVec, bool kBlockPerRow, typename scalar_t, typename index_t>
__global__ void __launch_bounds__(threads_per_block<kBlockPerRow>())
edge_softmax_kernel(const index_t* __restrict__ rowptr, const index_t* __restrict__ perm,
                    const index_t* __restrict__ row_list, int64_t rows,
                    const scalar_t* __restrict__ logits, scalar_t* __restrict__ out,
                    int64_t width, int column_bits) {
  using acc_t = typename Scalar<scalar_t>::acc;
  using State = SoftmaxState<acc_t>;
  __shared__ MergeScratch<State, kBlockPerRow> scratch;
  const LaneSplit lanes(column_bits, kBlockPerRow);
  for_each_row_pass<kBlockPerRow>(rowptr, row_list, rows, width / kVec, lanes,
                                  [&](int64_t begin, int64_t end, int64_t c) {
    State state[kVec];
    for_each_lane_entry<kVec>(perm, begin, end, width, c, lanes, [&](int64_t at) {
      acc_t v[kVec];
      load_packet<scalar_t, kVec>(logits + at, v);
#pragma unroll
      for (int k = 0; k < kVec; ++k) state[k].add(v[k]);
    });
    acc_t scale[kVec];
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      merge_column<kBlockPerRow>(state[k], lanes, scratch);
      scale[k] = state[k].scale();
    }
    for_each_lane_entry<kVec>(perm, begin, end, width, c, lanes, [&](int64_t at) {
      acc_t v[kVec];
      load_packet<scalar_t, kVec>(logits + at, v);
#pragma unroll
      for (int k = 0; k < kVec; ++k) v[k] = exp(v[k] - state[k].peak) * scale[k];
      store_packet<scalar_t, kVec>(out + at, v);
    });
  });
}

template <int kVec, bool kBlockPerRow, typename scalar_t, typename index_t>
__global__ void __launch_bounds__(threads_per_block<kBlockPerRow>())
edge_softmax_backward_kernel(const index_t* __restrict__ rowptr,
                             const index_t* __restrict__ perm,
                             const index_t* __restrict__ row_list, int64_t rows,
                             const scalar_t* __restrict__ out,
                             const scalar_t* __restrict__ grad_out,
                             scalar_t* __restrict__ grad, int64_t width, int column_bits) {
  using acc_t = typename Scalar<scalar_t>::acc;
  using State = SumState<acc_t>;
  __shared__ MergeScratch<State, kBlockPerRow> scratch;
  const LaneSplit lanes(column_bits, kBlockPerRow);
  for_each_row_pass<kBlockPerRow>(rowptr, row_list, rows, width / kVec, lanes,
                                  [&](int64_t begin, int64_t end, int64_t c) {
    State partial[kVec];
    for_each_lane_entry<kVec>(perm, begin, end, width, c, lanes, [&](int64_t at) {
      acc_t o[kVec], g[kVec];
      load_packet<scalar_t, kVec>(out + at, o);
      load_packet<scalar_t, kVec>(grad_out + at, g);
#pragma unroll
      for (int k = 0; k < kVec; ++k) partial[k].sum += o[k] * g[k];
    });
#pragma unroll
    for (int k = 0; k < kVec; ++k) merge_column<kBlockPerRow>(partial[k], lanes, scratch);
    for_each_lane_entry<kVec>(perm, begin, end, width, c, lanes, [&](int64_t at) {
      acc_t o[kVec], g[kVec];
      load_packet<scalar_t, kVec>(out + at, o);
      load_packet<scalar_t, kVec>(grad_out + at, g);
#pragma unroll
      for (int k = 0; k < kVec; ++k) o[k] *= g[k] - partial[k].sum;
      store_packet<scalar_t, kVec>(grad + at, o);
    });
  });
}

// Packets per pass: the smallest power of two covering the row's packets, at most a warp.
int column_bits(int64_t packets) {
  int bits = 0;
  while ((1 << bits) < kWarp && (int64_t(1) << bits) < packets) ++bits;
  return bits;
}

// Calls launch(std::bool_constant<block per row>, row list, row count, grid, block): the
// light rows (or every row) a warp each, then the heavy rows a block each.
template <typename Launch>
void launch_rows(const EdgeRows& rows, const Launch& launch) {
  const bool split = rows.heavy && rows.num_heavy > 0;
  const void* light = split ? rows.light : nullptr;
  const int64_t num_light = split ? rows.num_light : rows.rows;
  if (num_light > 0) {
    const int threads = threads_per_block<false>();
    launch(std::false_type{}, light, num_light, grid_for(num_light * kWarp, threads), threads);
  }
  if (split) {
    const int threads = threads_per_block<true>();
    launch(std::true_type{}, rows.heavy, rows.num_heavy, grid_for(rows.num_heavy, 1), threads);
  }
}

}  // namespace

void edge_softmax_forward(FloatType type, EdgeRows rows, const void* logits, void* out,
                          int64_t width, cudaStream_t stream) {
  if (rows.rows == 0) return;
  launch_rows(rows, [&](auto block_per_row, const void* list, int64_t count, unsigned grid,
                        int threads) {
    dispatch_float(type, [&](auto scalar) {
      using scalar_t = decltype(scalar);
      const int vec = packet_size(width, sizeof(scalar_t), logits, out);
      dispatch_vec(vec, [&](auto vec_c) {
        dispatch_index(rows.index64, [&](auto index) {
          using index_t = decltype(index);
          edge_softmax_kernel<decltype(vec_c)::value, decltype(block_per_row)::value>
              <<<grid, threads, 0, stream>>>(
                  static_cast<const index_t*>(rows.rowptr),
                  static_cast<const index_t*>(rows.perm), static_cast<const index_t*>(list),
                  count, static_cast<const scalar_t*>(logits), static_cast<scalar_t*>(out),
                  width, column_bits(width / vec));
        });
      });
    });
  });
  check_launch("edge_softmax");
}

void edge_softmax_backward(FloatType type, EdgeRows rows, const void* out, const void* grad_out,
                           void* grad, int64_t width, cudaStream_t stream) {
  if (rows.rows == 0) return;
  launch_rows(rows, [&](auto block_per_row, const void* list, int64_t count, unsigned grid,
                        int threads) {
    dispatch_float(type, [&](auto scalar) {
      using scalar_t = decltype(scalar);
      const int vec = std::min(packet_size(width, sizeof(scalar_t), out, grad_out),
                               packet_size(width, sizeof(scalar_t), grad, grad));
      dispatch_vec(vec, [&](auto vec_c) {
        dispatch_index(rows.index64, [&](auto index) {
          using index_t = decltype(index);
          edge_softmax_backward_kernel<decltype(vec_c)::value, decltype(block_per_row)::value>
              <<<grid, threads, 0, stream>>>(
                  static_cast<const index_t*>(rows.rowptr),
                  static_cast<const index_t*>(rows.perm), static_cast<const index_t*>(list),
                  count, static_cast<const scalar_t*>(out),
                  static_cast<const scalar_t*>(grad_out), static_cast<scalar_t*>(grad), width,
                  column_bits(width / vec));
        });
      });
    });
  });
  check_launch("edge_softmax_backward");
}

}  // namespace cuda
}  // namespace fastgnn
