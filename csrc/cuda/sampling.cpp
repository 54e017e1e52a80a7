// Torch-facing glue of CUDA neighbour sampling: device pointers (mapped ones for a graph in
// pinned host memory) and allocation. Outputs are sized from the fanout's bound on the edge
// count and narrowed after the layer's one sync, which reads its counters (fanout -1 needs a
// second, for the edge count, before it can allocate).
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <limits>
#include <tuple>

#include "cuda/glue.h"
#include "cuda/sampling_kernels.h"

namespace fastgnn {
namespace cuda {
namespace {

// A pointer the GPU can read: the tensor's own on the GPU, the mapped address of pinned host
// memory (zero-copy reads through unified addressing).
const void* readable(const at::Tensor& t, const char* name) {
  if (t.is_cuda()) return t.data_ptr();
  TORCH_CHECK(t.is_pinned(), "sample_layer: ", name,
              " must be on the GPU or in pinned host memory for GPU sampling");
  void* mapped = nullptr;
  C10_CUDA_CHECK(cudaHostGetDevicePointer(&mapped, t.data_ptr(), 0));
  return mapped;
}

// The layer's counters (kCounters values after its row pointers), copied back in one sync.
std::array<int64_t, kCounters> read_counters(const at::Tensor& ptr, int64_t num_seeds,
                                             cudaStream_t s) {
  auto host = at::empty({kCounters}, ptr.options().device(at::kCPU).pinned_memory(true));
  C10_CUDA_CHECK(cudaMemcpyAsync(host.data_ptr(), ptr.data_ptr<int64_t>() + num_seeds,
                                 kCounters * sizeof(int64_t), cudaMemcpyDeviceToHost, s));
  C10_CUDA_CHECK(cudaStreamSynchronize(s));
  std::array<int64_t, kCounters> counters;
  std::copy_n(host.data_ptr<int64_t>(), kCounters, counters.begin());
  return counters;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> sample_layer_cuda(
    const at::Tensor& rowptr, const at::Tensor& col, const c10::optional<at::Tensor>& weight,
    const at::Tensor& nodes, int64_t seeds_begin, int64_t fanout, bool replace, int64_t seed,
    bool deterministic) {
  TORCH_CHECK(nodes.is_cuda() && nodes.dim() == 1 && nodes.scalar_type() == at::kLong &&
                  nodes.is_contiguous(),
              "sample_layer: nodes must be a contiguous 1-D int64 GPU tensor");
  TORCH_CHECK(rowptr.dim() == 1 && col.dim() == 1 && rowptr.numel() >= 1 &&
                  rowptr.scalar_type() == col.scalar_type() &&
                  (col.scalar_type() == at::kInt || col.scalar_type() == at::kLong) &&
                  rowptr.is_contiguous() && col.is_contiguous(),
              "sample_layer: rowptr and col must be contiguous 1-D, both int32 or both int64");
  TORCH_CHECK(seeds_begin >= 0 && seeds_begin <= nodes.numel(),
              "sample_layer: seeds_begin out of range");
  const c10::cuda::CUDAGuard guard(nodes.device());
  const cudaStream_t s = stream();
  SampleInput in{readable(rowptr, "rowptr"), readable(col, "col"), nullptr,
                 col.scalar_type() == at::kLong, rowptr.numel() - 1, nodes.data_ptr<int64_t>(),
                 seeds_begin, nodes.numel() - seeds_begin, fanout, replace, uint64_t(seed)};
  if (weight.has_value()) {
    TORCH_CHECK(weight->scalar_type() == at::kFloat && weight->is_contiguous() &&
                    weight->numel() == col.numel(),
                "sample_layer: weight must be a contiguous float32 tensor with one entry per edge");
    in.weight = static_cast<const float*>(readable(*weight, "weight"));
  }
  const auto opts = nodes.options();
  const int64_t num_known = nodes.numel(), num_seeds = in.num_seeds;
  // The local id type the CPU kernel picks, from the same bound.
  const int64_t most = num_known + (fanout < 0 ? col.numel() : num_seeds * fanout);
  const bool local64 = most >= std::numeric_limits<int32_t>::max();
  const auto local_type = local64 ? at::kLong : at::kInt;
  auto scratch_for = [&](int64_t max_edges, at::Tensor* storage) {
    const LayerPlan plan = plan_layer(num_known, num_seeds, max_edges, local64);
    *storage = at::empty({int64_t(plan.total_bytes)}, opts.dtype(at::kByte));
    return layer_scratch(storage->data_ptr(), plan);
  };

  // Row pointers, then the layer's counters (ptr[num_seeds] is the edge count).
  auto ptr = at::empty({num_seeds + 1 + kCounters}, opts);
  at::Tensor storage;
  LayerScratch scratch;
  int64_t max_edges = num_seeds * fanout;
  const bool by_warp = warp_sortable(fanout);
  if (by_warp) {
    scratch = scratch_for(max_edges, &storage);
    sample_row_pointers(in, ptr.data_ptr<int64_t>(), scratch, s);
  } else {  // fanout -1 (or a huge one): size everything from the true edge count
    sample_row_pointers(in, ptr.data_ptr<int64_t>(), scratch_for(0, &storage), s);
    max_edges = read_counters(ptr, num_seeds, s)[kNumEdges];
    scratch = scratch_for(max_edges, &storage);
    clear_table(scratch, s);
  }
  sample_positions(in, ptr.data_ptr<int64_t>(), scratch, s);
  auto nodes_out = at::empty({num_known + max_edges}, opts);
  C10_CUDA_CHECK(cudaMemcpyAsync(nodes_out.data_ptr(), nodes.data_ptr(),
                                 num_known * sizeof(int64_t), cudaMemcpyDeviceToDevice, s));
  relabel_sources(in, ptr.data_ptr<int64_t>(), max_edges, deterministic, local64,
                  nodes_out.data_ptr<int64_t>(), scratch, s);

  auto rowptr_out = at::empty({num_seeds + 1}, opts.dtype(local_type));
  auto local = at::empty({max_edges}, opts.dtype(local_type));
  auto pos = at::empty({max_edges}, opts);
  if (by_warp) {
    sort_rows_by_warp(ptr.data_ptr<int64_t>(), num_seeds, local64, scratch, rowptr_out.data_ptr(),
                      local.data_ptr(), pos.data_ptr<int64_t>(), s);
  } else {
    rowptr_out.copy_(ptr.narrow(0, 0, num_seeds + 1));
    if (max_edges > 0) {
      size_t temp_bytes = 0;
      sort_rows_segmented(ptr.data_ptr<int64_t>(), num_seeds, max_edges, local64, scratch,
                          local.data_ptr(), pos.data_ptr<int64_t>(), nullptr, &temp_bytes, s);
      auto temp = at::empty({int64_t(temp_bytes)}, opts.dtype(at::kByte));
      sort_rows_segmented(ptr.data_ptr<int64_t>(), num_seeds, max_edges, local64, scratch,
                          local.data_ptr(), pos.data_ptr<int64_t>(), temp.data_ptr(), &temp_bytes,
                          s);
    }
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  const auto counters = read_counters(ptr, num_seeds, s);
  TORCH_CHECK_VALUE(counters[kNodeOutOfRange] == 0, "sample_layer: seeds must be node ids in [0, ",
                    in.num_rows, ")");
  TORCH_CHECK_VALUE(counters[kDuplicateSeed] == 0, "sample_layer: seeds must be unique node ids");
  const int64_t num_edges = counters[kNumEdges];
  return {rowptr_out, local.narrow(0, 0, num_edges), pos.narrow(0, 0, num_edges),
          nodes_out.narrow(0, 0, num_known + counters[kNumNew])};
}

}  // namespace

TORCH_LIBRARY_IMPL(fastgnn, CUDA, m) { m.impl("sample_layer", &sample_layer_cuda); }

}  // namespace cuda
}  // namespace fastgnn
