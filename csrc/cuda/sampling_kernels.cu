// CUDA neighbour sampling. One warp per seed chooses its edges with the same draws as the CPU
// kernel (csrc/sampling_common.h), so both devices pick the same edges: Floyd's algorithm
// runs its draws in parallel across the lanes and resolves collisions with a ballot per
// draw. A launch with rows enough to fill the GPU a lane each, of at most 32 edges, gives each
// row to a lane instead (rows_by_lane), the warp drawing its Floyd rows together. Sources are
// relabelled through a global open-addressing hash table (atomicCAS on keys, atomicMin on
// first edge positions) that a run of layers shares: after a layer its new nodes hold their
// ids, so the next layer starts from them without re-inserting. Each block row is sorted by
// local id by its warp (or lane), in the pass that assigns the local ids. Every
// pass runs over host-known bounds and reads the true counts on the device, so a mini-batch
// needs no sync between its layers. The two scans of a layer (row pointers, first edges) run
// inside the passes that produce their items (decoupled look-back), so the host makes no
// CUB call and no temp-size or occupancy query for them. The passes of warp-sorted layers
// serve several batches in one launch: grid row blockIdx.y runs batch blockIdx.y's task.
#include <algorithm>

#include <cub/device/device_segmented_sort.cuh>

#include "cuda/sampling_kernels.h"
#include "sampling_common.h"

