// The WSB SpMM's layout checks, shared by its CPU and CUDA implementations.
#pragma once

#include <ATen/ATen.h>

namespace fastgnn {

// Checks the layout's dtypes and sizes against x and num_out; returns the window count.
inline int64_t check_wsb_layout(const at::Tensor& tile_ptr, const at::Tensor& tile_cols,
                                const at::Tensor& tile_vals, const at::Tensor& x,
                                int64_t num_out) {
  TORCH_CHECK(tile_vals.scalar_type() == x.scalar_type(), "wsb_spmm: tile_vals must have x's dtype");
  TORCH_CHECK(tile_ptr.scalar_type() == at::kInt && tile_cols.scalar_type() == at::kInt,
              "wsb_spmm: tile_ptr and tile_cols must be int32");
  const int64_t windows = tile_ptr.numel() - 1;
  TORCH_CHECK(windows >= 0 && (num_out + 15) / 16 == windows,
              "wsb_spmm: tile_ptr must have one entry per 16-row window plus one");
  TORCH_CHECK(tile_cols.numel() % 16 == 0 && tile_vals.numel() == tile_cols.numel() * 16,
              "wsb_spmm: tile_cols must hold 16 and tile_vals 256 entries per tile");
  return windows;
}

}  // namespace fastgnn
