#include "cuda/spmm_split_work.h"

#include <mutex>
#include <tuple>

#include "graph_cache.h"

namespace fastgnn {
namespace cuda {
namespace {

std::shared_ptr<const SplitWork> build(const at::Tensor& rowptr, int64_t chunk) {
  const auto index = rowptr.scalar_type();
  const at::Tensor ptr = rowptr.to(at::kLong);
  const int64_t rows = ptr.numel() - 1;
  const auto options = ptr.options();
  const at::Tensor degree = ptr.slice(0, 1) - ptr.slice(0, 0, rows);
  const at::Tensor per_row = (degree + (chunk - 1)).div(chunk, "floor").clamp_min(1);
  const at::Tensor ends = per_row.cumsum(0);
  auto work = std::make_shared<SplitWork>();
  work->chunk = chunk;
  work->items = rows ? ends[-1].item<int64_t>() : 0;  // one sync, once per graph
  const at::Tensor item_row = at::arange(rows, options).repeat_interleave(per_row);
  const at::Tensor first = ends - per_row;
  const at::Tensor rank = at::arange(work->items, options) - first.index_select(0, item_row);
  const at::Tensor item_start = ptr.index_select(0, item_row) + rank * chunk;
  const at::Tensor row_is_split = per_row > 1;
  const at::Tensor item_is_split = row_is_split.index_select(0, item_row);
  const at::Tensor slot = item_is_split.to(at::kLong).cumsum(0) - 1;
  const at::Tensor split_row = at::nonzero(row_is_split).flatten();
  const at::Tensor split_first = at::zeros({split_row.numel() + 1}, options);
  split_first.slice(0, 1).copy_(per_row.index_select(0, split_row).cumsum(0));
  work->split_rows = split_row.numel();
  work->slots = work->split_rows ? split_first[-1].item<int64_t>() : 0;
  work->item_row = item_row.to(index);
  work->item_start = item_start.to(index);
  work->item_slot = at::where(item_is_split, slot, at::full({}, -1, options)).to(index);
  work->split_row = split_row.to(index);
  work->split_first = split_first.to(index);
  return work;
}

using Key = std::tuple<int64_t, int, int64_t, int>;  // graph, operand, chunk, device

using Cache = KeyedGraphCache<Key, std::shared_ptr<const SplitWork>>;

// Leaked on purpose (see KeyedGraphCache).
Cache& cache() {
  static auto* instance = new Cache();
  return *instance;
}

}  // namespace

SplitWorkView SplitWork::view() const {
  return SplitWorkView{item_row.data_ptr(),  item_start.data_ptr(), item_slot.data_ptr(),
                       split_row.data_ptr(), split_first.data_ptr(), items,
                       split_rows,           slots,                  chunk};
}

std::shared_ptr<const SplitWork> split_work(const at::Tensor& rowptr, int64_t graph_key,
                                            int operand, int64_t chunk) {
  if (graph_key == 0) return build(rowptr, chunk);
  Cache& c = cache();
  const Key key{graph_key, operand, chunk, int(rowptr.get_device())};
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    auto it = c.entries.find(key);
    if (it != c.entries.end()) return it->second;
  }
  auto work = build(rowptr, chunk);  // outside the lock: it runs GPU work and syncs
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.entries.emplace(key, std::move(work)).first->second;
}

}  // namespace cuda
}  // namespace fastgnn
