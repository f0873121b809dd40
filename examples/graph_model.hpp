// examples/graph_model.hpp — two small models whose stage graphs are not chains, as pipetype dags.
//
//   skip       0 → 1 → 2 → 3 and 0 → 2: stage 0's output feeds stages 1 and 2 (a fan-out, whose
//              gradients pipetype sums), stage 2 reads stages 1 and 0 (a fan-in)
//   two-tower  0 → 2, 1 → 2, 2 → 3: two encoders (both sources, reading their halves of the
//              batch) into a fusion stage, then a head
//
// Every stage is one `graph_model::node`: a dense layer of width `width` over the sum of its
// inputs (in edge order), tanh after it except on the loss stage, which computes the mean squared
// error against a fixed teacher. It splits its backward (I then W; the full backward is exactly
// the two), and hands pipetype its weight gradients, which pipetype adds in microbatch order.
//
// `reference_step` runs the same nodes without pipetype, microbatch after microbatch on one
// thread, summing a fan-out's gradients in edge order as pipetype does: every schedule must give
// bitwise its gradients.
#pragma once

#include <pipetype/graph/dag.hpp>
#include <pipetype/graph/stage.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "mlp.hpp"

namespace graph_model {

inline constexpr std::size_t width = 16;  // features
inline constexpr std::size_t rows = 4;    // rows per microbatch
inline constexpr std::size_t act = rows * width;
inline constexpr std::size_t params = width * width + width;  // weights [out][in], then biases

using mlp::rng;  // splitmix64 (examples/mlp.hpp), so runs are reproducible everywhere

class node {
 public:
  using input = pipetype::tensor<float, rows, width>;
  using output = pipetype::tensor<float, rows, width>;
  using stash = pipetype::tensor<float, 3 * act>;  // h (the summed input), y, dh
  using weight_grad = pipetype::tensor<float, params>;

  node(bool loss, std::uint64_t seed) : loss_(loss), w_(params), g_(params, 0.0f) {
    rng r{seed};
    const float scale = 1.2f / std::sqrt(static_cast<float>(width));
    for (std::size_t i = 0; i < width * width; ++i) w_[i] = r.uniform() * scale;
    for (std::size_t i = width * width; i < params; ++i) w_[i] = 0.0f;
  }

  std::span<float> weight_gradients() { return g_; }
  std::span<const float> weight_gradients() const { return g_; }
  /// The loss stage: the targets of every microbatch (microbatch j's at j · act) and where it
  /// writes each microbatch's loss.
  void set_targets(const float* t, std::vector<double>* losses) {
    targets_ = t;
    losses_ = losses;
  }

  void forward(const pipetype::forward_ctx<node>& c) {
    float* h = c.stash.data();
    float* y = h + act;
    for (std::size_t i = 0; i < act; ++i) h[i] = c.inputs[0][i];
    for (int k = 1; k < c.inputs.size(); ++k)
      for (std::size_t i = 0; i < act; ++i) h[i] += c.inputs[k][i];
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t o = 0; o < width; ++o) {
        float z = w_[width * width + o];
        for (std::size_t i = 0; i < width; ++i) z += w_[o * width + i] * h[r * width + i];
        y[r * width + o] = loss_ ? z : std::tanh(z);
      }
    for (std::size_t i = 0; i < c.output.size(); ++i) c.output[i] = y[i];
    if (loss_ && losses_) {
      (*losses_)[static_cast<std::size_t>(c.microbatch)] =
          mlp::half_mse(y, targets_ + static_cast<std::size_t>(c.microbatch) * act, act);
    }
  }

