// CPU neighbour sampling, layer after layer in one call: per layer, OpenMP over seeds for the
// choice of edges, then a parallel relabel of the sampled sources through a shared
// open-addressing hash table. New nodes get ids in the order of their first occurrence among
// the sampled edges (a minimum over edge positions kept per hash slot), so the blocks are the
// same for any thread count. Several batches in one call run in parallel, a batch per thread.
#include "cpu/cpu_common.h"

#include <omp.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <tuple>
#include <utility>
#include <vector>

#include "sampling_batches.h"
#include "sampling_checks.h"
#include "sampling_common.h"
#include "sampling_plan.h"

namespace fastgnn {
namespace cpu {
namespace {

using sampling::choose_uniform;
using sampling::draw;
using sampling::hash_slot;
using sampling::sample_count;
using sampling::unit;

constexpr int64_t kEmpty = -1;
// Items below which a loop runs serially: a parallel region costs microseconds (and far more
// when a thread waits for a core on a busy machine), a seed's sampling about 0.1 us and a
// hash probe about 10 ns. A [15, 10] batch of 1024 seeds has about 8,000 edges a layer, whose
// loops must run in parallel: serial, they made 2 threads only 1.15x faster than one.
constexpr int64_t kSeedGrain = 1024;
constexpr int64_t kEdgeGrain = 2048;

// Serial inside a parallel region (a batch of several, on its thread).
template <typename Body>
void parallel_for(int64_t n, int64_t grain, const Body& body) {
#pragma omp parallel for num_threads(num_threads()) schedule(dynamic, 64) \
    if (n >= grain && !omp_in_parallel())
  for (int64_t i = 0; i < n; ++i) body(i);
}

// Candidate edges of a row: its degree, or its positive-weight edges when weighted.
template <typename index_t>
int64_t available(const index_t* rowptr, const float* weight, int64_t v) {
  const int64_t begin = rowptr[v], end = rowptr[v + 1];
  if (weight == nullptr) return end - begin;
  int64_t positive = 0;
  for (int64_t e = begin; e < end; ++e) positive += weight[e] > 0.f;
  return positive;
}

// Weight-proportional choice of k offsets of a row. With replacement: inverse CDF over the
// row's prefix sums. Without: the k largest keys log(u) / w (Efraimidis-Spirakis), u drawn
// per edge offset, ties to the smaller offset; zero weights are never taken.
void choose_weighted(uint64_t seed, uint64_t position, const float* w, int64_t degree,
                     int64_t k, bool replace, int64_t* out) {
  if (replace) {
    thread_local std::vector<double> prefix;
    prefix.resize(degree);
    double total = 0;
    for (int64_t o = 0; o < degree; ++o) prefix[o] = total += w[o];
    for (int64_t j = 0; j < k; ++j) {
      const double x = unit(draw(seed, position, j)) * total;
      const int64_t o = std::lower_bound(prefix.begin(), prefix.end(), x) - prefix.begin();
      out[j] = std::min(o, degree - 1);
    }
    return;
  }
  thread_local std::vector<std::pair<double, int64_t>> keys;
  keys.clear();
  for (int64_t o = 0; o < degree; ++o) {
    if (w[o] > 0.f) keys.emplace_back(std::log(unit(draw(seed, position, o))) / w[o], o);
  }
  const auto larger = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  std::partial_sort(keys.begin(), keys.begin() + k, keys.end(), larger);
  for (int64_t j = 0; j < k; ++j) out[j] = keys[j].second;
}

// Inserts `key` with value `value`, keeping the smaller value when present; returns false
// when `unique` and the key was already there.
bool insert_min(int64_t* keys, int64_t* values, uint64_t mask, int64_t key, int64_t value,
                bool unique) {
  for (uint64_t slot = hash_slot(key, mask);; slot = (slot + 1) & mask) {
    int64_t expected = kEmpty;
    if (!__atomic_compare_exchange_n(&keys[slot], &expected, key, false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE)) {
      if (expected != key) continue;
      if (unique) return false;
    }
    int64_t held = __atomic_load_n(&values[slot], __ATOMIC_RELAXED);
    while (value < held && !__atomic_compare_exchange_n(&values[slot], &held, value, true,
                                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
    return true;
  }
}

int64_t find_value(const int64_t* keys, const int64_t* values, uint64_t mask, int64_t key) {
  uint64_t slot = hash_slot(key, mask);
  while (keys[slot] != key) slot = (slot + 1) & mask;
  return values[slot];
}

// One layer: (rowptr, col, sampled CSR positions, nodes_out).
template <typename index_t, typename out_t>
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> sample_layer(
    const at::Tensor& rowptr_t, const at::Tensor& col_t, const float* weight,
    const at::Tensor& nodes_t, int64_t seeds_begin, int64_t fanout, bool replace,
    uint64_t seed) {
  const index_t* rowptr = rowptr_t.data_ptr<index_t>();
  const index_t* col = col_t.data_ptr<index_t>();
  const int64_t* nodes = nodes_t.data_ptr<int64_t>();
  const int64_t num_known = nodes_t.numel(), num_seeds = num_known - seeds_begin;
  const int64_t num_rows = rowptr_t.numel() - 1;
  const at::ScalarType out_type = std::is_same_v<out_t, int32_t> ? at::kInt : at::kLong;

  // 1. How many edges each seed takes, and the block's row pointers.
  std::vector<int64_t> ptr(num_seeds + 1, 0);
  std::atomic<bool> in_range{true};
  parallel_for(num_seeds, kSeedGrain, [&](int64_t i) {
    const int64_t v = nodes[seeds_begin + i];
    if (v < 0 || v >= num_rows) {
      in_range.store(false, std::memory_order_relaxed);
      return;
    }
    const int64_t degree = rowptr[v + 1] - rowptr[v];
    const int64_t avail = fanout >= 0 ? available(rowptr, weight, v) : degree;
    ptr[i + 1] = sample_count(degree, avail, fanout, replace);
  });
  TORCH_CHECK_VALUE(in_range.load(), "sample_neighbors: seeds must be node ids in [0, ", num_rows, ")");
  for (int64_t i = 0; i < num_seeds; ++i) ptr[i + 1] += ptr[i];
  const int64_t num_edges = ptr[num_seeds];
  auto edge_pos = at::empty({num_edges}, nodes_t.options());
  int64_t* pos = edge_pos.data_ptr<int64_t>();

  // 2. The edges of each seed, as CSR positions of the base graph.
  parallel_for(num_seeds, kSeedGrain, [&](int64_t i) {
    const int64_t v = nodes[seeds_begin + i], begin = rowptr[v];
    const int64_t degree = rowptr[v + 1] - begin, k = ptr[i + 1] - ptr[i];
    int64_t* out = pos + ptr[i];
    if (weight != nullptr && fanout >= 0 && k > 0) {
      choose_weighted(seed, i, weight + begin, degree, k, replace, out);
    } else {
      choose_uniform(seed, i, degree, k, replace && fanout >= 0, out);  // -1: every edge once
    }
    for (int64_t j = 0; j < k; ++j) out[j] += begin;
  });

  // 3. Relabel: known nodes keep their positions; a new node's value is the position (past
  // num_known) of its first sampled edge, which then ranks it among the new nodes.
  uint64_t capacity = 1;
  while (capacity < uint64_t(2 * (num_known + num_edges) + 1)) capacity <<= 1;
  const uint64_t mask = capacity - 1;
  auto table = at::empty({2, int64_t(capacity)}, nodes_t.options());
  table[0].fill_(kEmpty);
  table[1].fill_(std::numeric_limits<int64_t>::max());
  int64_t* keys = table.data_ptr<int64_t>();
  int64_t* values = keys + capacity;
  std::atomic<bool> unique{true};
  parallel_for(num_known, kEdgeGrain, [&](int64_t i) {
    if (!insert_min(keys, values, mask, nodes[i], i, true)) {
      unique.store(false, std::memory_order_relaxed);
    }
  });
  TORCH_CHECK_VALUE(unique.load(), "sample_neighbors: seeds must be unique node ids");
  parallel_for(num_edges, kEdgeGrain, [&](int64_t e) {
    insert_min(keys, values, mask, col[pos[e]], num_known + e, false);
  });
  std::vector<int64_t> value_of(num_edges), rank(num_edges + 1, 0);
  parallel_for(num_edges, kEdgeGrain, [&](int64_t e) {
    value_of[e] = find_value(keys, values, mask, col[pos[e]]);
    rank[e + 1] = value_of[e] == num_known + e;
  });
  for (int64_t e = 0; e < num_edges; ++e) rank[e + 1] += rank[e];
  const int64_t num_new = rank[num_edges];
  auto nodes_out = at::empty({num_known + num_new}, nodes_t.options());
  int64_t* out_nodes = nodes_out.data_ptr<int64_t>();
  std::copy(nodes, nodes + num_known, out_nodes);
  auto block_col = at::empty({num_edges}, nodes_t.options().dtype(out_type));
  out_t* local = block_col.data_ptr<out_t>();
  parallel_for(num_edges, kEdgeGrain, [&](int64_t e) {
    const int64_t value = value_of[e];
    if (value < num_known) {
      local[e] = out_t(value);
      return;
    }
    const int64_t id = num_known + rank[value - num_known];
    local[e] = out_t(id);
    if (value == num_known + e) out_nodes[id] = col[pos[e]];
  });

  // 4. Each row's sources in ascending local order (the order min/max ties rely on).
  parallel_for(num_seeds, kSeedGrain, [&](int64_t i) {
    const int64_t begin = ptr[i], end = ptr[i + 1];
    for (int64_t a = begin + 1; a < end; ++a) {  // rows are fanout-sized: insertion sort
      const out_t key = local[a];
      const int64_t p = pos[a];
      int64_t b = a;
      for (; b > begin && local[b - 1] > key; --b) {
        local[b] = local[b - 1];
        pos[b] = pos[b - 1];
      }
      local[b] = key;
      pos[b] = p;
    }
  });
  auto block_rowptr = at::empty({num_seeds + 1}, nodes_t.options().dtype(out_type));
  out_t* rp = block_rowptr.data_ptr<out_t>();
  for (int64_t i = 0; i <= num_seeds; ++i) rp[i] = out_t(ptr[i]);
  return {block_rowptr, block_col, edge_pos, nodes_out};
}

// CSR positions to the user's edge ids, in place.
void map_positions(at::Tensor& pos, const int64_t* edge_map) {
  int64_t* p = pos.data_ptr<int64_t>();
  parallel_for(pos.numel(), kEdgeGrain, [&](int64_t e) { p[e] = edge_map[p[e]]; });
}

using sampling::TensorList;

sampling::Sampled sample_neighbors_cpu(
    const at::Tensor& rowptr, const at::Tensor& col, const c10::optional<at::Tensor>& weight,
    const c10::optional<at::Tensor>& edge_map, const at::Tensor& seeds, at::IntArrayRef fanouts,
    at::IntArrayRef layer_seeds, bool expand_all, bool replace,
    bool /*deterministic: the CPU kernel always is*/) {
  const std::vector<int64_t> fanout_list = fanouts.vec();
  sampling::check_sample_args(rowptr, col, weight, edge_map, seeds, fanout_list,
                              layer_seeds.vec());
  const float* w = weight.has_value() ? weight->data_ptr<float>() : nullptr;
  const auto bounds = sampling::layer_bounds(seeds.numel(), fanout_list, expand_all, col.numel());
  TensorList rowptrs, cols, edge_ids;
  at::Tensor nodes = seeds;
  int64_t begin = 0;
  for (size_t l = 0; l < fanout_list.size(); ++l) {
    auto layer = FASTGNN_DISPATCH_INDEX(col.scalar_type(), "sample_neighbors", [&] {
      const uint64_t seed = uint64_t(layer_seeds[l]);
      return bounds[l].local64
                 ? sample_layer<index_t, int64_t>(rowptr, col, w, nodes, begin, fanout_list[l],
                                                  replace, seed)
                 : sample_layer<index_t, int32_t>(rowptr, col, w, nodes, begin, fanout_list[l],
                                                  replace, seed);
    });
    at::Tensor pos = std::get<2>(layer);
    if (edge_map.has_value()) map_positions(pos, edge_map->data_ptr<int64_t>());
    rowptrs.push_back(std::get<0>(layer));
    cols.push_back(std::get<1>(layer));
    edge_ids.push_back(pos);
    begin = expand_all ? 0 : nodes.numel();
    nodes = std::get<3>(layer);
  }
  return {rowptrs, cols, edge_ids, nodes};
}

// Several batches: each is sample_neighbors on its own seeds, a batch per thread (its loops
// then run serially, with no barrier between passes).
sampling::SampledMany sample_neighbors_many_cpu(
    const at::Tensor& rowptr, const at::Tensor& col, const c10::optional<at::Tensor>& weight,
    const c10::optional<at::Tensor>& edge_map, const at::Tensor& seeds,
    at::IntArrayRef batch_sizes, at::IntArrayRef fanouts, at::IntArrayRef layer_seeds,
    bool expand_all, bool replace, bool deterministic) {
  return sampling::sample_each(&sample_neighbors_cpu, rowptr, col, weight, edge_map, seeds,
                               batch_sizes, fanouts, layer_seeds, expand_all, replace,
                               deterministic, num_threads());
}

}  // namespace

TORCH_LIBRARY_IMPL(fastgnn, CPU, m) {
  m.impl("sample_neighbors", &sample_neighbors_cpu);
  m.impl("sample_neighbors_many", &sample_neighbors_many_cpu);
}

}  // namespace cpu
}  // namespace fastgnn
