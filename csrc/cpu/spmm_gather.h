// The CPU SpMM gather, out[i] = sum over row i of weight(e) * x[col[e]]: its arguments and
// entry point. The kernels are in spmm_gather_kernels.h, instantiated once per feature dtype
// in spmm_gather_<dtype>.cpp so that the heaviest templates compile in parallel.
#pragma once

#include "cpu/kernel_common.h"

namespace fastgnn {
namespace cpu {

// How a gather finds the weight of edge e: none (1), value[e], or value[value_perm[e]] (a
// transposed CSR walking values kept in forward order). A template parameter, so the edge
// loop carries no branch and the compiler keeps the feature tile in vector registers.
enum class Weights { kOne, kDirect, kPermuted };

// out[i] = sum over e in row i of weight(e) * x[col[e]].
template <typename scalar_t, typename index_t>
struct Gather {
  using acc_t = acc_type<scalar_t>;
  const index_t* rowptr;
  const index_t* col;
  const acc_t* value;
  const index_t* value_perm;
  const scalar_t* x;
  scalar_t* out;
  int64_t width;

  template <Weights kWeights>
  FASTGNN_ALWAYS_INLINE acc_t weight(index_t e) const {
    if constexpr (kWeights == Weights::kOne) return acc_t(1);
    else if constexpr (kWeights == Weights::kDirect) return value[e];
    else return value[value_perm[e]];
  }

  Weights weights() const {
    return !value ? Weights::kOne : value_perm ? Weights::kPermuted : Weights::kDirect;
  }
};

// Rows per scheduling chunk: about 2048 edges of work, at least one row.
inline int64_t rows_per_chunk(int64_t rows, int64_t nnz) {
  const int64_t avg_degree = std::max<int64_t>(1, nnz / std::max<int64_t>(1, rows));
  return std::clamp<int64_t>(2048 / avg_degree, 1, 256);
}

// Runs the gather over rows [0, rows) on the OpenMP threads.
template <typename scalar_t, typename index_t>
void run_gather(const Gather<scalar_t, index_t>& g, int64_t rows);

}  // namespace cpu
}  // namespace fastgnn
