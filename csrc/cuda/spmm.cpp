// Torch-facing glue of the CUDA SpMM family: checks, stream, allocation, and the dispatch of
// the tuner's algo (ours: 0-6, cuSPARSE: 16-17) to a kernel.
#include <torch/library.h>

#include "cuda/glue.h"
#include "cuda/spmm_cusparse.h"
#include "cuda/spmm_kernels.h"
#include "cuda/spmm_split_work.h"

namespace fastgnn {
namespace cuda {
namespace {

constexpr int64_t kFirstCusparseAlgo = 16;
constexpr int64_t kLastCusparseAlgo = 17;
constexpr int64_t kOwnAlgoMask = 0xff;  // higher bits carry the backward's choice

at::Tensor spmm_cuda(const at::Tensor& rowptr, const at::Tensor& col,
                     const c10::optional<at::Tensor>& value, const at::Tensor& x,
                     const c10::optional<at::Tensor>& t_rowptr,
                     const c10::optional<at::Tensor>& t_col,
                     const c10::optional<at::Tensor>& t_perm,
                     const c10::optional<at::Tensor>& t_value, int64_t num_out, bool transpose,
                     int64_t graph_key, int64_t algo_bits) {
  const c10::cuda::CUDAGuard guard(x.device());
  const CsrView csr = csr_view(rowptr, col, "spmm");
  TORCH_CHECK(x.dim() == 2, "spmm: x must be 2-D, got ", x.dim(), " dims");
  TORCH_CHECK(x.is_cuda() && x.device() == col.device(), "spmm: x must be on the graph's GPU");
  TORCH_CHECK(!transpose || x.size(0) == csr.rows, "spmm: the transposed product needs x with ",
              csr.rows, " rows, got ", x.size(0));
  TORCH_CHECK(transpose || num_out == csr.rows, "spmm: num_out must equal the CSR rows");
  if (value.has_value())
    TORCH_CHECK(value->scalar_type() == acc_type(x) && value->numel() == csr.nnz &&
                    value->is_contiguous() && value->device() == x.device(),
                "spmm: value must be a contiguous float32 (float64 for float64 x) tensor on "
                "the graph's GPU with one entry per edge");
  const bool cached_t = transpose && t_rowptr.has_value() && t_col.has_value() &&
                        t_perm.has_value();
  const CsrView walk = cached_t ? csr_view(*t_rowptr, *t_col, "spmm") : csr;
  TORCH_CHECK(!cached_t || (walk.rows == num_out && walk.nnz == csr.nnz &&
                            t_perm->numel() == csr.nnz &&
                            t_perm->scalar_type() == col.scalar_type() &&
                            t_perm->is_contiguous() && t_perm->device() == col.device()),
              "spmm: the cached transpose does not match the CSR and num_out");
  // Values in the transposed walk's order: given, or gathered through t_perm.
  const bool use_t_value = cached_t && value.has_value() && t_value.has_value();
  if (use_t_value)
    TORCH_CHECK(t_value->scalar_type() == value->scalar_type() &&
                    t_value->numel() == value->numel() && t_value->is_contiguous() &&
                    t_value->device() == value->device(),
                "spmm: t_value must match value in dtype, size and device");
  const int64_t algo = algo_bits & kOwnAlgoMask;
  const bool use_cusparse = algo >= kFirstCusparseAlgo && algo <= kLastCusparseAlgo;
  TORCH_CHECK(use_cusparse || algo <= int64_t(CsrKernel::kSplitLast), "spmm: unknown algo ",
              algo);
  auto xc = x.contiguous();
  const int64_t width = x.size(1);
  auto out = at::empty({num_out, width}, x.options());
  if (num_out == 0 || width == 0) return out;
  if (csr.nnz == 0 || x.size(0) == 0) return out.zero_();

  if (use_cusparse) {
    const int cusparse_algo = int(algo - kFirstCusparseAlgo);
    // Measured on an H100: with 64-bit indices cusparseSpMM faults instead of returning an
    // error, which poisons the CUDA context. Refuse them with an error the caller can catch.
    TORCH_CHECK(col.scalar_type() == at::kInt, "spmm: cuSPARSE is not used with int64 indices");
    const at::Tensor values = value.has_value() ? *value : at::Tensor();
    if (!transpose) {
      cusparse_spmm(rowptr, col, values, xc, out, x.size(0), SparseOperand::kForward, graph_key,
                    cusparse_algo);
    } else if (cached_t) {
      const at::Tensor t_values = use_t_value          ? *t_value
                                  : values.defined() ? values.index_select(0, *t_perm)
                                                     : values;
      cusparse_spmm(*t_rowptr, *t_col, t_values, xc, out, x.size(0),
                    SparseOperand::kCachedTranspose, graph_key, cusparse_algo);
    } else {
      cusparse_spmm(rowptr, col, values, xc, out, num_out, SparseOperand::kForwardTransposed,
                    graph_key, cusparse_algo);
    }
    return out;
  }

  const auto kernel = static_cast<CsrKernel>(algo);
  if (!transpose || cached_t) {
    const void* walk_value = use_t_value ? t_value->data_ptr() : data_or_null(value);
    const void* walk_perm = cached_t && !use_t_value ? t_perm->data_ptr() : nullptr;
    if (algo >= int64_t(CsrKernel::kSplitFirst)) {
      const int64_t chunk = int64_t(64) << (2 * (algo - int64_t(CsrKernel::kSplitFirst)));
      const auto work = split_work(cached_t ? *t_rowptr : rowptr, graph_key, cached_t, chunk);
      auto partial = at::empty({work->slots * width}, x.options().dtype(acc_type(x)));
      spmm_csr_split(float_type(x), walk, walk_value, walk_perm, xc.data_ptr(), out.data_ptr(),
                     partial.data_ptr(), work->view(), width, stream());
      return out;
    }
    spmm_csr(float_type(x), walk, walk_value, walk_perm, xc.data_ptr(), out.data_ptr(), width,
             kernel, stream());
    return out;
  }
  at::globalContext().alertNotDeterministic(
      "fastgnn spmm backward without a cached transpose (Graph(cache_transpose=False))");
  auto acc = at::zeros({num_out, width}, x.options().dtype(acc_type(x)));
  spmm_csr_transposed_atomic(float_type(x), csr, data_or_null(value), xc.data_ptr(),
                             acc.data_ptr(), width, stream());
  return acc.scalar_type() == x.scalar_type() ? acc : acc.to(x.scalar_type());
}

at::Tensor sddmm_cuda(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& a,
                      const at::Tensor& b) {
  const c10::cuda::CUDAGuard guard(a.device());
  const CsrView csr = csr_view(rowptr, col, "sddmm");
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(1) && a.size(0) == csr.rows,
              "sddmm: a must be [rows, D] and b [*, D]");
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "sddmm: a and b dtypes differ");
  auto ac = a.contiguous(), bc = b.contiguous();
  auto out = at::empty({csr.nnz}, a.options().dtype(acc_type(a)));
  sddmm_csr(float_type(a), csr, ac.data_ptr(), bc.data_ptr(), out.data_ptr(), a.size(1),
            stream());
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(fastgnn, CUDA, m) {
  m.impl("spmm", &spmm_cuda);
  m.impl("sddmm", &sddmm_cuda);
}

}  // namespace cuda
}  // namespace fastgnn
