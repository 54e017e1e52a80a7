// Reverse Cuthill-McKee ordering of an undirected graph, for fastgnn.reorder(method="rcm").
// A breadth-first search from a low-degree node of each component, visiting the new neighbours
// of each node in ascending degree, then reversed: neighbours end up with nearby ids, which is
// what the gather of an SpMM needs to find its source rows in cache. Sequential by nature (one
// queue), so one thread; it runs once per dataset.
#include <algorithm>
#include <numeric>
#include <vector>

#include <torch/library.h>

#include "cpu/cpu_common.h"

namespace fastgnn {
namespace cpu {
namespace {

template <typename index_t>
std::vector<int64_t> rcm(const index_t* rowptr, const index_t* col, int64_t n) {
  std::vector<int64_t> degree(n);
  for (int64_t v = 0; v < n; ++v) degree[v] = rowptr[v + 1] - rowptr[v];
  auto by_degree = [&](int64_t a, int64_t b) {
    return degree[a] != degree[b] ? degree[a] < degree[b] : a < b;
  };
  std::vector<int64_t> starts(n);  // component starts are tried in ascending degree
  std::iota(starts.begin(), starts.end(), 0);
  std::sort(starts.begin(), starts.end(), by_degree);

  std::vector<int64_t> order;
  order.reserve(n);
  std::vector<char> seen(n, 0);
  std::vector<int64_t> fresh;
  for (int64_t start : starts) {
    if (seen[start]) continue;
    seen[start] = 1;
    size_t head = order.size();
    order.push_back(start);
    while (head < order.size()) {
      const int64_t v = order[head++];
      fresh.clear();
      for (index_t e = rowptr[v]; e < rowptr[v + 1]; ++e) {
        const int64_t u = col[e];
        if (!seen[u]) {
          seen[u] = 1;
          fresh.push_back(u);
        }
      }
      std::sort(fresh.begin(), fresh.end(), by_degree);
      order.insert(order.end(), fresh.begin(), fresh.end());
    }
  }
  std::reverse(order.begin(), order.end());
  return order;
}

// rowptr/col: the symmetric CSR of the undirected graph. Returns perm (int64): perm[new] = old.
at::Tensor reorder_rcm_cpu(const at::Tensor& rowptr, const at::Tensor& col) {
  check_csr(rowptr, col, "reorder_rcm");
  const int64_t n = rowptr.numel() - 1;
  std::vector<int64_t> order = FASTGNN_DISPATCH_INDEX(rowptr.scalar_type(), "reorder_rcm", [&] {
    return rcm<index_t>(rowptr.data_ptr<index_t>(), col.data_ptr<index_t>(), n);
  });
  return at::tensor(order, rowptr.options().dtype(at::kLong));
}

}  // namespace

TORCH_LIBRARY_IMPL(fastgnn, CPU, m) { m.impl("reorder_rcm", &reorder_rcm_cpu); }

}  // namespace cpu
}  // namespace fastgnn
