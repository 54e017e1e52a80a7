// Neighbour sampling shared by the CPU and CUDA kernels: the per-seed random streams and the
// choice of one seed's edges. A seed's draws are a pure function of (seed, seed position,
// draw number), so results depend neither on the thread count nor on the device: both
// devices run these same functions and pick the same edges.
#pragma once

#include <cstdint>

#include "attention_dropout.h"  // mix64, FASTGNN_HOST_DEVICE

namespace fastgnn {
namespace sampling {

// The d-th 64-bit word of the stream of the seed at position `position` (a splitmix64
// stream whose state starts from a hash of the call's seed and the position).
FASTGNN_HOST_DEVICE uint64_t draw(uint64_t seed, uint64_t position, uint64_t d) {
  const uint64_t key = mix64(seed ^ mix64(position ^ 0x6A09E667F3BCC909ull));
  return mix64(key + (d + 1) * 0x9E3779B97F4A7C15ull);
}

// A uniform integer in [0, n) from a 64-bit word (Lemire's multiply-high, no division).
FASTGNN_HOST_DEVICE int64_t below(uint64_t word, int64_t n) {
#ifdef __CUDA_ARCH__
  return int64_t(__umul64hi(word, uint64_t(n)));
#else
  return int64_t((unsigned __int128)word * uint64_t(n) >> 64);
#endif
}

// A uniform double in (0, 1].
FASTGNN_HOST_DEVICE double unit(uint64_t word) {
  return double((word >> 11) + 1) * (1.0 / 9007199254740992.0);
}

// How many edges a seed of `avail` candidate edges (degree, or positive-weight edges when
// weighted) takes: all for fanout < 0, fanout draws with replacement, else min(fanout, avail).
FASTGNN_HOST_DEVICE int64_t sample_count(int64_t degree, int64_t avail, int64_t fanout,
                                         bool replace) {
  if (fanout < 0) return degree;
  if (replace) return avail > 0 ? fanout : 0;
  return avail < fanout ? avail : fanout;
}

// Uniform choice of k of a row's `degree` edges, written as offsets into the row: every
// edge when k == degree (in row order), k independent draws with replacement, else Floyd's
// algorithm (k draws, each a distinct offset; membership by a scan of the choices so far,
// k is a fanout).
template <typename offset_t>
FASTGNN_HOST_DEVICE void choose_uniform(uint64_t seed, uint64_t position, int64_t degree,
                                        int64_t k, bool replace, offset_t* out) {
  if (k == degree && !replace) {
    for (int64_t j = 0; j < k; ++j) out[j] = offset_t(j);
    return;
  }
  if (replace) {
    for (int64_t j = 0; j < k; ++j) out[j] = offset_t(below(draw(seed, position, j), degree));
    return;
  }
  for (int64_t j = degree - k, d = 0; j < degree; ++j, ++d) {
    int64_t t = below(draw(seed, position, d), j + 1);
    for (int64_t c = 0; c < d; ++c) {
      if (int64_t(out[c]) == t) {
        t = j;
        break;
      }
    }
    out[d] = offset_t(t);
  }
}

// Open-addressing hash of node ids: slot of `key` in a table of mask + 1 slots.
FASTGNN_HOST_DEVICE uint64_t hash_slot(int64_t key, uint64_t mask) {
  return mix64(uint64_t(key)) & mask;
}

}  // namespace sampling
}  // namespace fastgnn
