// CPU snapshot SpMM over the window's one structure (shared edges first in each row, their
// masks unread). A thread owns a destination row at a time and sums each feature tile in
// vector registers; see run_snapshots for the order of rows and snapshots.
#include "cpu/cpu_common.h"

#include <torch/library.h>


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
  const acc_t* src_scale;  // source j's scale in snapshot t: src_scale[t * scale_t + j * scale_j]
  int64_t scale_t, scale_j;
  const acc_t* dst_scale;     // [T, num_out]
  scalar_t* out;
  int64_t snapshots, x_tstride, num_out, width;  // x_tstride 0: features shared by all
};

// Sums tile [f0, f0 + kTile) of row i of snapshot t into registers: the row's edges (read
// from L1 after the first snapshot) stream by while kVecs accumulators stay in registers.
template <int kVecs, typename scalar_t, typename index_t>
FASTGNN_ALWAYS_INLINE void snapshot_tile(const SnapshotArgs<scalar_t, index_t>& a, int64_t i,
                                         int64_t t, int64_t f0) {
  using V = AccVec<scalar_t>;
  using acc_t = acc_type<scalar_t>;
  typename V::type acc[kVecs];
  for (int k = 0; k < kVecs; ++k) acc[k] = typename V::type{};
  const scalar_t* xt = a.x + t * a.x_tstride + f0;
  const acc_t* scale = a.src_scale ? a.src_scale + t * a.scale_t : nullptr;
  auto add = [&](int64_t j) {
    const acc_t s = scale ? scale[j * a.scale_j] : acc_t(1);
    const scalar_t* xr = xt + j * a.width;
    for (int k = 0; k < kVecs; ++k) acc[k] += s * V::load(xr + k * V::kLanes);
  };
  const index_t shared = a.shared_end[i], stop = a.rowptr[i + 1];
  for (index_t e = a.rowptr[i]; e < shared; ++e) add(a.col[e]);
  for (index_t e = shared; e < stop; ++e)
    if (uint64_t(a.mask[e]) >> t & 1) add(a.col[e]);
  const acc_t d = a.dst_scale ? a.dst_scale[t * a.num_out + i] : acc_t(1);
  scalar_t* o = a.out + (t * a.num_out + i) * a.width + f0;
  for (int k = 0; k < kVecs; ++k) V::store(acc[k] * d, o + k * V::kLanes);
}

// The features past the last whole vector, one at a time.
template <typename scalar_t, typename index_t>
FASTGNN_ALWAYS_INLINE void snapshot_tail(const SnapshotArgs<scalar_t, index_t>& a, int64_t i,
                                         int64_t t, int64_t f0) {
  using acc_t = acc_type<scalar_t>;
  for (int64_t f = f0; f < a.width; ++f) {
    acc_t sum = 0;
    auto add = [&](int64_t j) {
      const acc_t s = a.src_scale ? a.src_scale[t * a.scale_t + j * a.scale_j] : acc_t(1);
      sum += s * acc_t(a.x[t * a.x_tstride + j * a.width + f]);
    };
    const index_t shared = a.shared_end[i], stop = a.rowptr[i + 1];
    for (index_t e = a.rowptr[i]; e < shared; ++e) add(a.col[e]);
    for (index_t e = shared; e < stop; ++e)
      if (uint64_t(a.mask[e]) >> t & 1) add(a.col[e]);
    const acc_t d = a.dst_scale ? a.dst_scale[t * a.num_out + i] : acc_t(1);
    a.out[(t * a.num_out + i) * a.width + f] = scalar_t(d * sum);
  }
}

