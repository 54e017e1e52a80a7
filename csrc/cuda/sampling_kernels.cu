// CUDA neighbour sampling. One warp per seed chooses its edges with the same draws as the CPU
// kernel (csrc/sampling_common.h), so both devices pick the same edges: Floyd's algorithm
// runs its draws in parallel across the lanes and resolves collisions with a ballot per
// draw. Sources are relabelled through a global open-addressing hash table (atomicCAS on
// keys, atomicMin on first edge positions), and each block row is sorted by local id by one
// warp. Every pass past the row pointers runs over a host-known bound of the edge count and
// reads the true count on the device, so a layer needs one sync, at its end.
#include <algorithm>

#include <cub/device/device_scan.cuh>
#include <cub/device/device_segmented_sort.cuh>

#include "cuda/sampling_kernels.h"
#include "sampling_common.h"

namespace fastgnn {
namespace cuda {
namespace {

using sampling::below;
using sampling::draw;
using sampling::hash_slot;
using sampling::sample_count;
using sampling::unit;

constexpr int kThreads = 256;
constexpr int kWarp = 32;
constexpr int kWarpsPerBlock = kThreads / kWarp;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr long long kEmpty = -1;
// Rows a warp sorts by ranking every pair (fanout^2 / 32 comparisons per lane).
constexpr int64_t kWarpSortMaxFanout = 512;

inline unsigned blocks_for(int64_t n) { return unsigned((n + kThreads - 1) / kThreads); }
inline unsigned warp_blocks_for(int64_t warps) {
  return unsigned((warps + kWarpsPerBlock - 1) / kWarpsPerBlock);
}
__device__ int64_t warp_index() {
  return (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / kWarp;
}
__device__ int lane() { return threadIdx.x % kWarp; }

template <typename index_t>
__device__ int64_t row_begin(const SampleInput& in, int64_t v) {
  return int64_t(static_cast<const index_t*>(in.rowptr)[v]);
}

template <typename index_t>
__device__ int64_t source_of(const SampleInput& in, int64_t position) {
  return int64_t(static_cast<const index_t*>(in.col)[position]);
}

__device__ int64_t warp_sum(int64_t x) {
  for (int o = kWarp / 2; o > 0; o /= 2) x += __shfl_xor_sync(kFullMask, x, o);
  return x;
}

// ---- row pointers ----------------------------------------------------------------------------
// Warp i counts seed i's edges; every thread also clears one word of the hash table (keys
// -1, values UINT64_MAX: all bits set), which saves the layer a memset.
template <typename index_t>
__global__ void counts_kernel(SampleInput in, int64_t* ptr, int64_t* counts,
                              unsigned long long* table, uint64_t table_words) {
  const uint64_t t = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x;
  if (t < table_words) table[t] = ~0ull;
  const int64_t i = warp_index();
  if (i == 0 && lane() < kCounters) ptr[in.num_seeds + lane()] = 0;
  if (i == 0 && lane() == kCounters) ptr[0] = 0;
  if (i >= in.num_seeds) return;
  const int64_t v = in.nodes[in.seeds_begin + i];
  if (v < 0 || v >= in.num_rows) {  // flagged by insert_known_kernel
    if (lane() == 0) counts[i] = 0;
    return;
  }
  const int64_t begin = row_begin<index_t>(in, v), degree = row_begin<index_t>(in, v + 1) - begin;
  int64_t avail = degree;
  if (in.weight != nullptr && in.fanout >= 0) {
    int64_t positive = 0;
    for (int64_t o = lane(); o < degree; o += kWarp) positive += in.weight[begin + o] > 0.f;
    avail = warp_sum(positive);
  }
  if (lane() == 0) counts[i] = sample_count(degree, avail, in.fanout, in.replace);
}

// ---- choice of a seed's edges (offsets into its row, by one warp) ------------------------------
// Floyd's algorithm as the CPU runs it: draw d picks t_d in [0, j_d] (j_d = degree - k + d)
// and takes j_d instead when an earlier draw holds t_d. The draws are independent, so the
// lanes make 32 at once; a draw then only has to learn whether an earlier one holds t_d: the
// earlier chunks are final in `out`, the chunk's own lanes resolve in order by ballot.
__device__ void choose_floyd(uint64_t seed, uint64_t position, int64_t degree, int64_t k,
                             int64_t* out) {
  for (int64_t base = 0; base < k; base += kWarp) {
    const int64_t d = base + lane();
    const bool active = d < k;
    const int64_t j = degree - k + d;
    const int64_t t = active ? below(draw(seed, position, d), j + 1) : -1;
    bool held_before = false;
    for (int64_t c = 0; active && c < base && !held_before; ++c) held_before = out[c] == t;
    int64_t mine = t;
    const int steps = int(k - base < kWarp ? k - base : kWarp);
    for (int s = 0; s < steps; ++s) {
      const int64_t ts = __shfl_sync(kFullMask, t, s);
      const bool taken = __ballot_sync(kFullMask, lane() < s && mine == ts) != 0;
      const bool held = __shfl_sync(kFullMask, held_before, s);
      if (lane() == s && (taken || held)) mine = j;
    }
    if (active) out[d] = mine;
    __syncwarp();
  }
}

// The larger of two (key, offset) candidates: larger key, ties to the smaller offset.
__device__ bool better(double key, int64_t offset, double best, int64_t best_offset) {
  return best_offset < 0 || (offset >= 0 && (key > best || (key == best && offset < best_offset)));
}

// Weighted choice by one warp. With replacement, each lane makes its draws by the CPU's
// inverse CDF (sequential prefix sums, so the same doubles). Without: the k largest keys
// log(u) / w, one warp-wide maximum per pick over the keys below the previous pick.
__device__ void choose_weighted(uint64_t seed, uint64_t position, const float* w,
                                int64_t degree, int64_t k, bool replace, int64_t* out) {
  if (replace) {
    double total = 0;
    for (int64_t o = 0; o < degree; ++o) total += w[o];
    for (int64_t j = lane(); j < k; j += kWarp) {
      const double x = unit(draw(seed, position, j)) * total;
      double prefix = 0;
      int64_t o = 0;
      for (; o < degree - 1; ++o) {
        prefix += w[o];
        if (prefix >= x) break;
      }
      out[j] = o;
    }
    return;
  }
  double last_key = 0;
  int64_t last_offset = -1;
  for (int64_t j = 0; j < k; ++j) {
    double best = -INFINITY;
    int64_t best_offset = -1;
    for (int64_t o = lane(); o < degree; o += kWarp) {
      if (!(w[o] > 0.f)) continue;
      const double key = log(unit(draw(seed, position, o))) / w[o];
      const bool below_last = last_offset < 0 || key < last_key ||
                              (key == last_key && o > last_offset);
      if (below_last && better(key, o, best, best_offset)) {
        best = key;
        best_offset = o;
      }
    }
    for (int s = kWarp / 2; s > 0; s /= 2) {
      const double other = __shfl_xor_sync(kFullMask, best, s);
      const int64_t other_offset = __shfl_xor_sync(kFullMask, best_offset, s);
      if (better(other, other_offset, best, best_offset)) {
        best = other;
        best_offset = other_offset;
      }
    }
    if (lane() == 0) out[j] = best_offset;
    last_key = best;
    last_offset = best_offset;
  }
}

template <typename index_t>
__global__ void positions_kernel(SampleInput in, const int64_t* ptr, int64_t* pos) {
  const int64_t i = warp_index();
  if (i >= in.num_seeds) return;
  const int64_t k = ptr[i + 1] - ptr[i];
  if (k == 0) return;  // also every out-of-range node
  const int64_t v = in.nodes[in.seeds_begin + i];
  const int64_t begin = row_begin<index_t>(in, v), degree = row_begin<index_t>(in, v + 1) - begin;
  int64_t* out = pos + ptr[i];
  const bool replace = in.replace && in.fanout >= 0;  // -1: every edge once
  if (in.weight != nullptr && in.fanout >= 0) {
    choose_weighted(in.seed, i, in.weight + begin, degree, k, in.replace, out);
  } else if (k == degree && !replace) {
    for (int64_t j = lane(); j < k; j += kWarp) out[j] = j;
  } else if (replace) {
    for (int64_t j = lane(); j < k; j += kWarp) out[j] = below(draw(in.seed, i, j), degree);
  } else {
    choose_floyd(in.seed, i, degree, k, out);
  }
  __syncwarp();
  for (int64_t j = lane(); j < k; j += kWarp) out[j] += begin;
}

// ---- relabelling -----------------------------------------------------------------------------
struct Table {
  int64_t* keys;
  unsigned long long* values;
  uint64_t mask;
};

// The slot holding `key`, inserting it when absent; *inserted says whether this call did.
__device__ uint64_t claim_slot(Table t, int64_t key, bool* inserted) {
  for (uint64_t slot = hash_slot(key, t.mask);; slot = (slot + 1) & t.mask) {
    const long long held = atomicCAS(reinterpret_cast<unsigned long long*>(&t.keys[slot]),
                                     (unsigned long long)kEmpty, (unsigned long long)key);
    if (held == kEmpty || held == key) {
      *inserted = held == kEmpty;
      return slot;
    }
  }
}

__device__ uint64_t find_slot(Table t, int64_t key) {
  uint64_t slot = hash_slot(key, t.mask);
  while (t.keys[slot] != key) slot = (slot + 1) & t.mask;
  return slot;
}

__global__ void insert_known_kernel(const int64_t* nodes, int64_t num_known, int64_t num_rows,
                                    Table t, int64_t* counters) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= num_known) return;
  if (nodes[i] < 0 || nodes[i] >= num_rows) {
    atomicExch(reinterpret_cast<unsigned long long*>(&counters[kNodeOutOfRange]), 1ull);
  }
  bool inserted;
  const uint64_t slot = claim_slot(t, nodes[i], &inserted);
  if (!inserted) {
    atomicExch(reinterpret_cast<unsigned long long*>(&counters[kDuplicateSeed]), 1ull);
  }
  t.values[slot] = (unsigned long long)i;
}

// Deterministic numbering, pass 1: each source's slot keeps num_known + its first edge.
template <typename index_t>
__global__ void insert_edges_kernel(SampleInput in, const int64_t* pos, const int64_t* counters,
                                    int64_t max_edges, int64_t num_known, Table t) {
  const int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (e >= max_edges || e >= counters[kNumEdges]) return;
  bool inserted;
  const uint64_t slot = claim_slot(t, source_of<index_t>(in, pos[e]), &inserted);
  atomicMin(&t.values[slot], (unsigned long long)(num_known + e));
}

// Pass 2: value_of[e] = the slot value of edge e's source, first[e] = whether e is its
// first edge (0 past the edge count, so the scan of first can run over max_edges).
template <typename index_t>
__global__ void first_edges_kernel(SampleInput in, const int64_t* pos, const int64_t* counters,
                                   int64_t max_edges, int64_t num_known, Table t,
                                   int64_t* value_of, int64_t* first) {
  const int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (e >= max_edges) return;
  if (e >= counters[kNumEdges]) {
    first[e] = 0;
    return;
  }
  const int64_t value = int64_t(t.values[find_slot(t, source_of<index_t>(in, pos[e]))]);
  value_of[e] = value;
  first[e] = value == num_known + e;
}

// Pass 3 (rank: inclusive scan of first): local ids, the new nodes' global ids and count.
template <typename index_t, typename out_t>
__global__ void assign_kernel(SampleInput in, const int64_t* pos, int64_t* counters,
                              int64_t max_edges, int64_t num_known, const int64_t* value_of,
                              const int64_t* rank, out_t* local, int64_t* nodes_out) {
  const int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int64_t num_edges = counters[kNumEdges];
  if (e >= max_edges || e >= num_edges) return;
  if (e == num_edges - 1) counters[kNumNew] = rank[e];
  const int64_t value = value_of[e];
  if (value < num_known) {
    local[e] = out_t(value);
    return;
  }
  const int64_t first = value - num_known;
  const int64_t id = num_known + rank[first] - 1;  // rank is an inclusive scan
  local[e] = out_t(id);
  if (first == e) nodes_out[id] = source_of<index_t>(in, pos[e]);
}

// Fast numbering (not reproducible): ids from the kNumNew counter as new keys land.
template <typename index_t>
__global__ void insert_unordered_kernel(SampleInput in, const int64_t* pos, int64_t* counters,
                                        int64_t max_edges, int64_t num_known, Table t,
                                        int64_t* nodes_out) {
  const int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (e >= max_edges || e >= counters[kNumEdges]) return;
  const int64_t key = source_of<index_t>(in, pos[e]);
  bool inserted;
  const uint64_t slot = claim_slot(t, key, &inserted);
  if (!inserted) return;
  const int64_t id =
      num_known + int64_t(atomicAdd(reinterpret_cast<unsigned long long*>(&counters[kNumNew]), 1ull));
  t.values[slot] = (unsigned long long)id;
  nodes_out[id] = key;
}

template <typename index_t, typename out_t>
__global__ void lookup_kernel(SampleInput in, const int64_t* pos, const int64_t* counters,
                              int64_t max_edges, Table t, out_t* local) {
  const int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (e >= max_edges || e >= counters[kNumEdges]) return;
  local[e] = out_t(t.values[find_slot(t, source_of<index_t>(in, pos[e]))]);
}

// ---- row sort --------------------------------------------------------------------------------
// Row i's pairs land at their rank: the number of pairs with a smaller local id, or an equal
// one earlier in the row (stable, as the CPU's insertion sort). Warp num_seeds writes the
// last row pointer.
template <typename out_t>
__global__ void sort_rows_kernel(const int64_t* ptr, int64_t num_seeds, const out_t* local,
                                 const int64_t* pos, out_t* rowptr_out, out_t* local_out,
                                 int64_t* pos_out) {
  const int64_t i = warp_index();
  if (i > num_seeds) return;
  if (lane() == 0) rowptr_out[i] = out_t(ptr[i]);
  if (i == num_seeds) return;
  const int64_t begin = ptr[i], length = ptr[i + 1] - begin;
  for (int64_t a0 = 0; a0 < length; a0 += kWarp) {
    const int64_t a = a0 + lane();
    const out_t key = a < length ? local[begin + a] : out_t(0);
    int64_t rank = 0;
    for (int64_t b0 = 0; b0 < length; b0 += kWarp) {
      const out_t other_key = b0 + lane() < length ? local[begin + b0 + lane()] : out_t(0);
      const int steps = int(length - b0 < kWarp ? length - b0 : kWarp);
      for (int s = 0; s < steps; ++s) {
        const out_t k = __shfl_sync(kFullMask, other_key, s);
        rank += k < key || (k == key && b0 + s < a);
      }
    }
    if (a < length) {
      local_out[begin + rank] = key;
      pos_out[begin + rank] = pos[begin + a];
    }
  }
}

// Runs launch(index_t{}) for the graph's index type.
template <typename Launch>
void by_index(bool index64, const Launch& launch) {
  if (index64) {
    launch(int64_t{});
  } else {
    launch(int32_t{});
  }
}

template <typename Launch>
void by_local(bool local64, const Launch& launch) {
  if (local64) {
    launch(int64_t{});
  } else {
    launch(int32_t{});
  }
}

size_t scan_temp_bytes(int64_t n) {
  size_t bytes = 0;
  cub::DeviceScan::InclusiveSum(nullptr, bytes, static_cast<const int64_t*>(nullptr),
                                static_cast<int64_t*>(nullptr), n);
  return bytes;
}

// At least 32 slots: then the keys fill whole 256-byte chunks and the values follow them
// directly, so one pass clears both.
uint64_t table_capacity(int64_t num_known, int64_t max_edges) {
  uint64_t capacity = 32;
  while (capacity < uint64_t(2 * (num_known + max_edges) + 1)) capacity <<= 1;
  return capacity;
}

}  // namespace

LayerPlan plan_layer(int64_t num_known, int64_t num_seeds, int64_t max_edges, bool local64) {
  LayerPlan plan;
  plan.capacity = table_capacity(num_known, max_edges);
  const size_t e8 = size_t(max_edges) * 8;
  const size_t temp = scan_temp_bytes(std::max(num_seeds, max_edges));  // grows with n
  // keys, values, pos, local, value_of, first (which first holds the seeds' counts: it has
  // num_seeds + 1 more entries), rank, CUB temp
  const size_t sizes[kScratchParts] = {plan.capacity * 8, plan.capacity * 8, e8,
                                       size_t(max_edges) * (local64 ? 8 : 4), e8,
                                       e8 + size_t(num_seeds) * 8 + 8, e8, temp};
  plan.total_bytes = 0;
  for (int p = 0; p < kScratchParts; ++p) {
    plan.part_bytes[p] = (sizes[p] + 255) / 256 * 256;
    plan.total_bytes += plan.part_bytes[p];
  }
  return plan;
}

LayerScratch layer_scratch(void* base, const LayerPlan& plan) {
  char* parts[kScratchParts];
  char* at = static_cast<char*>(base);
  for (int p = 0; p < kScratchParts; ++p) {
    parts[p] = at;
    at += plan.part_bytes[p];
  }
  return LayerScratch{reinterpret_cast<int64_t*>(parts[0]),
                      reinterpret_cast<uint64_t*>(parts[1]),
                      plan.capacity,
                      reinterpret_cast<int64_t*>(parts[2]),
                      parts[3],
                      reinterpret_cast<int64_t*>(parts[4]),
                      reinterpret_cast<int64_t*>(parts[5]),
                      reinterpret_cast<int64_t*>(parts[6]),
                      parts[7],
                      plan.part_bytes[7]};
}

void sample_row_pointers(const SampleInput& in, int64_t* ptr, const LayerScratch& scratch,
                         cudaStream_t stream) {
  int64_t* counts = scratch.first;
  const int64_t warps = in.num_seeds > 0 ? in.num_seeds : 1;  // warp 0 zeroes the counters
  const uint64_t table_words = 2 * scratch.capacity;  // keys, then values (table_capacity)
  const unsigned blocks = std::max(warp_blocks_for(warps), blocks_for(int64_t(table_words)));
  by_index(in.index64, [&](auto index) {
    counts_kernel<decltype(index)><<<blocks, kThreads, 0, stream>>>(
        in, ptr, counts, reinterpret_cast<unsigned long long*>(scratch.keys), table_words);
  });
  if (in.num_seeds == 0) return;
  size_t bytes = scratch.temp_bytes;
  cub::DeviceScan::InclusiveSum(scratch.temp, bytes, counts, ptr + 1, in.num_seeds, stream);
}

void sample_positions(const SampleInput& in, const int64_t* ptr, const LayerScratch& scratch,
                      cudaStream_t stream) {
  if (in.num_seeds == 0) return;
  by_index(in.index64, [&](auto index) {
    positions_kernel<decltype(index)><<<warp_blocks_for(in.num_seeds), kThreads, 0, stream>>>(
        in, ptr, scratch.pos);
  });
}

void relabel_sources(const SampleInput& in, int64_t* ptr, int64_t max_edges, bool deterministic,
                     bool local64, int64_t* nodes_out, const LayerScratch& scratch,
                     cudaStream_t stream) {
  const int64_t num_known = in.seeds_begin + in.num_seeds;
  int64_t* counters = ptr + in.num_seeds;
  const Table table{scratch.keys, reinterpret_cast<unsigned long long*>(scratch.values),
                    scratch.capacity - 1};
  if (num_known > 0) {
    insert_known_kernel<<<blocks_for(num_known), kThreads, 0, stream>>>(
        in.nodes, num_known, in.num_rows, table, counters);
  }
  if (max_edges == 0) return;
  const unsigned blocks = blocks_for(max_edges);
  const int64_t* pos = scratch.pos;
  by_index(in.index64, [&](auto index) {
    using index_t = decltype(index);
    by_local(local64, [&](auto local_index) {
      using out_t = decltype(local_index);
      out_t* local = static_cast<out_t*>(scratch.local);
      if (!deterministic) {
        insert_unordered_kernel<index_t><<<blocks, kThreads, 0, stream>>>(
            in, pos, counters, max_edges, num_known, table, nodes_out);
        lookup_kernel<index_t, out_t><<<blocks, kThreads, 0, stream>>>(in, pos, counters,
                                                                       max_edges, table, local);
        return;
      }
      insert_edges_kernel<index_t><<<blocks, kThreads, 0, stream>>>(in, pos, counters, max_edges,
                                                                    num_known, table);
      first_edges_kernel<index_t><<<blocks, kThreads, 0, stream>>>(
          in, pos, counters, max_edges, num_known, table, scratch.value_of, scratch.first);
      size_t bytes = scratch.temp_bytes;
      cub::DeviceScan::InclusiveSum(scratch.temp, bytes, scratch.first, scratch.rank, max_edges,
                                    stream);
      assign_kernel<index_t, out_t><<<blocks, kThreads, 0, stream>>>(
          in, pos, counters, max_edges, num_known, scratch.value_of, scratch.rank, local,
          nodes_out);
    });
  });
}

void clear_table(const LayerScratch& scratch, cudaStream_t stream) {
  cudaMemsetAsync(scratch.keys, 0xff, scratch.capacity * 16, stream);  // keys -1, values max
}

bool warp_sortable(int64_t fanout) { return fanout >= 0 && fanout <= kWarpSortMaxFanout; }

void sort_rows_by_warp(const int64_t* ptr, int64_t num_seeds, bool local64,
                       const LayerScratch& scratch, void* rowptr_out, void* local_out,
                       int64_t* pos_out, cudaStream_t stream) {
  by_local(local64, [&](auto local_index) {
    using out_t = decltype(local_index);
    sort_rows_kernel<out_t><<<warp_blocks_for(num_seeds + 1), kThreads, 0, stream>>>(
        ptr, num_seeds, static_cast<const out_t*>(scratch.local), scratch.pos,
        static_cast<out_t*>(rowptr_out), static_cast<out_t*>(local_out), pos_out);
  });
}

void sort_rows_segmented(const int64_t* ptr, int64_t num_seeds, int64_t num_edges, bool local64,
                         const LayerScratch& scratch, void* local_out, int64_t* pos_out,
                         void* temp, size_t* temp_bytes, cudaStream_t stream) {
  by_local(local64, [&](auto local_index) {
    using out_t = decltype(local_index);
    cub::DeviceSegmentedSort::StableSortPairs(
        temp, *temp_bytes, static_cast<const out_t*>(scratch.local),
        static_cast<out_t*>(local_out), scratch.pos, pos_out, num_edges, num_seeds, ptr, ptr + 1,
        stream);
  });
}

}  // namespace cuda
}  // namespace fastgnn
