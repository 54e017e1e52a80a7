// The Graph Transformer backward's destination pass over the WSB layout on the CPU: the CUDA
// Tensor Core kernel's walk (csrc/cuda/wsb_attention_backward_kernels.cu) in scalar loops, so
// that the layout's edge cursors and the op are tested where there is no GPU. Each piece of
// the plan starts its rows' cursors at edge_starts and walks its tiles; a slot of c edges
// gives weight P = exp(logit - lse) and dLogit g = P (<dOut, v> - delta), adds c g k to q's
// gradient and stores (g, P) for the next c edges. The CSR source pass
// (csrc/cpu/attention.cpp) then forms k's and v's gradients. OpenMP over windows, a window's
// pieces in tile order; q's gradient sums in double.
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <numeric>
#include <tuple>
#include <vector>

#include "cpu/attention_backward.h"
#include "cpu/cpu_common.h"
#include "wsb_checks.h"

namespace fastgnn {
namespace cpu {
namespace {

constexpr const char* kOp = "wsb_graph_attention_backward";

// The plan's pieces grouped by window, each window's in tile order: (offsets [windows + 1],
// piece ids).
std::pair<std::vector<int64_t>, std::vector<int64_t>> pieces_by_window(const int* work,
                                                                       int64_t pieces,
                                                                       int64_t windows) {
  std::vector<int64_t> order(pieces), offsets(windows + 1, 0);
  std::iota(order.begin(), order.end(), 0);
  const auto place = [&](int64_t p) { return std::make_pair(work[4 * p + 2], work[4 * p]); };
  std::sort(order.begin(), order.end(),
            [&](int64_t a, int64_t b) { return place(a) < place(b); });
  for (int64_t p = 0; p < pieces; ++p) ++offsets[work[4 * p + 2] + 1];
  std::partial_sum(offsets.begin(), offsets.end(), offsets.begin());
  return {offsets, order};
}

template <typename acc_t>
double dot(const acc_t* a, const acc_t* b, int64_t dim) {
  double sum = 0;
  for (int64_t d = 0; d < dim; ++d) sum += double(a[d]) * double(b[d]);
  return sum;
}

// Returns false when a cursor would leave the edge range (a layout of another CSR).
template <typename acc_t>
bool destination_pass(const int* tile_cols, const acc_t* counts, const int* work, int64_t pieces,
                      const int* edge_starts, const DestinationBuffers& b, double scale,
                      int64_t windows, int64_t edges) {
  const int64_t rows = b.q.size(0), heads = b.q.size(1), dim = b.q.size(2);
  const acc_t *q = b.q.data_ptr<acc_t>(), *k = b.k.data_ptr<acc_t>(), *v = b.v.data_ptr<acc_t>();
  const acc_t *dout = b.grad_out.data_ptr<acc_t>(), *lse = b.lse.data_ptr<acc_t>();
  const acc_t* delta = b.delta.data_ptr<acc_t>();
  acc_t* grad_q = b.grad_q.data_ptr<acc_t>();
  acc_t* scores = b.scores.data_ptr<acc_t>();
  const auto [offsets, order] = pieces_by_window(work, pieces, windows);
  std::atomic<bool> in_range{true};
#pragma omp parallel num_threads(num_threads())
  {
    std::vector<double> grad(16 * heads * dim);  // the window's dQ / scale
#pragma omp for schedule(dynamic, 4)
    for (int64_t w = 0; w < windows; ++w) {
      std::fill(grad.begin(), grad.end(), 0.0);
      for (int64_t at = offsets[w]; at < offsets[w + 1]; ++at) {
        const int64_t piece = order[at];
        const int begin = work[4 * piece], end = work[4 * piece + 1];
        for (int r = 0; r < 16 && w * 16 + r < rows; ++r) {
          const int64_t i = w * 16 + r;
          for (int64_t h = 0; h < heads; ++h) {
            const acc_t* qi = q + (i * heads + h) * dim;
            const acc_t* di = dout + (i * heads + h) * dim;
            double* gq = grad.data() + (r * heads + h) * dim;
            int64_t cursor = edge_starts[piece * 16 + r];
            for (int t = begin; t < end; ++t) {
              for (int s = 0; s < 16; ++s) {
                const acc_t count = counts[int64_t(t) * 256 + r * 16 + s];
                if (count == acc_t(0)) continue;
                const int64_t n = int64_t(count);
                if (cursor < 0 || cursor + n > edges) {
                  in_range = false;
                  continue;
                }
                const int64_t j = tile_cols[16 * int64_t(t) + s];
                const acc_t* kj = k + (j * heads + h) * dim;
                const double weight =
                    std::exp(scale * dot(qi, kj, dim) - double(lse[i * heads + h]));
                const double g = weight * (dot(di, v + (j * heads + h) * dim, dim) -
                                           double(delta[i * heads + h]));
                for (int64_t m = 0; m < n; ++m) {
                  acc_t* record = scores + ((cursor + m) * heads + h) * 2;
                  record[0] = acc_t(g);
                  record[1] = acc_t(weight);
                }
                cursor += n;
                for (int64_t d = 0; d < dim; ++d) gq[d] += double(n) * g * double(kj[d]);
              }
            }
          }
        }
      }
      for (int r = 0; r < 16 && w * 16 + r < rows; ++r)
        for (int64_t f = 0; f < heads * dim; ++f)
          grad_q[(w * 16 + r) * heads * dim + f] = acc_t(scale * grad[r * heads * dim + f]);
    }
  }
  return in_range;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> wsb_graph_attention_backward_cpu(
    const at::Tensor& grad_out, const at::Tensor& out, const at::Tensor& lse,
    const at::Tensor& tile_ptr, const at::Tensor& tile_cols, const at::Tensor& tile_counts,
    const at::Tensor& work, const at::Tensor& splits, const at::Tensor& edge_starts,
    const at::Tensor& rowptr, const at::Tensor& col, const c10::optional<at::Tensor>& t_rowptr,
    const c10::optional<at::Tensor>& t_col, const at::Tensor& t_perm, const at::Tensor& q,
    const at::Tensor& k, const at::Tensor& v, double scale,
    const c10::optional<at::Tensor>& /*light_rows*/,
    const c10::optional<at::Tensor>& /*heavy_rows*/, int64_t /*heavy_warps*/) {
  for (const at::Tensor* t : {&grad_out, &out, &lse, &tile_ptr, &tile_cols, &tile_counts, &work,
                              &splits, &edge_starts, &q, &k, &v})
    TORCH_CHECK(t->device().is_cpu(), kOp, ": every tensor must be a CPU tensor");
  const int64_t windows = check_wsb_attention(tile_ptr, tile_cols, tile_counts, q, k, v, kOp);
  TORCH_CHECK_VALUE(work.scalar_type() == at::kInt && work.dim() == 2 && work.size(1) == 4 &&
                  work.size(0) >= windows,
              kOp, ": work must be the layout's attention plan (WSB.attention_plan())");
  TORCH_CHECK_VALUE(
      edge_starts.scalar_type() == at::kInt && edge_starts.numel() == work.size(0) * 16, kOp,
      ": edge_starts must be the layout's WSB.attention_edge_starts() (int32, 16 a piece)");
  const auto plan = work.contiguous();
  const int* item = plan.data_ptr<int>();
  const int64_t tiles = tile_cols.numel() / 16;
  for (int64_t p = 0; p < plan.size(0); ++p)
    TORCH_CHECK_VALUE(item[4 * p + 2] >= 0 && item[4 * p + 2] < windows && 0 <= item[4 * p] &&
                    item[4 * p] <= item[4 * p + 1] && item[4 * p + 1] <= tiles,
                kOp, ": work must be the layout's attention plan (WSB.attention_plan())");
  const auto cols = tile_cols.contiguous(), starts = edge_starts.contiguous();
  const int64_t edges = col.numel();
  const DestinationPass destination = [&](const DestinationBuffers& b) {
    const auto counts = tile_counts.to(b.q.scalar_type()).contiguous();
    AT_DISPATCH_FLOATING_TYPES(b.q.scalar_type(), kOp, [&] {
      const bool in_range = destination_pass<scalar_t>(
          cols.data_ptr<int>(), counts.data_ptr<scalar_t>(), item, plan.size(0),
          starts.data_ptr<int>(), b, scale, windows, edges);
      TORCH_CHECK_VALUE(in_range, kOp,
                        ": the layout does not match the CSR (an edge cursor left its range)");
    });
  };
  return graph_attention_backward_from(destination, grad_out, out, lse, rowptr, col, t_rowptr,
                                       t_col, t_perm, q, k, v, scale, kOp);
}

}  // namespace

TORCH_LIBRARY_IMPL(fastgnn, CPU, m) {
  m.impl("wsb_graph_attention_backward", &wsb_graph_attention_backward_cpu);
}

}  // namespace cpu
}  // namespace fastgnn
