// cp.async (sm_80 and newer): 16-byte copies from global to shared memory that bypass the
// registers, so a warp can keep the next tile's gathers in flight while it computes on the
// current one. Shared by the WSB kernels.
#pragma once

namespace fastgnn {
namespace cuda {

#if __CUDA_ARCH__ >= 800
// 16 bytes from global to shared memory; bytes = 0 reads nothing and writes zeros (padding
// columns, features past the width).
__device__ __forceinline__ void copy_async(void* dst, const void* src, int bytes) {
  const auto shared = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared), "l"(src),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void commit_async() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int kPending>  // wait until at most kPending committed groups are still in flight
__device__ __forceinline__ void wait_async() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}
#endif

}  // namespace cuda
}  // namespace fastgnn
