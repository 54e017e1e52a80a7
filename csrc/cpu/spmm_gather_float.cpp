// run_gather for float features (one translation unit per dtype: see spmm_gather.h).
#include "cpu/spmm_gather_kernels.h"

namespace fastgnn {
namespace cpu {
FASTGNN_GATHER_INSTANCES(float)
}  // namespace cpu
}  // namespace fastgnn
