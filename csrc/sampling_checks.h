// Argument checks of sample_neighbors shared by its CPU and CUDA implementations (ATen-facing;
// the kernels check the seeds' range and uniqueness themselves).
#pragma once

#include <ATen/ATen.h>

#include <vector>

namespace fastgnn {
namespace sampling {

inline void check_sample_args(const at::Tensor& rowptr, const at::Tensor& col,
                              const c10::optional<at::Tensor>& weight,
                              const c10::optional<at::Tensor>& edge_map, const at::Tensor& seeds,
                              const std::vector<int64_t>& fanouts,
                              const std::vector<int64_t>& layer_seeds) {
  TORCH_CHECK(rowptr.dim() == 1 && col.dim() == 1 && rowptr.numel() >= 1 &&
                  rowptr.scalar_type() == col.scalar_type() &&
                  (col.scalar_type() == at::kInt || col.scalar_type() == at::kLong) &&
                  rowptr.is_contiguous() && col.is_contiguous(),
              "sample_neighbors: rowptr and col must be contiguous 1-D, both int32 or both int64");
  TORCH_CHECK(seeds.dim() == 1 && seeds.scalar_type() == at::kLong && seeds.is_contiguous(),
              "sample_neighbors: seeds must be a contiguous 1-D int64 tensor");
  TORCH_CHECK_VALUE(!fanouts.empty() && fanouts.size() == layer_seeds.size(),
                    "sample_neighbors: fanouts and layer_seeds must name the same layers (one "
                    "or more)");
  for (const int64_t f : fanouts) {
    TORCH_CHECK_VALUE(f >= -1, "sample_neighbors: fanouts must be >= -1 (-1: all), got ", f);
  }
  if (weight.has_value()) {
    TORCH_CHECK(weight->scalar_type() == at::kFloat && weight->is_contiguous() &&
                    weight->numel() == col.numel(),
                "sample_neighbors: weight must be a contiguous float32 tensor with one entry "
                "per edge");
  }
  if (edge_map.has_value()) {
    TORCH_CHECK(edge_map->scalar_type() == at::kLong && edge_map->is_contiguous() &&
                    edge_map->numel() == col.numel(),
                "sample_neighbors: edge_map must be a contiguous int64 tensor with one entry "
                "per edge");
  }
}

}  // namespace sampling
}  // namespace fastgnn
