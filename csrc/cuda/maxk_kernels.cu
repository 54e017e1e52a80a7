// MaxK-family CUDA kernels: the top-k into CBSR, the forward SpGEMM and the backward SSpMM
// (MaxK-GNN, Peng et al. 2024). See maxk_kernels.h for each launcher's contract.
#include "cuda/maxk_kernels.h"
#include "cuda/spmm_common.cuh"

#include <type_traits>

namespace fastgnn {
namespace cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / kWarp;
constexpr unsigned kFull = 0xffffffffu;

// Calls f(cidx_t{}) for the CBSR index type.
template <typename F>
void dispatch_cbsr_index(CbsrIndexType type, F&& f) {
  switch (type) {
    case CbsrIndexType::kUInt8: f(uint8_t{}); break;
    case CbsrIndexType::kInt16: f(int16_t{}); break;
    case CbsrIndexType::kInt32: f(int32_t{}); break;
  }
}

// Lanes per edge: k rounded up to a power of two, at most a warp.
inline int lanes_per_edge(int64_t k) {
  int lanes = 1;
  while (lanes < k && lanes < kWarp) lanes *= 2;
  return lanes;
}

// ---- top-k -----------------------------------------------------------------------------------
// The number of a lane's keys at or above `candidate` (at least 1): the carries out of
// key + (2^32 - candidate). ptxas adds two carries with one IADD3.X, 1.5 instructions a key
// where `count += key >= candidate` takes 3 (compare, add, select).
template <int kRegs>
__device__ __forceinline__ int count_at_least(const uint32_t (&key)[kRegs], uint32_t candidate) {
  const uint32_t minus_candidate = 0u - candidate;
  int count = 0;
#pragma unroll
  for (int r = 0; r < kRegs; ++r) {
    asm("{\n\t.reg .u32 sum;\n\tadd.cc.u32 sum, %1, %2;\n\taddc.u32 %0, %3, 0;\n\t}"
        : "=r"(count)
        : "r"(key[r]), "r"(minus_candidate), "r"(count));
  }
  return count;
}

// A warp per row; lane l holds columns l, l + 32, ... (kRegs of them) as order keys. Key 0
// marks a column past the width: real keys are at least ~0x7fffff's complement of -inf,
// 0x007fffff, and the search's candidates are at least 1, so those never count.
template <typename scalar_t, typename cidx_t, int kRegs>
__global__ void __launch_bounds__(kThreads, kRegs <= 8 ? 8 : 4)
maxk_select_rows(const scalar_t* __restrict__ x, scalar_t* __restrict__ values,
                 cidx_t* __restrict__ indices, int64_t rows, int width, int k) {
  const int lane = threadIdx.x % kWarp;
  const int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  if (row >= rows) return;  // the whole warp leaves together
  const scalar_t* xr = x + row * width;
  // Rows of exactly kRegs * 32 columns (the usual widths) need no check per column.
  const bool full_row = width == kRegs * kWarp;
  uint32_t key[kRegs];
#pragma unroll
  for (int r = 0; r < kRegs; ++r) {
    const int c = r * kWarp + lane;
    key[r] = full_row || c < width ? maxk_order_key(float(Scalar<scalar_t>::load(xr[c]))) : 0u;
  }
  // Bounds of the k-th largest key: `upper` the largest key, `lower` the smallest of the maxima
  // of `subsets` >= k disjoint sets of keys (distinct keys, so at most the k-th largest):
  // groups of 32 / subsets lanes when k <= 32, else blocks of `block` consecutive registers of
  // a lane. Folding the registers pairwise gives the block maxima on the way to the lane's
  // largest key. On random rows the bounds settle most bits of the exponent.
  const int subsets = 1 << (32 - __clz(k - 1));  // k rounded up to a power of two
  const int block = subsets > kWarp ? kRegs * kWarp / subsets : kRegs;
  uint32_t fold[kRegs], lane_low = 0;
#pragma unroll
  for (int r = 0; r < kRegs; ++r) fold[r] = key[r];
#pragma unroll
  for (int len = 1; len <= kRegs; len *= 2) {
    if (len == block) {
      lane_low = fold[0];
#pragma unroll
      for (int r = 1; r < kRegs; ++r) {
        if (r < kRegs / len) lane_low = min(lane_low, fold[r]);
      }
    }
#pragma unroll
    for (int r = 0; r < kRegs / 2; ++r) {
      if (r < kRegs / len / 2) fold[r] = max(fold[2 * r], fold[2 * r + 1]);
    }
  }
  for (int offset = 1; offset * subsets < kWarp; offset *= 2)
    lane_low = max(lane_low, __shfl_xor_sync(kFull, lane_low, offset));
  const uint32_t upper = __reduce_max_sync(kFull, fold[0]);
  const uint32_t lower = __reduce_min_sync(kFull, lane_low);
  // The smallest lane maximum: `lower` when k = 32, and for larger k no bound but a good first
  // candidate (on random rows of 256 at k = 64 it saves about 4 of 14 counts).
  const uint32_t lane_floor = __reduce_min_sync(kFull, fold[0]);
  // The k-th largest key lies in [lo, hi]. A count at a candidate in (lo, hi] moves lo up to it
  // (at least k keys reach it) or hi below it. Candidates after the first are the common prefix
  // of lo and hi and the highest bit where they differ, so bits they share cost no count.
  // Exactly k keys at or above a candidate settle the answer early (no ties to break).
  uint32_t lo = lower, hi = upper;
  auto bisect = [&] { return hi & ~(0x7fffffffu >> __clz(int((lo ^ hi) | 1u))); };
  uint32_t candidate = lo < lane_floor && lane_floor <= hi ? lane_floor : bisect();
  bool exact = false;
  while (lo != hi) {
    const int count = __reduce_add_sync(kFull, count_at_least(key, candidate));
    const bool reached = count >= k;
    lo = reached ? candidate : lo;
    hi = reached ? hi : candidate - 1;
    exact = count == k;
    if (exact) break;
    candidate = bisect();
  }
  const uint32_t threshold = lo;
  // Without an exact cut, every key above the threshold is kept and the first `ties` keys
  // equal to it in column order.
  int ties = 0;
  if (!exact) {
    const int above = threshold == ~0u ? 0 : count_at_least(key, threshold + 1);
    ties = k - __reduce_add_sync(kFull, above);
  }
  const unsigned lower_lanes = (1u << lane) - 1u;
  int written = 0, ties_seen = 0;
  scalar_t* out_values = values + row * k;
  cidx_t* out_indices = indices + row * k;
  // Opaque to the compiler, which would otherwise recompute row * k for each register's stores.
  asm("" : "+l"(out_values), "+l"(out_indices));
  __builtin_assume(__isGlobal(out_values) && __isGlobal(out_indices));
#pragma unroll
  for (int r = 0; r < kRegs; ++r) {
    bool take;
    if (exact) {
      take = key[r] >= threshold;
    } else {
      const bool tie = key[r] == threshold;
      const unsigned tie_lanes = __ballot_sync(kFull, tie);
      take = key[r] > threshold || (tie && ties_seen + __popc(tie_lanes & lower_lanes) < ties);
      ties_seen += __popc(tie_lanes);
    }
    const unsigned taken = __ballot_sync(kFull, take);
    if (take) {
      const int at = written + __popc(taken & lower_lanes);
      const int c = r * kWarp + lane;
      out_values[at] = xr[c];
      out_indices[at] = cidx_t(c);
    }
    written += __popc(taken);
  }
}

// ---- forward SpGEMM --------------------------------------------------------------------------
// Edges each lane group walks per step; their loads are in flight together.
constexpr int kEdgeUnroll = 4;
// Dense row buffers per warp of the SpGEMM (one per lane group).
constexpr int kMaxGroups = 4;
// Small blocks: a warp that ends early frees its slot sooner (items differ in length).
constexpr int kSpgemmWarpsPerBlock = 2;

// Sources and weights of the kEdgeUnroll edges e0, e0 + step, ... (source -1 past `end`).
template <typename index_t, typename acc_t>
__device__ __forceinline__ void load_edges(const index_t* __restrict__ col,
                                           const acc_t* __restrict__ value, index_t e0,
                                           index_t end, int step, index_t (&src)[kEdgeUnroll],
                                           acc_t (&w)[kEdgeUnroll]) {
#pragma unroll
  for (int u = 0; u < kEdgeUnroll; ++u) {
    const index_t e = e0 + index_t(u * step);
    src[u] = e < end ? col[e] : index_t(-1);
    w[u] = e < end && value ? value[e] : acc_t(1);
  }
}

// A warp per work item, its lanes in `groups` groups of 32 / groups lanes: at most max_groups,
// and no more than gives each group two of the item's edges. Group g takes edges begin + g,
// begin + g + groups, ... into a dense row buffer of its own; the lanes of a group add an
// edge's kept entries at distinct columns and the warp synchronises between edges, so no add
// is atomic and every entry receives its adds in a fixed order (bitwise reproducible). The
// next step's edges load while a step adds. The buffers are summed in group order at the end.
template <typename scalar_t, typename index_t, typename cidx_t>
__global__ void __launch_bounds__(kThreads)
maxk_spgemm_items(const index_t* __restrict__ rowptr, const index_t* __restrict__ col,
                  const typename Scalar<scalar_t>::acc* __restrict__ value,
                  const scalar_t* __restrict__ values, const cidx_t* __restrict__ indices,
                  scalar_t* __restrict__ out, typename Scalar<scalar_t>::acc* __restrict__ partial,
                  SplitWorkView work, int width, int k, int max_groups) {
  using acc_t = typename Scalar<scalar_t>::acc;
  extern __shared__ __align__(16) unsigned char shared_raw[];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  acc_t* buffers = reinterpret_cast<acc_t*>(shared_raw) + int64_t(warp) * max_groups * width;
  const int64_t item = int64_t(blockIdx.x) * (blockDim.x / kWarp) + warp;
  if (item >= work.items) return;
  const int64_t row = static_cast<const index_t*>(work.item_row)[item];
  const index_t begin = static_cast<const index_t*>(work.item_start)[item];
  const index_t end = index_t(min(int64_t(begin) + work.chunk, int64_t(rowptr[row + 1])));
  const int64_t slot = static_cast<const index_t*>(work.item_slot)[item];
  int groups = 1;
  while (groups < max_groups && end - begin >= index_t(4 * groups)) groups *= 2;
  for (int f = lane; f < groups * width; f += kWarp) buffers[f] = acc_t(0);
  __syncwarp();
  const int lanes = kWarp / groups, group = lane / lanes, first = lane % lanes;
  const index_t step = index_t(groups * kEdgeUnroll);
  acc_t* buffer = buffers + group * width;
  index_t src[kEdgeUnroll];
  acc_t w[kEdgeUnroll];
  load_edges(col, value, begin + group, end, groups, src, w);
  // every lane runs the same trip counts, so the __syncwarp calls are uniform
  for (index_t base = begin; base < end; base += step) {
    index_t next_src[kEdgeUnroll];
    acc_t next_w[kEdgeUnroll];
    load_edges(col, value, base + step + group, end, groups, next_src, next_w);
    for (int m0 = 0; m0 < k; m0 += lanes) {
      const int m = m0 + first;
      acc_t v[kEdgeUnroll];
      int c[kEdgeUnroll];
#pragma unroll
      for (int u = 0; u < kEdgeUnroll; ++u) {
        const bool live = src[u] >= 0 && m < k;
        const int64_t at = int64_t(src[u]) * k + m;
        v[u] = live ? w[u] * Scalar<scalar_t>::load(values[at]) : acc_t(0);
        c[u] = live ? int(indices[at]) : -1;
      }
#pragma unroll
      for (int u = 0; u < kEdgeUnroll; ++u) {
        if (c[u] >= 0) buffer[c[u]] += v[u];
        __syncwarp();  // the next edge may add at the same column from another lane
      }
    }
#pragma unroll
    for (int u = 0; u < kEdgeUnroll; ++u) {
      src[u] = next_src[u];
      w[u] = next_w[u];
    }
  }
  for (int f = lane; f < width; f += kWarp) {
    acc_t sum = buffers[f];
    for (int g = 1; g < groups; ++g) sum += buffers[g * width + f];
    if (slot < 0) out[row * width + f] = Scalar<scalar_t>::store(sum);
    else partial[slot * width + f] = sum;
  }
}

// ---- backward SSpMM, pulled over the transpose -----------------------------------------------
template <typename scalar_t, typename index_t, typename cidx_t>
__global__ void __launch_bounds__(kThreads)
maxk_sspmm_pull_items(const index_t* __restrict__ t_rowptr, const index_t* __restrict__ t_col,
                      const typename Scalar<scalar_t>::acc* __restrict__ t_value,
                      const scalar_t* __restrict__ grad_out, const cidx_t* __restrict__ indices,
                      scalar_t* __restrict__ grad_values,
                      typename Scalar<scalar_t>::acc* __restrict__ partial, SplitWorkView work,
                      int width, int k, int lanes) {
  using acc_t = typename Scalar<scalar_t>::acc;
  const int lane = threadIdx.x % kWarp;
  const int64_t item = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  if (item >= work.items) return;
  const int64_t j = static_cast<const index_t*>(work.item_row)[item];
  const index_t begin = static_cast<const index_t*>(work.item_start)[item];
  const index_t end = index_t(min(int64_t(begin) + work.chunk, int64_t(t_rowptr[j + 1])));
  const int64_t slot = static_cast<const index_t*>(work.item_slot)[item];
  const int group = lane / lanes, step = kWarp / lanes, first = lane % lanes;
  for (int m0 = 0; m0 < k; m0 += lanes) {
    const int m = m0 + first;
    const int64_t column = m < k ? int64_t(indices[j * k + m]) : 0;
    acc_t sum = 0;
#pragma unroll 4
    for (index_t e = begin + group; e < end; e += step) {
      const acc_t w = t_value ? t_value[e] : acc_t(1);
      sum += w * Scalar<scalar_t>::load(grad_out[int64_t(t_col[e]) * width + column]);
    }
    for (int offset = lanes; offset < kWarp; offset *= 2) sum += __shfl_xor_sync(kFull, sum, offset);
    if (group == 0 && m < k) {
      if (slot < 0) grad_values[j * k + m] = Scalar<scalar_t>::store(sum);
      else partial[slot * k + m] = sum;
    }
  }
}

// ---- backward SSpMM, pushed from a shared-memory row (outer product) -------------------------
// acc[0..N) += v with one vector atomic where the chip has them (float2/float4 on sm_90).
template <int N, typename T>
__device__ __forceinline__ void atomic_add_packet(T* p, const T (&v)[N]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr bool kVectorAtomic = std::is_same_v<T, float> && (N == 2 || N == 4);
#else
  constexpr bool kVectorAtomic = false;
#endif
  if constexpr (kVectorAtomic && N == 4) {
    atomicAdd(reinterpret_cast<float4*>(p), make_float4(v[0], v[1], v[2], v[3]));
  } else if constexpr (kVectorAtomic && N == 2) {
    atomicAdd(reinterpret_cast<float2*>(p), make_float2(v[0], v[1]));
  } else {
#pragma unroll
    for (int q = 0; q < N; ++q) atomicAdd(p + q, v[q]);
  }
}

// kVec consecutive kept columns of a CBSR row as one aligned access (the launcher checks the
// alignment).
template <typename cidx_t, int kVec>
__device__ __forceinline__ void load_columns(const cidx_t* p, int (&column)[kVec]) {
  const Packet<cidx_t, kVec> packet = *reinterpret_cast<const Packet<cidx_t, kVec>*>(p);
#pragma unroll
  for (int q = 0; q < kVec; ++q) column[q] = int(packet.v[q]);
}

// A warp per work item; each edge's k columns are spread over `lanes` lanes of kVec, the
// 32 / lanes lane groups take different edges, and each edge adds into its source's k
// accumulators with vector atomics.
template <typename scalar_t, typename index_t, typename cidx_t, int kVec>
__global__ void __launch_bounds__(kThreads)
maxk_sspmm_push_items(const index_t* __restrict__ rowptr, const index_t* __restrict__ col,
                      const typename Scalar<scalar_t>::acc* __restrict__ value,
                      const scalar_t* __restrict__ grad_out, const cidx_t* __restrict__ indices,
                      typename Scalar<scalar_t>::acc* __restrict__ acc, SplitWorkView work,
                      int width, int k, int lanes) {
  using acc_t = typename Scalar<scalar_t>::acc;
  extern __shared__ __align__(16) unsigned char shared_raw[];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  acc_t* buffer = reinterpret_cast<acc_t*>(shared_raw) + int64_t(warp) * width;
  const int64_t item = int64_t(blockIdx.x) * (blockDim.x / kWarp) + warp;
  if (item >= work.items) return;
  const int64_t row = static_cast<const index_t*>(work.item_row)[item];
  const index_t begin = static_cast<const index_t*>(work.item_start)[item];
  const index_t end = index_t(min(int64_t(begin) + work.chunk, int64_t(rowptr[row + 1])));
  if (begin == end) return;
  const scalar_t* dy = grad_out + row * width;
  for (int f = lane; f < width; f += kWarp) buffer[f] = Scalar<scalar_t>::load(dy[f]);
  __syncwarp();
  const int groups = kWarp / lanes, first = (lane % lanes) * kVec, stride = lanes * kVec;
  for (index_t e0 = begin + lane / lanes; e0 < end; e0 += index_t(groups * kEdgeUnroll)) {
    index_t src[kEdgeUnroll];
    acc_t w[kEdgeUnroll];
    load_edges(col, value, e0, end, groups, src, w);
    for (int m = first; m < k; m += stride) {
      int c[kEdgeUnroll][kVec];
#pragma unroll
      for (int u = 0; u < kEdgeUnroll; ++u) {
        if (src[u] >= 0) load_columns<cidx_t, kVec>(indices + int64_t(src[u]) * k + m, c[u]);
      }
#pragma unroll
      for (int u = 0; u < kEdgeUnroll; ++u) {
        if (src[u] < 0) continue;
        acc_t add[kVec];
#pragma unroll
        for (int q = 0; q < kVec; ++q) add[q] = w[u] * buffer[c[u][q]];
        atomic_add_packet(acc + int64_t(src[u]) * k + m, add);
      }
    }
  }
}

// Warps per block (at most max_warps) whose `buffers` dense row buffers each fit the
// shared-memory budget, and the bytes.
template <typename acc_t>
void row_buffer_launch(int64_t width, int buffers, int max_warps, int& warps, size_t& bytes) {
  const int64_t per_warp = width * buffers * int64_t(sizeof(acc_t));
  warps = int(per_warp > 0 ? kMaxkRowBufferBytes / per_warp : max_warps);
  warps = warps < 1 ? 1 : (warps > max_warps ? max_warps : warps);
  bytes = size_t(warps) * size_t(per_warp);
}

// Most lane groups of the SpGEMM: as many edges at a time as k leaves lanes for (at least
// 32 / kMaxGroups lanes a group), while the groups' row buffers fit the budget.
inline int spgemm_groups(int64_t k, int64_t row_bytes) {
  int lanes = kWarp / kMaxGroups;
  while (lanes < k && lanes < kWarp) lanes *= 2;
  int groups = kWarp / lanes;
  while (groups > 1 && groups * row_bytes > kMaxkRowBufferBytes) groups /= 2;
  return groups;
}

// The widest packet (4, 2 or 1 entries) that divides k and keeps every CBSR row of both
// arrays aligned.
inline int cbsr_packet(int64_t k, int64_t bytes_a, const void* a, int64_t bytes_b,
                       const void* b) {
  const int pa = packet_size(k, bytes_a, a, a), pb = packet_size(k, bytes_b, b, b);
  return pa < pb ? pa : pb;
}

template <typename F>
void dispatch_all(FloatType type, bool index64, CbsrIndexType index_type, F&& f) {
  dispatch_float(type, [&](auto s) {
    dispatch_index(index64, [&](auto i) {
      dispatch_cbsr_index(index_type, [&](auto c) { f(s, i, c); });
    });
  });
}

}  // namespace

