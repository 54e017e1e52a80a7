// Launcher of the snapshot SpMM CUDA kernel (raw pointers, sizes, stream; no torch).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernel_types.h"

namespace fastgnn {
namespace cuda {

// out[t, i] = dst_scale[t, i] * sum over edges e of row i in snapshot t of
// src_scale_nt[col[e], t] * x[t, col[e]], for x [T, num_src, width] (snapshot t's rows start
// at x + t * x_tstride; x_tstride 0: one [num_src, width] shared by every snapshot) and out
// [T, csr.rows, width]. Edges [rowptr[i], shared_end[i]) are in every snapshot; the others in
// those whose bit is set in mask[e]. shared_end has the CSR's index type; the scales (acc
// type; the source one transposed to [num_src, T], the destination one [T, rows]) may be
// null. A warp owns (work item, feature chunk, chunk of up to 8 snapshots) and reads each
// edge's index, mask and source scales once for all snapshots of its chunk; an item whose row
// has several items (item_slot >= 0) adds into out with atomics after those rows are zeroed
// here, and every other row is stored: out needs no initial value.
void spmm_snapshots(FloatType type, CsrView csr, SplitWorkView work, const void* shared_end,
                    const int64_t* mask,
                    const void* x, const void* src_scale_nt, const void* dst_scale, void* out,
                    int64_t snapshots, int64_t x_tstride, int64_t width, cudaStream_t stream);

}  // namespace cuda
}  // namespace fastgnn
