// CUDA neighbour sampling: one thread per seed chooses its edges with the same functions as
// the CPU kernel (csrc/sampling_common.h), so both devices draw the same edges; sources are
// relabelled through a global open-addressing hash table (atomicCAS on keys, atomicMin on
// first edge positions), and each block row is sorted by local id with CUB.
#include <cub/device/device_segmented_sort.cuh>

#include "cuda/sampling_kernels.h"
#include "sampling_common.h"

namespace fastgnn {
namespace cuda {
namespace {

using sampling::choose_uniform;
using sampling::draw;
using sampling::hash_slot;
using sampling::sample_count;
using sampling::unit;

constexpr int kThreads = 256;
constexpr long long kEmpty = -1;

inline unsigned blocks_for(int64_t n) { return unsigned((n + kThreads - 1) / kThreads); }

template <typename index_t>
__device__ int64_t row_begin(const SampleInput& in, int64_t v) {
  return int64_t(static_cast<const index_t*>(in.rowptr)[v]);
}

template <typename index_t>
__device__ int64_t source_of(const SampleInput& in, int64_t position) {
  return int64_t(static_cast<const index_t*>(in.col)[position]);
}

__device__ int64_t positive_weights(const float* w, int64_t degree) {
  int64_t positive = 0;
  for (int64_t o = 0; o < degree; ++o) positive += w[o] > 0.f;
  return positive;
}

template <typename index_t>
__global__ void counts_kernel(SampleInput in, int64_t* counts) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= in.num_seeds) return;
  const int64_t v = in.nodes[in.seeds_begin + i];
  const int64_t begin = row_begin<index_t>(in, v), degree = row_begin<index_t>(in, v + 1) - begin;
  const int64_t avail = in.weight != nullptr && in.fanout >= 0
                            ? positive_weights(in.weight + begin, degree) : degree;
  counts[i] = sample_count(degree, avail, in.fanout, in.replace);
}

// Weighted choice of k offsets by one thread. With replacement: inverse CDF by a scan of the
// row per draw. Without: the k largest keys log(u) / w, found by k passes over the row, each
// taking the largest key below the previous pick (ties to the smaller offset).
__device__ void choose_weighted(uint64_t seed, uint64_t position, const float* w,
                                int64_t degree, int64_t k, bool replace, int64_t* out) {
  if (replace) {
    double total = 0;
    for (int64_t o = 0; o < degree; ++o) total += w[o];
    for (int64_t j = 0; j < k; ++j) {
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
    for (int64_t o = 0; o < degree; ++o) {
      if (!(w[o] > 0.f)) continue;
      const double key = log(unit(draw(seed, position, o))) / w[o];
      const bool below_last = last_offset < 0 || key < last_key ||
                              (key == last_key && o > last_offset);
      if (below_last && (best_offset < 0 || key > best)) {
        best = key;
        best_offset = o;
      }
    }
    out[j] = best_offset;
    last_key = best;
    last_offset = best_offset;
  }
}

template <typename index_t>
__global__ void fill_kernel(SampleInput in, const int64_t* ptr, int64_t* pos) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= in.num_seeds) return;
  const int64_t v = in.nodes[in.seeds_begin + i];
  const int64_t begin = row_begin<index_t>(in, v), degree = row_begin<index_t>(in, v + 1) - begin;
  const int64_t k = ptr[i + 1] - ptr[i];
  int64_t* out = pos + ptr[i];
  if (in.weight != nullptr && in.fanout >= 0 && k > 0) {
    choose_weighted(in.seed, i, in.weight + begin, degree, k, in.replace, out);
  } else {
    choose_uniform(in.seed, i, degree, k, in.replace && in.fanout >= 0, out);
  }
  for (int64_t j = 0; j < k; ++j) out[j] += begin;
}

// The slot holding `key`, inserting it when absent; *inserted says whether this call did.
__device__ uint64_t claim_slot(RelabelTable t, int64_t key, bool* inserted) {
  for (uint64_t slot = hash_slot(key, t.mask);; slot = (slot + 1) & t.mask) {
    const long long held = atomicCAS(reinterpret_cast<unsigned long long*>(&t.keys[slot]),
                                     (unsigned long long)kEmpty, (unsigned long long)key);
    if (held == kEmpty || held == key) {
      *inserted = held == kEmpty;
      return slot;
    }
  }
}

