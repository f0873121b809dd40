// examples/cuda_mlp/model.hpp — examples/mlp.hpp's MLP as pipeline stages on a GPU.
//
// The same model (layers of width 32, tanh between them, MSE loss against a fixed teacher, 8 rows
// per microbatch, the same initial weights) with every stage call launching kernels (kernels.cu)
// on the stream pipetype hands it. The last stage is the sink: it declares `using target`, so the
// step's batch carries the targets (pipetype::batch, device memory), writes each microbatch's loss
// to ctx.loss from a kernel, and seeds its backward with ctx.loss_scale (1/m: the mean). A stage owns its parameters
// and gradients in device memory; its stash keeps each layer's output and pre-activation gradient per microbatch, like
// mlp.hpp. It declares a weight_grad and `add_weight_grad(span, stream)`, so the device executor adds the microbatches'
// weight gradients in microbatch order on the stream: every schedule accumulates the same sums in the same order as the
// unpipelined run (reference_step below).
//
// Host-compiled (g++): kernels.hpp is CUDA-free; device memory comes from the CUDA runtime.
#pragma once

#include <cuda_runtime.h>

#include <pipetype/bind/batch.hpp>
#include <pipetype/graph/chain.hpp>
#include <pipetype/graph/stage.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "../mlp.hpp"
#include "kernels.hpp"

namespace cuda_mlp {

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("cuda_mlp: ") + what + ": " + cudaGetErrorString(e));
}

