// cuSPARSE SpMM with every per-graph object created once: the CSR and dense descriptors, the
// all-ones values of unweighted graphs, the workspace and the preprocessing of the chosen
// algorithm live in an entry keyed by (graph, operand, dtype, width, device) and are reused by
// every later call; only the data pointers are reset per call. A freed Graph drops its entries
// through release_graph_cache.
#include "cuda/spmm_cusparse.h"

#include <cusparse.h>

#if __has_include(<cublas_v2.h>)
#include <ATen/cuda/CUDAContextLight.h>
#else
// Syntax checks on machines with cusparse.h but not the rest of the toolkit's headers that
// CUDAContextLight.h pulls in: the one declaration used here. Real builds take the header.
namespace at {
namespace cuda {
cusparseHandle_t getCurrentCUDASparseHandle();
}  // namespace cuda
}  // namespace at
#endif

#include <algorithm>
#include <memory>
#include <mutex>
#include <tuple>

#include "cuda/glue.h"
#include "graph_cache.h"

namespace fastgnn {
namespace cuda {
namespace {

void check(cusparseStatus_t status, const char* what) {
  TORCH_CHECK(status == CUSPARSE_STATUS_SUCCESS, "fastgnn spmm: cuSPARSE ", what, " failed: ",
              cusparseGetErrorString(status));
}

constexpr cusparseSpMMAlg_t kAlgorithms[] = {CUSPARSE_SPMM_ALG_DEFAULT, CUSPARSE_SPMM_CSR_ALG1};
constexpr int kNumAlgorithms = 2;

cudaDataType data_type(at::ScalarType type) {
  switch (type) {
    case at::kHalf: return CUDA_R_16F;
    case at::kBFloat16: return CUDA_R_16BF;
    case at::kFloat: return CUDA_R_32F;
    case at::kDouble: return CUDA_R_64F;
    default: TORCH_CHECK(false, "fastgnn spmm: cuSPARSE does not take ", type);
  }
}

// Everything cuSPARSE needs for one (graph, operand, dtype, width, device).
struct Entry {
  cusparseSpMatDescr_t matrix = nullptr;
  cusparseDnMatDescr_t input = nullptr, output = nullptr;
  int64_t rows = 0, cols = 0, nnz = 0, input_rows = 0, output_rows = 0;
  at::Tensor ones;       // values of an unweighted graph, in the feature dtype
  at::Tensor workspace;  // grows to the largest size any algorithm asked for
  int64_t workspace_bytes[kNumAlgorithms] = {-1, -1};
  // The preprocessing done for (algorithm, structure, workspace); redone when one changes.
  int prepared_algo = -1;
  const void* prepared_for[3] = {nullptr, nullptr, nullptr};

