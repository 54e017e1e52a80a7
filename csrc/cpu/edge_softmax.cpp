// CPU edge softmax: OpenMP over rows (dynamic schedule for skewed degrees), each row by one
// thread, so results do not depend on the thread count; rows run in the AVX2 clone where the
// CPU has it. The forward makes three passes over a row's edges: the column maxima;
// exp(logit - max) into a per-thread buffer, summed per column; the normalised values,
// scattered to the edges' input positions. The backward makes two: the column sums of
// out * grad_out, then the gradients. The sums over a row are kept in double: a hub's
// thousands of terms would otherwise lose more than the reference's pairwise sums do.
#include "cpu/cpu_common.h"

#include <torch/library.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "edge_softmax_checks.h"

namespace fastgnn {
namespace cpu {
namespace {

// Input position of the edge at row position p.
template <typename index_t>
inline int64_t edge_at(const index_t* perm, int64_t p) {
  return perm ? int64_t(perm[p]) : p;
}

// One thread's buffers: a row's column maxima and sums, its exps, and one edge's values.
template <typename acc_t>
struct RowScratch {
  std::vector<acc_t> peak, exps, values, grads;
  std::vector<double> sums;
  explicit RowScratch(int64_t width) : peak(width), values(width), grads(width), sums(width) {}
};

// Row i of the forward; kIsa: the clone it is compiled for (float16 logits and outputs convert
// by F16C in the AVX2 one).
template <typename scalar_t, typename index_t, Isa kIsa>
FASTGNN_ALWAYS_INLINE void softmax_row(const index_t* rowptr, const index_t* perm,
                                       const scalar_t* logits, scalar_t* out, int64_t i,
                                       int64_t width, RowScratch<acc_type<scalar_t>>& s) {
  using acc_t = acc_type<scalar_t>;
  const int64_t begin = rowptr[i], degree = int64_t(rowptr[i + 1]) - begin;
  if (degree == 0) return;
  acc_t* peak = s.peak.data();
  double* scale = s.sums.data();
  std::fill(peak, peak + width, -std::numeric_limits<acc_t>::infinity());
  for (int64_t k = 0; k < degree; ++k) {
    const acc_t* z =
        as_acc<kIsa, acc_t>(logits + edge_at(perm, begin + k) * width, width, s.values.data());
    for (int64_t w = 0; w < width; ++w) peak[w] = std::max(peak[w], z[w]);
  }
  s.exps.resize(degree * width);
  std::fill(scale, scale + width, 0.0);
  for (int64_t k = 0; k < degree; ++k) {
    const acc_t* z =
        as_acc<kIsa, acc_t>(logits + edge_at(perm, begin + k) * width, width, s.values.data());
    acc_t* e = s.exps.data() + k * width;
    for (int64_t w = 0; w < width; ++w) {
      e[w] = std::exp(z[w] - peak[w]);
      scale[w] += e[w];
    }
  }
  // A maximum of +-inf (inf - inf) or a NaN logit made the sum NaN: so is the whole row.
  for (int64_t w = 0; w < width; ++w) scale[w] = 1.0 / scale[w];
  acc_t* normalised = s.values.data();
  for (int64_t k = 0; k < degree; ++k) {
    const acc_t* e = s.exps.data() + k * width;
    for (int64_t w = 0; w < width; ++w) normalised[w] = acc_t(e[w] * scale[w]);
    store_as<kIsa>(normalised, width, out + edge_at(perm, begin + k) * width);
  }
}

template <typename scalar_t, typename index_t>
void softmax_rows(const index_t* rowptr, const index_t* perm, const scalar_t* logits,
                  scalar_t* out, int64_t rows, int64_t width) {
#pragma omp parallel num_threads(num_threads())
  {
    RowScratch<acc_type<scalar_t>> scratch(width);
#pragma omp for schedule(dynamic, 64)
    for (int64_t i = 0; i < rows; ++i)
      on_avx2_or_baseline<softmax_row<scalar_t, index_t, Isa::kAvx2>,
                          softmax_row<scalar_t, index_t, Isa::kBaseline>>(
          rowptr, perm, logits, out, i, width, scratch);
  }
}

// Row i of the backward, in the clone kIsa.
template <typename scalar_t, typename index_t, Isa kIsa>
FASTGNN_ALWAYS_INLINE void softmax_backward_row(const index_t* rowptr, const index_t* perm,
                                                const scalar_t* out, const scalar_t* grad_out,
                                                scalar_t* grad, int64_t i, int64_t width,
                                                RowScratch<acc_type<scalar_t>>& s) {
  using acc_t = acc_type<scalar_t>;
  const int64_t begin = rowptr[i], end = rowptr[i + 1];
  if (begin == end) return;
  double* dot = s.sums.data();
  std::fill(dot, dot + width, 0.0);
  for (int64_t p = begin; p < end; ++p) {
    const int64_t e = edge_at(perm, p) * width;
    const acc_t* o = as_acc<kIsa, acc_t>(out + e, width, s.values.data());
    const acc_t* g = as_acc<kIsa, acc_t>(grad_out + e, width, s.grads.data());
    for (int64_t w = 0; w < width; ++w) dot[w] += double(o[w] * g[w]);
  }
  acc_t* result = s.peak.data();  // the forward's buffer, free here
  for (int64_t p = begin; p < end; ++p) {
    const int64_t e = edge_at(perm, p) * width;
    const acc_t* o = as_acc<kIsa, acc_t>(out + e, width, s.values.data());
    const acc_t* g = as_acc<kIsa, acc_t>(grad_out + e, width, s.grads.data());
    for (int64_t w = 0; w < width; ++w) result[w] = o[w] * (g[w] - acc_t(dot[w]));
    store_as<kIsa>(result, width, grad + e);
  }
}

template <typename scalar_t, typename index_t>
void softmax_backward_rows(const index_t* rowptr, const index_t* perm, const scalar_t* out,
                           const scalar_t* grad_out, scalar_t* grad, int64_t rows,
                           int64_t width) {
#pragma omp parallel num_threads(num_threads())
  {
    RowScratch<acc_type<scalar_t>> scratch(width);
#pragma omp for schedule(dynamic, 64)
    for (int64_t i = 0; i < rows; ++i)
      on_avx2_or_baseline<softmax_backward_row<scalar_t, index_t, Isa::kAvx2>,
                          softmax_backward_row<scalar_t, index_t, Isa::kBaseline>>(
          rowptr, perm, out, grad_out, grad, i, width, scratch);
  }
}

// rowptr's last entry is cheap to read here (the GPU glue cannot without a sync).
void check_edge_count(const at::Tensor& rowptr, const at::Tensor& values, const char* op) {
  const int64_t last = rowptr[rowptr.numel() - 1].item<int64_t>();
  TORCH_CHECK(last == values.size(0), op, ": rowptr ends at ", last, " but there are ",
              values.size(0), " edges");
}

const void* perm_or_null(const c10::optional<at::Tensor>& edge_perm) {
  return edge_perm.has_value() ? edge_perm->data_ptr() : nullptr;
}

// light_rows/heavy_rows: the GPU's launch split, checked and otherwise ignored.
at::Tensor edge_softmax_cpu(const at::Tensor& rowptr, const c10::optional<at::Tensor>& edge_perm,
                            const at::Tensor& logits,
                            const c10::optional<at::Tensor>& light_rows,
                            const c10::optional<at::Tensor>& heavy_rows) {
  check_edge_rows(rowptr, edge_perm, logits, "edge_softmax");
  check_row_split(rowptr, light_rows, heavy_rows, "edge_softmax");
  check_edge_count(rowptr, logits, "edge_softmax");
  auto lc = logits.contiguous();
  auto out = at::empty_like(lc);
  if (out.numel() == 0) return out;
  FASTGNN_DISPATCH_INDEX(rowptr.scalar_type(), "edge_softmax", [&] {
    FASTGNN_DISPATCH_FLOAT(logits.scalar_type(), "edge_softmax", [&] {
      softmax_rows<scalar_t, index_t>(
          rowptr.data_ptr<index_t>(), static_cast<const index_t*>(perm_or_null(edge_perm)),
          lc.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), rowptr.numel() - 1, lc.size(1));
    });
  });
  return out;
}

at::Tensor edge_softmax_backward_cpu(const at::Tensor& rowptr,
                                     const c10::optional<at::Tensor>& edge_perm,
                                     const at::Tensor& out, const at::Tensor& grad_out,
                                     const c10::optional<at::Tensor>& light_rows,
                                     const c10::optional<at::Tensor>& heavy_rows) {
  check_edge_rows(rowptr, edge_perm, out, "edge_softmax_backward");
  check_row_split(rowptr, light_rows, heavy_rows, "edge_softmax_backward");
  check_edge_count(rowptr, out, "edge_softmax_backward");
  TORCH_CHECK(grad_out.sizes() == out.sizes() && grad_out.scalar_type() == out.scalar_type(),
              "edge_softmax_backward: grad_out must have out's shape and dtype");
  auto oc = out.contiguous(), gc = grad_out.contiguous();
  auto grad = at::empty_like(oc);
  if (grad.numel() == 0) return grad;
  FASTGNN_DISPATCH_INDEX(rowptr.scalar_type(), "edge_softmax_backward", [&] {
    FASTGNN_DISPATCH_FLOAT(out.scalar_type(), "edge_softmax_backward", [&] {
      softmax_backward_rows<scalar_t, index_t>(
          rowptr.data_ptr<index_t>(), static_cast<const index_t*>(perm_or_null(edge_perm)),
          oc.data_ptr<scalar_t>(), gc.data_ptr<scalar_t>(), grad.data_ptr<scalar_t>(),
          rowptr.numel() - 1, oc.size(1));
    });
  });
  return grad;
}

}  // namespace

TORCH_LIBRARY_IMPL(fastgnn, CPU, m) {
  m.impl("edge_softmax", &edge_softmax_cpu);
  m.impl("edge_softmax_backward", &edge_softmax_backward_cpu);
}

}  // namespace cpu
}  // namespace fastgnn