// Rows [begin, end) of snapshots [t_begin, t_end): per row, per snapshot, register tiles of 8
// vectors (64 floats), then 4, then 1, then single features. A row's edge list and its sources'
// scales are read from memory once and from L1 for the other snapshots and tiles.
template <typename scalar_t, typename index_t>
FASTGNN_ALWAYS_INLINE void snapshot_rows_body(const SnapshotArgs<scalar_t, index_t>& a,
                                              int64_t begin, int64_t end, int64_t t_begin,
                                              int64_t t_end) {
  constexpr int64_t kLanes = AccVec<scalar_t>::kLanes;
  for (int64_t i = begin; i < end; ++i) {
    for (int64_t t = t_begin; t < t_end; ++t) {
      int64_t f = 0;
      for (; f + 8 * kLanes <= a.width; f += 8 * kLanes) snapshot_tile<8>(a, i, t, f);
      for (; f + 4 * kLanes <= a.width; f += 4 * kLanes) snapshot_tile<4>(a, i, t, f);
      for (; f + kLanes <= a.width; f += kLanes) snapshot_tile<1>(a, i, t, f);
      snapshot_tail(a, i, t, f);
    }
  }
}

// Features shared by every snapshot: one pass over the rows, all snapshots of a row in turn,
// so a source's features are read from memory once for all of them. Features of their own per
// snapshot: a pass per snapshot, which gathers from one [N, F] slice at a time (the cache
// locality of a per-snapshot spmm) over the shared structure.
template <typename scalar_t, typename index_t>
void run_snapshots(const SnapshotArgs<scalar_t, index_t>& a, int64_t nnz) {
  const int64_t avg_degree = std::max<int64_t>(1, nnz / std::max<int64_t>(1, a.num_out));
  const int64_t chunk = std::clamp<int64_t>(2048 / avg_degree, 1, 256);
  auto pass = [&](int64_t t_begin, int64_t t_end) {
    parallel_chunks(a.num_out, chunk, [&](int64_t begin, int64_t end) {
      on_best_isa<snapshot_rows_body<scalar_t, index_t>>(a, begin, end, t_begin, t_end);
    });
  };
  if (a.x_tstride == 0) {
    pass(0, a.snapshots);
  } else {
    for (int64_t t = 0; t < a.snapshots; ++t) pass(t, t + 1);
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
  // Features shared by every snapshot (an expanded [N, F]: snapshot stride 0) stay one copy.
  const bool shared_x = x.size(0) > 1 && x.stride(0) == 0 && x[0].is_contiguous();
  const auto xc = shared_x ? x : x.contiguous();
  const int64_t T = x.size(0), width = x.size(2);
  auto out = at::empty({T, num_out, width}, x.options());
  if (out.numel() == 0) return out;
  // The source scales in the order a pass reads them: [N, T] when a row visits every snapshot
  // (shared features), [T, N] for a pass per snapshot.
  at::Tensor ss = !src_scale.has_value() ? at::Tensor()
                  : shared_x ? src_scale->t().contiguous() : src_scale->contiguous();
  const int64_t scale_t = shared_x ? 1 : x.size(1), scale_j = shared_x ? T : 1;
  at::Tensor ds = dst_scale.has_value() ? dst_scale->contiguous() : at::Tensor();
  FASTGNN_DISPATCH_INDEX(col.scalar_type(), "spmm_snapshots", [&] {
    FASTGNN_DISPATCH_FLOAT(x.scalar_type(), "spmm_snapshots", [&] {
      using acc_t = acc_type<scalar_t>;
      SnapshotArgs<scalar_t, index_t> a{
          rowptr.data_ptr<index_t>(), shared_end.data_ptr<index_t>(), col.data_ptr<index_t>(),
          mask.data_ptr<int64_t>(), xc.data_ptr<scalar_t>(),
          ss.defined() ? ss.data_ptr<acc_t>() : nullptr, scale_t, scale_j,
          ds.defined() ? ds.data_ptr<acc_t>() : nullptr, out.data_ptr<scalar_t>(), T,
          shared_x ? 0 : x.size(1) * width, num_out, width};
      run_snapshots(a, col.numel());
    });
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(fastgnn, CPU, m) { m.impl("spmm_snapshots", &spmm_snapshots_cpu); }

}  // namespace cpu
}  // namespace fastgnn
