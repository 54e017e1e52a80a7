// Snapshot SpMM kernel: one warp per (work item of at most 64 edges of a destination row,
// feature chunk, snapshot chunk). The lanes cover the chunk's features (kVec apart by 32,
// coalesced); each edge's source index is read once and its feature rows of up to kSnapshots
// snapshots are loaded back to back, which keeps that many independent loads in flight per
// lane. Items of a row cut into several add their sums into it with atomics.
#include "cuda/common.cuh"
#include "cuda/spmm_snapshots_kernels.h"

namespace fastgnn {
namespace cuda {
namespace {

constexpr int kSnapshots = 8;  // snapshots per warp: accumulators kept in registers
constexpr int kWarpsPerBlock = 8;

// atomicAdd on the feature type (half and bfloat16 overloads: sm_70 and sm_80 onwards).
template <typename T>
__device__ __forceinline__ void atomic_add(T* p, typename Scalar<T>::acc v) {
  atomicAdd(p, Scalar<T>::store(v));
}

template <typename T, typename I, int kVec>
__global__ void __launch_bounds__(kWarp * kWarpsPerBlock)
snapshots_kernel(const I* __restrict__ rowptr, const I* __restrict__ shared_end,
                 const I* __restrict__ col, const int64_t* __restrict__ mask,
                 const I* __restrict__ item_row, const I* __restrict__ item_start,
                 const I* __restrict__ item_slot, int64_t num_items, int64_t chunk,
                 const T* __restrict__ x, const typename Scalar<T>::acc* __restrict__ src_scale,
                 const typename Scalar<T>::acc* __restrict__ dst_scale, T* __restrict__ out,
                 int64_t rows, int64_t num_src, int64_t width, int snapshots,
                 int64_t feature_chunks, int snapshot_chunks) {
  using acc_t = typename Scalar<T>::acc;
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = int64_t(gridDim.x) * kWarpsPerBlock;
  const int64_t items = num_items * feature_chunks * snapshot_chunks;
  for (int64_t item = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp; item < items;
       item += warps) {
    const int64_t w = item / (feature_chunks * snapshot_chunks);
    const int64_t rest = item % (feature_chunks * snapshot_chunks);
    const int t0 = int(rest % snapshot_chunks) * kSnapshots;
    const int64_t f0 = (rest / snapshot_chunks) * (kWarp * kVec) + lane;
    const int count = min(kSnapshots, snapshots - t0);
    const int64_t row = item_row[w];
    const int64_t begin = item_start[w];
    const int64_t end = min(begin + chunk, int64_t(rowptr[row + 1]));
    const int64_t shared = max(begin, min(end, int64_t(shared_end[row])));
    acc_t acc[kSnapshots][kVec];
#pragma unroll
    for (int t = 0; t < kSnapshots; ++t)
#pragma unroll
      for (int v = 0; v < kVec; ++v) acc[t][v] = acc_t(0);

    auto add = [&](int64_t j, unsigned bits) {
#pragma unroll
      for (int t = 0; t < kSnapshots; ++t) {
        if (t < count && (bits >> t & 1u)) {
          const int64_t src_row = int64_t(t0 + t) * num_src + j;
          const acc_t s = src_scale ? src_scale[src_row] : acc_t(1);
          const T* xr = x + src_row * width;
#pragma unroll
          for (int v = 0; v < kVec; ++v) {
            const int64_t f = f0 + v * kWarp;
            if (f < width) acc[t][v] += s * Scalar<T>::load(xr[f]);
          }
        }
      }
    };
    for (int64_t e = begin; e < shared; ++e) add(int64_t(col[e]), 0xffu);
    for (int64_t e = shared; e < end; ++e)
      add(int64_t(col[e]), unsigned(uint64_t(mask[e]) >> t0) & 0xffu);
    const bool whole_row = item_slot[w] < 0;
#pragma unroll
    for (int t = 0; t < kSnapshots; ++t) {
      if (t < count) {
        const int64_t out_row = int64_t(t0 + t) * rows + row;
        const acc_t d = dst_scale ? dst_scale[out_row] : acc_t(1);
#pragma unroll
        for (int v = 0; v < kVec; ++v) {
          const int64_t f = f0 + v * kWarp;
          if (f >= width) continue;
          if (whole_row) out[out_row * width + f] = Scalar<T>::store(d * acc[t][v]);
          else atomic_add(out + out_row * width + f, d * acc[t][v]);
        }
      }
    }
  }
}

template <int kVec>
void launch(FloatType type, CsrView csr, SplitWorkView work, const void* shared_end,
            const int64_t* mask, const void* x, const void* src_scale, const void* dst_scale,
            void* out, int64_t snapshots, int64_t num_src, int64_t width, cudaStream_t stream) {
  const int64_t feature_chunks = ceil_div(width, int64_t(kWarp) * kVec);
  const int snapshot_chunks = int(ceil_div(snapshots, kSnapshots));
  const int64_t items = work.items * feature_chunks * snapshot_chunks;
  const unsigned blocks = grid_for(items * kWarp, kWarp * kWarpsPerBlock);
  dispatch_float(type, [&](auto scalar) {
    using T = decltype(scalar);
    using acc_t = typename Scalar<T>::acc;
    dispatch_index(csr.index64, [&](auto index) {
      using I = decltype(index);
      snapshots_kernel<T, I, kVec><<<blocks, kWarp * kWarpsPerBlock, 0, stream>>>(
          static_cast<const I*>(csr.rowptr), static_cast<const I*>(shared_end),
          static_cast<const I*>(csr.col), mask, static_cast<const I*>(work.item_row),
          static_cast<const I*>(work.item_start), static_cast<const I*>(work.item_slot),
          work.items, work.chunk, static_cast<const T*>(x),
          static_cast<const acc_t*>(src_scale), static_cast<const acc_t*>(dst_scale),
          static_cast<T*>(out), csr.rows, num_src, width, int(snapshots), feature_chunks,
          snapshot_chunks);
    });
  });
  check_launch("spmm_snapshots");
}

}  // namespace

void spmm_snapshots(FloatType type, CsrView csr, SplitWorkView work, const void* shared_end,
                    const int64_t* mask, const void* x, const void* src_scale,
                    const void* dst_scale, void* out, int64_t snapshots, int64_t num_src,
                    int64_t width, cudaStream_t stream) {
  if (work.items == 0 || width == 0 || snapshots == 0) return;
  // Features per lane: 1 up to width 32, 2 up to 64, else 4 (chunks of 128 features).
  auto run = [&](auto vec) {
    launch<decltype(vec)::value>(type, csr, work, shared_end, mask, x, src_scale, dst_scale,
                                 out, snapshots, num_src, width, stream);
  };
  if (width <= kWarp) run(std::integral_constant<int, 1>{});
  else if (width <= 2 * kWarp) run(std::integral_constant<int, 2>{});
  else run(std::integral_constant<int, 4>{});
}

}  // namespace cuda
}  // namespace fastgnn
