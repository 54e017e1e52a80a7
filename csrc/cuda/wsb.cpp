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
                         const at::Tensor&, const at::Tensor&, const c10::optional<at::Tensor>&,
                         const c10::optional<at::Tensor>&, const c10::optional<at::Tensor>&,
                         const c10::optional<at::Tensor>&, const c10::optional<at::Tensor>&,
                         int64_t, int64_t) {
  const c10::cuda::CUDAGuard guard(x.device());
  TORCH_CHECK(x.dim() == 2 && x.is_cuda(), "wsb_spmm: x must be a 2-D CUDA tensor");
  TORCH_CHECK(x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16,
              "wsb_spmm: the Tensor Core path takes float16 or bfloat16 features, got ",
              x.scalar_type());
  for (const at::Tensor* t : {&tile_ptr, &tile_cols, &tile_vals})
    TORCH_CHECK(t->device() == x.device() && t->is_contiguous(),
                "wsb_spmm: the WSB tensors must be contiguous on x's GPU");
  const int64_t windows = check_wsb_layout(tile_ptr, tile_cols, tile_vals, x, num_out);
  int major = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor,
                                        x.device().index()));
  TORCH_CHECK(major >= 8,
              "wsb_spmm: float16/bfloat16 Tensor Core products need compute capability 8.0+");
  auto xc = x.contiguous();
  auto out = at::empty({num_out, x.size(1)}, x.options());
  const WsbView view{tile_ptr.data_ptr<int>(), tile_cols.data_ptr<int>(), tile_vals.data_ptr(),
                     windows, num_out};
  wsb_spmm(float_type(x), view, xc.data_ptr(), out.data_ptr(), x.size(1),
           stream());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(fastgnn, CUDA, m) { m.impl("wsb_spmm", &wsb_spmm_cuda); }

}  // namespace cuda
}  // namespace fastgnn
