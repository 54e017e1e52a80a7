// SpMM-family CUDA kernels over destination-major CSR. Every SpMM kernel here sums each
// output in a fixed order (deterministic); only the transposed fallback uses atomics.
#include "cuda/spmm_common.cuh"
#include "cuda/spmm_kernels.h"

#include <type_traits>

namespace fastgnn {
namespace cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / kWarp;

// A group of kGroup lanes per row (kGroup = 32: a warp per row; less: several rows per warp).
// The group loads kGroup edges' sources and weights at once and broadcasts them by shuffle;
// each lane then owns kVec consecutive features, read with one vector load per edge.
template <typename scalar_t, typename index_t, int kVec, int kGroup>
__global__ void __launch_bounds__(kThreads)
spmm_grouped(const index_t* __restrict__ rowptr, const index_t* __restrict__ col,
             EdgeWeights<typename Scalar<scalar_t>::acc, index_t> weights,
             const scalar_t* __restrict__ x, scalar_t* __restrict__ out, int64_t rows,
             int64_t width) {
  using acc_t = typename Scalar<scalar_t>::acc;
  const int lane = threadIdx.x % kGroup;
  const int group_in_warp = (threadIdx.x % kWarp) / kGroup;
  const unsigned mask =
      kGroup == kWarp ? 0xffffffffu : (((1u << kGroup) - 1u) << (group_in_warp * kGroup));
  const int64_t row = int64_t(blockIdx.x) * (kThreads / kGroup) + threadIdx.x / kGroup;
  if (row >= rows) return;  // the whole group leaves together
  const index_t begin = rowptr[row], end = rowptr[row + 1];
  for (int64_t f0 = 0; f0 < width; f0 += kGroup * kVec) {
    const int64_t f = f0 + int64_t(lane) * kVec;
    const bool active = f < width;
    acc_t acc[kVec] = {};
    for (index_t e0 = begin; e0 < end; e0 += kGroup) {
      index_t my_col = 0;
      acc_t my_weight = 0;
      if (e0 + lane < end) {
        my_col = col[e0 + lane];
        my_weight = weights(e0 + lane);
      }
      const int count = int(min(int64_t(kGroup), int64_t(end - e0)));
      for (int k = 0; k < count; ++k) {
        const index_t src = __shfl_sync(mask, my_col, k, kGroup);
        const acc_t w = __shfl_sync(mask, my_weight, k, kGroup);
        if (active) {
          acc_t v[kVec];
          load_packet<scalar_t, kVec>(x + int64_t(src) * width + f, v);
#pragma unroll
          for (int j = 0; j < kVec; ++j) acc[j] += w * v[j];
        }
      }
    }
    if (active) store_packet<scalar_t, kVec>(out + row * width + f, acc);
  }
}

// One block per row: its warps take every kWarpsPerBlock-th edge, then warp 0 adds the warps'
// partial sums in warp order (deterministic). For rows with thousands of edges.
template <typename scalar_t, typename index_t, int kVec>
__global__ void __launch_bounds__(kThreads)
spmm_block_per_row(const index_t* __restrict__ rowptr, const index_t* __restrict__ col,
                   EdgeWeights<typename Scalar<scalar_t>::acc, index_t> weights,
                   const scalar_t* __restrict__ x, scalar_t* __restrict__ out, int64_t width) {
  using acc_t = typename Scalar<scalar_t>::acc;
  __shared__ acc_t partial[kWarpsPerBlock][kWarp * kVec];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t row = blockIdx.x;
  const index_t begin = rowptr[row], end = rowptr[row + 1];
  for (int64_t f0 = 0; f0 < width; f0 += kWarp * kVec) {
    const int64_t f = f0 + int64_t(lane) * kVec;
    const bool active = f < width;
    acc_t acc[kVec] = {};
    if (active) {
      for (index_t e = begin + warp; e < end; e += kWarpsPerBlock) {
        const acc_t w = weights(e);
        acc_t v[kVec];
        load_packet<scalar_t, kVec>(x + int64_t(col[e]) * width + f, v);
#pragma unroll
        for (int j = 0; j < kVec; ++j) acc[j] += w * v[j];
      }
    }
#pragma unroll
    for (int j = 0; j < kVec; ++j) partial[warp][lane * kVec + j] = acc[j];
    __syncthreads();
    if (warp == 0 && active) {
      acc_t total[kVec] = {};
      for (int w = 0; w < kWarpsPerBlock; ++w) {
#pragma unroll
        for (int j = 0; j < kVec; ++j) total[j] += partial[w][lane * kVec + j];
      }
      store_packet<scalar_t, kVec>(out + row * width + f, total);
    }
    __syncthreads();
  }
}

template <typename scalar_t, typename index_t>
__global__ void spmm_transposed_atomic(const index_t* __restrict__ rowptr,
                                       const index_t* __restrict__ col,
                                       const typename Scalar<scalar_t>::acc* __restrict__ value,
                                       const scalar_t* __restrict__ x,
                                       typename Scalar<scalar_t>::acc* __restrict__ acc_out,
                                       int64_t rows, int64_t width) {
  using acc_t = typename Scalar<scalar_t>::acc;
  const int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= rows) return;
  for (index_t e = rowptr[row]; e < rowptr[row + 1]; ++e) {
    const acc_t w = value ? value[e] : acc_t(1);
    acc_t* dst = acc_out + int64_t(col[e]) * width;
    for (int64_t f = lane; f < width; f += kWarp)
      atomicAdd(dst + f, w * Scalar<scalar_t>::load(x[row * width + f]));
  }
}

