// CUDA neighbour sampling kernels (no torch headers). The glue (sampling.cpp) runs every layer
// of a mini-batch on one stream, sizing each from host-known bounds; the kernels read the
// true counts (known nodes, seeds, edges) from device memory, so a batch needs no sync between
// its layers. Grids cover the bounds and threads past the device-side counts exit.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace fastgnn {
namespace cuda {

// One layer: the graph (device pointers, possibly mapped pinned host memory), its draws, and
// where its counts live. Nodes known before the layer have local ids 0 .. known - 1; its seeds
// are nodes[begin, known).
struct SampleLayer {
  const void* rowptr;
  const void* col;
  const float* weight;      // null: uniform
  const int64_t* edge_map;  // CSR position -> user edge id (null: identity)
  bool index64;
  int64_t num_rows;
  int64_t fanout;
  bool replace;
  uint64_t seed;
  const int64_t* nodes;  // the known nodes
  int64_t* nodes_out;    // the run's node list (nodes[0, known) copied at the run's start)
  int64_t known_host;    // known when the host knows it, else -1: read *known
  int64_t* known;        // device counter of the known nodes (written when known_host is set)
  int64_t begin_host;    // begin when the host knows it, else -1: read *begin
  const int64_t* begin;
  int64_t seeds_bound;   // >= the true seed count
  int64_t edges_bound;   // >= the true edge count
  int64_t* known_next;   // written: the nodes known after the layer
  int64_t* num_edges;    // written: the layer's edge count
  int64_t* fresh;        // the unordered numbering's new-node counter
  int64_t* duplicate;    // set to 1 when a run's starting nodes repeat
  int64_t* out_of_range; // set to 1 when one is not a row
};

// Open-addressing table of node id -> local id, kept across a run's layers (its known nodes
// hold their ids). Cleared to all-ones bytes: keys -1 (empty), values UINT64_MAX.
struct SampleTable {
  int64_t* keys;
  unsigned long long* values;
  uint64_t capacity;  // a power of two
};
// Capacity for up to max_nodes keys (load at most 1/2).
uint64_t table_capacity(int64_t max_nodes);

// The known nodes a run starts from (count 0: the layer continues a run): copied into
// nodes_out and inserted into the table with their positions as ids.
struct RunStart {
  const int64_t* nodes;
  int64_t count;
};

// Per-layer scratch (sized for the layer's bounds; reusable by the next layer of the stream).
struct LayerScratch {
  int64_t* ptr;      // seeds_bound + 1 row pointers; ptr[seeds_bound] is the edge count
  int64_t* counts;   // seeds_bound
  int64_t* pos;      // edges_bound sampled CSR positions, rows unsorted
  void* local;       // edges_bound local source ids, rows unsorted
  int64_t* value_of; // edges_bound (deterministic numbering)
  int64_t* first;    // edges_bound
  int64_t* rank;     // edges_bound
  void* temp;        // CUB scratch (scans; a long-row layer's segmented sort)
  size_t temp_bytes;
};
size_t scan_temp_bytes(int64_t n);

// A layer's outputs: row pointers (seeds_bound + 1) and local ids in the local id type, and
// user edge ids (edges_bound).
struct LayerOutput {
  void* rowptr;
  void* col;
  int64_t* edge_ids;
};

// Counts each seed's edges and scans them into scratch.ptr, after the run's start (when
// start.count > 0, fused in: the table must be cleared).
void count_edges(const SampleLayer& in, const RunStart& start, const SampleTable& table,
                 const LayerScratch& scratch, cudaStream_t stream);
// A run's start on its own (when count_edges ran before the table existed).
void start_run(const SampleLayer& in, const RunStart& start, const SampleTable& table,
               cudaStream_t stream);
// Draws each seed's edges into scratch.pos (one warp per seed) and numbers their sources:
// new nodes follow the known ones in the order of their first edge (deterministic) or as the
// GPU meets them. Writes scratch.local, the new nodes into nodes_out, and the table's ids of
// the new nodes for the run's next layer.
void sample_and_relabel(const SampleLayer& in, bool deterministic, bool local64,
                        const SampleTable& table, const LayerScratch& scratch,
                        cudaStream_t stream);

// Whether a layer's rows (at most `fanout` edges) sort by warp; longer rows (fanout -1's hubs)
// go through CUB's segmented sort, which needs the exact edge count.
bool warp_sortable(int64_t fanout);
size_t segmented_sort_temp_bytes(int64_t num_edges, int64_t num_segments, bool local64);
// Each row's (local id, edge) pairs by local id (stable), the row pointers in the local id
// type and the user edge ids. exact_edges: the edge count for the segmented sort (-1: warps).
void sort_rows(const SampleLayer& in, bool local64, const LayerScratch& scratch,
               const LayerOutput& out, int64_t exact_edges, cudaStream_t stream);

}  // namespace cuda
}  // namespace fastgnn
