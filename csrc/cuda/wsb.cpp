// Torch-facing glue of the WSB Tensor Core SpMM: checks, stream, allocation.
#include <torch/library.h>

#include "cuda/glue.h"
#include "cuda/wsb_kernels.h"
#include "wsb_checks.h"

namespace fastgnn {
namespace cuda {
namespace {

at::Tensor wsb_spmm_cuda(const at::Tensor& tile_ptr, const at::Tensor& tile_cols,
                         const at::Tensor& tile_vals, const at::Tensor& x, int64_t num_out,
                         const at::Tensor& work, const at::Tensor& splits,
                         const at::Tensor&, const at::Tensor&, const c10::optional<at::Tensor>&,
                         const c10::optional<at::Tensor>&, const c10::optional<at::Tensor>&,
                         const c10::optional<at::Tensor>&, const c10::optional<at::Tensor>&,
                         int64_t, int64_t) {
  const c10::cuda::CUDAGuard guard(x.device());
  TORCH_CHECK(x.dim() == 2 && x.is_cuda(), "wsb_spmm: x must be a 2-D CUDA tensor");
  TORCH_CHECK(x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16,
              "wsb_spmm: the Tensor Core path takes float16 or bfloat16 features, got ",
              x.scalar_type());
  for (const at::Tensor* t : {&tile_ptr, &tile_cols, &tile_vals, &work, &splits})
    TORCH_CHECK(t->device() == x.device() && t->is_contiguous(),
                "wsb_spmm: the WSB tensors must be contiguous on x's GPU");
  const int64_t windows =
      check_wsb_layout(tile_ptr, tile_cols, tile_vals, x, num_out, "wsb_spmm");
  TORCH_CHECK(work.scalar_type() == at::kInt && work.dim() == 2 && work.size(1) == 4 &&
                  work.size(0) % kWsbWarps == 0 && work.size(0) >= windows &&
                  splits.scalar_type() == at::kInt &&
                  splits.dim() == 2 && splits.size(1) == 2,
              "wsb_spmm: work and splits must be the layout's plan (WSB.plan())");
  check_tensor_cores(x.device(), "wsb_spmm");
  auto xc = x.contiguous();
  auto out = at::empty({num_out, x.size(1)}, x.options());
  // The float partials of the pieces of split windows, 16 rows each.
  auto partials = at::empty({splits.size(0) * 16, x.size(1)}, x.options().dtype(at::kFloat));
  const WsbView view{tile_ptr.data_ptr<int>(), tile_cols.data_ptr<int>(), tile_vals.data_ptr(),
                     work.data_ptr<int>(), splits.data_ptr<int>(), windows, num_out,
                     work.size(0), splits.size(0)};
  wsb_spmm(float_type(x), view, xc.data_ptr(), out.data_ptr(), partials.data_ptr<float>(),
           x.size(1), stream());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(fastgnn, CUDA, m) { m.impl("wsb_spmm", &wsb_spmm_cuda); }

}  // namespace cuda
}  // namespace fastgnn
