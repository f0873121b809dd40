// The stages the host mesh tests share (host_mesh.test.cpp, host_held_params.test.cpp): a
// per-feature affine map with parameters and weight gradients pipetype can see, and a squared-error
// sink without parameters.
#pragma once

#include <pipetype/host.hpp>

#include <atomic>
#include <cstddef>
#include <deque>
#include <limits>
#include <span>
#include <stdexcept>
#include <vector>

namespace mesh_stages {

namespace pt = pipetype;

inline constexpr std::size_t width = 5;  // 10 parameters a stage, no multiple of 2 or 3: uneven shards

inline std::atomic<int> throw_at{-1};  // a forward of this microbatch on a stage 1 throws (−1: none)
inline std::atomic<int> nan_at{-1};    // a weight backward of this microbatch on a stage 1 writes a NaN (−1: none)
inline std::atomic<int> lent_calls{0}, lent_calls_without{0};  // a lending stage's calls, those with no ctx.params

// h' = w ⊙ h + b; hands its weight gradients (w then b) to pipetype; its parameters p are w and b.
// `Lends`: it lends them (graph/stage.hpp) and reads them from ctx.params when given; `Steps`:
// it has an optimizer hook (optimizer_step) for a step with OPT_STEP; `G`: its gradients' element
// type (pipetype::bfloat16: they are written, added and reduced in it).
template <bool Lends, bool Steps = true, class G = float>
struct lin {
  static constexpr bool lends_parameters = Lends;
  using input = pt::tensor<float, width>;
  using output = pt::tensor<float, width>;
  using weight_grad = pt::tensor<G, 2 * width>;
  float p[2 * width] = {1, -2, 0.5f, 1.5f, -0.75f, 0.1f, -0.2f, 0.3f, 0, 0.25f};
  G acc[2 * width] = {};
  std::span<G> weight_gradients() { return acc; }
  std::span<float> parameters() { return p; }
  std::span<G> tied_gradients(int) { return std::span<G>(acc).first(width); }  // w is tied
  template <class C>
  const float* w(const C& c) const {
    if constexpr (Lends) {
      ++lent_calls;
      if (c.params.empty()) ++lent_calls_without;
      if (!c.params.empty()) return c.params.data();
    }
    return p;
  }
  void forward(const pt::forward_ctx<lin>& c) {
    if (c.stage == 1 && c.microbatch == throw_at.load()) throw std::runtime_error("injected");
    const float* q = w(c);
    for (std::size_t i = 0; i < width; ++i) c.output[i] = q[i] * c.input[i] + q[width + i];
  }
  void backward_input(const pt::backward_ctx<lin>& c) {
    const float* q = w(c);
    for (std::size_t i = 0; i < c.grad_input.size(); ++i) c.grad_input[i] = q[i] * c.grad_output[i];
  }
  void backward_weight(const pt::backward_ctx<lin>& c) {
    for (std::size_t i = 0; i < width; ++i) {
      c.weight_grad[i] = G(c.grad_output[i] * c.input[i]);
      c.weight_grad[width + i] = G(c.grad_output[i]);
    }
    if (c.stage == 1 && c.microbatch == nan_at.load())
      c.weight_grad[width] = G(std::numeric_limits<float>::quiet_NaN());
  }
  // the step's optimizer (OPT_STEP): SGD with momentum on the elements it is given, its velocity
  // for those only; `clip` > 0 scales the gradients to a global norm of at most `clip`; a step
  // whose gradients are not all finite (FINITE_CHECK) is skipped
  float clip = 0;
  std::vector<float> velocity;
  std::size_t first = 0;
  int skipped = 0;
  void optimizer_step(const pt::optimizer_ctx<lin>& c) requires Steps {
    if (velocity.empty()) velocity.assign(c.params.size(), 0.0f), first = c.offset;
    if (c.offset != first || c.params.size() != velocity.size() || c.grads.size() != c.params.size())
      throw std::logic_error("lin: OPT_STEP over other elements than the last step's");
    if (!c.finite) {
      ++skipped;
      return;
    }
    sgd(c.params, c.grads, scale(c.grad_norm));
  }
  float scale(double norm) const {
    return clip > 0 && norm >= 0 && clip / (norm + 1e-6) < 1 ? static_cast<float>(clip / (norm + 1e-6)) : 1.0f;
  }
  /// The same update on `params` (between steps, without OPT_STEP).
  void sgd(std::span<float> params, std::span<const G> grads, float s) {
    if (velocity.empty()) velocity.assign(params.size(), 0.0f);
    for (std::size_t i = 0; i < params.size(); ++i) {
      velocity[i] = 0.9f * velocity[i] + static_cast<float>(grads[i]) * s;
      params[i] -= 0.05f * velocity[i];
    }
  }
};

// Half the squared error against the targets; no parameters (a weight_grad of none), and with
// `Params` false not even an empty parameters().
template <bool Params = true>
struct mse_of {
  using input = pt::tensor<float, width>;
  using output = pt::tensor<float, 1>;
  using target = pt::tensor<float, width>;
  using weight_grad = pt::tensor<float, 0>;
  std::span<float> weight_gradients() { return {}; }
  std::span<float> parameters() requires Params { return {}; }
  void forward(const pt::forward_ctx<mse_of>& c) {
    float l = 0;
    for (std::size_t i = 0; i < width; ++i) l += 0.5f * (c.input[i] - c.target[i]) * (c.input[i] - c.target[i]);
    *c.loss = l;
  }
  void backward_input(const pt::backward_ctx<mse_of>& c) {
    for (std::size_t i = 0; i < width; ++i) c.grad_input[i] = c.loss_scale * (c.input[i] - c.target[i]);
  }
  void backward_weight(const pt::backward_ctx<mse_of>&) {}
};
using mse = mse_of<>;

/// `replicas` models of one type, and a global batch of `microbatches` a replica for them (inputs
/// and targets of `width` floats a microbatch).
template <class Model>
struct replicas_with_batch {
  std::deque<Model> models;
  std::vector<Model*> ptrs;
  std::vector<float> x, t;
  pt::batch b;
  replicas_with_batch(int replicas, int microbatches) {
    for (int d = 0; d < replicas; ++d) ptrs.push_back(&models.emplace_back());
    for (int j = 0; j < replicas * microbatches * static_cast<int>(width); ++j) {
      x.push_back(static_cast<float>(j % 7 - 3) * 0.37f);
      t.push_back(static_cast<float>((5 * j) % 3) * 0.5f);
    }
    b.input(x).target(t);
  }
};

}  // namespace mesh_stages