  // I: the pre-activation gradient (kept for W) and the gradient of every input (the sum's
  // gradient: the same for each)
  void backward_input(const pipetype::backward_ctx<node>& c) {
    const float* y = c.stash.data() + act;
    float* dh = c.stash.data() + 2 * act;
    const float* t = loss_ ? targets_ + static_cast<std::size_t>(c.microbatch) * act : nullptr;
    for (std::size_t i = 0; i < act; ++i)
      dh[i] = loss_ ? (y[i] - t[i]) / float(act) : c.grad_output[i] * (1.0f - y[i] * y[i]);
    for (int k = 0; k < c.grad_inputs.size(); ++k) {
      const std::span<float> dx = c.grad_inputs[k];
      if (dx.empty()) continue;  // a detached edge: no gradient goes back over it
      for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t i = 0; i < width; ++i) {
          float s = 0;
          for (std::size_t o = 0; o < width; ++o) s += w_[o * width + i] * dh[r * width + o];
          dx[r * width + i] = s;
        }
    }
  }
  // W: this microbatch's weight gradient, which pipetype adds into weight_gradients() in order
  void backward_weight(const pipetype::backward_ctx<node>& c) {
    const float* h = c.stash.data();
    const float* dh = h + 2 * act;
    float* g = c.weight_grad.data();
    for (std::size_t o = 0; o < width; ++o) {
      for (std::size_t i = 0; i < width; ++i) {
        float s = 0;
        for (std::size_t r = 0; r < rows; ++r) s += dh[r * width + o] * h[r * width + i];
        g[o * width + i] = s;
      }
      float b = 0;
      for (std::size_t r = 0; r < rows; ++r) b += dh[r * width + o];
      g[width * width + o] = b;
    }
  }
  void backward(const pipetype::backward_ctx<node>& c) {
    backward_input(c);
    backward_weight(c);
  }

  void sgd(float lr) {
    for (std::size_t i = 0; i < params; ++i) w_[i] -= lr * g_[i];
    for (float& x : g_) x = 0.0f;
  }

 private:
  bool loss_;
  std::vector<float> w_, g_;
  const float* targets_ = nullptr;
  std::vector<double>* losses_ = nullptr;
};

using skip =
    pipetype::dag<pipetype::nodes<node, node, node, node>, pipetype::edges<pipetype::edge<0, 1>, pipetype::edge<1, 2>,
                                                                           pipetype::edge<2, 3>, pipetype::edge<0, 2>>>;
using two_tower = pipetype::dag<pipetype::nodes<node, node, node, node>,
                                pipetype::edges<pipetype::edge<0, 2>, pipetype::edge<1, 2>, pipetype::edge<2, 3>>>;
/// The skip connection with its skip detached and listed first among stage 2's inputs: stage 0
/// is trained through stage 1 only, and stage 2 writes no gradient for its first input.
using skip_cut = pipetype::dag<
    pipetype::nodes<node, node, node, node>,
    pipetype::edges<pipetype::edge<0, 1>, pipetype::detached_edge<0, 2>, pipetype::edge<1, 2>, pipetype::edge<2, 3>>>;

template <class M>
M make(std::uint64_t seed) {
  return M{node{false, seed}, node{false, seed + 1}, node{false, seed + 2}, node{true, seed + 3}};
}

template <class M>
std::vector<node*> nodes_of(M& model) {
  std::vector<node*> out;
  model.for_each_stage([&](int, node& n) { out.push_back(&n); });
  return out;
}

/// One step's data: per microbatch one row of the sources' inputs side by side (what step()
/// takes), and the loss stage's targets, a fixed function of them.
struct batch {
  std::vector<float> inputs, targets;
};
inline batch make_batch(int sources, int m, std::uint64_t step) {
  batch b;
  rng r{0x5eedULL + step * 7919};
  const std::size_t row = static_cast<std::size_t>(sources) * act;
  b.inputs.resize(static_cast<std::size_t>(m) * row);
  for (float& x : b.inputs) x = r.uniform();
  b.targets.resize(static_cast<std::size_t>(m) * act);
  for (std::size_t j = 0; j < static_cast<std::size_t>(m); ++j)
    for (std::size_t i = 0; i < act; ++i) {
      float s = 0;
      for (std::size_t k = 0; k < static_cast<std::size_t>(sources); ++k) s += b.inputs[j * row + k * act + i];
      b.targets[j * act + i] = 0.5f * std::sin(2.0f * s);
    }
  return b;
}

template <class M>
void attach(M& model, const batch& b, std::vector<double>& losses, int m) {
  losses.assign(static_cast<std::size_t>(m), 0.0);
  nodes_of(model).back()->set_targets(b.targets.data(), &losses);
}

