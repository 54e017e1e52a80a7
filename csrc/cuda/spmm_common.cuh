// What the SpMM kernels (spmm_kernels.cu, spmm_split_kernels.cu, maxk_kernels.cu) share:
// the per-edge weight lookup, the recovery of a launch's compile-time types from its runtime
// description, and the in-order sum of a work list's partial rows.
#pragma once

#include "cuda/common.cuh"

namespace fastgnn {
namespace cuda {

// Weight of edge e: value[perm[e]] on a transposed walk, value[e], or 1 without values.
template <typename acc_t, typename index_t>
struct EdgeWeights {
  const acc_t* value;
  const index_t* perm;
  __device__ __forceinline__ acc_t operator()(index_t e) const {
    return value ? value[perm ? perm[e] : e] : acc_t(1);
  }
};

// Typed views of one SpMM launch's operands.
template <typename scalar_t, typename index_t>
struct SpmmOperands {
  using scalar_type = scalar_t;
  using index_type = index_t;
  using acc_t = typename Scalar<scalar_t>::acc;
  const index_t* rowptr;
  const index_t* col;
  EdgeWeights<acc_t, index_t> weights;
  const scalar_t* x;
  scalar_t* out;
};

// Calls f(SpmmOperands<scalar_t, index_t>, std::integral_constant<int, kVec>) with the feature
// and index types of the launch and the widest vector access its width and pointers allow: up
// to 16 bytes a lane, so 8 scalars of fp16/bf16 (with 4, a half lane would issue as many loads
// as a float32 lane for half the bytes, and measured no faster).
template <typename F>
void dispatch_spmm(FloatType type, CsrView csr, const void* value, const void* value_perm,
                   const void* x, void* out, int64_t width, F&& f) {
  dispatch_float(type, [&](auto s) {
    using scalar_t = decltype(s);
    using acc_t = typename Scalar<scalar_t>::acc;
    constexpr int kMaxVec = sizeof(scalar_t) == 2 ? 8 : 4;
    const int vec = packet_size(width, sizeof(scalar_t), x, out, kMaxVec);
    dispatch_index(csr.index64, [&](auto i) {
      using index_t = decltype(i);
      const SpmmOperands<scalar_t, index_t> ops{
          static_cast<const index_t*>(csr.rowptr), static_cast<const index_t*>(csr.col),
          {static_cast<const acc_t*>(value), static_cast<const index_t*>(value_perm)},
          static_cast<const scalar_t*>(x), static_cast<scalar_t*>(out)};
      dispatch_vec<kMaxVec>(vec, [&](auto vec_c) { f(ops, vec_c); });
    });
  });
}

// One thread per (split row, feature) of a work-list launch (SplitWorkView): the row's
// partial results added in item order, so the sum is deterministic.
template <typename scalar_t, typename index_t>
__global__ void split_combine(const typename Scalar<scalar_t>::acc* __restrict__ partial,
                              SplitWorkView work, scalar_t* __restrict__ out, int64_t width) {
  using acc_t = typename Scalar<scalar_t>::acc;
  const auto* split_row = static_cast<const index_t*>(work.split_row);
  const auto* split_first = static_cast<const index_t*>(work.split_first);
  const int64_t total = work.split_rows * width;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t k = i / width, f = i % width;
    const int64_t first = split_first[k], last = split_first[k + 1];
    acc_t sum = 0;
    for (int64_t s = first; s < last; ++s) sum += partial[s * width + f];
    out[int64_t(split_row[k]) * width + f] = Scalar<scalar_t>::store(sum);
  }
}

}  // namespace cuda
}  // namespace fastgnn
