// sample_neighbors_many_layout: the host half of a sample_neighbors_many_async call, run once
// its counters' copy has landed (the caller waits for the call's stream first). A call that
// returned no counters (the CPU, or a GPU call with a layer of long rows) is complete already.
#include <torch/library.h>

#include "sampling_counters.h"

namespace fastgnn {
namespace {

at::Tensor sample_neighbors_many_layout(const at::Tensor& layout, const at::Tensor& counts,
                                        int64_t num_rows, bool expand_all) {
  TORCH_CHECK_VALUE(layout.device().is_cpu() && counts.device().is_cpu() &&
                        layout.scalar_type() == at::kLong && counts.scalar_type() == at::kLong &&
                        layout.dim() == 2 && counts.dim() == 2 &&
                        (layout.size(1) - 2) % 4 == 0 && layout.size(1) >= 6,
                    "sample_neighbors_many_layout: layout and counts must be the int64 CPU "
                    "tensors a sample_neighbors_many_async call returned");
  if (counts.size(1) == 0) return layout.clone();
  const int num_layers = int((layout.size(1) - 2) / 4);
  TORCH_CHECK_VALUE(counts.size(0) == layout.size(0) &&
                        counts.size(1) == sampling::Counters{num_layers}.size(),
                    "sample_neighbors_many_layout: counts of ", counts.sizes(),
                    " do not belong to a layout of ", layout.sizes());
  at::Tensor out = layout.contiguous().clone();
  sampling::fill_layout(out.data_ptr<int64_t>(), counts.contiguous().data_ptr<int64_t>(),
                        layout.size(0), num_layers, expand_all, num_rows);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(fastgnn, CPU, m) {
  m.impl("sample_neighbors_many_layout", &sample_neighbors_many_layout);
}

}  // namespace fastgnn