__device__ uint64_t find_slot(RelabelTable t, int64_t key) {
  uint64_t slot = hash_slot(key, t.mask);
  while (t.keys[slot] != key) slot = (slot + 1) & t.mask;
  return slot;
}

__global__ void insert_known_kernel(const int64_t* nodes, int64_t num_known, RelabelTable t,
                                    int* duplicate) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= num_known) return;
  bool inserted;
  const uint64_t slot = claim_slot(t, nodes[i], &inserted);
  if (!inserted) *duplicate = 1;
  t.values[slot] = i;
}

template <typename index_t>
__global__ void insert_edges_kernel(SampleInput in, const int64_t* pos, int64_t num_edges,
                                    int64_t num_known, RelabelTable t) {
  const int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (e >= num_edges) return;
  bool inserted;
  const uint64_t slot = claim_slot(t, source_of<index_t>(in, pos[e]), &inserted);
  atomicMin(reinterpret_cast<long long*>(&t.values[slot]), (long long)(num_known + e));
}

template <typename index_t>
__global__ void first_edges_kernel(SampleInput in, const int64_t* pos, int64_t num_edges,
                                   int64_t num_known, RelabelTable t, int64_t* value_of,
                                   int64_t* first) {
  const int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (e >= num_edges) return;
  const int64_t value = t.values[find_slot(t, source_of<index_t>(in, pos[e]))];
  value_of[e] = value;
  first[e] = value == num_known + e;
}

template <typename index_t, typename out_t>
__global__ void assign_kernel(SampleInput in, const int64_t* pos, int64_t num_edges,
                              int64_t num_known, const int64_t* value_of, const int64_t* rank,
                              out_t* local, int64_t* nodes_out) {
  const int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (e >= num_edges) return;
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

template <typename index_t>
__global__ void insert_unordered_kernel(SampleInput in, const int64_t* pos, int64_t num_edges,
                                        int64_t num_known, RelabelTable t,
                                        unsigned long long* counter, int64_t* nodes_out) {
  const int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (e >= num_edges) return;
  const int64_t key = source_of<index_t>(in, pos[e]);
  bool inserted;
  const uint64_t slot = claim_slot(t, key, &inserted);
  if (!inserted) return;
  const int64_t id = num_known + int64_t(atomicAdd(counter, 1ull));
  t.values[slot] = id;
  nodes_out[id] = key;
}

template <typename index_t, typename out_t>
__global__ void lookup_kernel(SampleInput in, const int64_t* pos, int64_t num_edges,
                              RelabelTable t, out_t* local) {
  const int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (e >= num_edges) return;
  local[e] = out_t(t.values[find_slot(t, source_of<index_t>(in, pos[e]))]);
}

// Runs launch.template operator()<index_t>() for the graph's index type.
template <typename Launch>
void by_index(bool index64, const Launch& launch) {
  if (index64) {
    launch(int64_t{});
  } else {
    launch(int32_t{});
  }
}

}  // namespace

void sample_counts(const SampleInput& in, int64_t* counts, cudaStream_t stream) {
  if (in.num_seeds == 0) return;
  by_index(in.index64, [&](auto index) {
    counts_kernel<decltype(index)><<<blocks_for(in.num_seeds), kThreads, 0, stream>>>(in, counts);
  });
}

void sample_fill(const SampleInput& in, const int64_t* ptr, int64_t* pos, cudaStream_t stream) {
  if (in.num_seeds == 0) return;
  by_index(in.index64, [&](auto index) {
    fill_kernel<decltype(index)><<<blocks_for(in.num_seeds), kThreads, 0, stream>>>(in, ptr, pos);
  });
}

void relabel_insert_known(const int64_t* nodes, int64_t num_known, RelabelTable table,
                          int* duplicate, cudaStream_t stream) {
  if (num_known == 0) return;
  insert_known_kernel<<<blocks_for(num_known), kThreads, 0, stream>>>(nodes, num_known, table,
                                                                      duplicate);
}

