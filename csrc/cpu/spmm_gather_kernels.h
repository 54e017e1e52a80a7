// The CPU SpMM gather kernels. Rows (destinations) are handed out dynamically, so hubs do not
// stall a thread; each row's features are processed in compile-time tiles held in registers
// (8, 4, 2 and 1 vectors wide, then a short tail), so the edge list is walked once per tile and
// every gathered source row is read in full cache lines. The loops are compiled for the
// baseline ISA, for AVX2+FMA and, with 64-byte vectors, for AVX-512, chosen at run time; float16
// rows convert with F16C in the latter two.
// Included only by spmm_gather_<dtype>.cpp.
#pragma once

#include <vector>

#include "cpu/spmm_gather.h"

namespace fastgnn {
namespace cpu {
namespace gather_detail {

// Features [f0, f0 + kVecs * lanes) of one output row, accumulated in vector registers.
template <int kVecs, Weights kWeights, Isa kIsa, typename scalar_t, typename index_t>
FASTGNN_ALWAYS_INLINE void gather_tile(const Gather<scalar_t, index_t>& g, index_t begin,
                                       index_t end, int64_t f0, scalar_t* out_row) {
  using Vec = AccVec<scalar_t, kIsa>;
  typename Vec::type acc[kVecs] = {};
  for (index_t e = begin; e < end; ++e) {
    const auto w = g.template weight<kWeights>(e);
    const scalar_t* src = g.x + int64_t(g.col[e]) * g.width + f0;
#pragma GCC unroll 16
    for (int v = 0; v < kVecs; ++v)
      acc[v] = Vec::mul_add(w, Vec::load(src + v * Vec::kLanes), acc[v]);
  }
#pragma GCC unroll 16
  for (int v = 0; v < kVecs; ++v) Vec::store(acc[v], out_row + f0 + v * Vec::kLanes);
}

// The last `count` (< one vector) features of a row.
template <Weights kWeights, Isa kIsa, typename scalar_t, typename index_t>
FASTGNN_ALWAYS_INLINE void gather_tail(const Gather<scalar_t, index_t>& g, index_t begin,
                                       index_t end, int64_t f0, int64_t count, scalar_t* out_row) {
  using acc_t = acc_type<scalar_t>;
  acc_t acc[AccVec<scalar_t, kIsa>::kLanes] = {};
  for (index_t e = begin; e < end; ++e) {
    const acc_t w = g.template weight<kWeights>(e);
    const scalar_t* src = g.x + int64_t(g.col[e]) * g.width + f0;
    for (int64_t k = 0; k < count; ++k) acc[k] = mul_add<kIsa>(w, acc_t(src[k]), acc[k]);
  }
  for (int64_t k = 0; k < count; ++k) out_row[f0 + k] = scalar_t(acc[k]);
}

// One output row, edges [begin, end) of g, tile by tile.
template <Weights kWeights, Isa kIsa, typename scalar_t, typename index_t>
FASTGNN_ALWAYS_INLINE void gather_row(const Gather<scalar_t, index_t>& g, index_t begin,
                                      index_t end, scalar_t* out_row) {
  constexpr int64_t kLanes = AccVec<scalar_t, kIsa>::kLanes;
  const int64_t width = g.width;
  int64_t f = 0;
  for (; f + 8 * kLanes <= width; f += 8 * kLanes)
    gather_tile<8, kWeights, kIsa>(g, begin, end, f, out_row);
  if (width - f >= 4 * kLanes) {
    gather_tile<4, kWeights, kIsa>(g, begin, end, f, out_row);
    f += 4 * kLanes;
  }
  if (width - f >= 2 * kLanes) {
    gather_tile<2, kWeights, kIsa>(g, begin, end, f, out_row);
    f += 2 * kLanes;
  }
  if (width - f >= kLanes) {
    gather_tile<1, kWeights, kIsa>(g, begin, end, f, out_row);
    f += kLanes;
  }
  if (f < width) gather_tail<kWeights, kIsa>(g, begin, end, f, width - f, out_row);
}

template <Weights kWeights, Isa kIsa, typename scalar_t, typename index_t>
FASTGNN_ALWAYS_INLINE void gather_rows(const Gather<scalar_t, index_t>& g, int64_t row_begin,
                                       int64_t row_end) {
  using acc_t = acc_type<scalar_t>;
  constexpr int64_t kTileWidth = 8 * AccVec<scalar_t, kIsa>::kLanes;
  for (int64_t i = row_begin; i < row_end; ++i) {
    const index_t begin = g.rowptr[i], end = g.rowptr[i + 1];
    scalar_t* out_row = g.out + i * g.width;
    if constexpr (kWeights == Weights::kPermuted) {
      if (g.width > kTileWidth) {
        // Several tiles would each fetch value[perm[e]] at random: fetch the row's weights
        // once into a per-thread buffer and walk the row with direct weights.
        static thread_local std::vector<acc_t> row_weights;
        const int64_t degree = int64_t(end - begin);
        if (int64_t(row_weights.size()) < degree) row_weights.resize(degree);
        for (index_t e = begin; e < end; ++e) row_weights[e - begin] = g.value[g.value_perm[e]];
        const Gather<scalar_t, index_t> row{nullptr, g.col + begin, row_weights.data(),
                                            nullptr, g.x, g.out, g.width};
        gather_row<Weights::kDirect, kIsa>(row, index_t(0), index_t(degree), out_row);
        continue;
      }
    }
    gather_row<kWeights, kIsa>(g, begin, end, out_row);
  }
}

template <typename scalar_t, typename index_t, Isa kIsa>
FASTGNN_ALWAYS_INLINE void gather_rows_any(const Gather<scalar_t, index_t>& g, int64_t b,
                                           int64_t e) {
  switch (g.weights()) {
    case Weights::kOne: return gather_rows<Weights::kOne, kIsa>(g, b, e);
    case Weights::kDirect: return gather_rows<Weights::kDirect, kIsa>(g, b, e);
    case Weights::kPermuted: return gather_rows<Weights::kPermuted, kIsa>(g, b, e);
  }
}

}  // namespace gather_detail

template <typename scalar_t, typename index_t>
void run_gather(const Gather<scalar_t, index_t>& g, int64_t rows) {
  parallel_chunks(rows, rows_per_chunk(rows, int64_t(g.rowptr[rows])), [&](int64_t b, int64_t e) {
    on_widest_isa<gather_detail::gather_rows_any<scalar_t, index_t, Isa::kAvx512>,
                  gather_detail::gather_rows_any<scalar_t, index_t, Isa::kAvx2>,
                  gather_detail::gather_rows_any<scalar_t, index_t, Isa::kBaseline>>(g, b, e);
  });
}

// Explicit instances of run_gather for one feature dtype (both index dtypes).
#define FASTGNN_GATHER_INSTANCES(scalar_t)                                                   \
  template void run_gather<scalar_t, int32_t>(const Gather<scalar_t, int32_t>&, int64_t); \
  template void run_gather<scalar_t, int64_t>(const Gather<scalar_t, int64_t>&, int64_t);

}  // namespace cpu
}  // namespace fastgnn
