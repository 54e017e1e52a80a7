// CUDA neighbour sampling kernels (no torch headers). The glue (sampling.cpp) allocates from
// host-known bounds and syncs once per layer; these launch on the given stream.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace fastgnn {
namespace cuda {

// The graph the sampler reads (device pointers, possibly mapped pinned host memory) and the
// layer's seeds: nodes[seeds_begin, seeds_begin + num_seeds).
struct SampleInput {
  const void* rowptr;
  const void* col;
  const float* weight;  // null: uniform
  bool index64;
  int64_t num_rows;
  const int64_t* nodes;
  int64_t seeds_begin;
  int64_t num_seeds;
  int64_t fanout;
  bool replace;
  uint64_t seed;
};

// A layer's counters, read back to the host in one copy: they follow the row pointers
// (ptr[num_seeds] is the edge count), so ptr + num_seeds holds kCounters values.
enum LayerCounter : int { kNumEdges = 0, kNumNew = 1, kDuplicateSeed = 2, kNodeOutOfRange = 3 };
constexpr int kCounters = 4;

// Scratch of one layer, carved from one allocation by layer_scratch.
struct LayerScratch {
  int64_t* keys;    // hash table, capacity slots (-1: empty)
  uint64_t* values; // first position of a key (UINT64_MAX: none)
  uint64_t capacity;  // a power of two
  int64_t* pos;     // max_edges sampled CSR positions, rows unsorted
  void* local;      // max_edges local source ids, rows unsorted
  int64_t* value_of;
  int64_t* first;
  int64_t* rank;
  void* temp;       // CUB scan temporary storage
  size_t temp_bytes;
};

// How layer_scratch carves one allocation for these sizes (max_edges: a bound on the layer's
// edges); computed once per layer, as it asks CUB for its scan storage.
constexpr int kScratchParts = 8;
struct LayerPlan {
  uint64_t capacity;
  size_t part_bytes[kScratchParts];
  size_t total_bytes;
};
LayerPlan plan_layer(int64_t num_known, int64_t num_seeds, int64_t max_edges, bool local64);
LayerScratch layer_scratch(void* base, const LayerPlan& plan);

// Zeroes the counters, counts each seed's edges and scans them into ptr (num_seeds + 1 +
// kCounters entries): after it, ptr[num_seeds] is the layer's edge count. Also clears
// scratch's hash table.
void sample_row_pointers(const SampleInput& in, int64_t* ptr, const LayerScratch& scratch,
                         cudaStream_t stream);
// One warp per seed writes its sampled CSR positions at scratch.pos[ptr[i] .. ptr[i + 1]).
void sample_positions(const SampleInput& in, const int64_t* ptr, const LayerScratch& scratch,
                      cudaStream_t stream);
// Clears scratch's hash table (for a scratch that sample_row_pointers did not get).
void clear_table(const LayerScratch& scratch, cudaStream_t stream);
// Numbers the sources of the layer's edges (at most max_edges; the count is on the device):
// the layer's nodes keep their positions, new nodes follow in the order of their first edge
// (deterministic) or in the order the GPU meets them. Writes scratch.local and the new nodes'
// global ids into nodes_out[num_known ..], and the counters after ptr.
void relabel_sources(const SampleInput& in, int64_t* ptr, int64_t max_edges, bool deterministic,
                     bool local64, int64_t* nodes_out, const LayerScratch& scratch,
                     cudaStream_t stream);

// Whether sort_rows_by_warp takes rows of up to `fanout` edges (longer rows, fanout -1's
// hubs, go through CUB's segmented sort).
bool warp_sortable(int64_t fanout);
// One warp per row: each row's (local id, position) pairs by local id (stable), and the
// block's row pointers in the local id type.
void sort_rows_by_warp(const int64_t* ptr, int64_t num_seeds, bool local64,
                       const LayerScratch& scratch, void* rowptr_out, void* local_out,
                       int64_t* pos_out, cudaStream_t stream);
// The same with CUB for exactly num_edges edges; temp == null asks for *temp_bytes.
void sort_rows_segmented(const int64_t* ptr, int64_t num_seeds, int64_t num_edges, bool local64,
                         const LayerScratch& scratch, void* local_out, int64_t* pos_out,
                         void* temp, size_t* temp_bytes, cudaStream_t stream);

}  // namespace cuda
}  // namespace fastgnn