void maxk_select(FloatType type, CbsrIndexType index_type, const void* x, void* values,
                 void* indices, int64_t rows, int64_t width, int64_t k, cudaStream_t stream) {
  if (rows == 0) return;
  if (type == FloatType::kDouble || width > kMaxkSelectMaxWidth)
    throw std::runtime_error("maxk_select: float32/16/bf16 rows of at most 1024 entries");
  if (index_type != cbsr_index_type(width))
    throw std::runtime_error("maxk_select: indices must have the CBSR index type of the width");
  const auto blocks = unsigned(ceil_div(rows, kWarpsPerBlock));
  dispatch_float(type, [&](auto s) {
    using scalar_t = decltype(s);
    if constexpr (!std::is_same_v<scalar_t, double>) {
      auto launch = [&](auto regs_c) {
        constexpr int kRegs = decltype(regs_c)::value;
        // cbsr_index_type of the widths that take kRegs registers: uint8 up to 256 columns
        using cidx_t = std::conditional_t<kRegs * kWarp <= 256, uint8_t, int16_t>;
        maxk_select_rows<scalar_t, cidx_t, kRegs><<<blocks, kThreads, 0, stream>>>(
            static_cast<const scalar_t*>(x), static_cast<scalar_t*>(values),
            static_cast<cidx_t*>(indices), rows, int(width), int(k));
      };
      const int64_t regs = ceil_div(width, kWarp);
      if (regs <= 1) launch(std::integral_constant<int, 1>{});
      else if (regs <= 2) launch(std::integral_constant<int, 2>{});
      else if (regs <= 4) launch(std::integral_constant<int, 4>{});
      else if (regs <= 8) launch(std::integral_constant<int, 8>{});
      else if (regs <= 16) launch(std::integral_constant<int, 16>{});
      else launch(std::integral_constant<int, 32>{});
    }
  });
  check_launch("maxk_select");
}

