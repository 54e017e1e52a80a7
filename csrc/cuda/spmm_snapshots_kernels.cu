// Snapshot SpMM kernel. A warp owns (work item of at most 64 edges of a destination row,
// feature chunk, chunk of 8 snapshots). Its lanes form 32 / kGroup slots of kGroup lanes;
// the lanes of a slot cover the chunk's features in vector packets (coalesced) and a slot
// covers every (32 / kGroup)-th snapshot of the chunk, so one pass over the item's edges
// reads each edge's source index and mask once and loads the source's feature rows of all 8
// snapshots at once: 8 packets in flight per lane whatever the width. Each snapshot's source
// norm is applied per (edge, snapshot) from an [N, T] table (one sector per edge). With
// features shared by every snapshot (kShared: the input's snapshot stride is 0, e.g. static
// node features), a lane loads its packet of a source row once and applies it to all its
// snapshots. Items of a row cut into several add their sums into it with atomics, after a
// first kernel zeroes those rows (the output is not zero-filled as a whole).
#include "cuda/common.cuh"
#include "cuda/spmm_snapshots_kernels.h"

namespace fastgnn {
namespace cuda {
namespace {

constexpr int kSnapshots = 8;  // snapshots per warp
constexpr int kThreads = 256;

template <typename T>
__device__ __forceinline__ void atomic_add(T* p, typename Scalar<T>::acc v) {
  atomicAdd(p, Scalar<T>::store(v));
}

template <typename T, typename I, int kVec, int kGroup, bool kShared>
__global__ void __launch_bounds__(kThreads)
snapshots_kernel(const I* __restrict__ rowptr, const I* __restrict__ shared_end,
                 const I* __restrict__ col, const int64_t* __restrict__ mask,
                 SplitWorkView work, const T* __restrict__ x,
                 const typename Scalar<T>::acc* __restrict__ src_scale_nt,
                 const typename Scalar<T>::acc* __restrict__ dst_scale, T* __restrict__ out,
                 int64_t rows, int64_t x_tstride, int64_t width, int snapshots,
                 int64_t feature_chunks, int snapshot_chunks) {
  using acc_t = typename Scalar<T>::acc;
  constexpr int kSlots = kWarp / kGroup;           // snapshot slots per warp
  constexpr int kPer = kSnapshots / kSlots;        // snapshots per lane
  constexpr int kUnroll = kSnapshots / kPer;       // edges per step: 8 packets in flight
  const int lane = threadIdx.x % kWarp;
  const int slot = lane / kGroup;
  const auto* item_row = static_cast<const I*>(work.item_row);
  const auto* item_start = static_cast<const I*>(work.item_start);
  const auto* item_slot = static_cast<const I*>(work.item_slot);
  const int64_t warps = int64_t(gridDim.x) * (kThreads / kWarp);
  const int64_t total = work.items * feature_chunks * snapshot_chunks;
  for (int64_t warp = int64_t(blockIdx.x) * (kThreads / kWarp) + threadIdx.x / kWarp;
       warp < total; warp += warps) {
    const int64_t w = warp / (feature_chunks * snapshot_chunks);
    const int64_t rest = warp % (feature_chunks * snapshot_chunks);
    const int t0 = int(rest % snapshot_chunks) * kSnapshots;
    const int64_t f = (rest / snapshot_chunks) * (kGroup * kVec) + (lane % kGroup) * kVec;
    const bool active = f < width;
    const int64_t row = item_row[w];
    const int64_t begin = item_start[w];
    const int64_t end = min(begin + work.chunk, int64_t(rowptr[row + 1]));
    const int64_t shared = shared_end[row];
    acc_t acc[kPer][kVec];
#pragma unroll
    for (int p = 0; p < kPer; ++p)
#pragma unroll
      for (int q = 0; q < kVec; ++q) acc[p][q] = acc_t(0);

    for (int64_t e0 = begin; e0 < end; e0 += kWarp) {
      // Lane k fetches edge e0 + k's source and its membership bits in this chunk.
      const int64_t mine = e0 + lane;
      int64_t my_src = 0;
      unsigned my_bits = 0;
      if (mine < end) {
        my_src = int64_t(col[mine]);
        my_bits = mine < shared ? 0xffu : unsigned(uint64_t(mask[mine]) >> t0) & 0xffu;
      }
      const int count = int(min(int64_t(kWarp), end - e0));
      for (int k = 0; k < count; k += kUnroll) {
        acc_t s[kUnroll][kPer];
        acc_t v[kUnroll][kPer][kVec];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int from = k + u < count ? k + u : k;  // every lane takes part in the shuffles
          const int64_t j = __shfl_sync(0xffffffffu, my_src, from);
          const unsigned bits = k + u < count ? __shfl_sync(0xffffffffu, my_bits, from) : 0u;
#pragma unroll
          for (int p = 0; p < kPer; ++p) {
            const int dt = slot + p * kSlots;
            const int t = t0 + dt;
            const bool on = active && t < snapshots && (bits >> dt & 1u);
            s[u][p] = on ? (src_scale_nt ? src_scale_nt[j * snapshots + t] : acc_t(1))
                         : acc_t(0);
            if (kShared && p > 0) {  // the same row: reuse the packet (s is 0 where absent)
#pragma unroll
              for (int q = 0; q < kVec; ++q) v[u][p][q] = v[u][0][q];
            } else if (kShared ? active && bits != 0u : on) {
              load_packet<T, kVec>(x + int64_t(t) * x_tstride + j * width + f, v[u][p]);
            } else {
#pragma unroll
              for (int q = 0; q < kVec; ++q) v[u][p][q] = acc_t(0);
            }
          }
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
#pragma unroll
          for (int p = 0; p < kPer; ++p)
#pragma unroll
            for (int q = 0; q < kVec; ++q) acc[p][q] += s[u][p] * v[u][p][q];
      }
    }
    if (!active) continue;
    const bool whole_row = item_slot[w] < 0;
#pragma unroll
    for (int p = 0; p < kPer; ++p) {
      const int t = t0 + slot + p * kSlots;
      if (t >= snapshots) continue;
      const int64_t out_row = int64_t(t) * rows + row;
      const acc_t d = dst_scale ? dst_scale[out_row] : acc_t(1);
#pragma unroll
      for (int q = 0; q < kVec; ++q) acc[p][q] *= d;
      T* o = out + out_row * width + f;
      if (whole_row) {
        store_packet<T, kVec>(o, acc[p]);
      } else {
#pragma unroll
        for (int q = 0; q < kVec; ++q) atomic_add(o + q, acc[p][q]);
      }
    }
  }
}

// out[t, split_row[r], :] = 0 for every snapshot t: the rows whose work items add into them.
template <typename T, typename I>
__global__ void zero_split_rows_kernel(const I* __restrict__ split_row, int64_t split_rows,
                                       T* __restrict__ out, int64_t rows, int64_t width,
                                       int64_t total) {
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < total;
       k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t f = k % width, tr = k / width;
    const int64_t t = tr / split_rows, r = tr % split_rows;
    out[(t * rows + int64_t(split_row[r])) * width + f] = Scalar<T>::store(0.f);
  }
}

// Lanes per slot: the fewest (4 to 32) whose packets cover the width in one chunk, else 32
// lanes and several feature chunks.
template <typename F>
void dispatch_group(int64_t packets, F&& f) {
  if (packets <= 4) f(std::integral_constant<int, 4>{});
  else if (packets <= 8) f(std::integral_constant<int, 8>{});
  else if (packets <= 16) f(std::integral_constant<int, 16>{});
  else f(std::integral_constant<int, 32>{});
}

}  // namespace

void spmm_snapshots(FloatType type, CsrView csr, SplitWorkView work, const void* shared_end,
                    const int64_t* mask, const void* x, const void* src_scale_nt,
                    const void* dst_scale, void* out, int64_t snapshots, int64_t x_tstride,
                    int64_t width, cudaStream_t stream) {
  if (work.items == 0 || width == 0 || snapshots == 0) return;
  dispatch_float(type, [&](auto scalar) {
    using T = decltype(scalar);
    using acc_t = typename Scalar<T>::acc;
    // Packets of 4 where width and pointers allow, else single scalars (2 would double the
    // kernels compiled for little: a lane already keeps 8 packets in flight).
    const int vec = packet_size(width, sizeof(T), x, out) == 4 ? 4 : 1;
    dispatch_index(csr.index64, [&](auto index) {
      using I = decltype(index);
      // The output is uninitialised: a zero fill of all of it (347 MB at width 64 on
      // ogbn-arxiv, 8 snapshots) would write bytes per-snapshot spmm calls never write twice.
      if (work.split_rows > 0) {
        const int64_t total = snapshots * work.split_rows * width;
        zero_split_rows_kernel<T, I><<<grid_for(total, kThreads), kThreads, 0, stream>>>(
            static_cast<const I*>(work.split_row), work.split_rows, static_cast<T*>(out),
            csr.rows, width, total);
      }
      dispatch_vec(vec, [&](auto vec_c) {
        constexpr int kVec = decltype(vec_c)::value;
        dispatch_group(ceil_div(width, kVec), [&](auto group_c) {
          constexpr int kGroup = decltype(group_c)::value;
          const int64_t feature_chunks = ceil_div(width, int64_t(kGroup) * kVec);
          const int snapshot_chunks = int(ceil_div(snapshots, kSnapshots));
          const int64_t warps = work.items * feature_chunks * snapshot_chunks;
          auto launch = [&](auto shared_c) {
            snapshots_kernel<T, I, kVec, kGroup, decltype(shared_c)::value>
                <<<grid_for(warps * kWarp, kThreads), kThreads, 0, stream>>>(
                    static_cast<const I*>(csr.rowptr), static_cast<const I*>(shared_end),
                    static_cast<const I*>(csr.col), mask, work, static_cast<const T*>(x),
                    static_cast<const acc_t*>(src_scale_nt),
                    static_cast<const acc_t*>(dst_scale), static_cast<T*>(out), csr.rows,
                    x_tstride, width, int(snapshots), feature_chunks, snapshot_chunks);
          };
          if (x_tstride == 0) launch(std::true_type{});
          else launch(std::false_type{});
        });
      });
    });
  });
  check_launch("spmm_snapshots");
}

}  // namespace cuda
}  // namespace fastgnn
