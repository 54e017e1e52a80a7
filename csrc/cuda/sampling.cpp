// Torch-facing glue of CUDA neighbour sampling: device pointers (mapped ones for a graph in
// pinned host memory), allocation from host-known bounds, and the batch's one read-back.
// Layers run in "runs": one starts at layer 0 or at a layer whose edge count no host bound
// sizes (fanout -1, or rows too long to sort by warp: its count is read back first, a sync).
// A run takes one workspace allocation: [counters (the call's first run) | hash table | every
// scan state of the run] cleared by one memset, then the arrays its layers share (they run in
// stream order), the node list of a run that is not the last, and the row pointers that the
// next run's first layer is counted into before its read-back. Every layer's outputs and the
// last run's node list get allocations of their own (outputs of an op must not alias each
// other), cut to the true counts in place after the read-back at the end. A batch whose layers
// all sort by warp is one run: 1 workspace + 3 outputs per layer + the node list, one memset,
// 4 launches per layer (3 unordered), one sync.
#include <torch/library.h>

#include <algorithm>
#include <tuple>
#include <utility>
#include <vector>

#include "cuda/glue.h"
#include "cuda/sampling_kernels.h"
#include "sampling_checks.h"
#include "sampling_plan.h"

namespace fastgnn {
namespace cuda {
namespace {

using TensorList = std::vector<at::Tensor>;

// A pointer the GPU can read: the tensor's own on the GPU, the mapped address of pinned host
// memory (zero-copy reads through unified addressing).
const void* readable(const at::Tensor& t, const char* name) {
  if (t.is_cuda()) return t.data_ptr();
  TORCH_CHECK(t.is_pinned(), "sample_neighbors: ", name,
              " must be on the GPU or in pinned host memory for GPU sampling");
  void* mapped = nullptr;
  C10_CUDA_CHECK(cudaHostGetDevicePointer(&mapped, t.data_ptr(), 0));
  return mapped;
}

// Where the call's device counters live (int64): known[l] (nodes known before layer l; l = L:
// all), edges[l], fresh[l], then the two seed flags (all-ones until raised to 1).
struct Counters {
  int layers;
  int known(int l) const { return l; }
  int edges(int l) const { return layers + 1 + l; }
  int fresh(int l) const { return 2 * layers + 1 + l; }
  int duplicate() const { return 3 * layers + 1; }
  int out_of_range() const { return 3 * layers + 2; }
  int size() const { return 3 * layers + 3; }
};

// Carves one allocation into 256-byte aligned parts.
struct Carver {
  size_t total = 0;
  size_t add(size_t bytes) {
    const size_t at = total;
    total += (bytes + 255) / 256 * 256;
    return at;
  }
};

// A workspace allocation, kept alive until the read-back.
char* workspace(size_t bytes, const at::TensorOptions& opts, TensorList& keep) {
  keep.push_back(at::empty({int64_t(bytes)}, opts.dtype(at::kByte)));
  return static_cast<char*>(keep.back().data_ptr());
}

// The counters (and, when given, one more value: a layer's edge count) copied back, in one sync.
// Into pinned memory (torch's caching host allocator): the driver stages a copy into pageable
// memory through a pinned buffer of its own.
std::vector<int64_t> read_back(const int64_t* counters, int count, const int64_t* extra,
                               cudaStream_t s) {
  const at::Tensor pinned =
      at::empty({count + 1}, at::TensorOptions().dtype(at::kLong).pinned_memory(true));
  int64_t* words = pinned.data_ptr<int64_t>();
  words[count] = 0;
  C10_CUDA_CHECK(cudaMemcpyAsync(words, counters, count * sizeof(int64_t),
                                 cudaMemcpyDeviceToHost, s));
  if (extra != nullptr) {
    C10_CUDA_CHECK(cudaMemcpyAsync(words + count, extra, sizeof(int64_t),
                                   cudaMemcpyDeviceToHost, s));
  }
  C10_CUDA_CHECK(cudaStreamSynchronize(s));  // the copies are done before `pinned` is freed
  return std::vector<int64_t>(words, words + count + 1);
}

void check_seeds(const std::vector<int64_t>& host, const Counters& c, int64_t num_rows) {
  TORCH_CHECK_VALUE(host[c.out_of_range()] != 1, "sample_neighbors: seeds must be node ids in [0, ",
                    num_rows, ")");
  TORCH_CHECK_VALUE(host[c.duplicate()] != 1, "sample_neighbors: seeds must be unique node ids");
}

// Host bounds of a layer within its run.
struct LayerPlan {
  int64_t seeds;
  int64_t edges;
  bool local64;
};

// A layer's outputs, sized from its bounds.
struct LayerOutputs {
  at::Tensor rowptr, col, edge_ids;
};

// Cuts a bound-sized output to its true length in place (the op's own fresh tensor: no view op
// through the dispatcher, as narrow was; the storage keeps its bound size, as narrow's did).
void cut(at::Tensor& t, int64_t n) {
  TORCH_INTERNAL_ASSERT(n >= 0 && n <= t.numel(), "sample_neighbors: a count past its bound");
  t.unsafeGetTensorImpl()->set_sizes_contiguous({n});
}

// The row pointers that a run's long-row first layer is counted into before the run's
// read-back (carved by the run before, or by the call's first allocation), and the count's scan.
struct PreCount {
  int64_t* ptr = nullptr;
  ScanState scan{};
};

std::tuple<TensorList, TensorList, TensorList, at::Tensor> sample_neighbors_cuda(
    const at::Tensor& rowptr, const at::Tensor& col, const c10::optional<at::Tensor>& weight,
    const c10::optional<at::Tensor>& edge_map, const at::Tensor& seeds, at::IntArrayRef fanouts,
    at::IntArrayRef layer_seeds, bool expand_all, bool replace, bool deterministic) {
  const std::vector<int64_t> fanout_list = fanouts.vec();
  sampling::check_sample_args(rowptr, col, weight, edge_map, seeds, fanout_list,
                              layer_seeds.vec());
  TORCH_CHECK(seeds.is_cuda(), "sample_neighbors: seeds must be on the GPU");
  const c10::cuda::CUDAGuard guard(seeds.device());
  const cudaStream_t s = stream();
  const int num_layers = int(fanout_list.size());
  const Counters c{num_layers};
  const int64_t num_seeds = seeds.numel(), num_rows = rowptr.numel() - 1;
  const auto dtypes = sampling::layer_bounds(num_seeds, fanout_list, expand_all, col.numel());
  const auto opts = seeds.options();
  constexpr size_t kWord = sizeof(int64_t);

  SampleLayer graph{};
  graph.rowptr = readable(rowptr, "rowptr");
  graph.col = readable(col, "col");
  graph.weight = weight.has_value() ? static_cast<const float*>(readable(*weight, "weight"))
                                    : nullptr;
  graph.edge_map = edge_map.has_value()
                       ? static_cast<const int64_t*>(readable(*edge_map, "edge_map"))
                       : nullptr;
  graph.index64 = col.scalar_type() == at::kLong;
  graph.num_rows = num_rows;
  graph.replace = replace;

  TensorList keep;  // workspaces, alive until the read-back
  int64_t* counters = nullptr;
  std::vector<LayerOutputs> outputs(num_layers);
  at::Tensor node_list;  // the last run's: every layer's nodes are a prefix of it
  // Host knowledge between runs: the node list a run copies from, bounds on the known nodes
  // and on the previous layer's new ones, and exact counts at a run start after a sync.
  const int64_t* run_nodes = seeds.data_ptr<int64_t>();
  int64_t known_bound = num_seeds, new_bound = num_seeds;
  int64_t known_exact = num_seeds, begin_exact = 0;
  PreCount pre;

  auto layer_input = [&](int l, const LayerPlan& plan) {
    SampleLayer in = graph;
    in.fanout = fanout_list[l];
    in.seed = uint64_t(layer_seeds[l]);
    in.known_host = -1;
    in.known = counters + c.known(l);
    in.begin_host = expand_all || l == 0 ? 0 : -1;
    in.begin = l > 0 ? counters + c.known(l - 1) : nullptr;
    in.seeds_bound = plan.seeds;
    in.edges_bound = plan.edges;
    in.known_next = counters + c.known(l + 1);
    in.num_edges = counters + c.edges(l);
    in.fresh = counters + c.fresh(l);
    in.duplicate = counters + c.duplicate();
    in.out_of_range = counters + c.out_of_range();
    return in;
  };

  for (int l0 = 0; l0 < num_layers;) {
    const bool compact = !warp_sortable(fanout_list[l0]);
    int l1 = l0 + 1;
    while (l1 < num_layers && warp_sortable(fanout_list[l1])) ++l1;
    const bool last_run = l1 == num_layers;  // else layer l1 starts a long-row run

    // A long-row first layer: its row pointers first, then the exact counts, in one sync.
    int64_t exact_edges = -1;
    const int64_t first_seeds = l0 == 0 ? num_seeds : expand_all ? known_bound : new_bound;
    if (compact) {
      if (l0 == 0) {  // the call's first allocation: [counters | the count's scan] cleared, ptr
        Carver carve;
        const size_t counters_at = carve.add(c.size() * kWord);
        const size_t scan_at = carve.add(scan_words(first_seeds) * kWord);
        const size_t cleared = carve.total;
        const size_t ptr_at = carve.add((first_seeds + 1) * kWord);
        char* base = workspace(carve.total, opts, keep);
        C10_CUDA_CHECK(cudaMemsetAsync(base, 0xff, cleared, s));
        counters = reinterpret_cast<int64_t*>(base + counters_at);
        pre.ptr = reinterpret_cast<int64_t*>(base + ptr_at);
        pre.scan.words = reinterpret_cast<unsigned long long*>(base + scan_at);
      }
      SampleLayer in = layer_input(l0, {first_seeds, 0, dtypes[l0].local64});
      in.nodes = run_nodes;
      if (l0 == 0) in.known_host = num_seeds;
      count_edges(in, RunStart{nullptr, 0}, SampleTable{}, pre.ptr, pre.scan, s);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      const auto host = read_back(counters, c.size(), pre.ptr + first_seeds, s);
      check_seeds(host, c, num_rows);
      known_exact = host[c.known(l0)];
      begin_exact = expand_all || l0 == 0 ? 0 : host[c.known(l0 - 1)];
      exact_edges = host[c.size()];
    }

    // Bounds of the run's layers, from its exact start.
    std::vector<LayerPlan> plans;
    int64_t known = known_exact, fresh = new_bound, most_seeds = 0, most_edges = 0;
    for (int l = l0; l < l1; ++l) {
      const int64_t seeds_bound = l == l0 ? first_seeds : expand_all ? known : fresh;
      const int64_t edges_bound = l == l0 && compact
                                      ? exact_edges
                                      : sampling::capped_mul(seeds_bound, fanout_list[l]);
      plans.push_back({seeds_bound, edges_bound, dtypes[l].local64});
      fresh = std::min(edges_bound, num_rows);
      known = std::min(known + fresh, known_exact + num_rows);
      most_seeds = std::max(most_seeds, seeds_bound);
      most_edges = std::max(most_edges, edges_bound);
    }
    known_bound = known;
    new_bound = fresh;
    const int64_t next_seeds = expand_all ? known : fresh;  // layer l1's, when it starts a run

    // The run's workspace: [counters | table keys | table values | scan states] cleared by one
    // memset, then the arrays.
    const uint64_t capacity = table_capacity(known);
    Carver carve;
    const bool own_counters = counters == nullptr;
    const size_t counters_at = carve.add(own_counters ? c.size() * kWord : 0);
    const size_t keys_at = carve.add(capacity * kWord);
    const size_t values_at = carve.add(capacity * kWord);
    std::vector<size_t> count_scan_at(plans.size()), first_scan_at(plans.size());
    for (size_t k = 0; k < plans.size(); ++k) {
      const bool counted = compact && k == 0;  // counted into pre.ptr before the run
      count_scan_at[k] = carve.add(counted ? 0 : scan_words(plans[k].seeds) * kWord);
      first_scan_at[k] = carve.add(deterministic ? scan_words(plans[k].edges) * kWord : 0);
    }
    const size_t next_scan_at = carve.add(last_run ? 0 : scan_words(next_seeds) * kWord);
    const size_t cleared = carve.total;
    const size_t edges_bytes = size_t(most_edges) * kWord;
    const size_t ptr_at = carve.add((most_seeds + 1) * kWord);
    const size_t pos_at = carve.add(edges_bytes);
    const size_t value_of_at = carve.add(deterministic ? edges_bytes : 0);
    const size_t rank_at = carve.add(deterministic ? edges_bytes : 0);
    const size_t local_at =
        carve.add(compact ? size_t(exact_edges) * (dtypes[l0].local64 ? 8 : 4) : 0);
    const size_t temp_bytes =
        compact ? segmented_sort_temp_bytes(exact_edges, first_seeds, dtypes[l0].local64) : 0;
    const size_t temp_at = carve.add(temp_bytes);
    const size_t nodes_at = carve.add(last_run ? 0 : size_t(known) * kWord);
    const size_t next_ptr_at = carve.add(last_run ? 0 : size_t(next_seeds + 1) * kWord);
    char* base = workspace(carve.total, opts, keep);
    C10_CUDA_CHECK(cudaMemsetAsync(base, 0xff, cleared, s));
    if (own_counters) counters = reinterpret_cast<int64_t*>(base + counters_at);
    auto words = [&](size_t at) {
      return ScanState{reinterpret_cast<unsigned long long*>(base + at)};
    };
    const SampleTable table{reinterpret_cast<int64_t*>(base + keys_at),
                            reinterpret_cast<unsigned long long*>(base + values_at), capacity};
    int64_t* nodes_out = reinterpret_cast<int64_t*>(base + nodes_at);
    if (last_run) {
      node_list = at::empty({known}, opts);
      nodes_out = node_list.data_ptr<int64_t>();
    }

    const RunStart start{run_nodes, known_exact};
    for (int l = l0; l < l1; ++l) {
      const LayerPlan& plan = plans[l - l0];
      SampleLayer in = layer_input(l, plan);
      in.nodes = l == l0 ? run_nodes : nodes_out;
      in.nodes_out = nodes_out;
      if (l == l0) {
        in.known_host = known_exact;
        in.begin_host = begin_exact;
      }
      LayerOutputs& o = outputs[l];
      const auto local_type = opts.dtype(plan.local64 ? at::kLong : at::kInt);
      o.rowptr = at::empty({plan.seeds + 1}, local_type);
      o.col = at::empty({plan.edges}, local_type);
      o.edge_ids = at::empty({plan.edges}, opts);
      const LayerOutput out{o.rowptr.data_ptr(), o.col.data_ptr(),
                            o.edge_ids.data_ptr<int64_t>()};
      const bool counted = compact && l == l0;
      const LayerScratch scratch{counted ? pre.ptr : reinterpret_cast<int64_t*>(base + ptr_at),
                                 reinterpret_cast<int64_t*>(base + pos_at),
                                 reinterpret_cast<int64_t*>(base + value_of_at),
                                 reinterpret_cast<int64_t*>(base + rank_at),
                                 words(first_scan_at[l - l0]),
                                 base + local_at,
                                 base + temp_at,
                                 temp_bytes};
      if (counted) {
        start_run(in, start, table, s);
      } else {
        count_edges(in, l == l0 ? start : RunStart{nullptr, 0}, table, scratch.ptr,
                    words(count_scan_at[l - l0]), s);
      }
      sample_edges(in, deterministic, table, scratch, s);
      write_rows(in, deterministic, plan.local64, table, scratch, out, counted ? exact_edges : -1,
                 s);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    if (!last_run) {
      pre.ptr = reinterpret_cast<int64_t*>(base + next_ptr_at);
      pre.scan = words(next_scan_at);
    }
    run_nodes = nodes_out;
    l0 = l1;
  }

  const auto host = read_back(counters, c.size(), nullptr, s);
  check_seeds(host, c, num_rows);
  TensorList rowptrs, cols, edge_ids;
  for (int l = 0; l < num_layers; ++l) {
    const int64_t begin = expand_all || l == 0 ? 0 : host[c.known(l - 1)];
    const int64_t layer_seeds_count = host[c.known(l)] - begin, num_edges = host[c.edges(l)];
    LayerOutputs& o = outputs[l];
    cut(o.rowptr, layer_seeds_count + 1);
    cut(o.col, num_edges);
    cut(o.edge_ids, num_edges);
    rowptrs.push_back(std::move(o.rowptr));
    cols.push_back(std::move(o.col));
    edge_ids.push_back(std::move(o.edge_ids));
  }
  cut(node_list, host[c.known(num_layers)]);
  return {rowptrs, cols, edge_ids, node_list};
}

}  // namespace

TORCH_LIBRARY_IMPL(fastgnn, CUDA, m) { m.impl("sample_neighbors", &sample_neighbors_cuda); }

}  // namespace cuda
}  // namespace fastgnn
