// examples/cuda_mlp/kernels.cu — the CUDA MLP example's kernels and their launchers (kernels.hpp).
//
// Compiled by nvcc; kernels.hpp, which declares the launchers, includes no CUDA header, so the
// plan/executor .cpp that calls them compiles with g++. The kernels mirror examples/mlp.hpp: one
// thread per output element, fp32, the same summation order, and the _rn intrinsics (__fmul_rn,
// __fadd_rn, ...) so nvcc does not fuse a multiply and an add into an FMA the host never does.
// The reductions (loss, sum of squares, checksum) use cub::DeviceReduce::TransformReduce into a
// device double (the loss then rounded to the float the executor keeps), with scratch storage `reducer` allocates once.
#include "kernels.hpp"

#include <cuda_runtime.h>
#include <thrust/iterator/counting_iterator.h>
#include <cub/device/device_reduce.cuh>
#include <cuda/std/functional>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

namespace {

constexpr int block = 128;

cudaStream_t as_stream(void* stream) { return static_cast<cudaStream_t>(stream); }

/// Blocks for one thread per element (no cap: only add_kernel strides over the grid).
unsigned blocks_for(std::size_t n) { return static_cast<unsigned>((n + block - 1) / block); }

[[noreturn]] void fail(const char* what, cudaError_t e) {
  throw std::runtime_error(std::string("cuda_mlp::gpu: ") + what + ": " + cudaGetErrorString(e));
}
void check(const char* what, cudaError_t e) {
  if (e != cudaSuccess) fail(what, e);
}
/// After a launch: the launch's own error (bad configuration, no device, ...).
void check_launch(const char* kernel) { check(kernel, cudaGetLastError()); }

// ---- kernels ---------------------------------------------------------------------------------

__global__ void dense_forward_kernel(const float* w, const float* b, const float* x, float* y, int rows, int width,
                                     bool tanh_act) {
  const int t = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (t >= rows * width) return;
  const int r = t / width, o = t % width;
  float s = b[o];
  for (int i = 0; i < width; ++i) s = __fadd_rn(s, __fmul_rn(w[o * width + i], x[r * width + i]));
  y[t] = tanh_act ? tanhf(s) : s;
}

__global__ void activation_grad_kernel(const float* y, const float* dy, float* g, int n, bool tanh_act) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= n) return;
  g[i] = tanh_act ? __fmul_rn(dy[i], __fsub_rn(1.0f, __fmul_rn(y[i], y[i]))) : dy[i];
}

__global__ void dense_backward_input_kernel(const float* w, const float* g, float* dx, int rows, int width) {
  const int t = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (t >= rows * width) return;
  const int r = t / width, i = t % width;
  float s = 0;
  for (int o = 0; o < width; ++o) s = __fadd_rn(s, __fmul_rn(w[o * width + i], g[r * width + o]));
  dx[t] = s;
}

// Threads [0, width²) write dw[o][i]; threads [width², width² + width) write db[o].
__global__ void dense_backward_weight_kernel(const float* x, const float* g, float* dw, float* db, int rows,
                                             int width) {
  const int t = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  const int ww = width * width;
  if (t < ww) {
    const int o = t / width, i = t % width;
    float s = 0;
    for (int r = 0; r < rows; ++r) s = __fadd_rn(s, __fmul_rn(g[r * width + o], x[r * width + i]));
    dw[t] = s;
  } else if (t < ww + width) {
    const int o = t - ww;
    float s = 0;
    for (int r = 0; r < rows; ++r) s = __fadd_rn(s, g[r * width + o]);
    db[o] = s;
  }
}

__global__ void mse_grad_kernel(const float* y, const float* t, float* dy, int n, float scale) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= n) return;
  dy[i] = __fmul_rn(__fdiv_rn(__fsub_rn(y[i], t[i]), static_cast<float>(n)), scale);
}

__global__ void add_kernel(float* acc, const float* x, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x)
    acc[i] = __fadd_rn(acc[i], x[i]);
}

