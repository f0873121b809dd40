// examples/cuda_mlp/kernels.hpp — host-callable launchers for the CUDA MLP example's kernels.
//
// The math of examples/mlp.hpp on the GPU: dense layers y = x·Wᵀ + b (W stored [out][in], width ×
// width), tanh, the MSE loss and its gradient, the input and weight backwards, plus the elementwise
// helpers and reductions the example needs. The kernels live in kernels.cu (nvcc); this header
// includes no CUDA header, so the plan/executor .cpp that calls them compiles with g++: a stream
// is passed as `void*` (a cudaStream_t) and every pointer is a device pointer.
//
// Every function is asynchronous on `stream` and checks its launch: on failure it throws
// std::runtime_error naming the kernel and cudaGetErrorString. The kernels are simple, not fast
// (the sizes are tiny): one thread per output element, fp32, summing in the same index order as
// mlp.hpp without fused multiply-adds, so results match the host closely (tanhf may differ from
// the host's std::tanh by an ulp or two, so not bitwise). The reductions use CUB
// (cub::DeviceReduce::TransformReduce) with a scratch buffer that `reducer` allocates once.
#pragma once

#include <cstddef>

namespace cuda_mlp::gpu {

/// y[r][o] = b[o] + Σ_i w[o][i]·x[r][i] (then tanh when `tanh_act`), for r < rows, o < width.
/// One thread per output element.
void dense_forward(const float* w, const float* b, const float* x, float* y, int rows, int width, bool tanh_act,
                   void* stream);

/// The pre-activation gradient: g[i] = tanh_act ? dy[i]·(1 − y[i]²) : dy[i], for i < n.
void activation_grad(const float* y, const float* dy, float* g, int n, bool tanh_act, void* stream);

/// dx[r][i] = Σ_o w[o][i]·g[r][o] (o increasing), for r < rows, i < width.
void dense_backward_input(const float* w, const float* g, float* dx, int rows, int width, void* stream);

/// dw[o][i] = Σ_r g[r][o]·x[r][i] and db[o] = Σ_r g[r][o] (r increasing, one thread per output
/// element, so the result is deterministic). Writes, does not accumulate.
void dense_backward_weight(const float* x, const float* g, float* dw, float* db, int rows, int width, void* stream);

/// The MSE gradient seeded with the loss's scale (ctx.loss_scale): dy[i] = (y[i] − t[i]) / n · scale,
/// for i < n.
void mse_grad(const float* y, const float* t, float* dy, int n, float scale, void* stream);

/// acc[i] += x[i], for i < n.
void add(float* acc, const float* x, std::size_t n, void* stream);

/// dst[i] = src[i], for i < n (cudaMemcpyAsync, device to device).
void copy(float* dst, const float* src, std::size_t n, void* stream);

/// Reductions into one device double (the loss: a float), with CUB. The scratch CUB needs is allocated once, in the
/// constructor, for inputs of up to `max_n` elements; no call allocates (a larger n throws
/// std::invalid_argument). A reducer must not be used on two streams at once (one scratch).
/// Each sum is in double, in CUB's (deterministic, but not sequential) order.
///
///   cuda_mlp::gpu::reducer red(mlp::act);
///   red.mse_loss(d_y, d_t, int(mlp::act), d_loss, stream);
class reducer {
 public:
  explicit reducer(std::size_t max_n);
  ~reducer();
  reducer(const reducer&) = delete;
  reducer& operator=(const reducer&) = delete;
  reducer(reducer&& other) noexcept;
  reducer& operator=(reducer&& other) noexcept;

  /// *out = Σ_i 0.5·(y[i] − t[i])² / n (the difference in float, then squared and summed in double, as
  /// mlp.hpp; the mean rounded to float, as a sink's ctx.loss holds it).
  void mse_loss(const float* y, const float* t, int n, float* out, void* stream);
  /// *out = Σ_i x[i]² (for gradient norms).
  void sum_squares(const float* x, std::size_t n, double* out, void* stream);
  /// *out = Σ_i x[i] (transfer checksums).
  void checksum(const float* x, std::size_t n, double* out, void* stream);

  std::size_t max_n() const { return max_n_; }
  std::size_t scratch_bytes() const { return bytes_; }

 private:
  std::size_t max_n_ = 0;
  std::size_t bytes_ = 0;
  void* scratch_ = nullptr;  // device memory, cudaMalloc'ed once
  double* sum_ = nullptr;    // one device double: mse_loss's sum before the mean
};

}  // namespace cuda_mlp::gpu
