// Launchers of the MaxK-family CUDA kernels (raw pointers, sizes, stream; no torch types).
// CBSR values have the feature type, indices the CbsrIndexType of the width; edge values are
// float (double for double features); `work` lists items of at most work.chunk edges of the
// CSR walked (see SplitWorkView).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernel_types.h"
#include "maxk_common.h"

namespace fastgnn {
namespace cuda {

// Widest row the top-k keeps in registers (32 entries a lane).
constexpr int64_t kMaxkSelectMaxWidth = 1024;

// Shared-memory bytes the dense row buffers of one block of the SpGEMM or pushed SSpMM may take
// (a warp's buffers at least: a row of this many bytes is the widest they take).
constexpr int64_t kMaxkRowBufferBytes = 48 * 1024;

// values/indices [rows, k] = the k largest entries of each row of x [rows, width], ascending
// columns, ties to the smallest column. A warp per row: a bitwise search for the k-th largest
// order key between bounds from the lanes' maxima (a warp-wide count per bit they leave open,
// at most 32), then a ballot compaction in column order. float32/16/bf16, width <=
// kMaxkSelectMaxWidth; indices of the CBSR index type of the width.
void maxk_select(FloatType type, CbsrIndexType index_type, const void* x, void* values,
                 void* indices, int64_t rows, int64_t width, int64_t k, cudaStream_t stream);

// out [csr.rows, width] = A h: a warp per work item sums value[e] * h[col[e]] into dense row
// buffers in shared memory, one per lane group (each group adds one edge's k kept entries at a
// time, without atomics, in a fixed order: bitwise reproducible), then writes the row (or its
// partial, combined in item order by a second kernel). partial holds work.slots * width
// accumulators.
void maxk_spgemm(FloatType type, CbsrIndexType index_type, CsrView csr, const void* value,
                 const void* values, const void* indices, void* out, void* partial,
                 SplitWorkView work, int64_t width, int64_t k, cudaStream_t stream);

// grad_values [t_csr.rows, k] = (A^T grad_out) at the CBSR pattern, pulled over the transposed
// CSR: a warp per work item gathers grad_out[t_col[e], indices[j, m]] for its source j
// (deterministic; partials combined in item order). partial: work.slots * k accumulators.
void maxk_sspmm_pull(FloatType type, CbsrIndexType index_type, CsrView t_csr,
                     const void* t_value, const void* grad_out, const void* indices,
                     void* grad_values, void* partial, SplitWorkView work, int64_t width,
                     int64_t k, cudaStream_t stream);

// The same product pushed over the forward CSR (the paper's outer product): a warp per work
// item holds its destination's grad_out row in shared memory and atomically adds
// value[e] * row[indices[j, m]] into acc[j, m] (zeroed by the caller; float, or double for
// double features) for every source j of the item.
void maxk_sspmm_push(FloatType type, CbsrIndexType index_type, CsrView csr, const void* value,
                     const void* grad_out, const void* indices, void* acc, SplitWorkView work,
                     int64_t width, int64_t k, cudaStream_t stream);

}  // namespace cuda
}  // namespace fastgnn
