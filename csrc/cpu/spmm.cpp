// CPU SpMM and SDDMM: OpenMP over destination rows (dynamic schedule for skewed degrees),
// feature loop innermost and contiguous so the compiler vectorises it.
#include "cpu/cpu_common.h"

#include <torch/library.h>

#include <vector>

namespace fastgnn {
namespace cpu {
namespace {

template <typename scalar_t>
using acc_type = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;

// Row-parallel gather: out[i] = sum_e value[vidx(e)] * x[col[e]], where vidx is the identity,
// or value_perm[e] when walking a transposed CSR whose values stay in forward order.
template <typename scalar_t, typename index_t>
void spmm_rows(const index_t* rowptr, const index_t* col, const acc_type<scalar_t>* value,
               const index_t* value_perm, const scalar_t* x, scalar_t* out, int64_t rows,
               int64_t width) {
  using acc_t = acc_type<scalar_t>;
#pragma omp parallel num_threads(num_threads())
  {
    std::vector<acc_t> acc(width);
#pragma omp for schedule(dynamic, 32)
    for (int64_t i = 0; i < rows; ++i) {
      std::fill(acc.begin(), acc.end(), acc_t(0));
      for (index_t e = rowptr[i]; e < rowptr[i + 1]; ++e) {
        const acc_t w = value ? acc_t(value[value_perm ? value_perm[e] : e]) : acc_t(1);
        const scalar_t* xr = x + int64_t(col[e]) * width;
        for (int64_t f = 0; f < width; ++f) acc[f] += w * acc_t(xr[f]);
      }
      scalar_t* o = out + i * width;
      for (int64_t f = 0; f < width; ++f) o[f] = scalar_t(acc[f]);
    }
  }
}

// Transposed product without a transposed CSR: each thread owns a slice of the features, so
// the scatter needs no atomics. Used only when the caller chose not to cache the transpose.
template <typename scalar_t, typename index_t>
void spmm_rows_transposed(const index_t* rowptr, const index_t* col,
                          const acc_type<scalar_t>* value,
                          const scalar_t* x, scalar_t* out, int64_t rows, int64_t num_out,
                          int64_t width) {
  using acc_t = acc_type<scalar_t>;
  std::vector<acc_t> acc(num_out * width, acc_t(0));
#pragma omp parallel for num_threads(num_threads()) schedule(static)
  for (int64_t f = 0; f < width; ++f) {
    for (int64_t i = 0; i < rows; ++i) {
      const acc_t xi = acc_t(x[i * width + f]);
      for (index_t e = rowptr[i]; e < rowptr[i + 1]; ++e)
        acc[int64_t(col[e]) * width + f] += (value ? acc_t(value[e]) : acc_t(1)) * xi;
    }
  }
  for (int64_t k = 0; k < num_out * width; ++k) out[k] = scalar_t(acc[k]);
}

at::Tensor spmm_cpu(const at::Tensor& rowptr, const at::Tensor& col,
                    const c10::optional<at::Tensor>& value, const at::Tensor& x,
                    const c10::optional<at::Tensor>& t_rowptr,
                    const c10::optional<at::Tensor>& t_col,
                    const c10::optional<at::Tensor>& t_perm, int64_t num_out, bool transpose,
                    int64_t /*graph_key*/, int64_t /*algo*/) {
  check_csr(rowptr, col, "spmm");
  TORCH_CHECK(x.dim() == 2, "spmm: x must be 2-D");
  const int64_t rows = rowptr.numel() - 1;
  TORCH_CHECK(!transpose || x.size(0) == rows, "spmm: x rows mismatch");
  const bool use_cached_t = transpose && t_rowptr.has_value() && t_col.has_value() &&
                            t_perm.has_value();
  if (use_cached_t) check_csr(*t_rowptr, *t_col, "spmm");
  auto xc = x.contiguous();
  auto out = at::empty({num_out, x.size(1)}, x.options());
  at::Tensor vc;
  if (value.has_value()) {
    vc = value->contiguous();
    TORCH_CHECK(vc.scalar_type() == (x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat) &&
                    vc.numel() == col.numel(),
                "spmm: value must be float32 (float64 for float64 x) with one entry per edge");
  }
  FASTGNN_DISPATCH_INDEX(rowptr.scalar_type(), "spmm", [&] {
    FASTGNN_DISPATCH_FLOAT(x.scalar_type(), "spmm", [&] {
      const auto* vptr = vc.defined() ? vc.data_ptr<acc_type<scalar_t>>() : nullptr;
      if (use_cached_t)
        spmm_rows<scalar_t, index_t>(t_rowptr->data_ptr<index_t>(), t_col->data_ptr<index_t>(),
                                     vptr, t_perm->data_ptr<index_t>(), xc.data_ptr<scalar_t>(),
                                     out.data_ptr<scalar_t>(), num_out, x.size(1));
      else if (transpose)
        spmm_rows_transposed<scalar_t, index_t>(rowptr.data_ptr<index_t>(), col.data_ptr<index_t>(),
                                                vptr, xc.data_ptr<scalar_t>(),
                                                out.data_ptr<scalar_t>(), rows, num_out, x.size(1));
      else
        spmm_rows<scalar_t, index_t>(rowptr.data_ptr<index_t>(), col.data_ptr<index_t>(), vptr,
                                     nullptr, xc.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(),
                                     rows, x.size(1));
    });
  });
  return out;
}

// out[e] = <a[row(e)], b[col(e)]>, one row of a kept hot per destination.
template <typename scalar_t, typename index_t>
void sddmm_rows(const index_t* rowptr, const index_t* col, const scalar_t* a, const scalar_t* b,
                acc_type<scalar_t>* out, int64_t rows, int64_t width) {
  using acc_t = acc_type<scalar_t>;
#pragma omp parallel for num_threads(num_threads()) schedule(dynamic, 32)
  for (int64_t i = 0; i < rows; ++i) {
    const scalar_t* ar = a + i * width;
    for (index_t e = rowptr[i]; e < rowptr[i + 1]; ++e) {
      const scalar_t* br = b + int64_t(col[e]) * width;
      acc_t s = 0;
      for (int64_t f = 0; f < width; ++f) s += acc_t(ar[f]) * acc_t(br[f]);
      out[e] = s;
    }
  }
}

at::Tensor sddmm_cpu(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& a,
                     const at::Tensor& b) {
  check_csr(rowptr, col, "sddmm");
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(1), "sddmm: a, b must be [*, D]");
  TORCH_CHECK(a.size(0) == rowptr.numel() - 1, "sddmm: a must have one row per destination");
  auto ac = a.contiguous(), bc = b.contiguous();
  const auto out_type = a.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  auto out = at::empty({col.numel()}, a.options().dtype(out_type));
  FASTGNN_DISPATCH_INDEX(rowptr.scalar_type(), "sddmm", [&] {
    FASTGNN_DISPATCH_FLOAT(a.scalar_type(), "sddmm", [&] {
      sddmm_rows<scalar_t, index_t>(rowptr.data_ptr<index_t>(), col.data_ptr<index_t>(),
                                    ac.data_ptr<scalar_t>(), bc.data_ptr<scalar_t>(),
                                    out.data_ptr<acc_type<scalar_t>>(), rowptr.numel() - 1,
                                    a.size(1));
    });
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(fastgnn, CPU, m) {
  m.impl("spmm", &spmm_cpu);
  m.impl("sddmm", &sddmm_cpu);
}

}  // namespace cpu
}  // namespace fastgnn
