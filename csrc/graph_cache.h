// Per-graph native caches (cuSPARSE descriptors, workspaces, work lists, ...) keyed by
// fastgnn.Graph.key. Each cache registers itself once; release_graph_cache (fastgnn._C's, called
// when a Graph is freed) and the op graph_cache_size reach every registered cache, whatever
// device it serves.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <tuple>

namespace fastgnn {

struct GraphCacheClient {
  std::function<void(int64_t graph_key)> release;  // drops every entry of that graph
  std::function<int64_t()> size;                   // number of live entries
};

void register_graph_cache(GraphCacheClient client);

void release_graph_cache(int64_t graph_key);
int64_t graph_cache_size();

// Orders keys as std::tuple does, and a key against a bare graph key (its first element), so
// a graph's entries are one equal_range: releasing a graph costs no scan of every live entry.
template <typename Key>
struct GraphKeyLess {
  using is_transparent = void;
  bool operator()(const Key& a, const Key& b) const { return a < b; }
  bool operator()(const Key& a, int64_t graph_key) const { return std::get<0>(a) < graph_key; }
  bool operator()(int64_t graph_key, const Key& b) const { return graph_key < std::get<0>(b); }
};

// A map whose keys are tuples starting with the graph key, registered on construction so a
// freed Graph drops its entries. Create it once and never destroy it (Graph finalisers may
// run during interpreter shutdown); lock `mutex` around any use of `entries`.
template <typename Key, typename Value>
struct KeyedGraphCache {
  std::mutex mutex;
  std::map<Key, Value, GraphKeyLess<Key>> entries;

  KeyedGraphCache() {
    register_graph_cache(GraphCacheClient{
        [this](int64_t graph_key) {
          std::lock_guard<std::mutex> lock(mutex);
          const auto range = entries.equal_range(graph_key);
          entries.erase(range.first, range.second);
        },
        [this] {
          std::lock_guard<std::mutex> lock(mutex);
          return int64_t(entries.size());
        }});
  }
  KeyedGraphCache(const KeyedGraphCache&) = delete;
  KeyedGraphCache& operator=(const KeyedGraphCache&) = delete;
};

}  // namespace fastgnn
