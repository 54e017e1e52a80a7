// The host side of sample_neighbors_many shared by its CPU and CUDA implementations
// (ATen-facing): its argument checks, the layout that locates each batch in the packed
// outputs, and batches sampled one at a time by sample_neighbors, then packed.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <exception>
#include <tuple>
#include <vector>

#include "sampling_checks.h"

namespace fastgnn {
namespace sampling {

using TensorList = std::vector<at::Tensor>;
// sample_neighbors' outputs: per layer rowptrs, cols, edge_ids; the node list.
using Sampled = std::tuple<TensorList, TensorList, TensorList, at::Tensor>;
// sample_neighbors_many's: the same packed over the batches, then the layout.
using SampledMany = std::tuple<TensorList, TensorList, TensorList, at::Tensor, at::Tensor>;

// Columns of the layout, an int64 CPU tensor with a row per batch: per layer l its row
// pointers' offset in rowptrs[l] and its row count (the row pointers take rows + 1 entries),
// its edges' offset in cols[l] and edge_ids[l] and their count; then the batch's node list's
// offset in nodes and its length.
struct Layout {
  int layers;
  int row_offset(int l) const { return 4 * l; }
  int rows(int l) const { return 4 * l + 1; }
  int edge_offset(int l) const { return 4 * l + 2; }
  int edges(int l) const { return 4 * l + 3; }
  int node_offset() const { return 4 * layers; }
  int nodes() const { return 4 * layers + 1; }
  int width() const { return 4 * layers + 2; }
};

// Checks the arguments of sample_neighbors_many (batch b's seeds are the next batch_sizes[b]
// of the packed seeds, its layer l draws from layer_seeds[b * layers + l]); returns where each
// batch's seeds start.
inline std::vector<int64_t> check_many_args(const at::Tensor& rowptr, const at::Tensor& col,
                                            const c10::optional<at::Tensor>& weight,
                                            const c10::optional<at::Tensor>& edge_map,
                                            const at::Tensor& seeds, at::IntArrayRef batch_sizes,
                                            at::IntArrayRef fanouts, at::IntArrayRef layer_seeds) {
  const size_t num_layers = fanouts.size();
  TORCH_CHECK_VALUE(!batch_sizes.empty(), "sample_neighbors_many: batch_sizes names no batch");
  TORCH_CHECK_VALUE(num_layers > 0 && layer_seeds.size() == batch_sizes.size() * num_layers,
                    "sample_neighbors_many: layer_seeds must hold one seed per batch and layer (",
                    batch_sizes.size(), " x ", num_layers, "), got ", layer_seeds.size());
  check_sample_args(rowptr, col, weight, edge_map, seeds, fanouts.vec(),
                    layer_seeds.slice(0, num_layers).vec());
  std::vector<int64_t> starts;
  int64_t total = 0;
  for (const int64_t size : batch_sizes) {
    TORCH_CHECK_VALUE(size >= 0, "sample_neighbors_many: batch_sizes must be >= 0, got ", size);
    starts.push_back(total);
    total += size;
  }
  TORCH_CHECK_VALUE(total == seeds.numel(), "sample_neighbors_many: batch_sizes add up to ",
                    total, " but there are ", seeds.numel(), " seeds");
  return starts;
}

// Batches sampled one at a time, packed back to back (the layout's offsets are the sums of
// the sizes before). A layer's local ids take int64 if any batch's do (the largest batch's
// dtype: the bounds grow with the seed count).
inline SampledMany pack_batches(const std::vector<Sampled>& batches, int num_layers) {
  const Layout layout{num_layers};
  const int64_t count = int64_t(batches.size());
  at::Tensor table = at::empty({count, layout.width()}, at::TensorOptions().dtype(at::kLong));
  int64_t* rows = table.data_ptr<int64_t>();
  TensorList rowptrs, cols, edge_ids, node_lists;
  for (int l = 0; l < num_layers; ++l) {
    bool local64 = false;
    for (const Sampled& batch : batches) {
      local64 |= std::get<1>(batch)[l].scalar_type() == at::kLong;
    }
    const auto local_type = local64 ? at::kLong : at::kInt;
    TensorList layer_rowptrs, layer_cols, layer_edge_ids;
    int64_t row_offset = 0, edge_offset = 0;
    for (int64_t b = 0; b < count; ++b) {
      const at::Tensor& rowptr = std::get<0>(batches[b])[l];
      const at::Tensor& local = std::get<1>(batches[b])[l];
      int64_t* row = rows + b * layout.width();
      row[layout.row_offset(l)] = row_offset;
      row[layout.rows(l)] = rowptr.numel() - 1;
      row[layout.edge_offset(l)] = edge_offset;
      row[layout.edges(l)] = local.numel();
      row_offset += rowptr.numel();
      edge_offset += local.numel();
      layer_rowptrs.push_back(rowptr.to(local_type));
      layer_cols.push_back(local.to(local_type));
      layer_edge_ids.push_back(std::get<2>(batches[b])[l]);
    }
    rowptrs.push_back(at::cat(layer_rowptrs));
    cols.push_back(at::cat(layer_cols));
    edge_ids.push_back(at::cat(layer_edge_ids));
  }
  int64_t node_offset = 0;
  for (int64_t b = 0; b < count; ++b) {
    const at::Tensor& nodes = std::get<3>(batches[b]);
    int64_t* row = rows + b * layout.width();
    row[layout.node_offset()] = node_offset;
    row[layout.nodes()] = nodes.numel();
    node_offset += nodes.numel();
    node_lists.push_back(nodes);
  }
  return {rowptrs, cols, edge_ids, at::cat(node_lists), table};
}

// A device's sample_neighbors.
using SampleOne = Sampled (*)(const at::Tensor&, const at::Tensor&,
                              const c10::optional<at::Tensor>&, const c10::optional<at::Tensor>&,
                              const at::Tensor&, at::IntArrayRef, at::IntArrayRef, bool, bool,
                              bool);

// sample_neighbors_many as `sample` of each batch, packed. With threads > 1 the batches run in
// parallel (OpenMP), a batch per thread; an exception is caught on its thread and rethrown here
// (one must not leave a parallel region).
inline SampledMany sample_each(SampleOne sample, const at::Tensor& rowptr, const at::Tensor& col,
                               const c10::optional<at::Tensor>& weight,
                               const c10::optional<at::Tensor>& edge_map, const at::Tensor& seeds,
                               at::IntArrayRef batch_sizes, at::IntArrayRef fanouts,
                               at::IntArrayRef layer_seeds, bool expand_all, bool replace,
                               bool deterministic, int threads) {
  const auto starts = check_many_args(rowptr, col, weight, edge_map, seeds, batch_sizes, fanouts,
                                      layer_seeds);
  const int64_t count = int64_t(batch_sizes.size()), num_layers = int64_t(fanouts.size());
  std::vector<Sampled> batches(count);
  std::vector<std::exception_ptr> errors(count);
  threads = int(std::min<int64_t>(count, threads));
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1) if (threads > 1)
  for (int64_t b = 0; b < count; ++b) {
    try {
      batches[b] = sample(rowptr, col, weight, edge_map,
                          seeds.narrow(0, starts[b], batch_sizes[b]), fanouts,
                          layer_seeds.slice(b * num_layers, num_layers), expand_all, replace,
                          deterministic);
    } catch (...) {
      errors[b] = std::current_exception();
    }
  }
  for (const std::exception_ptr& error : errors) {
    if (error) std::rethrow_exception(error);
  }
  return pack_batches(batches, int(num_layers));
}

}  // namespace sampling
}  // namespace fastgnn