void maxk_spgemm(FloatType type, CbsrIndexType index_type, CsrView csr, const void* value,
                 const void* values, const void* indices, void* out, void* partial,
                 SplitWorkView work, int64_t width, int64_t k, cudaStream_t stream) {
  if (work.items == 0 || width == 0) return;
  dispatch_all(type, csr.index64, index_type, [&](auto s, auto i, auto c) {
    using scalar_t = decltype(s);
    using index_t = decltype(i);
    using cidx_t = decltype(c);
    using acc_t = typename Scalar<scalar_t>::acc;
    const int groups = spgemm_groups(k, width * int64_t(sizeof(acc_t)));
    int warps;
    size_t bytes;
    row_buffer_launch<acc_t>(width, groups, kSpgemmWarpsPerBlock, warps, bytes);
    const auto blocks = unsigned(ceil_div(work.items, warps));
    auto* partials = static_cast<acc_t*>(partial);
    maxk_spgemm_items<scalar_t, index_t, cidx_t><<<blocks, warps * kWarp, bytes, stream>>>(
        static_cast<const index_t*>(csr.rowptr), static_cast<const index_t*>(csr.col),
        static_cast<const acc_t*>(value), static_cast<const scalar_t*>(values),
        static_cast<const cidx_t*>(indices), static_cast<scalar_t*>(out), partials, work,
        int(width), int(k), groups);
    if (work.split_rows > 0) {
      split_combine<scalar_t, index_t><<<grid_for(work.split_rows * width, kThreads), kThreads,
                                         0, stream>>>(partials, work,
                                                      static_cast<scalar_t*>(out), width);
    }
  });
  check_launch("maxk_spgemm");
}