/// The unpipelined step: microbatch after microbatch, every stage in topological order forward,
/// then in reverse backward, a fan-out's gradients summed in edge order.
template <class M>
void reference_step(M& model, const batch& b, std::vector<double>& losses, int m) {
  const pipetype::stage_dag g = M::topology();
  const std::vector<int> order = pipetype::topological_order(g);
  const std::vector<node*> n = nodes_of(model);
  const std::size_t S = n.size(), E = g.edges.size();
  attach(model, b, losses, m);
  std::vector<int> source_index(S, -1);
  int sources = 0;
  for (std::size_t s = 0; s < S; ++s)
    if (pipetype::predecessors(g, static_cast<int>(s)).empty()) source_index[s] = sources++;
  std::vector<std::vector<float>> out(S, std::vector<float>(act)), stash(S, std::vector<float>(3 * act));
  std::vector<std::vector<float>> edge_grad(E, std::vector<float>(act)), grad_out(S, std::vector<float>(act));
  std::vector<float> wg(params);
  for (int j = 0; j < m; ++j) {
    const float* row = b.inputs.data() + static_cast<std::size_t>(j) * static_cast<std::size_t>(sources) * act;
    std::vector<std::vector<const std::byte*>> in(S);
    for (const int s : order) {
      const auto us = static_cast<std::size_t>(s);
      if (source_index[us] >= 0)
        in[us].push_back(reinterpret_cast<const std::byte*>(row + static_cast<std::size_t>(source_index[us]) * act));
      for (const pipetype::stage_edge& e : g.edges)
        if (e.to == s)
          in[us].push_back(reinterpret_cast<const std::byte*>(out[static_cast<std::size_t>(e.from)].data()));
      const bool loss = pipetype::successors(g, s).empty();
      pipetype::forward_ctx<node> c{
          s,         j,       {reinterpret_cast<const float*>(in[us][0]), act},     {out[us].data(), loss ? 0 : act},
          stash[us], nullptr, {in[us].data(), static_cast<int>(in[us].size()), act}};
      n[us]->forward(c);
    }
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      const int s = *it;
      const auto us = static_cast<std::size_t>(s);
      bool first = true;  // the consumers' gradients, in edge order: the first, then += each
      for (std::size_t e = 0; e < E; ++e)
        if (g.edges[e].from == s && !g.edges[e].detached) {
          for (std::size_t i = 0; i < act; ++i)
            grad_out[us][i] = first ? edge_grad[e][i] : grad_out[us][i] + edge_grad[e][i];
          first = false;
        }
      std::vector<std::byte*> gin;  // (none for a detached edge)
      for (std::size_t e = 0; e < E; ++e)
        if (g.edges[e].to == s)
          gin.push_back(g.edges[e].detached ? nullptr : reinterpret_cast<std::byte*>(edge_grad[e].data()));
      bool loss = true;  // no consumer sends it a gradient
      for (const pipetype::stage_edge& e : g.edges) loss = loss && !(e.from == s && !e.detached);
      pipetype::backward_ctx<node> c{
          s,
          j,
          {reinterpret_cast<const float*>(in[us][0]), act},
          {grad_out[us].data(), loss ? 0 : act},
          {gin.empty() ? nullptr : reinterpret_cast<float*>(gin[0]), gin.empty() || gin[0] == nullptr ? 0 : act},
          stash[us],
          wg,
          nullptr,
          {in[us].data(), static_cast<int>(in[us].size()), act},
          {gin.data(), static_cast<int>(gin.size()), act}};
      n[us]->backward(c);
      const std::span<float> acc = n[us]->weight_gradients();
      for (std::size_t i = 0; i < params; ++i) acc[i] += wg[i];
    }
  }
}

/// The largest |difference| between two models' accumulated gradients; `same` says whether they
/// are bitwise equal.
template <class M>
double max_grad_diff(M& a, M& b, bool* same) {
  const std::vector<node*> x = nodes_of(a), y = nodes_of(b);
  double d = 0;
  *same = true;
  for (std::size_t s = 0; s < x.size(); ++s)
    mlp::grad_diff(x[s]->weight_gradients(), y[s]->weight_gradients(), d, *same);
  return d;
}

}  // namespace graph_model
