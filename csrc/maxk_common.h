// What the CPU and CUDA MaxK kernels share (no torch headers): the order key that ranks a
// row's entries, and the CBSR column-index types.
//
// The top-k keeps the k largest entries of a row with ties going to the smallest column. The
// ranking runs on unsigned keys that order like the values: NaN counts as the largest value
// (as torch.topk does) and -0.0 equals +0.0.
#pragma once

#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define FASTGNN_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define FASTGNN_HOST_DEVICE inline
#endif

namespace fastgnn {

FASTGNN_HOST_DEVICE uint32_t maxk_order_key(float v) {
  if (v != v) return 0xffffffffu;
  v += 0.0f;  // -0.0 + 0.0 is +0.0
#ifdef __CUDA_ARCH__
  const uint32_t bits = __float_as_uint(v);
#else
  uint32_t bits;
  memcpy(&bits, &v, sizeof(bits));
#endif
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

FASTGNN_HOST_DEVICE uint64_t maxk_order_key(double v) {
  if (v != v) return ~uint64_t(0);
  v += 0.0;
#ifdef __CUDA_ARCH__
  const uint64_t bits = uint64_t(__double_as_longlong(v));
#else
  uint64_t bits;
  memcpy(&bits, &v, sizeof(bits));
#endif
  const uint64_t sign = uint64_t(1) << 63;
  return (bits & sign) ? ~bits : (bits | sign);
}

// CBSR column indices are stored in the narrowest type that holds the width: uint8 up to 256
// features, int16 up to 32768, int32 beyond (fastgnn/cbsr.py mirrors this rule).
enum class CbsrIndexType : int { kUInt8 = 0, kInt16 = 1, kInt32 = 2 };

inline CbsrIndexType cbsr_index_type(int64_t num_features) {
  if (num_features <= 256) return CbsrIndexType::kUInt8;
  if (num_features <= 32768) return CbsrIndexType::kInt16;
  return CbsrIndexType::kInt32;
}

}  // namespace fastgnn
