// Edge softmax CUDA kernels: a warp per row. Its lanes split into 2^column_bits columns x the
// remaining edge slots: a lane reads one column of every (32 >> column_bits)-th edge of the
// row, so the lanes of one edge read its contiguous columns; rows wider than 32 columns take
// several passes. The forward keeps an online (maximum, sum) per lane and merges the lanes of
// a column by shuffles, then writes exp(logit - maximum) / sum; the backward sums out * grad
// the same way, then writes the gradients. Fixed shuffle orders: deterministic.
#include "cuda/common.cuh"
#include "cuda/edge_softmax_kernels.h"

#include <limits>

namespace fastgnn {
namespace cuda {
namespace {

constexpr int kWarpsPerBlock = 8;

template <typename acc_t>
__device__ __forceinline__ acc_t infinity() { return std::numeric_limits<acc_t>::infinity(); }

template <typename index_t>
__device__ __forceinline__ int64_t edge_at(const index_t* perm, int64_t p) {
  return perm ? int64_t(perm[p]) : p;
}

// A lane's place in its warp: its column within a pass and its first edge slot.
struct LaneSplit {
  int column, slot, column_lanes, slots;
  __device__ explicit LaneSplit(int column_bits) {
    const int lane = threadIdx.x % kWarp;
    column_lanes = 1 << column_bits;
    slots = kWarp >> column_bits;
    column = lane & (column_lanes - 1);
    slot = lane >> column_bits;
  }
};

// Calls body(begin, end, c) for each row of this warp and each pass over its columns: the
// row's positions [begin, end) and this lane's column c, which is past the last column
// (c >= width) on idle lanes of the last pass: they still take part in the body's shuffles.
// Grid-stride, every lane of a warp on the same rows.
template <typename index_t, typename Body>
__device__ __forceinline__ void for_each_row_pass(const index_t* rowptr, int64_t rows,
                                                  int64_t width, const LaneSplit& lanes,
                                                  const Body& body) {
  const int64_t stride = int64_t(gridDim.x) * (blockDim.x / kWarp);
  for (int64_t row = int64_t(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
       row < rows; row += stride) {
    const int64_t begin = rowptr[row], end = rowptr[row + 1];
    for (int64_t c0 = 0; c0 < width; c0 += lanes.column_lanes)
      body(begin, end, c0 + lanes.column);
  }
}

// Calls f(at) for the entries of column c this lane owns in the row, at = the edge's input
// position * width + c (none past the last column).
template <typename index_t, typename F>
__device__ __forceinline__ void for_each_lane_entry(const index_t* perm, int64_t begin,
                                                    int64_t end, int64_t width, int64_t c,
                                                    const LaneSplit& lanes, const F& f) {
  if (c >= width) return;
#pragma unroll 4
  for (int64_t p = begin + lanes.slot; p < end; p += lanes.slots) f(edge_at(perm, p) * width + c);
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

  // 1 / sum, or NaN where the row's maximum is +-inf (DGL's result: inf - inf).
  __device__ acc_t scale() const {
    const bool finite = peak > -infinity<acc_t>() && peak < infinity<acc_t>();
    return finite ? acc_t(1) / total : std::numeric_limits<acc_t>::quiet_NaN();
  }
};

template <typename scalar_t, typename index_t>
__global__ void __launch_bounds__(kWarpsPerBlock * kWarp)
edge_softmax_kernel(const index_t* __restrict__ rowptr, const index_t* __restrict__ perm,
                    int64_t rows, const scalar_t* __restrict__ logits,
                    scalar_t* __restrict__ out, int64_t width, int column_bits) {
  using S = Scalar<scalar_t>;
  const LaneSplit lanes(column_bits);
  for_each_row_pass(rowptr, rows, width, lanes, [&](int64_t begin, int64_t end, int64_t c) {
    SoftmaxState<typename S::acc> state;
    for_each_lane_entry(perm, begin, end, width, c, lanes,
                        [&](int64_t at) { state.add(S::load(logits[at])); });
    for (int offset = lanes.column_lanes; offset < kWarp; offset *= 2)
      state.merge(__shfl_xor_sync(0xffffffffu, state.peak, offset),
                  __shfl_xor_sync(0xffffffffu, state.total, offset));
    const auto scale = state.scale();
    for_each_lane_entry(perm, begin, end, width, c, lanes, [&](int64_t at) {
      out[at] = S::store(exp(S::load(logits[at]) - state.peak) * scale);
    });
  });
}

template <typename scalar_t, typename index_t>
__global__ void __launch_bounds__(kWarpsPerBlock * kWarp)
edge_softmax_backward_kernel(const index_t* __restrict__ rowptr,
                             const index_t* __restrict__ perm, int64_t rows,
                             const scalar_t* __restrict__ out,
                             const scalar_t* __restrict__ grad_out,
                             scalar_t* __restrict__ grad, int64_t width, int column_bits) {
  using S = Scalar<scalar_t>;
  const LaneSplit lanes(column_bits);
  for_each_row_pass(rowptr, rows, width, lanes, [&](int64_t begin, int64_t end, int64_t c) {
    typename S::acc dot = 0;
    for_each_lane_entry(perm, begin, end, width, c, lanes, [&](int64_t at) {
      dot += S::load(out[at]) * S::load(grad_out[at]);
    });
    for (int offset = lanes.column_lanes; offset < kWarp; offset *= 2)
      dot += __shfl_xor_sync(0xffffffffu, dot, offset);
    for_each_lane_entry(perm, begin, end, width, c, lanes, [&](int64_t at) {
      grad[at] = S::store(S::load(out[at]) * (S::load(grad_out[at]) - dot));
    });
  });
}

// Columns per pass: the smallest power of two covering the width, at most a warp.
int column_bits(int64_t width) {
  int bits = 0;
  while ((1 << bits) < kWarp && (int64_t(1) << bits) < width) ++bits;
  return bits;
}

// Calls launch(kernel arguments: grid, block) with one warp per row.
template <typename Launch>
void launch_rows(const EdgeRows& rows, const Launch& launch) {
  if (rows.rows == 0) return;
  const int threads = kWarpsPerBlock * kWarp;
  launch(grid_for(rows.rows * kWarp, threads), threads);
}

}  // namespace

void edge_softmax_forward(FloatType type, EdgeRows rows, const void* logits, void* out,
                          int64_t width, cudaStream_t stream) {
  launch_rows(rows, [&](unsigned grid, int threads) {
    dispatch_float(type, [&](auto scalar) {
      using scalar_t = decltype(scalar);
      dispatch_index(rows.index64, [&](auto index) {
        using index_t = decltype(index);
        edge_softmax_kernel<<<grid, threads, 0, stream>>>(
            static_cast<const index_t*>(rows.rowptr), static_cast<const index_t*>(rows.perm),
            rows.rows, static_cast<const scalar_t*>(logits), static_cast<scalar_t*>(out), width,
            column_bits(width));
      });
    });
  });
  check_launch("edge_softmax");
}

void edge_softmax_backward(FloatType type, EdgeRows rows, const void* out, const void* grad_out,
                           void* grad, int64_t width, cudaStream_t stream) {
  launch_rows(rows, [&](unsigned grid, int threads) {
    dispatch_float(type, [&](auto scalar) {
      using scalar_t = decltype(scalar);
      dispatch_index(rows.index64, [&](auto index) {
        using index_t = decltype(index);
        edge_softmax_backward_kernel<<<grid, threads, 0, stream>>>(
            static_cast<const index_t*>(rows.rowptr), static_cast<const index_t*>(rows.perm),
            rows.rows, static_cast<const scalar_t*>(out),
            static_cast<const scalar_t*>(grad_out), static_cast<scalar_t*>(grad), width,
            column_bits(width));
      });
    });
  });
  check_launch("edge_softmax_backward");
}

}  // namespace cuda
}  // namespace fastgnn
