// Device helpers shared by the CUDA kernels: scalar conversion, dispatch over the index and
// float types, warp reductions, launch checks. Only CUDA headers and our own light headers.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernel_types.h"

namespace fastgnn {
namespace cuda {

constexpr int kWarp = 32;

template <typename T> struct Scalar;
template <> struct Scalar<float> {
  using acc = float;
  __device__ static float load(float v) { return v; }
  __device__ static float store(float v) { return v; }
};
template <> struct Scalar<double> {
  using acc = double;
  __device__ static double load(double v) { return v; }
  __device__ static double store(double v) { return v; }
};
template <> struct Scalar<__half> {
  using acc = float;
  __device__ static float load(__half v) { return __half2float(v); }
  __device__ static __half store(float v) { return __float2half(v); }
};
template <> struct Scalar<__nv_bfloat16> {
  using acc = float;
  __device__ static float load(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ static __nv_bfloat16 store(float v) { return __float2bfloat16(v); }
};

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Sum of each of N values over each aligned segment of kLanes lanes (N and kLanes powers of
// two, N <= kLanes <= 32), left on every lane of the segment. The first log2(N) levels halve
// what a lane carries (it keeps the half its lane bit selects and sends the other), the rest
// reduce one value, and N broadcasts spread the sums: N = 4 over 32 lanes takes 10 shuffles
// instead of 20.
template <int N, int kLanes = kWarp, typename T>
__device__ __forceinline__ void warp_sum_each(T (&v)[N]) {
  static_assert(N >= 1 && N <= kLanes && kLanes <= kWarp && (N & (N - 1)) == 0 &&
                    (kLanes & (kLanes - 1)) == 0,
                "N and kLanes must be powers of two, N <= kLanes <= 32");
  const int lane = threadIdx.x % kWarp;
  T w[N];
#pragma unroll
  for (int n = 0; n < N; ++n) w[n] = v[n];
#pragma unroll
  for (int half = N / 2, offset = kLanes / 2; half >= 1; half /= 2, offset /= 2) {
    const bool upper = lane & offset;
#pragma unroll
    for (int n = 0; n < half; ++n) {
      const T send = upper ? w[n] : w[n + half];
      const T keep = upper ? w[n + half] : w[n];
      w[n] = keep + __shfl_xor_sync(0xffffffffu, send, offset);
    }
  }
#pragma unroll
  for (int offset = kLanes / (2 * N); offset > 0; offset /= 2)
    w[0] += __shfl_xor_sync(0xffffffffu, w[0], offset);
  // Lane l of a segment now holds the sum of value (l / (kLanes / N)).
  const int first = lane & ~(kLanes - 1);
#pragma unroll
  for (int n = 0; n < N; ++n) v[n] = __shfl_sync(0xffffffffu, w[0], first + n * (kLanes / N));
}

// N consecutive scalars moved as one aligned vector access (callers check the alignment).
template <typename T, int N>
struct alignas(sizeof(T) * N) Packet {
  T v[N];
};

template <typename T, int N>
__device__ __forceinline__ void load_packet(const T* p, typename Scalar<T>::acc (&out)[N]) {
  const Packet<T, N> packet = *reinterpret_cast<const Packet<T, N>*>(p);
#pragma unroll
  for (int k = 0; k < N; ++k) out[k] = Scalar<T>::load(packet.v[k]);
}

template <typename T, int N>
__device__ __forceinline__ void store_packet(T* p, const typename Scalar<T>::acc (&in)[N]) {
  Packet<T, N> packet;
#pragma unroll
  for (int k = 0; k < N; ++k) packet.v[k] = Scalar<T>::store(in[k]);
  *reinterpret_cast<Packet<T, N>*>(p) = packet;
}

// The widest packet (max_scalars, a power of two, down to 2 scalars, else 1) that divides the
// width and keeps every row of both buffers aligned.
inline int packet_size(int64_t width, int64_t scalar_bytes, const void* a, const void* b,
                       int max_scalars = 4) {
  for (int n = max_scalars; n >= 2; n /= 2) {
    const auto bytes = uintptr_t(n * scalar_bytes);
    if (width % n == 0 && uintptr_t(a) % bytes == 0 && uintptr_t(b) % bytes == 0) return n;
  }
  return 1;
}

inline void check_launch(const char* what) {
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

constexpr int64_t kMaxGridY = 65535;  // CUDA's limit on gridDim.y and gridDim.z

// Blocks for `work` threads of a grid-stride kernel, capped so huge inputs loop instead.
inline unsigned grid_for(int64_t work, int threads) {
  const int64_t blocks = ceil_div(work, threads);
  return unsigned(blocks < (int64_t(1) << 20) ? blocks : (int64_t(1) << 20));
}

// Calls f(std::integral_constant<int, N>) for a packet size N of 4, 2 or 1 (packet_size()),
// or 8 where kMaxVec allows it (only those callers instantiate their kernels at 8).
template <int kMaxVec = 4, typename F>
void dispatch_vec(int vec, F&& f) {
  if constexpr (kMaxVec >= 8) {
    if (vec == 8) {
      f(std::integral_constant<int, 8>{});
      return;
    }
  }
  switch (vec) {
    case 4: f(std::integral_constant<int, 4>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    default: f(std::integral_constant<int, 1>{}); break;
  }
}

// Calls f.template operator()<scalar_t>() for the runtime float type.
template <typename F>
void dispatch_float(FloatType type, F&& f) {
  switch (type) {
    case FloatType::kHalf: f(__half{}); break;
    case FloatType::kBFloat16: f(__nv_bfloat16{}); break;
    case FloatType::kFloat: f(float{}); break;
    case FloatType::kDouble: f(double{}); break;
  }
}

template <typename F>
void dispatch_index(bool index64, F&& f) {
  if (index64) f(int64_t{}); else f(int32_t{});
}

}  // namespace cuda
}  // namespace fastgnn
