// The WSB SpMM on the CPU: the same blocks multiplied with scalar loops, so that the format
// and the op's semantics are tested where there is no GPU (the Tensor Core kernel is the CUDA
// one). Windows are independent: OpenMP over windows.
#include <ATen/OpMathType.h>
#include <torch/library.h>

#include "cpu/cpu_common.h"
#include "wsb_checks.h"

namespace fastgnn {
namespace cpu {
namespace {

template <typename scalar_t, typename acc_t>
void multiply(const int* tile_ptr, const int* tile_cols, const scalar_t* tile_vals,
              const scalar_t* x, acc_t* out, int64_t windows, int64_t num_out, int64_t width) {
#pragma omp parallel for num_threads(num_threads()) schedule(dynamic, 16)
  for (int64_t w = 0; w < windows; ++w) {
    for (int t = tile_ptr[w]; t < tile_ptr[w + 1]; ++t) {
      for (int r = 0; r < 16 && w * 16 + r < num_out; ++r) {
        acc_t* row = out + (w * 16 + r) * width;
        for (int s = 0; s < 16; ++s) {
          const int src = tile_cols[16 * t + s];
          const acc_t a = static_cast<acc_t>(tile_vals[int64_t(t) * 256 + r * 16 + s]);
          if (src < 0 || a == acc_t(0)) continue;
          const scalar_t* xr = x + int64_t(src) * width;
          for (int64_t f = 0; f < width; ++f) row[f] += a * static_cast<acc_t>(xr[f]);
        }
      }
    }
  }
}

at::Tensor wsb_spmm_cpu(const at::Tensor& tile_ptr, const at::Tensor& tile_cols,
                        const at::Tensor& tile_vals, const at::Tensor& x, int64_t num_out,
                        const at::Tensor&, const at::Tensor&,  // the CUDA kernel's plan
                         const at::Tensor&, const at::Tensor&, const c10::optional<at::Tensor>&,
                         const c10::optional<at::Tensor>&, const c10::optional<at::Tensor>&,
                         const c10::optional<at::Tensor>&, const c10::optional<at::Tensor>&,
                         int64_t, int64_t) {
  TORCH_CHECK(x.dim() == 2 && x.device().is_cpu(), "wsb_spmm: x must be a 2-D CPU tensor");
  const int64_t windows =
      check_wsb_layout(tile_ptr, tile_cols, tile_vals, x, num_out, "wsb_spmm");
  auto xc = x.contiguous();
  auto ptr = tile_ptr.contiguous(), cols = tile_cols.contiguous(), vals = tile_vals.contiguous();
  const int64_t width = x.size(1);
  auto out = at::zeros({num_out, width}, x.options().dtype(
      x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat));
  FASTGNN_DISPATCH_FLOAT(x.scalar_type(), "wsb_spmm", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    multiply<scalar_t, acc_t>(ptr.data_ptr<int>(), cols.data_ptr<int>(),
                              vals.data_ptr<scalar_t>(), xc.data_ptr<scalar_t>(),
                              out.data_ptr<acc_t>(), windows, num_out, width);
  });
  return out.to(x.scalar_type());
}

}  // namespace

TORCH_LIBRARY_IMPL(fastgnn, CPU, m) { m.impl("wsb_spmm", &wsb_spmm_cpu); }

}  // namespace cpu
}  // namespace fastgnn
