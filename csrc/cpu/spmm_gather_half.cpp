// run_gather for c10::Half features (one translation unit per dtype: see spmm_gather.h).
#include "cpu/spmm_gather_kernels.h"

namespace fastgnn {
namespace cpu {
FASTGNN_GATHER_INSTANCES(c10::Half)
}  // namespace cpu
}  // namespace fastgnn
