// run_gather for double features (one translation unit per dtype: see spmm_gather.h).
#include "cpu/spmm_gather_kernels.h"

namespace fastgnn {
namespace cpu {
FASTGNN_GATHER_INSTANCES(double)
}  // namespace cpu
}  // namespace fastgnn
