// Kernels for the GPU tests, compiled by nvcc with the library's CUDA headers included (the
// issue's "a .cu including the CUDA executor" compile check: tests/CMakeLists.txt builds it
// whenever nvcc is found, GPU or not).
#include <pipetype/cuda/executor.hpp>
#include <pipetype/cuda/launch.hpp>
#include <pipetype/cuda/loopback.hpp>
#include <pipetype/cuda/record.hpp>
#include <pipetype/cuda/runtime.hpp>
#include <pipetype/pipetype.hpp>

#include "kernels.hpp"

// Not only parsed: nvcc instantiates the executor, the loopback pipeline over the CUDA driver and
// an unrolled step of a compile-time plan.
template class pipetype::cuda::executor<pipetype::cuda::runtime_driver>;
template class pipetype::cuda::loopback_pipeline<pipetype::cuda::runtime_driver>;
namespace {
constexpr auto nvcc_plan = pipetype::make_plan<pipetype::one_f_one_b<pipetype::ranks<2>, pipetype::microbatches<4>>>();
[[maybe_unused]] void nvcc_unrolled(pipetype::cuda::executor<pipetype::cuda::runtime_driver>& ex, const void* batch) {
  ex.step_unrolled<nvcc_plan, 0>(batch);
}
}  // namespace

namespace {
__global__ void add_kernel(const float* x, float* y, int n, float a) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) y[i] = x[i] + a;
}
__global__ void score_kernel(const float* target, const int* ids, float extra, float* loss) {
  *loss = target[0] + static_cast<float>(ids[0]) + extra;
}
}  // namespace

void gpu_test::add(const float* x, float* y, int n, float a, void* stream) {
  add_kernel<<<(n + 127) / 128, 128, 0, static_cast<cudaStream_t>(stream)>>>(x, y, n, a);
}

void gpu_test::score(const float* target, const int* ids, float extra, float* loss, void* stream) {
  score_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(target, ids, extra, loss);
}