  Entry() = default;
  Entry(const Entry&) = delete;
  Entry& operator=(const Entry&) = delete;
  ~Entry() {
    if (matrix) cusparseDestroySpMat(matrix);
    if (input) cusparseDestroyDnMat(input);
    if (output) cusparseDestroyDnMat(output);
  }
};

using Key = std::tuple<int64_t, int, int, int64_t, int>;  // graph, operand, dtype, width, device

using Cache = KeyedGraphCache<Key, std::unique_ptr<Entry>>;

// Leaked on purpose (see KeyedGraphCache).
Cache& cache() {
  static auto* instance = new Cache();
  return *instance;
}

// Builds the descriptors on first use, or again if the sizes ever differ.
void describe(Entry& entry, const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& x,
              const at::Tensor& out, int64_t cols) {
  const int64_t rows = rowptr.numel() - 1, nnz = col.numel(), width = x.size(1);
  if (entry.matrix && entry.rows == rows && entry.cols == cols && entry.nnz == nnz &&
      entry.input_rows == x.size(0) && entry.output_rows == out.size(0))
    return;
  const auto index = col.scalar_type() == at::kLong ? CUSPARSE_INDEX_64I : CUSPARSE_INDEX_32I;
  const auto type = data_type(x.scalar_type());
  if (entry.matrix) cusparseDestroySpMat(entry.matrix);
  if (entry.input) cusparseDestroyDnMat(entry.input);
  if (entry.output) cusparseDestroyDnMat(entry.output);
  entry.matrix = nullptr;
  entry.input = entry.output = nullptr;
  // Pointers are placeholders here; every call sets the real ones.
  check(cusparseCreateCsr(&entry.matrix, rows, cols, nnz, rowptr.data_ptr(), col.data_ptr(),
                          x.data_ptr(), index, index, CUSPARSE_INDEX_BASE_ZERO, type),
        "cusparseCreateCsr");
  check(cusparseCreateDnMat(&entry.input, x.size(0), width, width, x.data_ptr(), type,
                            CUSPARSE_ORDER_ROW),
        "cusparseCreateDnMat");
  check(cusparseCreateDnMat(&entry.output, out.size(0), width, width, out.data_ptr(), type,
                            CUSPARSE_ORDER_ROW),
        "cusparseCreateDnMat");
  entry.rows = rows;
  entry.cols = cols;
  entry.nnz = nnz;
  entry.input_rows = x.size(0);
  entry.output_rows = out.size(0);
  std::fill(std::begin(entry.workspace_bytes), std::end(entry.workspace_bytes), -1);
  entry.prepared_algo = -1;
}

void run(Entry& entry, const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& value,
         const at::Tensor& x, at::Tensor& out, int64_t cols, bool transposed, int algo) {
  TORCH_CHECK(algo >= 0 && algo < kNumAlgorithms, "fastgnn spmm: unknown cuSPARSE algorithm ",
              algo);
  describe(entry, rowptr, col, x, out, cols);
  // cuSPARSE wants the sparse values in the dense dtype; the product accumulates in float.
  at::Tensor values;
  if (!value.defined()) {
    if (!entry.ones.defined() || entry.ones.numel() != col.numel())
      entry.ones = at::ones({col.numel()}, x.options());
    values = entry.ones;
  } else {
    values = value.scalar_type() == x.scalar_type() ? value : value.to(x.scalar_type());
  }
  check(cusparseCsrSetPointers(entry.matrix, rowptr.data_ptr(), col.data_ptr(), values.data_ptr()),
        "cusparseCsrSetPointers");
  check(cusparseDnMatSetValues(entry.input, x.data_ptr()), "cusparseDnMatSetValues");
  check(cusparseDnMatSetValues(entry.output, out.data_ptr()), "cusparseDnMatSetValues");

  cusparseHandle_t handle = at::cuda::getCurrentCUDASparseHandle();
  check(cusparseSetStream(handle, stream()), "cusparseSetStream");
  const bool is_double = x.scalar_type() == at::kDouble;
  const auto compute = is_double ? CUDA_R_64F : CUDA_R_32F;
  const float alpha_f = 1.f, beta_f = 0.f;
  const double alpha_d = 1.0, beta_d = 0.0;
  const void* alpha = is_double ? static_cast<const void*>(&alpha_d) : &alpha_f;
  const void* beta = is_double ? static_cast<const void*>(&beta_d) : &beta_f;
  const auto op = transposed ? CUSPARSE_OPERATION_TRANSPOSE : CUSPARSE_OPERATION_NON_TRANSPOSE;
  const auto alg = kAlgorithms[algo];

  if (entry.workspace_bytes[algo] < 0) {
    size_t bytes = 0;
    check(cusparseSpMM_bufferSize(handle, op, CUSPARSE_OPERATION_NON_TRANSPOSE, alpha,
                                  entry.matrix, entry.input, beta, entry.output, compute, alg,
                                  &bytes),
          "cusparseSpMM_bufferSize");
    entry.workspace_bytes[algo] = int64_t(bytes);
  }
  const int64_t bytes = std::max<int64_t>(entry.workspace_bytes[algo], 1);
  if (!entry.workspace.defined() || entry.workspace.numel() < bytes) {
    entry.workspace = at::empty({bytes}, x.options().dtype(at::kByte));
    entry.prepared_algo = -1;
  }
  void* workspace = entry.workspace.data_ptr();
  const bool wants_preprocess = alg == CUSPARSE_SPMM_CSR_ALG1;
  if (wants_preprocess &&
      (entry.prepared_algo != algo || entry.prepared_for[0] != rowptr.data_ptr() ||
       entry.prepared_for[1] != col.data_ptr() || entry.prepared_for[2] != workspace)) {
    check(cusparseSpMM_preprocess(handle, op, CUSPARSE_OPERATION_NON_TRANSPOSE, alpha,
                                  entry.matrix, entry.input, beta, entry.output, compute, alg,
                                  workspace),
          "cusparseSpMM_preprocess");
    entry.prepared_algo = algo;
    entry.prepared_for[0] = rowptr.data_ptr();
    entry.prepared_for[1] = col.data_ptr();
    entry.prepared_for[2] = workspace;
  }
  check(cusparseSpMM(handle, op, CUSPARSE_OPERATION_NON_TRANSPOSE, alpha, entry.matrix,
                     entry.input, beta, entry.output, compute, alg, workspace),
        "cusparseSpMM");
}

}  // namespace

void cusparse_spmm(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& value,
                   const at::Tensor& x, at::Tensor& out, int64_t cols, SparseOperand operand,
                   int64_t graph_key, int cusparse_algo) {
  const bool transposed = operand == SparseOperand::kForwardTransposed;
  if (transposed)
    at::globalContext().alertNotDeterministic(
        "fastgnn spmm backward through cuSPARSE's transposed SpMM (Graph(cache_transpose=False))");
  if (graph_key == 0) {  // no owning Graph: a one-off entry
    Entry entry;
    run(entry, rowptr, col, value, x, out, cols, transposed, cusparse_algo);
    return;
  }
  Cache& c = cache();
  // Held for the whole call: an entry's workspace serves one product at a time.
  std::lock_guard<std::mutex> lock(c.mutex);
  const Key key{graph_key, int(operand), int(x.scalar_type()), x.size(1),
                int(x.get_device())};
  auto& slot = c.entries[key];
  if (!slot) slot = std::make_unique<Entry>();
  run(*slot, rowptr, col, value, x, out, cols, transposed, cusparse_algo);
}

}  // namespace cuda
}  // namespace fastgnn
