// Per-graph native caches (cuSPARSE descriptors, workspaces, ...) keyed by fastgnn.Graph.key.
// Each cache registers itself once; the ops release_graph_cache and graph_cache_size reach
// every registered cache, whatever device it serves.
#pragma once

#include <cstdint>

namespace fastgnn {

struct GraphCacheClient {
  void (*release)(int64_t graph_key);  // drops every entry of that graph
  int64_t (*size)();                   // number of live entries
};

// Call from a static initialiser of the file that owns the cache.
void register_graph_cache(GraphCacheClient client);

void release_graph_cache(int64_t graph_key);
int64_t graph_cache_size();

}  // namespace fastgnn
