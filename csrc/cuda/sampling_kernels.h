// CUDA neighbour sampling kernels (no torch headers). The glue (sampling.cpp) runs every layer
// of a mini-batch on one stream, sizing each from host-known bounds; the kernels read the
// true counts (known nodes, seeds, edges) from device memory, so a batch needs no sync between
// its layers. Grids cover the bounds and threads past the device-side counts exit.
//
// Launches per layer whose rows sort by warp (fanout 0..512): count_edges 1 (the row pointers'
// scan included), sample_edges 1 + 1 deterministic (the first-edge scan), write_rows 1: 4
// deterministic, 3 unordered. A layer with longer rows (fanout -1 or > 512) starts a run: its
// count_edges runs before the read-back of its edge count, then start_run 1, sample_edges 1-2,
// write_rows 2 + CUB's segmented sort.
//
// Several batches: the passes of warp-sorted layers take one task per batch in device memory
// (Batches) and launch once for all of them, batch b in grid row blockIdx.y; each batch has its
// own counters, table, scan states, scratch and outputs, so its results are those of a launch
// for it alone.
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
  bool rows_by_lane;     // a lane per seed's row, not a warp (rows_by_lane() below)
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

// State of one single-pass scan (decoupled look-back) over up to n items: a tile counter and
// one status word per tile, scan_words(n) words cleared to all-ones bytes before the pass
// (with the table: one memset). Every scan of a run needs its own.
struct ScanState {
  unsigned long long* words;
};
size_t scan_words(int64_t n);

// The known nodes a run starts from (count 0: the layer continues a run): copied into
// nodes_out and inserted into the table with their positions as ids.
struct RunStart {
  const int64_t* nodes;
  int64_t count;
};

// Per-layer scratch (sized for the layer's bounds; the arrays are reusable by the next layer
// of the stream, the scan states are not).
struct LayerScratch {
  int64_t* ptr;          // seeds_bound + 1 row pointers; ptr[seeds_bound] is the edge count
  int64_t* pos;          // edges_bound sampled CSR positions, rows unsorted
  int64_t* value_of;     // edges_bound: each edge's table value (deterministic numbering)
  int64_t* rank;         // edges_bound: new nodes whose first edge precedes each edge (same)
  ScanState first_scan;  // rank's scan (same)
  void* local;           // long-row layers: exact-count local source ids, rows unsorted
  void* temp;            // long-row layers: CUB's segmented sort scratch
  size_t temp_bytes;
};

// A layer's outputs: row pointers (seeds_bound + 1) and local ids in the local id type, and
// user edge ids (edges_bound).
struct LayerOutput {
  void* rowptr;
  void* col;
  int64_t* edge_ids;
};

// Everything one layer of one batch reads and writes. count_scan scans the row pointers into
// scratch.ptr; start: the run's start (count 0: none).
struct LayerTask {
  SampleLayer in;
  RunStart start;
  SampleTable table;
  ScanState count_scan;
  LayerScratch scratch;
  LayerOutput out;
};

// Which batches a launch serves: none listed (tasks null), the task it is given; else `count`
// tasks in device memory, and the task it is given is the one with the largest bounds (it
// sizes the grid; the batches' blocks past their own bounds exit).
struct Batches {
  const LayerTask* tasks = nullptr;
  int count = 1;
};

// Counts each seed's edges and scans them (task.count_scan) into task.scratch.ptr in the same
// pass, after the run's start (when start.count > 0, fused in: the table must be cleared).
// One launch.
void count_edges(const LayerTask& task, const Batches& batches, cudaStream_t stream);
// A run's start on its own (when count_edges ran before the table existed). One batch.
void start_run(const LayerTask& task, cudaStream_t stream);
// Draws each seed's edges into scratch.pos (one warp per seed) and enters their sources in the
// table: the unordered numbering gives a new node its id here; the deterministic one keeps
// each source's first edge and then ranks the first edges (value_of, rank; a second launch).
void sample_edges(const LayerTask& task, bool deterministic, const Batches& batches,
                  cudaStream_t stream);

// Whether a layer's rows (at most `fanout` edges) sort by warp; longer rows (fanout -1's hubs)
// go through CUB's segmented sort, which needs the exact edge count.
bool warp_sortable(int64_t fanout);

// Whether a layer's rows go a lane each rather than a warp each: its fanout is at most 32 and
// one launch holds `rows` rows (seeds over every batch), enough for a lane each to fill the GPU
// (its resident threads). With fewer, a warp per row keeps more of a row's edges in flight.
bool rows_by_lane(int64_t fanout, int64_t rows, int64_t resident_threads);

size_t segmented_sort_temp_bytes(int64_t num_edges, int64_t num_segments, bool local64);
// The blocks: each edge's local id (new nodes into nodes_out and, with their ids, into the
// table for the run's next layer; the layer's counts), each row's (local id, edge) pairs by
// local id (stable), the row pointers in the local id type and the user edge ids.
// exact_edges: -1 for a warp-sortable layer (one launch: ids and sort fused), else the edge
// count that the long-row path (ids into scratch.local, segmented sort, finish; one batch)
// needs.
void write_rows(const LayerTask& task, bool deterministic, bool local64, int64_t exact_edges,
                const Batches& batches, cudaStream_t stream);

}  // namespace cuda
}  // namespace fastgnn
