// CPU snapshot SpMM: every snapshot of a window aggregated in one pass over the shared rows.
// A thread owns a destination row at a time and keeps its T x F accumulators (in L1); each
// shared edge's source index is read once and applied to all T feature slices.
#include "cpu/cpu_common.h"

#include <torch/library.h>

#include <vector>

namespace fastgnn {
namespace cpu {
namespace {

template <typename scalar_t, typename index_t>
struct SnapshotArgs {
  using acc_t = acc_type<scalar_t>;
  const index_t* rowptr;
  const index_t* shared_end;
  const index_t* col;
  const int64_t* mask;
  const scalar_t* x;
  const acc_t* src_scale;
  const acc_t* dst_scale;
  scalar_t* out;
  int64_t snapshots, num_src, num_out, width;
};

template <typename scalar_t, typename index_t>
FASTGNN_ALWAYS_INLINE void add_source(const SnapshotArgs<scalar_t, index_t>& a,
                                      acc_type<scalar_t>* acc, int64_t j, int64_t t) {
  using acc_t = acc_type<scalar_t>;
  const acc_t s = a.src_scale ? a.src_scale[t * a.num_src + j] : acc_t(1);
  const scalar_t* xr = a.x + (t * a.num_src + j) * a.width;
  acc_t* dst = acc + t * a.width;
  for (int64_t f = 0; f < a.width; ++f) dst[f] += s * acc_t(xr[f]);
}

template <typename scalar_t, typename index_t>
FASTGNN_ALWAYS_INLINE void snapshot_rows_body(const SnapshotArgs<scalar_t, index_t>& a,
                                              acc_type<scalar_t>* acc, int64_t begin,
                                              int64_t end) {
  using acc_t = acc_type<scalar_t>;
  const int64_t T = a.snapshots, F = a.width;
  for (int64_t i = begin; i < end; ++i) {
    std::fill(acc, acc + T * F, acc_t(0));
    const index_t shared = a.shared_end[i], stop = a.rowptr[i + 1];
    for (index_t e = a.rowptr[i]; e < shared; ++e) {
      const int64_t j = a.col[e];
      for (int64_t t = 0; t < T; ++t) add_source(a, acc, j, t);
    }
    for (index_t e = shared; e < stop; ++e) {
      const int64_t j = a.col[e];
      const uint64_t bits = uint64_t(a.mask[e]);
      for (int64_t t = 0; t < T; ++t)
        if (bits >> t & 1) add_source(a, acc, j, t);
    }
    for (int64_t t = 0; t < T; ++t) {
      const acc_t d = a.dst_scale ? a.dst_scale[t * a.num_out + i] : acc_t(1);
      scalar_t* o = a.out + (t * a.num_out + i) * F;
      const acc_t* r = acc + t * F;
      for (int64_t f = 0; f < F; ++f) o[f] = scalar_t(d * r[f]);
    }
  }
}

template <typename scalar_t, typename index_t>
void snapshot_rows(const SnapshotArgs<scalar_t, index_t>& a, acc_type<scalar_t>* acc,
                   int64_t begin, int64_t end) {
  snapshot_rows_body(a, acc, begin, end);
}

#if FASTGNN_HAVE_AVX2_CLONE
template <typename scalar_t, typename index_t>
FASTGNN_TARGET_AVX2 void snapshot_rows_avx2(const SnapshotArgs<scalar_t, index_t>& a,
                                            acc_type<scalar_t>* acc, int64_t begin,
                                            int64_t end) {
  snapshot_rows_body(a, acc, begin, end);
}
#endif

template <typename scalar_t, typename index_t>
void run_snapshots(const SnapshotArgs<scalar_t, index_t>& a, int64_t nnz) {
  using acc_t = acc_type<scalar_t>;
  const int64_t avg_degree = std::max<int64_t>(1, nnz / std::max<int64_t>(1, a.num_out));
  const int64_t chunk = std::clamp<int64_t>(2048 / avg_degree, 1, 256);
  const int64_t chunks = (a.num_out + chunk - 1) / chunk;
#pragma omp parallel num_threads(num_threads())
  {
    std::vector<acc_t> acc(size_t(a.snapshots * a.width));
#pragma omp for schedule(dynamic, 1)
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t begin = c * chunk, end = std::min(a.num_out, begin + chunk);
#if FASTGNN_HAVE_AVX2_CLONE
      if (cpu_has_avx2()) {
        snapshot_rows_avx2(a, acc.data(), begin, end);
        continue;
      }
#endif
      snapshot_rows(a, acc.data(), begin, end);
    }
  }
}

void check_scale(const c10::optional<at::Tensor>& scale, const at::Tensor& x, int64_t rows,
                 const char* name) {
  if (!scale.has_value()) return;
  const auto acc = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  TORCH_CHECK(scale->scalar_type() == acc && scale->dim() == 2 && scale->size(0) == x.size(0) &&
                  scale->size(1) == rows && scale->device() == x.device(),
              "spmm_snapshots: ", name, " must be [T, ", rows, "] in the accumulation dtype on x's device");
}

at::Tensor spmm_snapshots_cpu(const at::Tensor& rowptr, const at::Tensor& shared_end,
                              const at::Tensor& col, const at::Tensor& mask, const at::Tensor& x,
                              const c10::optional<at::Tensor>& src_scale,
                              const c10::optional<at::Tensor>& dst_scale, int64_t num_out,
                              const c10::optional<at::Tensor>& /*t_rowptr*/,
                              const c10::optional<at::Tensor>& /*t_shared_end*/,
                              const c10::optional<at::Tensor>& /*t_col*/,
                              const c10::optional<at::Tensor>& /*t_mask*/,
                              int64_t /*graph_key*/, bool /*transposed: one CPU path*/) {
  check_csr(rowptr, col, "spmm_snapshots");
  TORCH_CHECK(x.dim() == 3, "spmm_snapshots: x must be [T, num_src, F], got ", x.dim(), " dims");
  TORCH_CHECK(x.size(0) <= 63, "spmm_snapshots: at most 63 snapshots, got ", x.size(0));
  TORCH_CHECK(rowptr.numel() == num_out + 1, "spmm_snapshots: rowptr must have num_out + 1 = ",
              num_out + 1, " entries, got ", rowptr.numel());
  TORCH_CHECK(shared_end.scalar_type() == col.scalar_type() && shared_end.dim() == 1 &&
                  shared_end.numel() == num_out && shared_end.is_contiguous(),
              "spmm_snapshots: shared_end must be [num_out] in the CSR's index dtype");
  TORCH_CHECK(mask.scalar_type() == at::kLong && mask.numel() == col.numel() &&
                  mask.is_contiguous(),
              "spmm_snapshots: mask must be int64 with one entry per edge");
  check_scale(src_scale, x, x.size(1), "src_scale");
  check_scale(dst_scale, x, num_out, "dst_scale");
  auto xc = x.contiguous();
  const int64_t T = x.size(0), width = x.size(2);
  auto out = at::empty({T, num_out, width}, x.options());
  if (out.numel() == 0) return out;
  at::Tensor ss = src_scale.has_value() ? src_scale->contiguous() : at::Tensor();
  at::Tensor ds = dst_scale.has_value() ? dst_scale->contiguous() : at::Tensor();
  FASTGNN_DISPATCH_INDEX(col.scalar_type(), "spmm_snapshots", [&] {
    FASTGNN_DISPATCH_FLOAT(x.scalar_type(), "spmm_snapshots", [&] {
      using acc_t = acc_type<scalar_t>;
      SnapshotArgs<scalar_t, index_t> a{
          rowptr.data_ptr<index_t>(), shared_end.data_ptr<index_t>(), col.data_ptr<index_t>(),
          mask.data_ptr<int64_t>(), xc.data_ptr<scalar_t>(),
          ss.defined() ? ss.data_ptr<acc_t>() : nullptr,
          ds.defined() ? ds.data_ptr<acc_t>() : nullptr, out.data_ptr<scalar_t>(), T,
          x.size(1), num_out, width};
      run_snapshots(a, col.numel());
    });
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(fastgnn, CPU, m) { m.impl("spmm_snapshots", &spmm_snapshots_cpu); }

}  // namespace cpu
}  // namespace fastgnn
