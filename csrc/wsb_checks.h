// The WSB ops' layout checks, shared by their CPU and CUDA implementations.
#pragma once

#include <ATen/ATen.h>

namespace fastgnn {

// Checks the layout's dtypes and sizes against features (whose dtype the value blocks share)
// and num_out destinations; returns the window count.
inline int64_t check_wsb_layout(const at::Tensor& tile_ptr, const at::Tensor& tile_cols,
                                const at::Tensor& tile_vals, const at::Tensor& features,
                                int64_t num_out, const char* op) {
  TORCH_CHECK(tile_vals.scalar_type() == features.scalar_type(), op,
              ": tile_vals must have the features' dtype");
  TORCH_CHECK(tile_ptr.scalar_type() == at::kInt && tile_cols.scalar_type() == at::kInt, op,
              ": tile_ptr and tile_cols must be int32");
  const int64_t windows = tile_ptr.numel() - 1;
  TORCH_CHECK(windows >= 0 && (num_out + 15) / 16 == windows, op,
              ": tile_ptr must have one entry per 16-row window plus one");
  TORCH_CHECK(tile_cols.numel() % 16 == 0 && tile_vals.numel() == tile_cols.numel() * 16, op,
              ": tile_cols must hold 16 and tile_vals 256 entries per tile");
  return windows;
}

// Checks q [T, H, D], k and v [S, H, D] (one dtype) against the layout of T destinations and
// its count blocks; returns the window count.
inline int64_t check_wsb_attention(const at::Tensor& tile_ptr, const at::Tensor& tile_cols,
                                   const at::Tensor& tile_counts, const at::Tensor& q,
                                   const at::Tensor& k, const at::Tensor& v, const char* op) {
  TORCH_CHECK(q.dim() == 3 && k.dim() == 3 && v.sizes() == k.sizes() &&
                  q.size(1) == k.size(1) && q.size(2) == k.size(2),
              op, ": q must be [T, H, D] and k, v [S, H, D]");
  TORCH_CHECK(q.scalar_type() == k.scalar_type() && v.scalar_type() == k.scalar_type(), op,
              ": q, k and v must share a dtype");
  TORCH_CHECK(tile_counts.scalar_type() == q.scalar_type(), op,
              ": tile_counts must have the features' dtype");
  return check_wsb_layout(tile_ptr, tile_cols, tile_counts, k, q.size(0), op);
}

}  // namespace fastgnn
