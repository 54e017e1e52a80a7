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
//
// sample_neighbors_many, when every layer sorts by warp: the batches' layers as one run each,
// side by side in one workspace (every batch's counters, hash table and scan states, cleared by
// one memset, then its arrays, then one task per batch and layer, copied from pinned memory
// in one copy) and in one set of outputs (per layer row pointers, local ids and edge ids, and
// the node lists, each batch at offsets of its bounds). Each pass launches once for all the
// batches, so a call is 1 workspace + 3 outputs per layer + the node list, one memset, one
// copy, 4 launches per layer (3 unordered) and one counters read-back, whatever the number of
// batches. With a layer of long rows the batches go one at a time through sample_neighbors.
#include <torch/library.h>

#include <algorithm>
#include <tuple>
#include <utility>
#include <vector>

#include "cuda/glue.h"
#include "cuda/sampling_kernels.h"
#include "sampling_batches.h"
#include "sampling_checks.h"
#include "sampling_plan.h"

namespace fastgnn {
namespace cuda {
namespace {

using sampling::TensorList;
constexpr size_t kWord = sizeof(int64_t);

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

// The threads the current GPU holds resident at once (the lane-per-row choice's bar).
int64_t resident_threads() {
  int device = 0, sms = 0, threads = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  C10_CUDA_CHECK(
      cudaDeviceGetAttribute(&threads, cudaDevAttrMaxThreadsPerMultiProcessor, device));
  return int64_t(sms) * threads;
}

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

// A batch's counters as read back.
void check_seeds(const int64_t* host, const Counters& c, int64_t num_rows) {
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

// Bounds of a run's layers [l0, l1), and after it: the known nodes, the last layer's new ones.
struct RunPlan {
  std::vector<LayerPlan> layers;
  int64_t known, fresh, most_seeds = 0, most_edges = 0;
};

// The run's first layer has first_seeds seeds and, when counted before the run (long rows),
// exact_edges edges (else -1); known_exact nodes are known at its start, and the layer before
// added at most new_bound.
RunPlan plan_run(const std::vector<int64_t>& fanouts,
                 const std::vector<sampling::LayerBound>& dtypes, int l0, int l1,
                 int64_t first_seeds, int64_t exact_edges, int64_t known_exact, int64_t new_bound,
                 bool expand_all, int64_t num_rows) {
  RunPlan run{{}, known_exact, new_bound};
  for (int l = l0; l < l1; ++l) {
    const int64_t seeds_bound = l == l0 ? first_seeds : expand_all ? run.known : run.fresh;
    const int64_t edges_bound = l == l0 && exact_edges >= 0
                                    ? exact_edges
                                    : sampling::capped_mul(seeds_bound, fanouts[l]);
    run.layers.push_back({seeds_bound, edges_bound, dtypes[l].local64});
    run.fresh = std::min(edges_bound, num_rows);
    run.known = std::min(run.known + run.fresh, known_exact + num_rows);
    run.most_seeds = std::max(run.most_seeds, seeds_bound);
    run.most_edges = std::max(run.most_edges, edges_bound);
  }
  return run;
}

// Layer l's inputs with a batch's counters; the nodes it reads, and the host-known counts of
// a run's first layer, are the caller's.
SampleLayer layer_input(const SampleLayer& graph, int64_t* counters, const Counters& c, int l,
                        int64_t fanout, int64_t seed, const LayerPlan& plan, bool expand_all) {
  SampleLayer in = graph;
  in.fanout = fanout;
  in.seed = uint64_t(seed);
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
}

// The graph's part of every layer's inputs.
SampleLayer graph_input(const at::Tensor& rowptr, const at::Tensor& col,
                        const c10::optional<at::Tensor>& weight,
                        const c10::optional<at::Tensor>& edge_map, bool replace) {
  SampleLayer graph{};
  graph.rowptr = readable(rowptr, "rowptr");
  graph.col = readable(col, "col");
  graph.weight = weight.has_value() ? static_cast<const float*>(readable(*weight, "weight"))
                                    : nullptr;
  graph.edge_map = edge_map.has_value()
                       ? static_cast<const int64_t*>(readable(*edge_map, "edge_map"))
                       : nullptr;
  graph.index64 = col.scalar_type() == at::kLong;
  graph.num_rows = rowptr.numel() - 1;
  graph.replace = replace;
  return graph;
}

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

sampling::Sampled sample_neighbors_cuda(
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
  const SampleLayer graph = graph_input(rowptr, col, weight, edge_map, replace);
  const int64_t lanes_bar = resident_threads();

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
  auto input = [&](int l, const LayerPlan& plan) {
    return layer_input(graph, counters, c, l, fanout_list[l], layer_seeds[l], plan, expand_all);
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
      LayerTask count{};
      count.in = input(l0, {first_seeds, 0, dtypes[l0].local64});
      count.in.nodes = run_nodes;
      if (l0 == 0) count.in.known_host = num_seeds;
      count.count_scan = pre.scan;
      count.scratch.ptr = pre.ptr;
      count_edges(count, Batches{}, s);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      const auto host = read_back(counters, c.size(), pre.ptr + first_seeds, s);
      check_seeds(host.data(), c, num_rows);
      known_exact = host[c.known(l0)];
      begin_exact = expand_all || l0 == 0 ? 0 : host[c.known(l0 - 1)];
      exact_edges = host[c.size()];
    }

    // Bounds of the run's layers, from its exact start.
    const RunPlan run = plan_run(fanout_list, dtypes, l0, l1, first_seeds, exact_edges,
                                 known_exact, new_bound, expand_all, num_rows);
    const std::vector<LayerPlan>& plans = run.layers;
    const int64_t known = run.known, most_seeds = run.most_seeds, most_edges = run.most_edges;
    known_bound = known;
    new_bound = run.fresh;
    const int64_t next_seeds = expand_all ? known : run.fresh;  // layer l1's, when it starts a run

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
      LayerTask task{};
      SampleLayer& in = task.in;
      in = input(l, plan);
      in.rows_by_lane = rows_by_lane(fanout_list[l], plan.seeds, lanes_bar);
      in.nodes = l == l0 ? run_nodes : nodes_out;
      in.nodes_out = nodes_out;
      if (l == l0) {
        in.known_host = known_exact;
        in.begin_host = begin_exact;
        task.start = start;
      }
      LayerOutputs& o = outputs[l];
      const auto local_type = opts.dtype(plan.local64 ? at::kLong : at::kInt);
      o.rowptr = at::empty({plan.seeds + 1}, local_type);
      o.col = at::empty({plan.edges}, local_type);
      o.edge_ids = at::empty({plan.edges}, opts);
      task.out = LayerOutput{o.rowptr.data_ptr(), o.col.data_ptr(),
                             o.edge_ids.data_ptr<int64_t>()};
      const bool counted = compact && l == l0;
      task.table = table;
      task.count_scan = words(count_scan_at[l - l0]);
      task.scratch = LayerScratch{
          counted ? pre.ptr : reinterpret_cast<int64_t*>(base + ptr_at),
          reinterpret_cast<int64_t*>(base + pos_at),
          reinterpret_cast<int64_t*>(base + value_of_at),
          reinterpret_cast<int64_t*>(base + rank_at),
          words(first_scan_at[l - l0]),
          base + local_at,
          base + temp_at,
          temp_bytes};
      if (counted) {
        start_run(task, s);
      } else {
        count_edges(task, Batches{}, s);
      }
      sample_edges(task, deterministic, Batches{}, s);
      write_rows(task, deterministic, plan.local64, counted ? exact_edges : -1, Batches{}, s);
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
  check_seeds(host.data(), c, num_rows);
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

// Where a batch's parts of the many-batch workspace are (byte offsets), and its table's size.
struct BatchParts {
  uint64_t capacity;
  size_t keys, values, ptr, pos, value_of, rank;
  std::vector<size_t> count_scan, first_scan;  // per layer
};

// sample_neighbors_many when every layer sorts by warp: each batch's layers are one run with
// the bounds that sample_neighbors gives the batch alone, and each pass launches once for every
// batch (grid rows), reading the batch's task from the workspace.
sampling::SampledMany sample_batches(const SampleLayer& graph, const at::Tensor& seeds,
                                     const std::vector<int64_t>& starts,
                                     at::IntArrayRef batch_sizes,
                                     const std::vector<int64_t>& fanouts,
                                     at::IntArrayRef layer_seeds, bool expand_all,
                                     bool deterministic, int64_t graph_edges) {
  const cudaStream_t s = stream();
  const int count = int(batch_sizes.size()), num_layers = int(fanouts.size());
  TORCH_CHECK_VALUE(count <= 65535, "sample_neighbors_many: at most 65535 batches a call on the "
                    "GPU (one grid row each), got ", count);
  const Counters c{num_layers};
  const sampling::Layout layout{num_layers};
  const auto opts = seeds.options();
  // The largest batch's bounds are every batch's upper bounds: its tasks size the grids, and
  // its local id types are the outputs'.
  const int top =
      int(std::max_element(batch_sizes.begin(), batch_sizes.end()) - batch_sizes.begin());
  const auto dtypes = sampling::layer_bounds(batch_sizes[top], fanouts, expand_all, graph_edges);
  std::vector<RunPlan> runs;
  for (int b = 0; b < count; ++b) {
    runs.push_back(plan_run(fanouts, dtypes, 0, num_layers, batch_sizes[b], -1, batch_sizes[b],
                            batch_sizes[b], expand_all, graph.num_rows));
  }

  // The workspace: [every batch's counters | per batch: table keys, table values, its layers'
  // scan states] cleared by one memset, then per batch the arrays its layers share (they run in
  // stream order), then the tasks.
  Carver carve;
  const size_t counters_at = carve.add(size_t(count) * c.size() * kWord);
  std::vector<BatchParts> parts(count);
  for (int b = 0; b < count; ++b) {
    BatchParts& p = parts[b];
    p.capacity = table_capacity(runs[b].known);
    p.keys = carve.add(p.capacity * kWord);
    p.values = carve.add(p.capacity * kWord);
    for (const LayerPlan& plan : runs[b].layers) {
      p.count_scan.push_back(carve.add(scan_words(plan.seeds) * kWord));
      p.first_scan.push_back(carve.add(deterministic ? scan_words(plan.edges) * kWord : 0));
    }
  }
  const size_t cleared = carve.total;
  for (int b = 0; b < count; ++b) {
    BatchParts& p = parts[b];
    const size_t edges_bytes = size_t(runs[b].most_edges) * kWord;
    p.ptr = carve.add((runs[b].most_seeds + 1) * kWord);
    p.pos = carve.add(edges_bytes);
    p.value_of = carve.add(deterministic ? edges_bytes : 0);
    p.rank = carve.add(deterministic ? edges_bytes : 0);
  }
  const size_t task_bytes = size_t(count) * num_layers * sizeof(LayerTask);
  const size_t tasks_at = carve.add(task_bytes);
  TensorList keep;
  char* base = workspace(carve.total, opts, keep);
  int64_t* counters = reinterpret_cast<int64_t*>(base + counters_at);
  auto words = [&](size_t at) {
    return ScanState{reinterpret_cast<unsigned long long*>(base + at)};
  };

  // The outputs, batch after batch at the sums of the bounds before.
  at::Tensor table = at::empty({count, layout.width()}, at::TensorOptions().dtype(at::kLong));
  int64_t* rows = table.data_ptr<int64_t>();
  TensorList rowptrs, cols, edge_ids;
  for (int l = 0; l < num_layers; ++l) {
    int64_t row_total = 0, edge_total = 0;
    for (int b = 0; b < count; ++b) {
      int64_t* row = rows + b * layout.width();
      row[layout.row_offset(l)] = row_total;
      row[layout.edge_offset(l)] = edge_total;
      row_total += runs[b].layers[l].seeds + 1;
      edge_total += runs[b].layers[l].edges;
    }
    const auto local_type = opts.dtype(dtypes[l].local64 ? at::kLong : at::kInt);
    rowptrs.push_back(at::empty({row_total}, local_type));
    cols.push_back(at::empty({edge_total}, local_type));
    edge_ids.push_back(at::empty({edge_total}, opts));
  }
  int64_t node_total = 0;
  for (int b = 0; b < count; ++b) {
    rows[b * layout.width() + layout.node_offset()] = node_total;
    node_total += runs[b].known;
  }
  at::Tensor nodes = at::empty({node_total}, opts);

  // A launch's rows: the largest batch's bound on every batch's grid row.
  std::vector<char> by_lane(num_layers);
  const int64_t lanes_bar = resident_threads();
  for (int l = 0; l < num_layers; ++l) {
    by_lane[l] = rows_by_lane(fanouts[l], runs[top].layers[l].seeds * count, lanes_bar);
  }

  // The tasks, layer after layer (a layer's batches side by side), written to pinned memory.
  const at::Tensor host_tasks = at::empty(
      {int64_t(task_bytes)}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
  LayerTask* tasks = reinterpret_cast<LayerTask*>(host_tasks.data_ptr());
  const int64_t* seed_ids = seeds.data_ptr<int64_t>();
  for (int b = 0; b < count; ++b) {
    const BatchParts& p = parts[b];
    const int64_t* row = rows + b * layout.width();
    int64_t* nodes_out = nodes.data_ptr<int64_t>() + row[layout.node_offset()];
    const SampleTable batch_table{reinterpret_cast<int64_t*>(base + p.keys),
                                  reinterpret_cast<unsigned long long*>(base + p.values),
                                  p.capacity};
    for (int l = 0; l < num_layers; ++l) {
      LayerTask& task = tasks[l * count + b];
      task = LayerTask{};
      task.in = layer_input(graph, counters + b * c.size(), c, l, fanouts[l],
                            layer_seeds[b * num_layers + l], runs[b].layers[l], expand_all);
      task.in.rows_by_lane = by_lane[l];
      task.in.nodes = l == 0 ? seed_ids + starts[b] : nodes_out;
      task.in.nodes_out = nodes_out;
      if (l == 0) {
        task.in.known_host = batch_sizes[b];
        task.start = RunStart{seed_ids + starts[b], batch_sizes[b]};
      }
      task.table = batch_table;
      task.count_scan = words(p.count_scan[l]);
      task.scratch = LayerScratch{reinterpret_cast<int64_t*>(base + p.ptr),
                                  reinterpret_cast<int64_t*>(base + p.pos),
                                  reinterpret_cast<int64_t*>(base + p.value_of),
                                  reinterpret_cast<int64_t*>(base + p.rank),
                                  words(p.first_scan[l]),
                                  nullptr,
                                  nullptr,
                                  0};
      const size_t local_bytes = dtypes[l].local64 ? 8 : 4;
      task.out = LayerOutput{
          static_cast<char*>(rowptrs[l].data_ptr()) + row[layout.row_offset(l)] * local_bytes,
          static_cast<char*>(cols[l].data_ptr()) + row[layout.edge_offset(l)] * local_bytes,
          edge_ids[l].data_ptr<int64_t>() + row[layout.edge_offset(l)]};
    }
  }
  C10_CUDA_CHECK(cudaMemsetAsync(base, 0xff, cleared, s));
  // host_tasks stays alive until the read-back's sync, past the copy.
  C10_CUDA_CHECK(
      cudaMemcpyAsync(base + tasks_at, tasks, task_bytes, cudaMemcpyHostToDevice, s));
  const LayerTask* device_tasks = reinterpret_cast<const LayerTask*>(base + tasks_at);
  for (int l = 0; l < num_layers; ++l) {
    const LayerTask& largest = tasks[l * count + top];
    const Batches batches{device_tasks + l * count, count};
    count_edges(largest, batches, s);
    sample_edges(largest, deterministic, batches, s);
    write_rows(largest, deterministic, dtypes[l].local64, -1, batches, s);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();

  const auto host = read_back(counters, count * c.size(), nullptr, s);
  for (int b = 0; b < count; ++b) {
    const int64_t* counts = host.data() + b * c.size();
    check_seeds(counts, c, graph.num_rows);
    int64_t* row = rows + b * layout.width();
    for (int l = 0; l < num_layers; ++l) {
      const int64_t begin = expand_all || l == 0 ? 0 : counts[c.known(l - 1)];
      row[layout.rows(l)] = counts[c.known(l)] - begin;
      row[layout.edges(l)] = counts[c.edges(l)];
      TORCH_INTERNAL_ASSERT(row[layout.rows(l)] <= runs[b].layers[l].seeds &&
                                row[layout.edges(l)] <= runs[b].layers[l].edges,
                            "sample_neighbors_many: a count past its bound");
    }
    row[layout.nodes()] = counts[c.known(num_layers)];
    TORCH_INTERNAL_ASSERT(row[layout.nodes()] <= runs[b].known,
                          "sample_neighbors_many: a count past its bound");
  }
  return {rowptrs, cols, edge_ids, nodes, table};
}

sampling::SampledMany sample_neighbors_many_cuda(
    const at::Tensor& rowptr, const at::Tensor& col, const c10::optional<at::Tensor>& weight,
    const c10::optional<at::Tensor>& edge_map, const at::Tensor& seeds,
    at::IntArrayRef batch_sizes, at::IntArrayRef fanouts, at::IntArrayRef layer_seeds,
    bool expand_all, bool replace, bool deterministic) {
  TORCH_CHECK(seeds.is_cuda(), "sample_neighbors_many: seeds must be on the GPU");
  if (!std::all_of(fanouts.begin(), fanouts.end(), warp_sortable)) {
    // A layer of long rows reads its edge count back mid-call: one batch at a time.
    return sampling::sample_each(&sample_neighbors_cuda, rowptr, col, weight, edge_map, seeds,
                                 batch_sizes, fanouts, layer_seeds, expand_all, replace,
                                 deterministic, 1);
  }
  const auto starts = sampling::check_many_args(rowptr, col, weight, edge_map, seeds,
                                                batch_sizes, fanouts, layer_seeds);
  const c10::cuda::CUDAGuard guard(seeds.device());
  return sample_batches(graph_input(rowptr, col, weight, edge_map, replace), seeds, starts,
                        batch_sizes, fanouts.vec(), layer_seeds, expand_all, deterministic,
                        col.numel());
}

}  // namespace

TORCH_LIBRARY_IMPL(fastgnn, CUDA, m) {
  m.impl("sample_neighbors", &sample_neighbors_cuda);
  m.impl("sample_neighbors_many", &sample_neighbors_many_cuda);
}

}  // namespace cuda
}  // namespace fastgnn
