// Load-balanced CSR SpMM: every row is cut into work items of at most `chunk` edges, so a hub
// row is spread over many lane groups instead of holding one warp while the rest of the GPU
// idles. A row of one item writes its output directly; the items of a longer row write
// partial sums that a second kernel adds in item order, so the result stays deterministic.
#include "cuda/spmm_common.cuh"
#include "cuda/spmm_kernels.h"

#include <type_traits>

namespace fastgnn {
namespace cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kPacketsInFlight = 4;  // vector loads each lane keeps in flight per step

// Each group of kGroup lanes takes one item. A lane owns kPasses packets of kVec features,
// kGroup * kVec apart, and walks the item's edges kUnroll at a time, issuing all their loads
// before accumulating (in edge order).
template <typename scalar_t, typename index_t, int kVec, int kGroup, int kPasses>
__global__ void __launch_bounds__(kThreads)
spmm_split_items(const index_t* __restrict__ rowptr, const index_t* __restrict__ col,
                 EdgeWeights<typename Scalar<scalar_t>::acc, index_t> weights,
                 const scalar_t* __restrict__ x,
                 scalar_t* __restrict__ out, typename Scalar<scalar_t>::acc* __restrict__ partial,
                 SplitWorkView work, int64_t width) {
  using acc_t = typename Scalar<scalar_t>::acc;
  constexpr int kUnroll = kPacketsInFlight / kPasses > 0 ? kPacketsInFlight / kPasses : 1;
  const int lane = threadIdx.x % kGroup;
  const int group_in_warp = (threadIdx.x % kWarp) / kGroup;
  const unsigned mask =
      kGroup == kWarp ? 0xffffffffu : (((1u << kGroup) - 1u) << (group_in_warp * kGroup));
  const int64_t item = int64_t(blockIdx.x) * (kThreads / kGroup) + threadIdx.x / kGroup;
  if (item >= work.items) return;  // the whole group leaves together
  const auto* item_row = static_cast<const index_t*>(work.item_row);
  const auto* item_start = static_cast<const index_t*>(work.item_start);
  const auto* item_slot = static_cast<const index_t*>(work.item_slot);
  const int64_t row = item_row[item];
  const index_t begin = item_start[item];
  const index_t end = index_t(min(int64_t(begin) + work.chunk, int64_t(rowptr[row + 1])));
  const int64_t slot = item_slot[item];
  scalar_t* direct = slot < 0 ? out + row * width : nullptr;
  acc_t* spill = slot < 0 ? nullptr : partial + slot * width;

  for (int64_t f0 = 0; f0 < width; f0 += int64_t(kGroup) * kVec * kPasses) {
    acc_t acc[kPasses][kVec] = {};
    bool active[kPasses];
#pragma unroll
    for (int p = 0; p < kPasses; ++p) active[p] = f0 + (int64_t(p) * kGroup + lane) * kVec < width;
    for (index_t e0 = begin; e0 < end; e0 += kGroup) {
      index_t my_col = 0;
      acc_t my_weight = 0;
      if (e0 + lane < end) {
        my_col = col[e0 + lane];
        my_weight = weights(e0 + lane);
      }
      const int count = int(min(int64_t(kGroup), int64_t(end - e0)));
      for (int k = 0; k < count; k += kUnroll) {
        acc_t w[kUnroll];
        acc_t v[kUnroll][kPasses][kVec];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          // Every lane of the group takes part in the shuffles; only edges before count load.
          const int source_lane = k + u < count ? k + u : k;
          const index_t src = __shfl_sync(mask, my_col, source_lane, kGroup);
          w[u] = __shfl_sync(mask, my_weight, source_lane, kGroup);
          const scalar_t* src_row = x + int64_t(src) * width + f0 + int64_t(lane) * kVec;
#pragma unroll
          for (int p = 0; p < kPasses; ++p) {
            if (k + u < count && active[p])
              load_packet<scalar_t, kVec>(src_row + int64_t(p) * kGroup * kVec, v[u][p]);
          }
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          if (k + u >= count) break;
#pragma unroll
          for (int p = 0; p < kPasses; ++p) {
#pragma unroll
            for (int j = 0; j < kVec; ++j) acc[p][j] += w[u] * v[u][p][j];
          }
        }
      }
    }
#pragma unroll
    for (int p = 0; p < kPasses; ++p) {
      if (!active[p]) continue;
      const int64_t f = f0 + (int64_t(p) * kGroup + lane) * kVec;
      if (direct) {
        store_packet<scalar_t, kVec>(direct + f, acc[p]);
      } else {
        store_packet<acc_t, kVec>(spill + f, acc[p]);
      }
    }
  }
}

// (lanes per item, passes) covering the width with as few idle lanes as possible: groups of
// 4-32 lanes with one packet each, then a full warp with 2 or 4 packets per lane.
template <int kVec, typename F>
void dispatch_shape(int64_t width, F&& f) {
  const int64_t packets = ceil_div(width, kVec);
  if (packets <= 4) f(std::integral_constant<int, 4>{}, std::integral_constant<int, 1>{});
  else if (packets <= 8) f(std::integral_constant<int, 8>{}, std::integral_constant<int, 1>{});
  else if (packets <= 16) f(std::integral_constant<int, 16>{}, std::integral_constant<int, 1>{});
  else if (packets <= 32) f(std::integral_constant<int, 32>{}, std::integral_constant<int, 1>{});
  else if (packets <= 64) f(std::integral_constant<int, 32>{}, std::integral_constant<int, 2>{});
  else f(std::integral_constant<int, 32>{}, std::integral_constant<int, 4>{});
}

}  // namespace

void spmm_csr_split(FloatType type, CsrView csr, const void* value, const void* value_perm,
                    const void* x, void* out, void* partial, SplitWorkView work, int64_t width,
                    cudaStream_t stream) {
  if (work.items == 0 || width == 0) return;
  dispatch_spmm(type, csr, value, value_perm, x, out, width, [&](auto ops, auto vec_c) {
    using scalar_t = typename decltype(ops)::scalar_type;
    using index_t = typename decltype(ops)::index_type;
    using acc_t = typename decltype(ops)::acc_t;
    constexpr int kVec = decltype(vec_c)::value;
    auto* partials = static_cast<acc_t*>(partial);
    dispatch_shape<kVec>(width, [&](auto group_c, auto passes_c) {
      constexpr int kGroup = decltype(group_c)::value, kPasses = decltype(passes_c)::value;
      const auto blocks = unsigned(ceil_div(work.items, kThreads / kGroup));
      spmm_split_items<scalar_t, index_t, kVec, kGroup, kPasses>
          <<<blocks, kThreads, 0, stream>>>(ops.rowptr, ops.col, ops.weights, ops.x, ops.out,
                                            partials, work, width);
    });
    if (work.split_rows > 0) {
      split_combine<scalar_t, index_t>
          <<<grid_for(work.split_rows * width, kThreads), kThreads, 0, stream>>>(
              partials, work, ops.out, width);
    }
  });
  check_launch("spmm_csr_split");
}

}  // namespace cuda
}  // namespace fastgnn
