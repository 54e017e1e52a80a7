// CPU SpMM and SDDMM ops: checks, dispatch, the transposed scatter and the SDDMM rows. The
// gather kernels behind spmm live in spmm_gather_kernels.h. Loops are compiled for the baseline
// ISA and once more for AVX2+FMA, chosen at run time.
#include "cpu/cpu_common.h"
#include "cpu/spmm_gather.h"

#include <torch/library.h>

namespace fastgnn {
namespace cpu {
namespace {

// A^T x without a transposed CSR (Graph(cache_transpose=False)): each thread owns a
// contiguous block of features and scatters into it, so no two threads write the same word
// (no atomics, deterministic) at the price of every thread reading the whole edge list.
template <typename scalar_t, typename index_t>
void scatter_transposed(const index_t* rowptr, const index_t* col,
                        const acc_type<scalar_t>* value, const scalar_t* x,
                        acc_type<scalar_t>* acc, int64_t rows, int64_t width) {
  using acc_t = acc_type<scalar_t>;
  constexpr int64_t kMinBlock = 16;
  const int64_t blocks = std::max<int64_t>(
      1, std::min<int64_t>(num_threads(), (width + kMinBlock - 1) / kMinBlock));
  const int64_t block_width = (width + blocks - 1) / blocks;
#pragma omp parallel for num_threads(num_threads()) schedule(static, 1)
  for (int64_t block = 0; block < blocks; ++block) {
    const int64_t f_begin = block * block_width, f_end = std::min(width, f_begin + block_width);
    for (int64_t i = 0; i < rows; ++i) {
      const scalar_t* src = x + i * width;
      for (index_t e = rowptr[i]; e < rowptr[i + 1]; ++e) {
        const acc_t w = value ? value[e] : acc_t(1);
        acc_t* dst = acc + int64_t(col[e]) * width;
        for (int64_t f = f_begin; f < f_end; ++f) dst[f] += w * acc_t(src[f]);
      }
    }
  }
}

at::ScalarType value_type_for(const at::Tensor& x) {
  return x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

at::Tensor spmm_cpu(const at::Tensor& rowptr, const at::Tensor& col,
                    const c10::optional<at::Tensor>& value, const at::Tensor& x,
                    const c10::optional<at::Tensor>& t_rowptr,
                    const c10::optional<at::Tensor>& t_col,
                    const c10::optional<at::Tensor>& t_perm,
                    const c10::optional<at::Tensor>& t_value, int64_t num_out, bool transpose,
                    int64_t /*graph_key*/, int64_t /*algo: one CPU kernel*/) {
  check_csr(rowptr, col, "spmm");
  TORCH_CHECK(x.dim() == 2, "spmm: x must be 2-D, got ", x.dim(), " dims");
  const int64_t rows = rowptr.numel() - 1;
  TORCH_CHECK(!transpose || x.size(0) == rows, "spmm: the transposed product needs x with ",
              rows, " rows, got ", x.size(0));
  TORCH_CHECK(transpose || num_out == rows, "spmm: num_out must equal the CSR rows (", rows,
              "), got ", num_out);
  const bool use_cached_t = transpose && t_rowptr.has_value() && t_col.has_value() &&
                            t_perm.has_value();
  if (use_cached_t) {
    check_csr(*t_rowptr, *t_col, "spmm");
    TORCH_CHECK(t_rowptr->numel() == num_out + 1 && t_col->numel() == col.numel() &&
                    t_perm->numel() == col.numel() && t_perm->scalar_type() == col.scalar_type(),
                "spmm: the cached transpose does not match the CSR");
  }
  at::Tensor vc;
  if (value.has_value()) {
    vc = value->contiguous();
    TORCH_CHECK(vc.scalar_type() == value_type_for(x) && vc.numel() == col.numel(),
                "spmm: value must be float32 (float64 for float64 x) with one entry per edge");
  }
  const bool use_t_value = use_cached_t && vc.defined() && t_value.has_value();
  at::Tensor t_vc;
  if (use_t_value) {
    t_vc = t_value->contiguous();
    TORCH_CHECK(t_vc.scalar_type() == vc.scalar_type() && t_vc.numel() == vc.numel(),
                "spmm: t_value must match value in dtype and size");
  }
  auto xc = x.contiguous();
  const int64_t width = x.size(1);
  auto out = at::empty({num_out, width}, x.options());
  if (num_out == 0 || width == 0) return out;
  FASTGNN_DISPATCH_INDEX(rowptr.scalar_type(), "spmm", [&] {
    FASTGNN_DISPATCH_FLOAT(x.scalar_type(), "spmm", [&] {
      using acc_t = acc_type<scalar_t>;
      const acc_t* vptr = vc.defined() ? vc.data_ptr<acc_t>() : nullptr;
      if (transpose && !use_cached_t) {
        at::Tensor acc = std::is_same_v<scalar_t, acc_t>
                             ? out.zero_()
                             : at::zeros({num_out, width}, x.options().dtype(value_type_for(x)));
        scatter_transposed<scalar_t, index_t>(rowptr.data_ptr<index_t>(),
                                              col.data_ptr<index_t>(), vptr,
                                              xc.data_ptr<scalar_t>(), acc.data_ptr<acc_t>(),
                                              rows, width);
        if (!acc.is_same(out)) out.copy_(acc);
        return;
      }
      Gather<scalar_t, index_t> g{rowptr.data_ptr<index_t>(), col.data_ptr<index_t>(), vptr,
                                  nullptr, xc.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(),
                                  width};
      if (use_cached_t) {
        g.rowptr = t_rowptr->data_ptr<index_t>();
        g.col = t_col->data_ptr<index_t>();
        if (use_t_value) g.value = t_vc.data_ptr<acc_t>();
        else if (vptr) g.value_perm = t_perm->data_ptr<index_t>();
      }
      run_gather(g, num_out);
    });
  });
  return out;
}

// out[e] = <a[row(e)], b[col(e)]>: the destination row stays hot while its edges stream by.
template <typename scalar_t, typename index_t>
FASTGNN_ALWAYS_INLINE void dot_rows(const index_t* rowptr, const index_t* col, const scalar_t* a,
                                    const scalar_t* b, acc_type<scalar_t>* out, int64_t width,
                                    int64_t row_begin, int64_t row_end) {
  using acc_t = acc_type<scalar_t>;
  for (int64_t i = row_begin; i < row_end; ++i) {
    const scalar_t* ar = a + i * width;
    for (index_t e = rowptr[i]; e < rowptr[i + 1]; ++e) {
      const scalar_t* br = b + int64_t(col[e]) * width;
      acc_t s = 0;
#pragma omp simd reduction(+ : s)
      for (int64_t f = 0; f < width; ++f) s += acc_t(ar[f]) * acc_t(br[f]);
      out[e] = s;
    }
  }
}

at::Tensor sddmm_cpu(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& a,
                     const at::Tensor& b) {
  check_csr(rowptr, col, "sddmm");
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(1),
              "sddmm: a and b must be 2-D with the same width");
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "sddmm: a and b dtypes differ");
  const int64_t rows = rowptr.numel() - 1;
  TORCH_CHECK(a.size(0) == rows, "sddmm: a must have one row per CSR row (", rows, "), got ",
              a.size(0));
  auto ac = a.contiguous(), bc = b.contiguous();
  auto out = at::empty({col.numel()}, a.options().dtype(value_type_for(a)));
  if (col.numel() == 0) return out;
  FASTGNN_DISPATCH_INDEX(rowptr.scalar_type(), "sddmm", [&] {
    FASTGNN_DISPATCH_FLOAT(a.scalar_type(), "sddmm", [&] {
      const index_t* rp = rowptr.data_ptr<index_t>();
      const index_t* cp = col.data_ptr<index_t>();
      const scalar_t* ap = ac.data_ptr<scalar_t>();
      const scalar_t* bp = bc.data_ptr<scalar_t>();
      auto* op = out.data_ptr<acc_type<scalar_t>>();
      const int64_t width = a.size(1);
      parallel_chunks(rows, rows_per_chunk(rows, col.numel()), [&](int64_t rb, int64_t re) {
        on_best_isa<dot_rows<scalar_t, index_t>>(rp, cp, ap, bp, op, width, rb, re);
      });
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