void relabel_insert_edges(const SampleInput& in, const int64_t* pos, int64_t num_edges,
                          RelabelTable table, cudaStream_t stream) {
  if (num_edges == 0) return;
  const int64_t num_known = in.seeds_begin + in.num_seeds;
  by_index(in.index64, [&](auto index) {
    insert_edges_kernel<decltype(index)><<<blocks_for(num_edges), kThreads, 0, stream>>>(
        in, pos, num_edges, num_known, table);
  });
}

void relabel_first_edges(const SampleInput& in, const int64_t* pos, int64_t num_edges,
                         RelabelTable table, int64_t* value_of, int64_t* first,
                         cudaStream_t stream) {
  if (num_edges == 0) return;
  const int64_t num_known = in.seeds_begin + in.num_seeds;
  by_index(in.index64, [&](auto index) {
    first_edges_kernel<decltype(index)><<<blocks_for(num_edges), kThreads, 0, stream>>>(
        in, pos, num_edges, num_known, table, value_of, first);
  });
}

void relabel_assign(const SampleInput& in, const int64_t* pos, int64_t num_edges,
                    int64_t num_known, const int64_t* value_of, const int64_t* rank,
                    void* local, bool local64, int64_t* nodes_out, cudaStream_t stream) {
  if (num_edges == 0) return;
  by_index(in.index64, [&](auto index) {
    using index_t = decltype(index);
    if (local64) {
      assign_kernel<index_t, int64_t><<<blocks_for(num_edges), kThreads, 0, stream>>>(
          in, pos, num_edges, num_known, value_of, rank, static_cast<int64_t*>(local), nodes_out);
    } else {
      assign_kernel<index_t, int32_t><<<blocks_for(num_edges), kThreads, 0, stream>>>(
          in, pos, num_edges, num_known, value_of, rank, static_cast<int32_t*>(local), nodes_out);
    }
  });
}

void relabel_insert_edges_unordered(const SampleInput& in, const int64_t* pos, int64_t num_edges,
                                    int64_t num_known, RelabelTable table,
                                    unsigned long long* counter, int64_t* nodes_out,
                                    cudaStream_t stream) {
  if (num_edges == 0) return;
  by_index(in.index64, [&](auto index) {
    insert_unordered_kernel<decltype(index)><<<blocks_for(num_edges), kThreads, 0, stream>>>(
        in, pos, num_edges, num_known, table, counter, nodes_out);
  });
}

void relabel_lookup(const SampleInput& in, const int64_t* pos, int64_t num_edges,
                    RelabelTable table, void* local, bool local64, cudaStream_t stream) {
  if (num_edges == 0) return;
  by_index(in.index64, [&](auto index) {
    using index_t = decltype(index);
    if (local64) {
      lookup_kernel<index_t, int64_t><<<blocks_for(num_edges), kThreads, 0, stream>>>(
          in, pos, num_edges, table, static_cast<int64_t*>(local));
    } else {
      lookup_kernel<index_t, int32_t><<<blocks_for(num_edges), kThreads, 0, stream>>>(
          in, pos, num_edges, table, static_cast<int32_t*>(local));
    }
  });
}

void sort_rows(const void* keys, void* keys_out, bool local64, const int64_t* pos,
               int64_t* pos_out, int64_t num_edges, const int64_t* ptr, int64_t num_seeds,
               void* temp, size_t* temp_bytes, cudaStream_t stream) {
  if (local64) {
    cub::DeviceSegmentedSort::StableSortPairs(
        temp, *temp_bytes, static_cast<const int64_t*>(keys), static_cast<int64_t*>(keys_out),
        pos, pos_out, num_edges, num_seeds, ptr, ptr + 1, stream);
  } else {
    cub::DeviceSegmentedSort::StableSortPairs(
        temp, *temp_bytes, static_cast<const int32_t*>(keys), static_cast<int32_t*>(keys_out),
        pos, pos_out, num_edges, num_seeds, ptr, ptr + 1, stream);
  }
}

}  // namespace cuda
}  // namespace fastgnn
