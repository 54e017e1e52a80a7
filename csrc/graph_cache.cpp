#include "graph_cache.h"

#include <mutex>
#include <vector>

namespace fastgnn {
namespace {

// Leaked on purpose: Graph finalisers may run during interpreter shutdown, after static
// destructors would have run.
std::vector<GraphCacheClient>& clients() {
  static auto* registered = new std::vector<GraphCacheClient>();
  return *registered;
}

std::mutex& clients_mutex() {
  static auto* mutex = new std::mutex();
  return *mutex;
}

}  // namespace

void register_graph_cache(GraphCacheClient client) {
  std::lock_guard<std::mutex> lock(clients_mutex());
  clients().push_back(client);
}

void release_graph_cache(int64_t graph_key) {
  std::vector<GraphCacheClient> copy;
  {
    std::lock_guard<std::mutex> lock(clients_mutex());
    copy = clients();
  }
  for (const auto& client : copy) client.release(graph_key);
}

int64_t graph_cache_size() {
  std::lock_guard<std::mutex> lock(clients_mutex());
  int64_t total = 0;
  for (const auto& client : clients()) total += client.size();
  return total;
}

}  // namespace fastgnn