// The mean after the sum, as mlp.hpp (sum / double(act)), rounded to the float the executor keeps.
__global__ void mean_kernel(const double* sum, float* out, double n) { *out = static_cast<float>(__ddiv_rn(*sum, n)); }

// ---- reduction transforms (applied by CUB to each element before summing) ---------------------

struct half_squared_difference {  // mlp.hpp: 0.5 · double(y − t) · double(y − t)
  const float* y;
  const float* t;
  __device__ double operator()(std::size_t i) const {
    const double d = __fsub_rn(y[i], t[i]);
    return __dmul_rn(__dmul_rn(0.5, d), d);
  }
};
struct square {
  __device__ double operator()(float v) const { return __dmul_rn(v, v); }
};
struct widen {
  __device__ double operator()(float v) const { return v; }
};

/// One CUB transform-reduce into *out (or, with scratch == nullptr, the scratch size it needs).
template <class Input, class Transform>
cudaError_t transform_sum(void* scratch, std::size_t& bytes, Input in, double* out, std::size_t n, Transform op,
                          cudaStream_t stream) {
  return cub::DeviceReduce::TransformReduce(scratch, bytes, in, out, n, cuda::std::plus<>{}, op, 0.0, stream);
}

/// The scratch bytes each reduction needs for n elements (a host-side query; allocates nothing).
std::size_t bytes_mse(std::size_t n) {
  std::size_t b = 0;
  check("reducer: cub::DeviceReduce (size query)",
        transform_sum(nullptr, b, thrust::counting_iterator<std::size_t>(0), nullptr, n,
                      half_squared_difference{nullptr, nullptr}, nullptr));
  return b;
}
std::size_t bytes_square(std::size_t n) {
  std::size_t b = 0;
  check("reducer: cub::DeviceReduce (size query)",
        transform_sum(nullptr, b, static_cast<const float*>(nullptr), nullptr, n, square{}, nullptr));
  return b;
}
std::size_t bytes_widen(std::size_t n) {
  std::size_t b = 0;
  check("reducer: cub::DeviceReduce (size query)",
        transform_sum(nullptr, b, static_cast<const float*>(nullptr), nullptr, n, widen{}, nullptr));
  return b;
}

}  // namespace

namespace cuda_mlp::gpu {

void dense_forward(const float* w, const float* b, const float* x, float* y, int rows, int width, bool tanh_act,
                   void* stream) {
  const int n = rows * width;
  if (n <= 0) return;
  dense_forward_kernel<<<blocks_for(n), block, 0, as_stream(stream)>>>(w, b, x, y, rows, width, tanh_act);
  check_launch("dense_forward_kernel");
}

void activation_grad(const float* y, const float* dy, float* g, int n, bool tanh_act, void* stream) {
  if (n <= 0) return;
  activation_grad_kernel<<<blocks_for(n), block, 0, as_stream(stream)>>>(y, dy, g, n, tanh_act);
  check_launch("activation_grad_kernel");
}

void dense_backward_input(const float* w, const float* g, float* dx, int rows, int width, void* stream) {
  const int n = rows * width;
  if (n <= 0) return;
  dense_backward_input_kernel<<<blocks_for(n), block, 0, as_stream(stream)>>>(w, g, dx, rows, width);
  check_launch("dense_backward_input_kernel");
}

void dense_backward_weight(const float* x, const float* g, float* dw, float* db, int rows, int width, void* stream) {
  if (width <= 0) return;
  const int n = width * width + width;
  dense_backward_weight_kernel<<<blocks_for(n), block, 0, as_stream(stream)>>>(x, g, dw, db, rows, width);
  check_launch("dense_backward_weight_kernel");
}

void mse_grad(const float* y, const float* t, float* dy, int n, float scale, void* stream) {
  if (n <= 0) return;
  mse_grad_kernel<<<blocks_for(n), block, 0, as_stream(stream)>>>(y, t, dy, n, scale);
  check_launch("mse_grad_kernel");
}

void add(float* acc, const float* x, std::size_t n, void* stream) {
  if (n == 0) return;
  add_kernel<<<blocks_for(n), block, 0, as_stream(stream)>>>(acc, x, n);
  check_launch("add_kernel");
}

void copy(float* dst, const float* src, std::size_t n, void* stream) {
  if (n == 0) return;
  check("copy (cudaMemcpyAsync)",
        cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, as_stream(stream)));
}

