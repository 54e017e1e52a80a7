// Torch-facing glue of CUDA neighbour sampling: device pointers (mapped ones for a graph in
// pinned host memory), allocation from host-known bounds, and the batch's one read-back.
// Layers run in "runs": one starts at layer 0 or at a layer whose edge count no host bound
// sizes (fanout -1, or rows too long to sort by warp: its count is read back first, a sync).
// A run takes one scratch allocation (the counters and the hash table at its head, cleared by
// one memset) and one node list; every layer's outputs get allocations of their own (outputs
// of an op must not alias each other), narrowed to the true counts after the read-back at
// the end.
#include <torch/library.h>

#include <algorithm>
#include <tuple>
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

// The counters (and, when given, one more value: a layer's edge count) copied back, in one sync.
std::vector<int64_t> read_back(const int64_t* counters, int count, const int64_t* extra,
                               cudaStream_t s) {
  std::vector<int64_t> host(count + 1, 0);
  C10_CUDA_CHECK(cudaMemcpyAsync(host.data(), counters, count * sizeof(int64_t),
                                 cudaMemcpyDeviceToHost, s));
  if (extra != nullptr) {
    C10_CUDA_CHECK(cudaMemcpyAsync(host.data() + count, extra, sizeof(int64_t),
                                   cudaMemcpyDeviceToHost, s));
  }
  C10_CUDA_CHECK(cudaStreamSynchronize(s));
  return host;
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

  TensorList keep;  // scratch allocations, alive until the read-back
  int64_t* counters = nullptr;
  std::vector<LayerOutputs> outputs(num_layers);
  at::Tensor node_list;  // the last run's: every layer's nodes are a prefix of it
  // Host knowledge between runs: the node list a run copies from, bounds on the known nodes
  // and on the previous layer's new ones, and exact counts at a run start after a sync.
  const int64_t* run_nodes = seeds.data_ptr<int64_t>();
  int64_t known_bound = num_seeds, new_bound = num_seeds;
  int64_t known_exact = num_seeds, begin_exact = 0;

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

    // A compact first layer: its row pointers first, then the exact counts, in one sync.
    at::Tensor pre;
    LayerScratch pre_scratch{};
    int64_t exact_edges = -1;
    const int64_t first_seeds = l0 == 0 ? num_seeds : expand_all ? known_bound : new_bound;
    if (compact) {
      Carver carve;
      const size_t counters_at = carve.add(l0 == 0 ? c.size() * sizeof(int64_t) : 0);
      const size_t ptr_at = carve.add((first_seeds + 1) * sizeof(int64_t));
      const size_t counts_at = carve.add(first_seeds * sizeof(int64_t));
      const size_t temp_bytes = scan_temp_bytes(first_seeds);
      const size_t temp_at = carve.add(temp_bytes);
      pre = at::empty({int64_t(carve.total)}, opts.dtype(at::kByte));
      char* base = static_cast<char*>(pre.data_ptr());
      if (l0 == 0) {
        counters = reinterpret_cast<int64_t*>(base + counters_at);
        C10_CUDA_CHECK(cudaMemsetAsync(counters, 0xff, c.size() * sizeof(int64_t), s));
      }
      pre_scratch.ptr = reinterpret_cast<int64_t*>(base + ptr_at);
      pre_scratch.counts = reinterpret_cast<int64_t*>(base + counts_at);
      pre_scratch.temp = base + temp_at;
      pre_scratch.temp_bytes = temp_bytes;
      SampleLayer in = layer_input(l0, {first_seeds, 0, dtypes[l0].local64});
      in.nodes = run_nodes;
      if (l0 == 0) in.known_host = num_seeds;
      count_edges(in, RunStart{nullptr, 0}, SampleTable{}, pre_scratch, s);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      const auto host = read_back(counters, c.size(), pre_scratch.ptr + first_seeds, s);
      check_seeds(host, c, num_rows);
      known_exact = host[c.known(l0)];
      begin_exact = expand_all || l0 == 0 ? 0 : host[c.known(l0 - 1)];
      exact_edges = host[c.size()];
      keep.push_back(pre);
    }

    // Bounds of the run's layers, from its exact start.
    std::vector<LayerPlan> plans;
    int64_t known = known_exact, fresh = new_bound, most_seeds = 0, most_edges = 0;
    bool any64 = false;
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
      any64 = any64 || dtypes[l].local64;
    }
    known_bound = known;
    new_bound = fresh;

    // One scratch allocation: [counters | table keys | table values] (one memset), then the
    // per-layer arrays, shared by the run's layers (they run in stream order).
    const uint64_t capacity = table_capacity(known);
    Carver carve;
    const bool own_counters = counters == nullptr;
    const size_t counters_at = carve.add(own_counters ? c.size() * sizeof(int64_t) : 0);
    const size_t keys_at = carve.add(capacity * sizeof(int64_t));
    const size_t values_at = carve.add(capacity * sizeof(int64_t));
    const size_t cleared = carve.total;
    const size_t e8 = size_t(most_edges) * sizeof(int64_t);
    const size_t ptr_at = carve.add((most_seeds + 1) * sizeof(int64_t));
    const size_t counts_at = carve.add(most_seeds * sizeof(int64_t));
    const size_t pos_at = carve.add(e8);
    const size_t local_at = carve.add(size_t(most_edges) * (any64 ? 8 : 4));
    const size_t value_of_at = carve.add(e8);
    const size_t first_at = carve.add(e8);
    const size_t rank_at = carve.add(e8);
    size_t temp_bytes = std::max(scan_temp_bytes(most_seeds), scan_temp_bytes(most_edges));
    if (compact) {
      temp_bytes = std::max(temp_bytes, segmented_sort_temp_bytes(exact_edges, first_seeds,
                                                                   dtypes[l0].local64));
    }
    const size_t temp_at = carve.add(temp_bytes);
    auto scratch_tensor = at::empty({int64_t(carve.total)}, opts.dtype(at::kByte));
    keep.push_back(scratch_tensor);
    char* base = static_cast<char*>(scratch_tensor.data_ptr());
    if (own_counters) counters = reinterpret_cast<int64_t*>(base + counters_at);
    C10_CUDA_CHECK(cudaMemsetAsync(base + (own_counters ? counters_at : keys_at), 0xff,
                                   cleared - (own_counters ? counters_at : keys_at), s));
    const SampleTable table{reinterpret_cast<int64_t*>(base + keys_at),
                            reinterpret_cast<unsigned long long*>(base + values_at), capacity};
    LayerScratch scratch{reinterpret_cast<int64_t*>(base + ptr_at),
                         reinterpret_cast<int64_t*>(base + counts_at),
                         reinterpret_cast<int64_t*>(base + pos_at),
                         base + local_at,
                         reinterpret_cast<int64_t*>(base + value_of_at),
                         reinterpret_cast<int64_t*>(base + first_at),
                         reinterpret_cast<int64_t*>(base + rank_at),
                         base + temp_at,
                         temp_bytes};

    if (node_list.defined()) keep.push_back(node_list);  // the run copies its nodes from it
    node_list = at::empty({known}, opts);
    int64_t* nodes_out = node_list.data_ptr<int64_t>();

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
      LayerScratch layer_scratch = scratch;
      const bool counted = compact && l == l0;
      if (counted) {
        layer_scratch.ptr = pre_scratch.ptr;
        layer_scratch.counts = pre_scratch.counts;
        start_run(in, start, table, s);
      } else {
        count_edges(in, l == l0 ? start : RunStart{nullptr, 0}, table, layer_scratch, s);
      }
      sample_and_relabel(in, deterministic, plan.local64, table, layer_scratch, s);
      sort_rows(in, plan.local64, layer_scratch, out, counted ? exact_edges : -1, s);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    run_nodes = nodes_out;
    l0 = l1;
  }

  const auto host = read_back(counters, c.size(), nullptr, s);
  check_seeds(host, c, num_rows);
  TensorList rowptrs, cols, edge_ids;
  for (int l = 0; l < num_layers; ++l) {
    const int64_t begin = expand_all || l == 0 ? 0 : host[c.known(l - 1)];
    const int64_t layer_seeds_count = host[c.known(l)] - begin, num_edges = host[c.edges(l)];
    const LayerOutputs& o = outputs[l];
    rowptrs.push_back(o.rowptr.narrow(0, 0, layer_seeds_count + 1));
    cols.push_back(o.col.narrow(0, 0, num_edges));
    edge_ids.push_back(o.edge_ids.narrow(0, 0, num_edges));
  }
  return {rowptrs, cols, edge_ids, node_list.narrow(0, 0, host[c.known(num_layers)])};
}

}  // namespace

TORCH_LIBRARY_IMPL(fastgnn, CUDA, m) { m.impl("sample_neighbors", &sample_neighbors_cuda); }

}  // namespace cuda
}  // namespace fastgnn
