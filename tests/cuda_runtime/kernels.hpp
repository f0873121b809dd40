// Host-callable launchers for the GPU tests' kernels (kernels.cu).
#pragma once

namespace gpu_test {
/// y[i] = x[i] + a on `stream` (a cudaStream_t).
void add(const float* x, float* y, int n, float a, void* stream);
/// *loss = target[0] + ids[0] + extra, from one thread on `stream` (a sink's loss that shows which
/// targets, token ids and length reached it).
void score(const float* target, const int* ids, float extra, float* loss, void* stream);
}  // namespace gpu_test
