// Counter-based attention dropout shared by the CPU and CUDA kernels: whether edge e (CSR
// position) keeps head h is a pure function of (seed, offset, e, h), so the backward pass
// regenerates the forward's mask without storing it, and both devices agree bit for bit.
// The seed is a host value, or (seed_ptr) one read from memory when the kernel runs: a CUDA
// graph replay or a compiled graph then draws a fresh seed on the device each time, where a
// host value would be frozen into the graph.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define FASTGNN_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define FASTGNN_HOST_DEVICE inline
#endif

namespace fastgnn {

// splitmix64 finaliser: a bijective 64-bit mix with good avalanche.
FASTGNN_HOST_DEVICE uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Dropout parameters as the kernels see them: threshold 0 means no dropout.
struct DropoutSpec {
  uint64_t seed;
  const int64_t* seed_ptr;  // non-null: the seed is *seed_ptr (see resolved())
  uint64_t offset;
  uint32_t threshold;  // keep when a 24-bit uniform draw is >= threshold
  double keep_scale;   // 1 / (1 - p)
  int64_t heads;

  FASTGNN_HOST_DEVICE bool active() const { return threshold != 0; }

  // This spec with the seed read from seed_ptr, when set: kernels call it once at their start,
  // so that keep() reads no memory per edge.
  FASTGNN_HOST_DEVICE DropoutSpec resolved() const {
    DropoutSpec spec = *this;
    if (seed_ptr != nullptr) {
      spec.seed = uint64_t(*seed_ptr);
      spec.seed_ptr = nullptr;
    }
    return spec;
  }

  FASTGNN_HOST_DEVICE bool keep(int64_t edge, int64_t head) const {
    const uint64_t counter = offset + uint64_t(edge) * uint64_t(heads) + uint64_t(head);
    return uint32_t(mix64(seed ^ mix64(counter)) >> 40) >= threshold;
  }

  // The factor an edge's attention weight gets: 1 without dropout, else 0 or 1/(1-p).
  template <typename T>
  FASTGNN_HOST_DEVICE T factor(int64_t edge, int64_t head) const {
    if (!active()) return T(1);
    return keep(edge, head) ? T(keep_scale) : T(0);
  }
};

// seed_ptr (null: use seed) is kept only with dropout, so a spec without it reads no memory.
inline DropoutSpec make_dropout(double p, int64_t seed, const int64_t* seed_ptr, int64_t offset,
                                int64_t heads) {
  DropoutSpec spec{uint64_t(seed), nullptr, uint64_t(offset), 0u, 1.0, heads};
  if (p > 0) {
    spec.seed_ptr = seed_ptr;
    spec.threshold = uint32_t(p * 16777216.0);
    if (spec.threshold == 0) spec.threshold = 1;
    spec.keep_scale = 1.0 / (1.0 - p);
  }
  return spec;
}

}  // namespace fastgnn
