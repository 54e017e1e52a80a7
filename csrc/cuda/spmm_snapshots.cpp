// Torch-facing glue of the CUDA snapshot SpMM: checks, stream, allocation.
#include <torch/library.h>

#include "cuda/glue.h"
#include "cuda/spmm_snapshots_kernels.h"
#include "cuda/spmm_split_work.h"

namespace fastgnn {
namespace cuda {
namespace {

// Edges per work item: a hub row (arxiv: 13,000 in-edges) is cut into many warps' work
// instead of holding one warp for its whole length.
constexpr int64_t kEdgesPerItem = 64;

void check_scale(const c10::optional<at::Tensor>& scale, const at::Tensor& x, int64_t rows,
                 const char* name) {
  if (!scale.has_value()) return;
  TORCH_CHECK(scale->scalar_type() == acc_type(x) && scale->dim() == 2 &&
                  scale->size(0) == x.size(0) && scale->size(1) == rows &&
                  scale->device() == x.device() && scale->is_contiguous(),
              "spmm_snapshots: ", name, " must be a contiguous [T, ", rows,
              "] tensor in the accumulation dtype on x's device");
}

at::Tensor spmm_snapshots_cuda(const at::Tensor& rowptr, const at::Tensor& shared_end,
                               const at::Tensor& col, const at::Tensor& mask, const at::Tensor& x,
                               const c10::optional<at::Tensor>& src_scale,
                               const c10::optional<at::Tensor>& dst_scale, int64_t num_out,
                               const c10::optional<at::Tensor>& /*t_rowptr*/,
                               const c10::optional<at::Tensor>& /*t_shared_end*/,
                               const c10::optional<at::Tensor>& /*t_col*/,
                               const c10::optional<at::Tensor>& /*t_mask*/, int64_t graph_key,
                               bool transposed) {
  const c10::cuda::CUDAGuard guard(x.device());
  const CsrView csr = csr_view(rowptr, col, "spmm_snapshots");
  TORCH_CHECK(x.dim() == 3 && x.is_cuda(), "spmm_snapshots: x must be a [T, num_src, F] GPU "
              "tensor, got ", x.dim(), " dims");
  TORCH_CHECK(x.size(0) <= 63, "spmm_snapshots: at most 63 snapshots, got ", x.size(0));
  TORCH_CHECK(csr.rows == num_out, "spmm_snapshots: rowptr must have num_out + 1 = ",
              num_out + 1, " entries, got ", rowptr.numel());
  TORCH_CHECK(shared_end.is_cuda() && shared_end.scalar_type() == col.scalar_type() &&
                  shared_end.dim() == 1 && shared_end.numel() == num_out &&
                  shared_end.is_contiguous(),
              "spmm_snapshots: shared_end must be [num_out] in the CSR's index dtype");
  TORCH_CHECK(mask.is_cuda() && mask.scalar_type() == at::kLong && mask.numel() == col.numel() &&
                  mask.is_contiguous(),
              "spmm_snapshots: mask must be int64 with one entry per edge");
  check_scale(src_scale, x, x.size(1), "src_scale");
  check_scale(dst_scale, x, num_out, "dst_scale");
  // Features shared by every snapshot (an expanded [N, F]: snapshot stride 0) stay one copy.
  const bool shared_x = x.size(0) > 1 && x.stride(0) == 0 && x[0].is_contiguous();
  const auto xc = shared_x ? x : x.contiguous();
  const int64_t x_tstride = shared_x ? 0 : x.size(1) * x.size(2);
  // Left uninitialised: spmm_snapshots zeroes the rows cut into several work items and the
  // kernel stores every other row.
  auto out = at::empty({x.size(0), num_out, x.size(2)}, x.options());
  if (out.numel() == 0) return out;
  const auto work = split_work(rowptr, graph_key, transposed ? 1 : 0, kEdgesPerItem);
  // [num_src, T]: an edge's source scales of every snapshot share one sector.
  const c10::optional<at::Tensor> src_scale_nt =
      src_scale.has_value() ? c10::optional<at::Tensor>(src_scale->t().contiguous())
                            : c10::nullopt;
  spmm_snapshots(float_type(x), csr, work->view(), shared_end.data_ptr(),
                 mask.data_ptr<int64_t>(), xc.data_ptr(), data_or_null(src_scale_nt),
                 data_or_null(dst_scale), out.data_ptr(), x.size(0), x_tstride, x.size(2),
                 stream());
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(fastgnn, CUDA, m) { m.impl("spmm_snapshots", &spmm_snapshots_cuda); }

}  // namespace cuda
}  // namespace fastgnn
