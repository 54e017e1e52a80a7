// The GPU sampler's per-batch device counters, and the host work once they are read back:
// the seed checks and the layout's counts. Shared by the CUDA op that reads them back itself
// and by sample_neighbors_many_layout, which finishes a call that left the read-back in flight.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

#include "sampling_batches.h"

namespace fastgnn {
namespace sampling {

// Where a batch's counters live (int64): known[l] (nodes known before layer l; l = L: all),
// edges[l], fresh[l], then the two seed flags (all-ones until raised to 1).
struct Counters {
  int layers;
  int known(int l) const { return l; }
  int edges(int l) const { return layers + 1 + l; }
  int fresh(int l) const { return 2 * layers + 1 + l; }
  int duplicate() const { return 3 * layers + 1; }
  int out_of_range() const { return 3 * layers + 2; }
  int size() const { return 3 * layers + 3; }
};

inline void check_seeds(const int64_t* host, const Counters& c, int64_t num_rows) {
  TORCH_CHECK_VALUE(host[c.out_of_range()] != 1, "sample_neighbors: seeds must be node ids in [0, ",
                    num_rows, ")");
  TORCH_CHECK_VALUE(host[c.duplicate()] != 1, "sample_neighbors: seeds must be unique node ids");
}

// Checks each batch's seeds and writes its counts (rows, edges, nodes) into its layout row from
// its counters (`count` batches, c.size() words each).
inline void fill_layout(int64_t* rows, const int64_t* counters, int64_t count, int num_layers,
                        bool expand_all, int64_t num_rows) {
  const Counters c{num_layers};
  const Layout layout{num_layers};
  for (int64_t b = 0; b < count; ++b) {
    const int64_t* counts = counters + b * c.size();
    check_seeds(counts, c, num_rows);
    int64_t* row = rows + b * layout.width();
    for (int l = 0; l < num_layers; ++l) {
      const int64_t begin = expand_all || l == 0 ? 0 : counts[c.known(l - 1)];
      row[layout.rows(l)] = counts[c.known(l)] - begin;
      row[layout.edges(l)] = counts[c.edges(l)];
    }
    row[layout.nodes()] = counts[c.known(num_layers)];
  }
}

}  // namespace sampling
}  // namespace fastgnn