namespace fastgnn {
namespace cuda {
namespace {

using sampling::below;
using sampling::draw;
using sampling::hash_slot;
using sampling::sample_count;
using sampling::unit;

constexpr int kThreads = 256;
constexpr int kWarp = 32;
constexpr int kWarpsPerBlock = kThreads / kWarp;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr long long kEmpty = -1;
// Rows a warp sorts by ranking every pair (fanout^2 / 32 comparisons per lane).
constexpr int64_t kWarpSortMaxFanout = 512;
// Layers of at most this fanout may give a seed's row to one lane, not to a warp: most rows of
// a sparse graph are a few edges long (ogbn-arxiv's in-edges: about 2 a sampled seed), and a
// warp per row leaves most lanes idle and launches a block per 8 rows. Taken when a launch has
// rows enough to fill the GPU by lanes; with fewer, a warp per row has more edges in flight
// (H100, ogbn-arxiv [15, 10]: one batch a call 40% slower by lanes, 160 batches 20% faster).
constexpr int64_t kLaneMaxFanout = 32;
constexpr int kLaneSortThreads = 128;  // the lane sort's shared keys: 128 x 32 x 8 bytes at most

inline unsigned blocks_for(int64_t n) { return unsigned((n + kThreads - 1) / kThreads); }
inline unsigned warp_blocks_for(int64_t warps) {
  return unsigned((warps + kWarpsPerBlock - 1) / kWarpsPerBlock);
}
__device__ int64_t warp_index() {
  return (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / kWarp;
}
__device__ int lane() { return threadIdx.x % kWarp; }

__device__ int64_t thread_index() { return blockIdx.x * int64_t(blockDim.x) + threadIdx.x; }
__device__ int64_t thread_count() { return int64_t(gridDim.x) * blockDim.x; }

// The task of this grid row: the launch's own (`one`, a __grid_constant__ parameter, read in
// place) or, when the launch serves several batches, batch blockIdx.y's.
__device__ const LayerTask& task_of(const LayerTask& one, const LayerTask* many) {
  return many == nullptr ? one : many[blockIdx.y];
}

__device__ int64_t known_count(const SampleLayer& in) {
  return in.known_host >= 0 ? in.known_host : *in.known;
}
__device__ int64_t seeds_begin(const SampleLayer& in) {
  return in.begin_host >= 0 ? in.begin_host : *in.begin;
}

template <typename index_t>
__device__ int64_t row_begin(const SampleLayer& in, int64_t v) {
  return int64_t(static_cast<const index_t*>(in.rowptr)[v]);
}

template <typename index_t>
__device__ int64_t source_of(const SampleLayer& in, int64_t position) {
  return int64_t(static_cast<const index_t*>(in.col)[position]);
}

__device__ int64_t warp_sum(int64_t x) {
  for (int o = kWarp / 2; o > 0; o /= 2) x += __shfl_xor_sync(kFullMask, x, o);
  return x;
}

// ---- single-pass scan (decoupled look-back) ----------------------------------------------------
// A pass whose threads each produce one item of a scan also scans them, in tiles of kThreads:
// a block claims the next tile (so every earlier tile belongs to a block that already runs and
// publishes without waiting on later ones), publishes its tile's sum, then adds the sums that
// earlier tiles published, 32 at a time, back to the nearest one that published its inclusive
// prefix, and publishes its own. A status word packs a flag and a 62-bit value, so one 64-bit
// store publishes both; all-ones (the cleared state) is neither flag. (The sums here are edge
// and node counts, far below 2^62.)
constexpr unsigned long long kTilePending = ~0ull;
constexpr unsigned long long kTileInclusive = 1ull << 63;
constexpr unsigned long long kTileAggregate = 1ull << 62;
constexpr unsigned long long kTileValue = kTileAggregate - 1;

__host__ __device__ int64_t tiles_for(int64_t n) { return (n + kThreads - 1) / kThreads; }

// The block's tile (the counter starts cleared, at all-ones: the first claim gets 0). Every
// thread of the block calls it, once per kernel.
__device__ int64_t claim_tile(const ScanState& scan) {
  __shared__ int64_t tile;
  if (threadIdx.x == 0) tile = int64_t(atomicAdd(scan.words, 1ull) + 1ull);
  __syncthreads();
  return tile;
}

// x's exclusive prefix over the block's threads, and (*total) the block's sum. Every thread of
// the block calls it, once per kernel.
__device__ int64_t block_exclusive_sum(int64_t x, int64_t* total) {
  __shared__ int64_t warp_sums[kWarpsPerBlock];
  int64_t inclusive = x;
  for (int o = 1; o < kWarp; o *= 2) {
    const int64_t y = __shfl_up_sync(kFullMask, inclusive, o);
    if (lane() >= o) inclusive += y;
  }
  const int warp = threadIdx.x / kWarp;
  if (lane() == kWarp - 1) warp_sums[warp] = inclusive;
  __syncthreads();
  int64_t before = 0, sum = 0;
  for (int w = 0; w < kWarpsPerBlock; ++w) {
    before += w < warp ? warp_sums[w] : 0;
    sum += warp_sums[w];
  }
  *total = sum;
  return before + inclusive - x;
}

__device__ void publish(unsigned long long* word, unsigned long long flag, int64_t value) {
  atomicExch(word, flag | (static_cast<unsigned long long>(value) & kTileValue));
}

// A tile's status once it has published (a spin; the tile's block runs, see above).
__device__ unsigned long long published(const unsigned long long* word) {
  unsigned long long status;
  do {
    status = *static_cast<const volatile unsigned long long*>(word);
  } while (status == kTilePending);
  return status;
}

// The sum of every tile before `tile`, whose own sum is `aggregate`. Warp 0 looks back; every
// thread of the block calls it, once per kernel.
__device__ int64_t tile_prefix(const ScanState& scan, int64_t tile, int64_t aggregate) {
  __shared__ int64_t prefix;
  unsigned long long* status = scan.words + 1;
  if (threadIdx.x < kWarp) {
    int64_t sum = 0;
    if (tile > 0) {
      if (lane() == 0) publish(&status[tile], kTileAggregate, aggregate);
      // Lane j reads tile end - 1 - j; tile 0 is always inclusive, so the window that reaches
      // it stops there (lanes before tile 0 read as an inclusive 0).
      for (int64_t end = tile;; end -= kWarp) {
        const int64_t p = end - 1 - lane();
        const unsigned long long word = p >= 0 ? published(&status[p]) : kTileInclusive;
        const unsigned inclusive = __ballot_sync(kFullMask, (word & kTileInclusive) != 0);
        const int last = inclusive != 0 ? __ffs(int(inclusive)) - 1 : kWarp - 1;
        sum += warp_sum(lane() <= last ? int64_t(word & kTileValue) : 0);
        if (inclusive != 0) break;
      }
    }
    if (lane() == 0) {
      publish(&status[tile], kTileInclusive, sum + aggregate);
      prefix = sum;
    }
  }
  __syncthreads();
  return prefix;
}

// ---- the hash table --------------------------------------------------------------------------
// The slot holding `key`, inserting it when absent; *inserted says whether this call did.
__device__ uint64_t claim_slot(const SampleTable& t, int64_t key, bool* inserted) {
  const uint64_t mask = t.capacity - 1;
  for (uint64_t slot = hash_slot(key, mask);; slot = (slot + 1) & mask) {
    const long long held = atomicCAS(reinterpret_cast<unsigned long long*>(&t.keys[slot]),
                                     (unsigned long long)kEmpty, (unsigned long long)key);
    if (held == kEmpty || held == key) {
      *inserted = held == kEmpty;
      return slot;
    }
  }
}

__device__ uint64_t find_slot(const SampleTable& t, int64_t key) {
  const uint64_t mask = t.capacity - 1;
  uint64_t slot = hash_slot(key, mask);
  while (t.keys[slot] != key) slot = (slot + 1) & mask;
  return slot;
}

__device__ void raise_flag(int64_t* flag) {
  atomicExch(reinterpret_cast<unsigned long long*>(flag), 1ull);
}

// A run's start: its known nodes keep their positions as ids (and are checked: the first
// run's are the user's seeds).
__device__ void start_nodes(const SampleLayer& in, const RunStart& start, const SampleTable& t) {
  for (int64_t k = thread_index(); k < start.count; k += thread_count()) {
    const int64_t v = start.nodes[k];
    in.nodes_out[k] = v;
    if (v < 0 || v >= in.num_rows) raise_flag(in.out_of_range);
    bool inserted;
    const uint64_t slot = claim_slot(t, v, &inserted);
    if (!inserted) raise_flag(in.duplicate);
    t.values[slot] = (unsigned long long)k;
  }
}

__global__ void start_kernel(SampleLayer in, RunStart start, SampleTable t) {
  start_nodes(in, start, t);
}

// ---- row pointers ----------------------------------------------------------------------------
// How many edges seed i takes (0 past the true seed count, so the scan can run over the bound).
// Weighted rows count their positive weights only as far as the count depends on them
// (sample_count takes min(fanout, avail), or avail > 0 with replacement), four at a time.
template <typename index_t>
__device__ int64_t seed_count(const SampleLayer& in, int64_t i) {
  const int64_t first = seeds_begin(in);
  if (i >= in.seeds_bound || i >= known_count(in) - first) return 0;
  const int64_t v = in.nodes[first + i];
  if (v < 0 || v >= in.num_rows) return 0;  // flagged by the run's start
  const int64_t begin = row_begin<index_t>(in, v), degree = row_begin<index_t>(in, v + 1) - begin;
  if (in.weight == nullptr || in.fanout < 0) {
    return sample_count(degree, degree, in.fanout, in.replace);
  }
  const int64_t enough = in.fanout == 0 ? 0 : in.replace ? 1 : in.fanout;
  const float* w = in.weight + begin;
  int64_t positive = 0;
  for (int64_t o = 0; o < degree && positive < enough; o += 4) {
#pragma unroll
    for (int u = 0; u < 4; ++u) positive += o + u < degree && w[o + u] > 0.f;
  }
  return sample_count(degree, positive, in.fanout, in.replace);
}

// Thread i counts seed i's edges; the block scans its tile into ptr[i + 1] (ptr[0] = 0).
// Thread 0 also resets the layer's counters; the run's start (when given) goes first.
template <typename index_t>
__global__ void __launch_bounds__(kThreads)
    counts_kernel(const __grid_constant__ LayerTask one, const LayerTask* many) {
  const LayerTask& task = task_of(one, many);
  const SampleLayer& in = task.in;
  int64_t* ptr = task.scratch.ptr;
  start_nodes(in, task.start, task.table);
  if (thread_index() == 0) {
    ptr[0] = 0;
    *in.fresh = 0;
    if (in.known_host >= 0) *in.known = in.known_host;
  }
  const int64_t tile = claim_tile(task.count_scan);
  if (tile >= tiles_for(in.seeds_bound)) return;  // the whole block (grids cover the start too)
  const int64_t i = tile * kThreads + threadIdx.x;
  const int64_t count = seed_count<index_t>(in, i);
  int64_t total;
  const int64_t before = block_exclusive_sum(count, &total);
  const int64_t prefix = tile_prefix(task.count_scan, tile, total);
  if (i < in.seeds_bound) ptr[i + 1] = prefix + before + count;
}

// ---- choice of a seed's edges (offsets into its row, by one warp) ------------------------------
// Floyd's algorithm as the CPU runs it: draw d picks t_d in [0, j_d] (j_d = degree - k + d)
// and takes j_d instead when an earlier draw holds t_d. The draws are independent, so the
// lanes make 32 at once; a draw then only has to learn whether an earlier one holds t_d: the
// earlier chunks are final in `out`, the chunk's own lanes resolve in order by ballot.
__device__ void choose_floyd(uint64_t seed, uint64_t position, int64_t degree, int64_t k,
                             int64_t* out) {
  for (int64_t base = 0; base < k; base += kWarp) {
    const int64_t d = base + lane();
    const bool active = d < k;
    const int64_t j = degree - k + d;
    const int64_t t = active ? below(draw(seed, position, d), j + 1) : -1;
    bool held_before = false;
    for (int64_t c = 0; active && c < base && !held_before; ++c) held_before = out[c] == t;
    int64_t mine = t;
    const int steps = int(k - base < kWarp ? k - base : kWarp);
    for (int s = 0; s < steps; ++s) {
      const int64_t ts = __shfl_sync(kFullMask, t, s);
      const bool taken = __ballot_sync(kFullMask, lane() < s && mine == ts) != 0;
      const bool held = __shfl_sync(kFullMask, held_before, s);
      if (lane() == s && (taken || held)) mine = j;
    }
    if (active) out[d] = mine;
    __syncwarp();
  }
}

// The larger of two (key, offset) candidates: larger key, ties to the smaller offset.
__device__ bool better(double key, int64_t offset, double best, int64_t best_offset) {
  return best_offset < 0 || (offset >= 0 && (key > best || (key == best && offset < best_offset)));
}

// Weighted choice by one warp. With replacement, each lane makes its draws by the CPU's
// inverse CDF (sequential prefix sums, so the same doubles). Without: the k largest keys
// log(u) / w, one warp-wide maximum per pick over the keys below the previous pick.
__device__ void choose_weighted(uint64_t seed, uint64_t position, const float* w,
                                int64_t degree, int64_t k, bool replace, int64_t* out) {
  if (replace) {
    double total = 0;
    for (int64_t o = 0; o < degree; ++o) total += w[o];
    for (int64_t j = lane(); j < k; j += kWarp) {
      const double x = unit(draw(seed, position, j)) * total;
      double prefix = 0;
      int64_t o = 0;
      for (; o < degree - 1; ++o) {
        prefix += w[o];
        if (prefix >= x) break;
      }
      out[j] = o;
    }
    return;
  }
  double last_key = 0;
  int64_t last_offset = -1;
  for (int64_t j = 0; j < k; ++j) {
    double best = -INFINITY;
    int64_t best_offset = -1;
    for (int64_t o = lane(); o < degree; o += kWarp) {
      if (!(w[o] > 0.f)) continue;
      const double key = log(unit(draw(seed, position, o))) / w[o];
      const bool below_last = last_offset < 0 || key < last_key ||
                              (key == last_key && o > last_offset);
      if (below_last && better(key, o, best, best_offset)) {
        best = key;
        best_offset = o;
      }
    }
    for (int s = kWarp / 2; s > 0; s /= 2) {
      const double other = __shfl_xor_sync(kFullMask, best, s);
      const int64_t other_offset = __shfl_xor_sync(kFullMask, best_offset, s);
      if (better(other, other_offset, best, best_offset)) {
        best = other;
        best_offset = other_offset;
      }
    }
    if (lane() == 0) out[j] = best_offset;
    last_key = best;
    last_offset = best_offset;
  }
}

// Edge e's source (its offset into the row at `begin`, in pos[e], made a position) into the
// table, for the lanes with `live` edges; every lane of the warp calls it. Deterministic
// numbering keeps each source's first edge (known + e); unordered ids take one atomicAdd a
// call for the sources the warp inserted (one per insert serialised every warp of a batch on
// its counter).
template <typename index_t>
__device__ void insert_edge(const SampleLayer& in, const SampleTable& t, int64_t* pos, int64_t e,
                            int64_t begin, bool live, bool deterministic, int64_t known) {
  int64_t key = -1;
  uint64_t slot = 0;
  bool inserted = false;
  if (live) {
    const int64_t p = pos[e] + begin;
    pos[e] = p;
    key = source_of<index_t>(in, p);
    slot = claim_slot(t, key, &inserted);
    if (deterministic) atomicMin(&t.values[slot], (unsigned long long)(known + e));
  }
  if (deterministic) return;
  const unsigned fresh = __ballot_sync(kFullMask, inserted);
  if (fresh == 0) return;
  const int leader = __ffs(int(fresh)) - 1;
  unsigned long long first = 0;
  if (lane() == leader) {
    first = atomicAdd(reinterpret_cast<unsigned long long*>(in.fresh),
                      (unsigned long long)__popc(fresh));
  }
  first = __shfl_sync(kFullMask, first, leader);
  if (inserted) {
    const int64_t id = known + int64_t(first) + __popc(fresh & ((1u << lane()) - 1u));
    t.values[slot] = (unsigned long long)id;
    in.nodes_out[id] = key;
  }
}

// Seed i's edges by warp i (any fanout, weights, replacement), then their sources into the
// table.
template <typename index_t>
__global__ void positions_kernel(const __grid_constant__ LayerTask one, bool deterministic,
                                 const LayerTask* many) {
  const LayerTask& task = task_of(one, many);
  const SampleLayer& in = task.in;
  const SampleTable& t = task.table;
  const int64_t* ptr = task.scratch.ptr;
  int64_t* pos = task.scratch.pos;
  const int64_t i = warp_index();
  if (i >= in.seeds_bound) return;
  const int64_t k = ptr[i + 1] - ptr[i];
  if (k == 0) return;  // also every seed past the true count, and every out-of-range node
  const int64_t v = in.nodes[seeds_begin(in) + i];
  const int64_t begin = row_begin<index_t>(in, v), degree = row_begin<index_t>(in, v + 1) - begin;
  int64_t* out = pos + ptr[i];
  const bool replace = in.replace && in.fanout >= 0;  // -1: every edge once
  if (in.weight != nullptr && in.fanout >= 0) {
    choose_weighted(in.seed, i, in.weight + begin, degree, k, in.replace, out);
  } else if (k == degree && !replace) {
    for (int64_t j = lane(); j < k; j += kWarp) out[j] = j;
  } else if (replace) {
    for (int64_t j = lane(); j < k; j += kWarp) out[j] = below(draw(in.seed, i, j), degree);
  } else {
    choose_floyd(in.seed, i, degree, k, out);
  }
  __syncwarp();
  const int64_t known = known_count(in);
  for (int64_t base = 0; base < k; base += kWarp) {  // every lane in every step (the ballot)
    const int64_t j = base + lane();
    insert_edge<index_t>(in, t, pos, ptr[i] + j, begin, j < k, deterministic, known);
  }
}

// Seed i's edges by lane i % 32 of a warp that holds 32 seeds, for unweighted layers without
// replacement whose fanout is at most kLaneMaxFanout: a row that takes every edge is its own
// lane's; the warp draws each Floyd row (one longer than the fanout) together, with the
// warp-per-seed kernel's draws; then each lane inserts its own row's sources.
template <typename index_t>
__global__ void __launch_bounds__(kThreads)
    positions_by_lane_kernel(const __grid_constant__ LayerTask one, bool deterministic,
                             const LayerTask* many) {
  const LayerTask& task = task_of(one, many);
  const SampleLayer& in = task.in;
  const int64_t* ptr = task.scratch.ptr;
  int64_t* pos = task.scratch.pos;
  const int64_t i = thread_index(), warp_first = i - lane();
  if (warp_first >= in.seeds_bound) return;  // the whole warp
  int64_t at = 0, k = 0, begin = 0, degree = 0;
  if (i < in.seeds_bound) {
    at = ptr[i];
    k = ptr[i + 1] - at;  // 0 past the true count, and for out-of-range nodes
  }
  if (k > 0) {
    const int64_t v = in.nodes[seeds_begin(in) + i];
    begin = row_begin<index_t>(in, v);
    degree = row_begin<index_t>(in, v + 1) - begin;
  }
  const bool floyd = k > 0 && k < degree;
  if (k > 0 && !floyd) {
    for (int64_t j = 0; j < k; ++j) pos[at + j] = j;
  }
  for (unsigned rows = __ballot_sync(kFullMask, floyd); rows != 0; rows &= rows - 1) {
    const int s = __ffs(int(rows)) - 1;
    choose_floyd(in.seed, uint64_t(warp_first + s), __shfl_sync(kFullMask, degree, s),
                 __shfl_sync(kFullMask, k, s), pos + __shfl_sync(kFullMask, at, s));
  }
  __syncwarp();
  const int64_t known = known_count(in);
  const int most = __reduce_max_sync(kFullMask, unsigned(k));  // every lane in every step
  for (int j = 0; j < most; ++j) {
    insert_edge<index_t>(in, task.table, pos, at + j, begin, j < k, deterministic, known);
  }
}

// ---- relabelling -----------------------------------------------------------------------------
// Deterministic numbering: value_of[e] = the slot value of edge e's source (after
// positions_kernel: the known node's id, or num_known + the position of its first edge), and
// rank[e] = the first edges before e (a scan of "e is its source's first edge", in this pass).
template <typename index_t>
__global__ void __launch_bounds__(kThreads)
    first_edges_kernel(const __grid_constant__ LayerTask one, const LayerTask* many) {
  const LayerTask& task = task_of(one, many);
  const SampleLayer& in = task.in;
  const SampleTable& t = task.table;
  const ScanState& scan = task.scratch.first_scan;
  const int64_t* pos = task.scratch.pos;
  int64_t* value_of = task.scratch.value_of;
  int64_t* rank = task.scratch.rank;
  // The row-pointer scan ends with the edge count. The grid covers the bound: blocks past the
  // true count's tiles leave before claiming one, so the first blocks claim tiles 0, 1, ...
  // in some order between them, and no block contends for the claim counter for nothing.
  const int64_t num_edges = task.scratch.ptr[in.seeds_bound];
  if (int64_t(blockIdx.x) >= tiles_for(num_edges)) return;  // the whole block
  const int64_t tile = claim_tile(scan);
  const int64_t e = tile * kThreads + threadIdx.x;
  int64_t first = 0;
  if (e < num_edges) {
    const int64_t value = int64_t(t.values[find_slot(t, source_of<index_t>(in, pos[e]))]);
    value_of[e] = value;
    first = value == known_count(in) + e;
  }
  int64_t total;
  const int64_t before = block_exclusive_sum(first, &total);
  const int64_t prefix = tile_prefix(scan, tile, total);
  if (e < num_edges) rank[e] = prefix + before;
}

// What the pass that assigns local ids reads.
struct Relabel {
  bool deterministic;
  const int64_t* pos;
  const int64_t* value_of;  // deterministic
  const int64_t* rank;      // deterministic
};

__host__ __device__ Relabel relabel_of(bool deterministic, const LayerScratch& scratch) {
  return Relabel{deterministic, scratch.pos, scratch.value_of, scratch.rank};
}

// Edge e's local id. Deterministic: a known source's own id, else known + the rank of its
// source's first edge; that first edge also writes the new node into nodes_out and its id into
// the table for the run's next layer (this pass reads value_of, not the table). Unordered: the
// id positions_kernel gave, from the table.
template <typename index_t>
__device__ int64_t local_id(const SampleLayer& in, const SampleTable& t, const Relabel& r,
                            int64_t known, int64_t e) {
  if (!r.deterministic) {
    return int64_t(t.values[find_slot(t, source_of<index_t>(in, r.pos[e]))]);
  }
  const int64_t value = r.value_of[e];
  if (value < known) return value;
  const int64_t first = value - known, id = known + r.rank[first];
  if (first == e) {
    const int64_t key = source_of<index_t>(in, r.pos[e]);
    in.nodes_out[id] = key;
    t.values[find_slot(t, key)] = (unsigned long long)id;
  }
  return id;
}

// The layer's counts (thread 0 of the pass that assigns local ids): the nodes known after it
// and its edges.
__device__ void write_counts(const SampleLayer& in, const Relabel& r, int64_t known,
                             int64_t num_edges) {
  int64_t added = 0;
  if (!r.deterministic) {
    added = *in.fresh;
  } else if (num_edges > 0) {
    const int64_t last = num_edges - 1;
    added = r.rank[last] + (r.value_of[last] == known + last);
  }
  *in.known_next = known + added;
  *in.num_edges = num_edges;
}

__device__ int64_t edge_id(const SampleLayer& in, int64_t position) {
  return in.edge_map == nullptr ? position : in.edge_map[position];
}

// ---- rows of at most kWarpSortMaxFanout edges: ids and sort in one pass ------------------------
// Row i's group (warp i, or with by_lane thread i, for rows of at most kLaneMaxFanout) assigns
// its local ids into the group's part of shared memory (fanout entries), then each pair lands
// at its rank: the number of pairs with a smaller local id, or an equal one earlier in the row
// (stable, as the CPU's insertion sort). Group num_seeds writes the last row pointer.
template <typename index_t, typename out_t, bool by_lane>
__global__ void __launch_bounds__(kThreads)
    sort_rows_kernel(const __grid_constant__ LayerTask one, bool deterministic,
                     const LayerTask* many) {
  extern __shared__ __align__(8) unsigned char row_keys[];
  const LayerTask& task = task_of(one, many);
  const SampleLayer& in = task.in;
  const SampleTable& t = task.table;
  const Relabel r = relabel_of(deterministic, task.scratch);
  const int64_t* ptr = task.scratch.ptr;
  out_t* rowptr_out = static_cast<out_t*>(task.out.rowptr);
  out_t* local_out = static_cast<out_t*>(task.out.col);
  int64_t* edge_ids = task.out.edge_ids;
  const int64_t known = known_count(in), num_seeds = known - seeds_begin(in);
  if (thread_index() == 0) write_counts(in, r, known, ptr[in.seeds_bound]);
  // The group's row, its entries for this thread (first, first + step, ...) and its keys.
  const int64_t i = by_lane ? thread_index() : warp_index();
  const int first = by_lane ? 0 : lane(), step = by_lane ? 1 : kWarp;
  if (i > num_seeds) return;  // the whole group
  if (first == 0) rowptr_out[i] = out_t(ptr[i]);
  if (i == num_seeds) return;
  const int64_t begin = ptr[i], length = ptr[i + 1] - begin;  // <= fanout
  const unsigned group = by_lane ? threadIdx.x : threadIdx.x / kWarp;
  out_t* keys = reinterpret_cast<out_t*>(row_keys) + group * in.fanout;
  for (int64_t a = first; a < length; a += step) {
    keys[a] = out_t(local_id<index_t>(in, t, r, known, begin + a));
  }
  if (!by_lane) __syncwarp();
  for (int64_t a = first; a < length; a += step) {
    const out_t key = keys[a];
    int64_t rank = 0;
    for (int64_t b = 0; b < length; ++b) rank += keys[b] < key || (keys[b] == key && b < a);
    local_out[begin + rank] = key;
    edge_ids[begin + rank] = edge_id(in, r.pos[begin + a]);
  }
}

// ---- long rows (fanout -1 or > kWarpSortMaxFanout): ids, CUB's segmented sort, finish --------
template <typename index_t, typename out_t>
__global__ void assign_kernel(SampleLayer in, SampleTable t, Relabel r, int64_t num_edges,
                              out_t* local) {
  const int64_t known = known_count(in);
  if (thread_index() == 0) write_counts(in, r, known, num_edges);
  for (int64_t e = thread_index(); e < num_edges; e += thread_count()) {
    local[e] = out_t(local_id<index_t>(in, t, r, known, e));
  }
}

// After the segmented sort: the row pointers in the local id type, positions to edge ids.
template <typename out_t>
__global__ void finish_rows_kernel(SampleLayer in, const int64_t* ptr, int64_t num_edges,
                                   out_t* rowptr_out, int64_t* edge_ids) {
  const int64_t num_seeds = known_count(in) - seeds_begin(in);
  for (int64_t i = thread_index(); i <= num_seeds; i += thread_count()) {
    rowptr_out[i] = out_t(ptr[i]);
  }
  if (in.edge_map == nullptr) return;
  for (int64_t e = thread_index(); e < num_edges; e += thread_count()) {
    edge_ids[e] = in.edge_map[edge_ids[e]];
  }
}

// Runs launch(index_t{}) for the graph's index type.
template <typename Launch>
void by_index(bool index64, const Launch& launch) {
  if (index64) {
    launch(int64_t{});
  } else {
    launch(int32_t{});
  }
}

template <typename Launch>
void by_local(bool local64, const Launch& launch) {
  if (local64) {
    launch(int64_t{});
  } else {
    launch(int32_t{});
  }
}

// Blocks of kThreads for n threads (at least one: thread 0 writes counters).
unsigned grid_for(int64_t n) { return std::max(1u, blocks_for(n)); }

}  // namespace

// At most 80% full should the host's bound on the nodes be reached, which it seldom nears
// (ogbn-arxiv, fanouts [15, 10]: 170k bound, about 16k nodes a batch). Every slot is cleared
// by the call's memset; at twice the bound that memset took 18% of a 160-batch call's GPU time.
uint64_t table_capacity(int64_t max_nodes) {
  uint64_t capacity = 32;
  while (capacity < uint64_t(max_nodes + max_nodes / 4 + 1)) capacity <<= 1;
  return capacity;
}

size_t scan_words(int64_t n) { return size_t(1 + tiles_for(n)); }

void count_edges(const LayerTask& task, const Batches& batches, cudaStream_t stream) {
  const unsigned blocks =
      std::max({1u, unsigned(tiles_for(task.in.seeds_bound)), blocks_for(task.start.count)});
  by_index(task.in.index64, [&](auto index) {
    counts_kernel<decltype(index)><<<dim3(blocks, batches.count), kThreads, 0, stream>>>(
        task, batches.tasks);
  });
}

void start_run(const LayerTask& task, cudaStream_t stream) {
  start_kernel<<<grid_for(task.start.count), kThreads, 0, stream>>>(task.in, task.start,
                                                                    task.table);
}

void sample_edges(const LayerTask& task, bool deterministic, const Batches& batches,
                  cudaStream_t stream) {
  by_index(task.in.index64, [&](auto index) {
    using index_t = decltype(index);
    const SampleLayer& in = task.in;
    if (in.seeds_bound > 0 && in.rows_by_lane && in.weight == nullptr && !in.replace) {
      positions_by_lane_kernel<index_t>
          <<<dim3(blocks_for(in.seeds_bound), batches.count), kThreads, 0, stream>>>(
              task, deterministic, batches.tasks);
    } else if (in.seeds_bound > 0) {
      positions_kernel<index_t>
          <<<dim3(warp_blocks_for(in.seeds_bound), batches.count), kThreads, 0, stream>>>(
              task, deterministic, batches.tasks);
    }
    if (deterministic) {
      first_edges_kernel<index_t>
          <<<dim3(grid_for(task.in.edges_bound), batches.count), kThreads, 0, stream>>>(
              task, batches.tasks);
    }
  });
}

bool warp_sortable(int64_t fanout) { return fanout >= 0 && fanout <= kWarpSortMaxFanout; }

bool rows_by_lane(int64_t fanout, int64_t rows, int64_t resident_threads) {
  return fanout >= 0 && fanout <= kLaneMaxFanout && rows >= resident_threads;
}

size_t segmented_sort_temp_bytes(int64_t num_edges, int64_t num_segments, bool local64) {
  size_t bytes = 0;
  by_local(local64, [&](auto local_index) {
    using out_t = decltype(local_index);
    cub::DeviceSegmentedSort::StableSortPairs(
        nullptr, bytes, static_cast<const out_t*>(nullptr), static_cast<out_t*>(nullptr),
        static_cast<const int64_t*>(nullptr), static_cast<int64_t*>(nullptr), num_edges,
        num_segments, static_cast<const int64_t*>(nullptr), static_cast<const int64_t*>(nullptr));
  });
  return bytes;
}

void write_rows(const LayerTask& task, bool deterministic, bool local64, int64_t exact_edges,
                const Batches& batches, cudaStream_t stream) {
  const SampleLayer& in = task.in;
  const LayerScratch& scratch = task.scratch;
  const LayerOutput& out = task.out;
  by_index(in.index64, [&](auto index) {
    using index_t = decltype(index);
    by_local(local64, [&](auto local_index) {
      using out_t = decltype(local_index);
      if (exact_edges < 0) {  // a thread's or a warp's keys in shared memory
        const bool lanes = in.rows_by_lane;
        const int threads = lanes ? kLaneSortThreads : kThreads;
        const size_t keys_bytes =
            size_t(lanes ? kLaneSortThreads : kWarpsPerBlock) * size_t(in.fanout) * sizeof(out_t);
        const unsigned blocks = lanes ? unsigned((in.seeds_bound + threads) / threads)
                                      : warp_blocks_for(in.seeds_bound + 1);
        const auto kernel = lanes ? sort_rows_kernel<index_t, out_t, true>
                                  : sort_rows_kernel<index_t, out_t, false>;
        kernel<<<dim3(blocks, batches.count), threads, keys_bytes, stream>>>(
            task, deterministic, batches.tasks);
        return;
      }
      out_t* rowptr_out = static_cast<out_t*>(out.rowptr);
      out_t* local_out = static_cast<out_t*>(out.col);
      const Relabel r = relabel_of(deterministic, scratch);
      out_t* local = static_cast<out_t*>(scratch.local);
      assign_kernel<index_t, out_t><<<grid_for(exact_edges), kThreads, 0, stream>>>(
          in, task.table, r, exact_edges, local);
      if (exact_edges > 0) {
        size_t bytes = scratch.temp_bytes;
        cub::DeviceSegmentedSort::StableSortPairs(scratch.temp, bytes, local, local_out,
                                                  scratch.pos, out.edge_ids, exact_edges,
                                                  in.seeds_bound, scratch.ptr, scratch.ptr + 1,
                                                  stream);
      }
      finish_rows_kernel<out_t><<<grid_for(std::max(in.seeds_bound + 1, exact_edges)),
                                  kThreads, 0, stream>>>(in, scratch.ptr, exact_edges,
                                                         rowptr_out, out.edge_ids);
    });
  });
}

}  // namespace cuda
}  // namespace fastgnn
