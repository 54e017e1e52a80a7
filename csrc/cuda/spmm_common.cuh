// What the SpMM kernels (spmm_kernels.cu, spmm_split_kernels.cu) share: the per-edge weight
// lookup and the recovery of a launch's compile-time types from its runtime description.
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
// and index types of the launch and the widest vector access its width and pointers allow.
template <typename F>
void dispatch_spmm(FloatType type, CsrView csr, const void* value, const void* value_perm,
                   const void* x, void* out, int64_t width, F&& f) {
  dispatch_float(type, [&](auto s) {
    using scalar_t = decltype(s);
    using acc_t = typename Scalar<scalar_t>::acc;
    const int vec = packet_size(width, sizeof(scalar_t), x, out);
    dispatch_index(csr.index64, [&](auto i) {
      using index_t = decltype(i);
      const SpmmOperands<scalar_t, index_t> ops{
          static_cast<const index_t*>(csr.rowptr), static_cast<const index_t*>(csr.col),
          {static_cast<const acc_t*>(value), static_cast<const index_t*>(value_perm)},
          static_cast<const scalar_t*>(x), static_cast<scalar_t*>(out)};
      dispatch_vec(vec, [&](auto vec_c) { f(ops, vec_c); });
    });
  });
}

}  // namespace cuda
}  // namespace fastgnn
