// Host-side bounds of a multi-layer sample, shared by the CPU and CUDA ops (no torch). They
// fix each layer's local id type before any count is known, so that both devices return the
// same dtypes for the same call.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

namespace fastgnn {
namespace sampling {

// Sums and products saturate here: the bounds only decide dtypes, and a saturated one is
// int64 either way.
constexpr int64_t kBoundCap = std::numeric_limits<int64_t>::max() / 4;

inline int64_t capped_add(int64_t a, int64_t b) { return a > kBoundCap - b ? kBoundCap : a + b; }
inline int64_t capped_mul(int64_t a, int64_t b) {
  return b != 0 && a > kBoundCap / b ? kBoundCap : a * b;
}

// Upper bounds of one layer, from the seed count and fanouts alone.
struct LayerBound {
  int64_t known;  // nodes known before the layer
  int64_t seeds;  // nodes the layer samples for
  int64_t edges;  // edges it samples (fanout -1: the graph's edge count)
  bool local64;   // whether its local ids (known + new nodes) may pass int32
};

// Layer l samples for all known nodes (expand_all, blocks) or for the nodes layer l - 1 added
// (subgraph hops); every sampled edge may bring a new node.
inline std::vector<LayerBound> layer_bounds(int64_t num_seeds, const std::vector<int64_t>& fanouts,
                                            bool expand_all, int64_t graph_edges) {
  std::vector<LayerBound> bounds;
  int64_t known = num_seeds, seeds = num_seeds;
  for (const int64_t fanout : fanouts) {
    const int64_t edges = fanout < 0 ? graph_edges : capped_mul(seeds, fanout);
    const int64_t most = capped_add(known, edges);
    bounds.push_back({known, seeds, edges, most >= std::numeric_limits<int32_t>::max()});
    known = most;
    seeds = expand_all ? known : edges;
  }
  return bounds;
}

}  // namespace sampling
}  // namespace fastgnn