// One warp per destination row: each edge's dot product is a warp reduction.
template <typename scalar_t, typename index_t>
__global__ void sddmm_warp_per_row(const index_t* __restrict__ rowptr,
                                   const index_t* __restrict__ col,
                                   const scalar_t* __restrict__ a, const scalar_t* __restrict__ b,
                                   typename Scalar<scalar_t>::acc* __restrict__ out, int64_t rows,
                                   int64_t width) {
  using acc_t = typename Scalar<scalar_t>::acc;
  const int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= rows) return;
  const scalar_t* ar = a + row * width;
  for (index_t e = rowptr[row]; e < rowptr[row + 1]; ++e) {
    const scalar_t* br = b + int64_t(col[e]) * width;
    acc_t s = 0;
    for (int64_t f = lane; f < width; f += kWarp)
      s += Scalar<scalar_t>::load(ar[f]) * Scalar<scalar_t>::load(br[f]);
    s = warp_sum(s);
    if (lane == 0) out[e] = s;
  }
}

unsigned warp_per_row_blocks(int64_t rows) { return unsigned(ceil_div(rows, kWarpsPerBlock)); }

// Lanes per row for the grouped kernel: enough for one packet each across the width, a power
// of two in [4, max_group].
int group_size(int64_t width, int vec, int max_group) {
  int group = 4;
  while (group < max_group && group * vec < width) group *= 2;
  return group;
}

template <typename F>
void dispatch_group(int group, F&& f) {
  switch (group) {
    case 4: f(std::integral_constant<int, 4>{}); break;
    case 8: f(std::integral_constant<int, 8>{}); break;
    case 16: f(std::integral_constant<int, 16>{}); break;
    default: f(std::integral_constant<int, 32>{}); break;
  }
}

}  // namespace

void spmm_csr(FloatType type, CsrView csr, const void* value, const void* value_perm,
              const void* x, void* out, int64_t width, CsrKernel kernel, cudaStream_t stream) {
  if (csr.rows == 0 || width == 0) return;
  dispatch_spmm(type, csr, value, value_perm, x, out, width, [&](auto ops, auto vec_c) {
    using scalar_t = typename decltype(ops)::scalar_type;
    using index_t = typename decltype(ops)::index_type;
    constexpr int kVec = decltype(vec_c)::value;
    if (kernel == CsrKernel::kBlock) {
      spmm_block_per_row<scalar_t, index_t, kVec><<<unsigned(csr.rows), kThreads, 0, stream>>>(
          ops.rowptr, ops.col, ops.weights, ops.x, ops.out, width);
      return;
    }
    const int group = kernel == CsrKernel::kWarp      ? kWarp
                      : kernel == CsrKernel::kSubWarp ? group_size(width, kVec, 16)
                                                      : group_size(width, kVec, kWarp);
    dispatch_group(group, [&](auto group_c) {
      constexpr int kGroup = decltype(group_c)::value;
      const auto blocks = unsigned(ceil_div(csr.rows, kThreads / kGroup));
      spmm_grouped<scalar_t, index_t, kVec, kGroup><<<blocks, kThreads, 0, stream>>>(
          ops.rowptr, ops.col, ops.weights, ops.x, ops.out, csr.rows, width);
    });
  });
  check_launch("spmm_csr");
}

void spmm_csr_transposed_atomic(FloatType type, CsrView csr, const void* value, const void* x,
                                void* acc, int64_t width, cudaStream_t stream) {
  if (csr.rows == 0 || width == 0) return;
  dispatch_float(type, [&](auto s) {
    using scalar_t = decltype(s);
    using acc_t = typename Scalar<scalar_t>::acc;
    dispatch_index(csr.index64, [&](auto i) {
      using index_t = decltype(i);
      spmm_transposed_atomic<scalar_t, index_t>
          <<<warp_per_row_blocks(csr.rows), kThreads, 0, stream>>>(
              static_cast<const index_t*>(csr.rowptr), static_cast<const index_t*>(csr.col),
              static_cast<const acc_t*>(value), static_cast<const scalar_t*>(x),
              static_cast<acc_t*>(acc), csr.rows, width);
    });
  });
  check_launch("spmm_csr_transposed_atomic");
}

void sddmm_csr(FloatType type, CsrView csr, const void* a, const void* b, void* out,
               int64_t width, cudaStream_t stream) {
  if (csr.rows == 0 || csr.nnz == 0) return;
  dispatch_float(type, [&](auto s) {
    using scalar_t = decltype(s);
    using acc_t = typename Scalar<scalar_t>::acc;
    dispatch_index(csr.index64, [&](auto i) {
      using index_t = decltype(i);
      sddmm_warp_per_row<scalar_t, index_t><<<warp_per_row_blocks(csr.rows), kThreads, 0, stream>>>(
          static_cast<const index_t*>(csr.rowptr), static_cast<const index_t*>(csr.col),
          static_cast<const scalar_t*>(a), static_cast<const scalar_t*>(b),
          static_cast<acc_t*>(out), csr.rows, width);
    });
  });
  check_launch("sddmm_csr");
}

}  // namespace cuda
}  // namespace fastgnn
