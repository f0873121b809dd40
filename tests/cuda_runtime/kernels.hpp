// Host-callable launchers for the GPU tests' kernels (kernels.cu).
#pragma once

namespace gpu_test {
/// y[i] = x[i] + a on `stream` (a cudaStream_t).
void add(const float* x, float* y, int n, float a, void* stream);
}  // namespace gpu_test
