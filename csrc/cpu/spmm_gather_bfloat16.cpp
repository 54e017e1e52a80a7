// run_gather for c10::BFloat16 features (one translation unit per dtype: see spmm_gather.h).
#include "cpu/spmm_gather_kernels.h"

namespace fastgnn {
namespace cpu {
FASTGNN_GATHER_INSTANCES(c10::BFloat16)
}  // namespace cpu
}  // namespace fastgnn