// ---- reducer ---------------------------------------------------------------------------------

reducer::reducer(std::size_t max_n) : max_n_(max_n) {
  bytes_ = std::max({bytes_mse(max_n), bytes_square(max_n), bytes_widen(max_n), std::size_t{1}});
  check("reducer: cudaMalloc", cudaMalloc(&scratch_, bytes_));
  if (const cudaError_t e = cudaMalloc(reinterpret_cast<void**>(&sum_), sizeof(double)); e != cudaSuccess) {
    cudaFree(scratch_);
    fail("reducer: cudaMalloc", e);
  }
}

reducer::~reducer() {  // an error here cannot be reported from a destructor
  if (scratch_) cudaFree(scratch_);
  if (sum_) cudaFree(sum_);
}

reducer::reducer(reducer&& other) noexcept
    : max_n_(std::exchange(other.max_n_, 0)),
      bytes_(std::exchange(other.bytes_, 0)),
      scratch_(std::exchange(other.scratch_, nullptr)),
      sum_(std::exchange(other.sum_, nullptr)) {}

reducer& reducer::operator=(reducer&& other) noexcept {
  if (this != &other) {
    if (scratch_) cudaFree(scratch_);
    if (sum_) cudaFree(sum_);
    max_n_ = std::exchange(other.max_n_, 0);
    bytes_ = std::exchange(other.bytes_, 0);
    scratch_ = std::exchange(other.scratch_, nullptr);
    sum_ = std::exchange(other.sum_, nullptr);
  }
  return *this;
}

namespace {
/// Throws unless n elements fit the scratch allocated in the constructor.
void check_fits(const char* what, std::size_t n, std::size_t max_n, std::size_t needed, std::size_t have) {
  if (n > max_n)
    throw std::invalid_argument(std::string("cuda_mlp::gpu::reducer::") + what + ": " + std::to_string(n) +
                                " elements, more than the " + std::to_string(max_n) + " it was built for");
  if (needed > have)
    throw std::runtime_error(std::string("cuda_mlp::gpu::reducer::") + what + ": CUB needs " + std::to_string(needed) +
                             " bytes of scratch, more than the " + std::to_string(have) + " allocated");
}
}  // namespace

void reducer::mse_loss(const float* y, const float* t, int n, float* out, void* stream) {
  if (n <= 0) throw std::invalid_argument("cuda_mlp::gpu::reducer::mse_loss: n must be positive");
  const auto count = static_cast<std::size_t>(n);
  std::size_t bytes = bytes_mse(count);
  check_fits("mse_loss", count, max_n_, bytes, bytes_);
  bytes = bytes_;
  check("mse_loss (cub::DeviceReduce::TransformReduce)",
        transform_sum(scratch_, bytes, thrust::counting_iterator<std::size_t>(0), sum_, count,
                      half_squared_difference{y, t}, as_stream(stream)));
  mean_kernel<<<1, 1, 0, as_stream(stream)>>>(sum_, out, static_cast<double>(n));
  check_launch("mean_kernel (mse_loss)");
}

void reducer::sum_squares(const float* x, std::size_t n, double* out, void* stream) {
  std::size_t bytes = bytes_square(n);
  check_fits("sum_squares", n, max_n_, bytes, bytes_);
  bytes = bytes_;
  check("sum_squares (cub::DeviceReduce::TransformReduce)",
        transform_sum(scratch_, bytes, x, out, n, square{}, as_stream(stream)));
}

void reducer::checksum(const float* x, std::size_t n, double* out, void* stream) {
  std::size_t bytes = bytes_widen(n);
  check_fits("checksum", n, max_n_, bytes, bytes_);
  bytes = bytes_;
  check("checksum (cub::DeviceReduce::TransformReduce)",
        transform_sum(scratch_, bytes, x, out, n, widen{}, as_stream(stream)));
}

}  // namespace cuda_mlp::gpu