void maxk_sspmm_pull(FloatType type, CbsrIndexType index_type, CsrView t_csr,
                     const void* t_value, const void* grad_out, const void* indices,
                     void* grad_values, void* partial, SplitWorkView work, int64_t width,
                     int64_t k, cudaStream_t stream) {
  if (work.items == 0 || k == 0) return;
  const int lanes = lanes_per_edge(k);
  dispatch_all(type, t_csr.index64, index_type, [&](auto s, auto i, auto c) {
    using scalar_t = decltype(s);
    using index_t = decltype(i);
    using cidx_t = decltype(c);
    using acc_t = typename Scalar<scalar_t>::acc;
    auto* partials = static_cast<acc_t*>(partial);
    maxk_sspmm_pull_items<scalar_t, index_t, cidx_t>
        <<<unsigned(ceil_div(work.items, kWarpsPerBlock)), kThreads, 0, stream>>>(
            static_cast<const index_t*>(t_csr.rowptr), static_cast<const index_t*>(t_csr.col),
            static_cast<const acc_t*>(t_value), static_cast<const scalar_t*>(grad_out),
            static_cast<const cidx_t*>(indices), static_cast<scalar_t*>(grad_values), partials,
            work, int(width), int(k), lanes);
    if (work.split_rows > 0) {
      split_combine<scalar_t, index_t><<<grid_for(work.split_rows * k, kThreads), kThreads, 0,
                                         stream>>>(partials, work,
                                                   static_cast<scalar_t*>(grad_values), k);
    }
  });
  check_launch("maxk_sspmm_pull");
}

