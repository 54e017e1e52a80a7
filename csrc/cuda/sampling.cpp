// Torch-facing glue of CUDA neighbour sampling: device pointers (mapped ones for a graph in
// pinned host memory), allocation, the scans, and the two syncs a layer needs (its edge count
// and its new-node count size the outputs).
#include <torch/library.h>

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
  const int64_t num_known = nodes.numel();

  auto ptr = at::zeros({in.num_seeds + 1}, opts);
  sample_counts(in, ptr.data_ptr<int64_t>() + 1, s);
  ptr = at::cumsum(ptr, 0);
  const int64_t num_edges = ptr[in.num_seeds].item<int64_t>();
  auto pos = at::empty({num_edges}, opts);
  sample_fill(in, ptr.data_ptr<int64_t>(), pos.data_ptr<int64_t>(), s);

  const bool local64 = num_known + num_edges >= std::numeric_limits<int32_t>::max();
  const auto local_type = local64 ? at::kLong : at::kInt;
  uint64_t capacity = 1;
  while (capacity < uint64_t(2 * (num_known + num_edges) + 1)) capacity <<= 1;
  auto keys = at::full({int64_t(capacity)}, -1, opts);
  auto values = at::full({int64_t(capacity)}, std::numeric_limits<int64_t>::max(), opts);
  RelabelTable table{keys.data_ptr<int64_t>(), values.data_ptr<int64_t>(), capacity - 1};
  auto duplicate = at::zeros({1}, opts.dtype(at::kInt));
  relabel_insert_known(nodes.data_ptr<int64_t>(), num_known, table, duplicate.data_ptr<int>(), s);

  auto local = at::empty({num_edges}, opts.dtype(local_type));
  at::Tensor nodes_out;
  if (deterministic) {
    relabel_insert_edges(in, pos.data_ptr<int64_t>(), num_edges, table, s);
    auto value_of = at::empty({num_edges}, opts);
    auto rank = at::empty({num_edges}, opts);
    relabel_first_edges(in, pos.data_ptr<int64_t>(), num_edges, table, value_of.data_ptr<int64_t>(),
                        rank.data_ptr<int64_t>(), s);
    rank = at::cumsum(rank, 0);
    const int64_t num_new = num_edges ? rank[num_edges - 1].item<int64_t>() : 0;
    nodes_out = at::empty({num_known + num_new}, opts);
    nodes_out.narrow(0, 0, num_known).copy_(nodes);
    relabel_assign(in, pos.data_ptr<int64_t>(), num_edges, num_known,
                   value_of.data_ptr<int64_t>(), rank.data_ptr<int64_t>(), local.data_ptr(),
                   local64, nodes_out.data_ptr<int64_t>(), s);
  } else {
    auto counter = at::zeros({1}, opts);
    auto room = at::empty({num_known + num_edges}, opts);
    room.narrow(0, 0, num_known).copy_(nodes);
    relabel_insert_edges_unordered(
        in, pos.data_ptr<int64_t>(), num_edges, num_known, table,
        reinterpret_cast<unsigned long long*>(counter.data_ptr<int64_t>()),
        room.data_ptr<int64_t>(), s);
    relabel_lookup(in, pos.data_ptr<int64_t>(), num_edges, table, local.data_ptr(), local64, s);
    nodes_out = room.narrow(0, 0, num_known + counter.item<int64_t>());
  }
  TORCH_CHECK(duplicate.item<int>() == 0, "sample_layer: the seed nodes must be unique");

  if (num_edges == 0) return {ptr.to(local_type), local, pos, nodes_out};
  auto sorted_local = at::empty_like(local);
  auto sorted_pos = at::empty_like(pos);
  size_t temp_bytes = 0;
  sort_rows(local.data_ptr(), sorted_local.data_ptr(), local64, pos.data_ptr<int64_t>(),
            sorted_pos.data_ptr<int64_t>(), num_edges, ptr.data_ptr<int64_t>(), in.num_seeds,
            nullptr, &temp_bytes, s);
  auto temp = at::empty({int64_t(temp_bytes)}, opts.dtype(at::kByte));
  sort_rows(local.data_ptr(), sorted_local.data_ptr(), local64, pos.data_ptr<int64_t>(),
            sorted_pos.data_ptr<int64_t>(), num_edges, ptr.data_ptr<int64_t>(), in.num_seeds,
            temp.data_ptr(), &temp_bytes, s);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {ptr.to(local_type), sorted_local, sorted_pos, nodes_out};
}

}  // namespace

TORCH_LIBRARY_IMPL(fastgnn, CUDA, m) { m.impl("sample_layer", &sample_layer_cuda); }

}  // namespace cuda
}  // namespace fastgnn