/// Device memory for n elements of T, zero-filled, freed with the object. Setup only: the fill
/// and uploads run on the legacy default stream, which does not order with the executor's
/// non-blocking streams, so each waits for the device before returning.
template <class T>
class device_array {
 public:
  device_array() = default;
  explicit device_array(std::size_t n) : n_(n) {
    void* p = nullptr;
    check(cudaMalloc(&p, (n ? n : 1) * sizeof(T)), "cudaMalloc");
    p_.reset(static_cast<T*>(p));
    check(cudaMemset(p, 0, (n ? n : 1) * sizeof(T)), "cudaMemset");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  T* data() const noexcept { return p_.get(); }
  std::size_t size() const noexcept { return n_; }
  void upload(const std::vector<T>& h) {
    if (h.size() != n_) throw std::invalid_argument("cuda_mlp: upload of the wrong size");
    check(cudaMemcpy(data(), h.data(), n_ * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy to the device");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  std::vector<T> download() const {
    std::vector<T> h(n_);
    check(cudaMemcpy(h.data(), data(), n_ * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy to the host");
    return h;
  }

 private:
  struct release {
    void operator()(T* p) const noexcept { (void)cudaFree(p); }
  };
  std::unique_ptr<T, release> p_;
  std::size_t n_ = 0;
};

using mlp::act;
using mlp::layer_grads;
using mlp::rows;
using mlp::width;

class stage {
 public:
  using input = pipetype::tensor<float, rows, width>;
  using output = pipetype::tensor<float, rows, width>;
  using target = pipetype::tensor<float, rows, width>;             // the teacher's outputs (last stage)
  using stash = pipetype::tensor<float, pipetype::dynamic>;        // 2 · layers · act
  using weight_grad = pipetype::tensor<float, pipetype::dynamic>;  // layers · layer_grads

  /// The layers of mlp::stage(first_layer, layers, last, seed), uploaded.
  stage(int first_layer, int layers, bool last, std::uint64_t seed)
      : layers_(static_cast<std::size_t>(layers)),
        last_(last),
        red_(std::max<std::size_t>(act, static_cast<std::size_t>(layers) * layer_grads)) {
    const mlp::stage host(first_layer, layers, last, seed);
    std::vector<float> p(layers_ * layer_grads);
    for (std::size_t l = 0; l < layers_; ++l) {
      const mlp::layer& L = host.layers()[l];
      std::copy(L.w.begin(), L.w.end(), p.begin() + static_cast<std::ptrdiff_t>(l * layer_grads));
      std::copy(L.b.begin(), L.b.end(), p.begin() + static_cast<std::ptrdiff_t>(l * layer_grads + width * width));
    }
    params_ = device_array<float>(p.size());
    params_.upload(p);
    grads_ = device_array<float>(p.size());
    scratch_ = device_array<float>(act);
  }

  std::size_t stash_extent() const { return 2 * layers_ * act; }
  std::size_t weight_grad_extent() const { return layers_ * layer_grads; }
  /// The accumulated gradients (device memory: pipetype only passes the span on).
  std::span<float> weight_gradients() { return {grads_.data(), grads_.size()}; }
  /// pipetype's ordered accumulation, on the stream of the op that finished the microbatch.
  void add_weight_grad(std::span<const float> g, void* stream) { gpu::add(grads_.data(), g.data(), g.size(), stream); }

  bool last() const { return last_; }
  std::vector<float> gradients() const { return grads_.download(); }
  void zero_gradients() {
    check(cudaMemset(grads_.data(), 0, grads_.size() * sizeof(float)), "cudaMemset");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  void forward(const pipetype::forward_ctx<stage>& c) {
    const float* x = c.input.data();
    for (std::size_t l = 0; l < layers_; ++l) {
      float* y = c.stash.data() + l * act;
      gpu::dense_forward(w(l), b(l), x, y, int(rows), int(width), !(last_ && l + 1 == layers_), c.stream);
      x = y;
    }
    if (!c.output.empty()) gpu::copy(c.output.data(), x, act, c.stream);
    if (c.loss != nullptr) red_.mse_loss(x, c.target.data(), int(act), c.loss, c.stream);
  }

  // I: every layer's pre-activation gradient (into the stash, for W) and the input's gradient.
  void backward_input(const pipetype::backward_ctx<stage>& c) {
    const std::size_t L = layers_;
    const float* dy = c.grad_output.data();
    if (last_) {
      const float* y = L ? c.stash.data() + (L - 1) * act : c.input.data();
      gpu::mse_grad(y, c.target.data(), scratch_.data(), int(act), c.loss_scale, c.stream);
      dy = scratch_.data();
    }
    for (std::size_t l = L; l-- > 0;) {
      const float* y = c.stash.data() + l * act;
      float* g = c.stash.data() + (L + l) * act;
      gpu::activation_grad(y, dy, g, int(act), !(last_ && l + 1 == L), c.stream);
      if (l == 0 && c.grad_input.empty()) return;
      gpu::dense_backward_input(w(l), g, scratch_.data(), int(rows), int(width), c.stream);
      dy = scratch_.data();
    }
    if (!c.grad_input.empty()) gpu::copy(c.grad_input.data(), dy, act, c.stream);
  }

  // W: this microbatch's weight gradients into c.weight_grad (pipetype adds them in order).
  void backward_weight(const pipetype::backward_ctx<stage>& c) {
    for (std::size_t l = 0; l < layers_; ++l) {
      const float* x = l == 0 ? c.input.data() : c.stash.data() + (l - 1) * act;
      const float* g = c.stash.data() + (layers_ + l) * act;
      float* dw = c.weight_grad.data() + l * layer_grads;
      gpu::dense_backward_weight(x, g, dw, dw + width * width, int(rows), int(width), c.stream);
    }
  }

  /// Σ g² of the accumulated gradients, into a device double (for the gradient norm).
  void gradient_sum_squares(double* out, void* stream) { red_.sum_squares(grads_.data(), grads_.size(), out, stream); }

 private:
  const float* w(std::size_t l) const { return params_.data() + l * layer_grads; }
  const float* b(std::size_t l) const { return params_.data() + l * layer_grads + width * width; }

  std::size_t layers_;
  bool last_;
  device_array<float> params_, grads_, scratch_;
  gpu::reducer red_;
};

static_assert(pipetype::stage<stage> && pipetype::adds_weight_grad_on_stream<stage>);

/// Stage i of `layers` layers over `stages` stages, as mlp::make_model splits them (what a process
/// that runs one rank builds for each stage the plan puts there: pipetype::stages_on).
inline stage make_stage(int layers, int stages, int i, std::uint64_t seed = 7) {
  const int lo = i * layers / stages, hi = (i + 1) * layers / stages;
  return stage(lo, hi - lo, i + 1 == stages, seed);
}

/// The weight-gradient elements of make_stage(layers, stages, i) (without building it).
inline std::size_t weight_grad_extent(int layers, int stages, int i) {
  const int lo = i * layers / stages, hi = (i + 1) * layers / stages;
  return static_cast<std::size_t>(hi - lo) * layer_grads;
}

/// All `stages` stages of `layers` layers.
inline pipetype::uniform_chain<stage> make_model(int layers, int stages, std::uint64_t seed = 7) {
  std::vector<stage> s;
  s.reserve(static_cast<std::size_t>(stages));
  for (int i = 0; i < stages; ++i) s.push_back(make_stage(layers, stages, i, seed));
  return pipetype::uniform_chain<stage>(std::move(s));
}

/// The unpipelined reference on one stream: every microbatch forward through all stages, then
/// backward, one after the other, each microbatch's weight gradients added at once. `inputs` and
/// `targets` as the batch holds them (device, microbatch j at j · act); the last stage writes
/// microbatch j's loss to losses[j] (device) and seeds its backward with 1/m, as a batch's mean.
inline void reference_step(pipetype::uniform_chain<stage>& model, const float* inputs, const float* targets,
                           float* losses, int microbatches, cudaStream_t stream) {
  const int S = model.size();
  void* s = stream;
  const float scale = static_cast<float>(pipetype::loss_scaling::mean().factor(microbatches));
  device_array<float> acts((static_cast<std::size_t>(S) + 1) * act), grad(act), grad_in(act);
  std::vector<device_array<float>> stash;
  std::size_t wg_max = 1;
  for (int k = 0; k < S; ++k) {
    stash.emplace_back(std::max<std::size_t>(model.stage(k).stash_extent(), 1));
    wg_max = std::max(wg_max, model.stage(k).weight_grad_extent());
  }
  device_array<float> wg(wg_max);
  auto a = [&](int k) { return acts.data() + static_cast<std::size_t>(k) * act; };
  for (int j = 0; j < microbatches; ++j) {
    const std::span<const float> target(targets + static_cast<std::size_t>(j) * act, act);
    check(cudaMemcpyAsync(a(0), inputs + static_cast<std::size_t>(j) * act, act * sizeof(float),
                          cudaMemcpyDeviceToDevice, stream),
          "cudaMemcpyAsync");
    for (int k = 0; k < S; ++k) {
      stage& st = model.stage(k);
      pipetype::forward_ctx<stage> c{k,
                                     j,
                                     {a(k), act},
                                     k + 1 < S ? std::span<float>(a(k + 1), act) : std::span<float>{},
                                     {stash[static_cast<std::size_t>(k)].data(), st.stash_extent()},
                                     s};
      if (k + 1 == S) {
        c.target = target;
        c.loss = losses + j;
      }
      st.forward(c);
    }
    for (int k = S; k-- > 0;) {
      stage& st = model.stage(k);
      pipetype::backward_ctx<stage> c{k,
                                      j,
                                      {a(k), act},
                                      k + 1 < S ? std::span<const float>(grad.data(), act) : std::span<const float>{},
                                      k > 0 ? std::span<float>(grad_in.data(), act) : std::span<float>{},
                                      {stash[static_cast<std::size_t>(k)].data(), st.stash_extent()},
                                      {},
                                      s};
      if (k + 1 == S) {
        c.target = target;
        c.loss_scale = scale;
      }
      st.backward_input(c);
      c.grad_input = {};
      c.weight_grad = {wg.data(), st.weight_grad_extent()};
      st.backward_weight(c);
      st.add_weight_grad({wg.data(), st.weight_grad_extent()}, s);
      if (k > 0)
        check(cudaMemcpyAsync(grad.data(), grad_in.data(), act * sizeof(float), cudaMemcpyDeviceToDevice, stream),
              "cudaMemcpyAsync");
    }
  }
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

}  // namespace cuda_mlp