void maxk_sspmm_push(FloatType type, CbsrIndexType index_type, CsrView csr, const void* value,
                     const void* grad_out, const void* indices, void* acc, SplitWorkView work,
                     int64_t width, int64_t k, cudaStream_t stream) {
  if (work.items == 0 || width == 0) return;
  dispatch_all(type, csr.index64, index_type, [&](auto s, auto i, auto c) {
    using scalar_t = decltype(s);
    using index_t = decltype(i);
    using cidx_t = decltype(c);
    using acc_t = typename Scalar<scalar_t>::acc;
    const int vec = cbsr_packet(k, sizeof(acc_t), acc, sizeof(cidx_t), indices);
    const int lanes = lanes_per_edge(k / vec);
    int warps;
    size_t bytes;
    row_buffer_launch<acc_t>(width, 1, kWarpsPerBlock, warps, bytes);
    dispatch_vec(vec, [&](auto vec_c) {
      maxk_sspmm_push_items<scalar_t, index_t, cidx_t, decltype(vec_c)::value>
          <<<unsigned(ceil_div(work.items, warps)), warps * kWarp, bytes, stream>>>(
              static_cast<const index_t*>(csr.rowptr), static_cast<const index_t*>(csr.col),
              static_cast<const acc_t*>(value), static_cast<const scalar_t*>(grad_out),
              static_cast<const cidx_t*>(indices), static_cast<acc_t*>(acc), work, int(width),
              int(k), lanes);
    });
  });
  check_launch("maxk_sspmm_push");
}

}  // namespace cuda
}  // namespace fastgnn
