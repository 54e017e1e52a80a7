// SpMM-family CUDA kernels over destination-major CSR.
#include "cuda/common.cuh"
#include "cuda/spmm_kernels.h"

namespace fastgnn {
namespace cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kRowsPerBlock = kThreads / kWarp;

// One warp per destination row; lanes stride over the features.
template <typename scalar_t, typename index_t>
__global__ void spmm_warp_per_row(const index_t* __restrict__ rowptr,
                                  const index_t* __restrict__ col,
                                  const typename Scalar<scalar_t>::acc* __restrict__ value,
                                  const index_t* __restrict__ value_perm,
                                  const scalar_t* __restrict__ x, scalar_t* __restrict__ out,
                                  int64_t rows, int64_t width) {
  using acc_t = typename Scalar<scalar_t>::acc;
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= rows) return;
  const index_t begin = rowptr[row], end = rowptr[row + 1];
  for (int64_t f0 = 0; f0 < width; f0 += kWarp) {
    const int64_t f = f0 + lane;
    acc_t acc = 0;
    for (index_t e = begin; e < end; ++e) {
      const acc_t w = value ? value[value_perm ? value_perm[e] : e] : acc_t(1);
      if (f < width) acc += w * Scalar<scalar_t>::load(x[int64_t(col[e]) * width + f]);
    }
    if (f < width) out[row * width + f] = Scalar<scalar_t>::store(acc);
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
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
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
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
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

unsigned blocks_for(int64_t rows) { return unsigned(ceil_div(rows, kRowsPerBlock)); }

}  // namespace

void spmm_csr(FloatType type, CsrView csr, const void* value, const void* value_perm,
              const void* x, void* out, int64_t width, cudaStream_t stream) {
  if (csr.rows == 0 || width == 0) return;
  dispatch_float(type, [&](auto s) {
    using scalar_t = decltype(s);
    using acc_t = typename Scalar<scalar_t>::acc;
    dispatch_index(csr.index64, [&](auto i) {
      using index_t = decltype(i);
      spmm_warp_per_row<scalar_t, index_t><<<blocks_for(csr.rows), kThreads, 0, stream>>>(
          static_cast<const index_t*>(csr.rowptr), static_cast<const index_t*>(csr.col),
          static_cast<const acc_t*>(value), static_cast<const index_t*>(value_perm),
          static_cast<const scalar_t*>(x), static_cast<scalar_t*>(out), csr.rows, width);
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
      spmm_transposed_atomic<scalar_t, index_t><<<blocks_for(csr.rows), kThreads, 0, stream>>>(
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
      sddmm_warp_per_row<scalar_t, index_t><<<blocks_for(csr.rows), kThreads, 0, stream>>>(
          static_cast<const index_t*>(csr.rowptr), static_cast<const index_t*>(csr.col),
          static_cast<const scalar_t*>(a), static_cast<const scalar_t*>(b),
          static_cast<acc_t*>(out), csr.rows, width);
    });
  });
  check_launch("sddmm_csr");
}

}  // namespace cuda
}  // namespace fastgnn
