// CUDA neighbour sampling kernels (no torch headers): the glue (sampling.cpp) allocates,
// scans and syncs; these launch one pass each on the given stream.
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

// counts[i] = number of edges seed i takes.
void sample_counts(const SampleInput& in, int64_t* counts, cudaStream_t stream);
// Writes the sampled CSR positions of seed i at pos[ptr[i] .. ptr[i + 1]).
void sample_fill(const SampleInput& in, const int64_t* ptr, int64_t* pos, cudaStream_t stream);

// The relabel hash table: capacity (a power of two) slots of keys (-1: empty) and values
// (INT64_MAX: none), filled by the glue.
struct RelabelTable {
  int64_t* keys;
  int64_t* values;
  uint64_t mask;
};

// Inserts the known nodes with their positions; sets *duplicate to 1 when one repeats.
void relabel_insert_known(const int64_t* nodes, int64_t num_known, RelabelTable table,
                          int* duplicate, cudaStream_t stream);
// Deterministic numbering, pass 1: inserts the source of every sampled edge with value
// num_known + (its first edge position).
void relabel_insert_edges(const SampleInput& in, const int64_t* pos, int64_t num_edges,
                          RelabelTable table, cudaStream_t stream);
// Pass 2: value_of[e] = the slot value of edge e's source, first[e] = whether e is its first.
void relabel_first_edges(const SampleInput& in, const int64_t* pos, int64_t num_edges,
                         RelabelTable table, int64_t* value_of, int64_t* first,
                         cudaStream_t stream);
// Pass 3 (rank: inclusive scan of first): local ids and the new nodes' global ids.
void relabel_assign(const SampleInput& in, const int64_t* pos, int64_t num_edges,
                    int64_t num_known, const int64_t* value_of, const int64_t* rank,
                    void* local, bool local64, int64_t* nodes_out, cudaStream_t stream);
// Fast numbering in the order the GPU meets new nodes (not reproducible): one insert pass
// that takes ids from *counter, then a lookup pass.
void relabel_insert_edges_unordered(const SampleInput& in, const int64_t* pos, int64_t num_edges,
                                    int64_t num_known, RelabelTable table,
                                    unsigned long long* counter, int64_t* nodes_out,
                                    cudaStream_t stream);
void relabel_lookup(const SampleInput& in, const int64_t* pos, int64_t num_edges,
                    RelabelTable table, void* local, bool local64, cudaStream_t stream);

// Sorts each block row's (local id, position) pairs by local id; temp == null asks for
// *temp_bytes. keys_out/pos_out receive the sorted pairs.
void sort_rows(const void* keys, void* keys_out, bool local64, const int64_t* pos,
               int64_t* pos_out, int64_t num_edges, const int64_t* ptr, int64_t num_seeds,
               void* temp, size_t* temp_bytes, cudaStream_t stream);

}  // namespace cuda
}  // namespace fastgnn
