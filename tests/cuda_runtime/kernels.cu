// Kernels for the GPU tests, compiled by nvcc with the library's CUDA headers included (the
// issue's "a .cu including the CUDA executor" compile check: tests/CMakeLists.txt builds it
// whenever nvcc is found, GPU or not).
#include <pipetype/cuda/executor.hpp>
#include <pipetype/cuda/record.hpp>
#include <pipetype/cuda/runtime.hpp>

#include "kernels.hpp"

namespace {
__global__ void add_kernel(const float* x, float* y, int n, float a) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) y[i] = x[i] + a;
}
}  // namespace

void gpu_test::add(const float* x, float* y, int n, float a, void* stream) {
  add_kernel<<<(n + 127) / 128, 128, 0, static_cast<cudaStream_t>(stream)>>>(x, y, n, a);
}
