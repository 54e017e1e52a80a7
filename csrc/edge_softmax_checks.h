// Argument checks of edge_softmax and its backward, shared by the CPU and CUDA implementations.
#pragma once

#include <ATen/ATen.h>

namespace fastgnn {

// Checks the rows (rowptr, edge_perm) and the [E, W] edge values against each other. Reading
// rowptr's last entry (it must be E) would synchronise with a GPU: the caller checks that
// where it is cheap.
inline void check_edge_rows(const at::Tensor& rowptr, const c10::optional<at::Tensor>& edge_perm,
                            const at::Tensor& values, const char* op) {
  TORCH_CHECK(rowptr.dim() == 1 && rowptr.numel() >= 1 && rowptr.is_contiguous() &&
                  (rowptr.scalar_type() == at::kInt || rowptr.scalar_type() == at::kLong),
              op, ": rowptr must be a contiguous 1-D int32 or int64 tensor");
  TORCH_CHECK(values.dim() == 2, op, ": edge values must be 2-D [E, W], got ", values.dim(),
              " dims");
  TORCH_CHECK(values.device() == rowptr.device(), op, ": rowptr and the edge values must be "
              "on one device");
  if (edge_perm.has_value()) {
    TORCH_CHECK(edge_perm->dim() == 1 && edge_perm->is_contiguous() &&
                    edge_perm->scalar_type() == rowptr.scalar_type() &&
                    edge_perm->numel() == values.size(0) &&
                    edge_perm->device() == rowptr.device(),
                op, ": edge_perm must be a contiguous 1-D tensor of rowptr's dtype with one "
                "entry per edge");
  }
}

// Checks the optional light/heavy row lists (GPU launch split; the CPU reads neither): both
// or neither, each a contiguous 1-D tensor of rowptr's dtype on its device.
inline void check_row_split(const at::Tensor& rowptr, const c10::optional<at::Tensor>& light_rows,
                            const c10::optional<at::Tensor>& heavy_rows, const char* op) {
  TORCH_CHECK(light_rows.has_value() == heavy_rows.has_value(), op,
              ": light_rows and heavy_rows come together (both or neither)");
  for (const auto* rows : {&light_rows, &heavy_rows}) {
    if (!rows->has_value()) continue;
    TORCH_CHECK((*rows)->dim() == 1 && (*rows)->is_contiguous() &&
                    (*rows)->scalar_type() == rowptr.scalar_type() &&
                    (*rows)->device() == rowptr.device(),
                op, ": light_rows and heavy_rows must be contiguous 1-D tensors of rowptr's "
                "dtype and device");
  }
}

}  // namespace fastgnn
