// Graph Transformer attention over the WSB layout on the CPU: the CUDA Tensor Core kernel's
// semantics with scalar loops (online softmax over each window's tiles, a slot of c duplicate
// edges weighing c exp(logit)), so that the layout and the op are tested where there is no
// GPU. Windows are independent: OpenMP over windows.
#include <torch/library.h>

#include <cmath>
#include <limits>
#include <tuple>

#include "cpu/cpu_common.h"
#include "wsb_checks.h"

namespace fastgnn {
namespace cpu {
namespace {

constexpr const char* kOp = "wsb_graph_attention_forward";

template <typename acc_t>
void attend(const int* tile_ptr, const int* tile_cols, const acc_t* counts, const acc_t* q,
            const acc_t* k, const acc_t* v, acc_t scale, acc_t* out, acc_t* lse,
            int64_t windows, int64_t rows, int64_t heads, int64_t dim) {
#pragma omp parallel for num_threads(num_threads()) schedule(dynamic, 4)
  for (int64_t w = 0; w < windows; ++w) {
    for (int r = 0; r < 16 && w * 16 + r < rows; ++r) {
      const int64_t i = w * 16 + r;
      for (int64_t h = 0; h < heads; ++h) {
        const acc_t* qi = q + (i * heads + h) * dim;
        acc_t* o = out + (i * heads + h) * dim;  // zeroed by the caller
        acc_t peak = -std::numeric_limits<acc_t>::infinity(), total = 0;
        for (int t = tile_ptr[w]; t < tile_ptr[w + 1]; ++t) {
          for (int s = 0; s < 16; ++s) {
            const acc_t count = counts[int64_t(t) * 256 + r * 16 + s];
            if (count == acc_t(0)) continue;
            const int64_t j = tile_cols[16 * int64_t(t) + s];
            const acc_t* kj = k + (j * heads + h) * dim;
            const acc_t* vj = v + (j * heads + h) * dim;
            acc_t logit = 0;
            for (int64_t d = 0; d < dim; ++d) logit += qi[d] * kj[d];
            logit *= scale;
            if (logit > peak) {  // new running max: rescale what was accumulated so far
              const acc_t rescale = std::exp(peak - logit);
              total *= rescale;
              for (int64_t d = 0; d < dim; ++d) o[d] *= rescale;
              peak = logit;
            }
            const acc_t weight = count * std::exp(logit - peak);
            total += weight;
            for (int64_t d = 0; d < dim; ++d) o[d] += weight * vj[d];
          }
        }
        const acc_t inv = total > 0 ? acc_t(1) / total : acc_t(0);
        for (int64_t d = 0; d < dim; ++d) o[d] *= inv;
        lse[i * heads + h] =
            total > 0 ? peak + std::log(total) : -std::numeric_limits<acc_t>::infinity();
      }
    }
  }
}

std::tuple<at::Tensor, at::Tensor> wsb_graph_attention_cpu(
    const at::Tensor& tile_ptr, const at::Tensor& tile_cols, const at::Tensor& tile_counts,
    const at::Tensor& /*work*/, const at::Tensor& /*splits*/,
    const c10::optional<at::Tensor>& /*edge_starts: the backward's*/, const at::Tensor& q,
    const at::Tensor& k, const at::Tensor& v, double scale,
    // the CSR backward's inputs, kept by autograd and not read here
    const at::Tensor&, const at::Tensor&, const c10::optional<at::Tensor>&,
    const c10::optional<at::Tensor>&, const c10::optional<at::Tensor>&,
    const c10::optional<at::Tensor>&, const c10::optional<at::Tensor>&,
    const c10::optional<at::Tensor>&, int64_t) {
  TORCH_CHECK(q.device().is_cpu() && k.device().is_cpu() && v.device().is_cpu(), kOp,
              ": q, k and v must be CPU tensors");
  const int64_t windows = check_wsb_attention(tile_ptr, tile_cols, tile_counts, q, k, v, kOp);
  // Converted once to the accumulation type, as the CSR CPU kernels do.
  const auto acc = q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  auto qa = q.to(acc).contiguous(), ka = k.to(acc).contiguous(), va = v.to(acc).contiguous();
  auto counts = tile_counts.to(acc).contiguous();
  auto ptr = tile_ptr.contiguous(), cols = tile_cols.contiguous();
  const int64_t heads = q.size(1), dim = q.size(2);
  auto out = at::zeros({q.size(0), heads, dim}, qa.options());
  auto lse = at::empty({q.size(0), heads}, qa.options());
  AT_DISPATCH_FLOATING_TYPES(acc, kOp, [&] {
    attend<scalar_t>(ptr.data_ptr<int>(), cols.data_ptr<int>(), counts.data_ptr<scalar_t>(),
                     qa.data_ptr<scalar_t>(), ka.data_ptr<scalar_t>(), va.data_ptr<scalar_t>(),
                     scalar_t(scale), out.data_ptr<scalar_t>(), lse.data_ptr<scalar_t>(),
                     windows, q.size(0), heads, dim);
  });
  return {out.to(q.scalar_type()), lse};
}

}  // namespace

TORCH_LIBRARY_IMPL(fastgnn, CPU, m) {
  m.impl("wsb_graph_attention_forward", &wsb_graph_attention_cpu);
}

}  // namespace cpu
}  // namespace fastgnn
