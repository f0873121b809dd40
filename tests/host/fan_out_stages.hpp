// A three-stage graph whose stage 0 feeds two stages (0 → 1, 1 → 2, 0 → 2), with gradients that
// say where they came from, for the fan-out sum's tests (host and CUDA executors alike).
//
// Backward of microbatch j: the head (2) sends 1·(j + 1) to stage 1 and 10·(j + 1) to stage 0;
// stage 1 sends twice its gradient, 2·(j + 1). So stage 0 must see 2(j + 1) + 10(j + 1), summed
// in edge order (0 → 1 first), exactly: every value is a small integer.
// `spread<true>` sums through its own add_grad_output, which logs each call; `spread<false>`
// leaves the sum to pipetype's `+=`.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include <pipetype/pipetype.hpp>

namespace fan_out {

inline constexpr std::size_t n = 4;  // elements per microbatch

struct add_call {
  int microbatch = -1;  // the microbatch the sum is for (from the gradient's value)
  float into = 0, g = 0;
  void* stream = nullptr;
};

template <bool OwnSum>
struct spread {
  using input = pipetype::tensor<float, n>;
  using output = pipetype::tensor<float, n>;
  std::vector<float> seen = std::vector<float>(8, -1.0f);  // per microbatch (8 at most): the grad_output seen
  std::vector<add_call> calls;                             // add_grad_output's, in the order they came

  void forward(const pipetype::forward_ctx<spread>& c) {
    for (std::size_t i = 0; i < n; ++i) c.output[i] = c.input[i];
  }
  void backward(const pipetype::backward_ctx<spread>& c) {
    for (std::size_t i = 1; i < n; ++i)
      if (c.grad_output[i] != c.grad_output[0]) return;  // left at -1: the test sees it
    seen[static_cast<std::size_t>(c.microbatch)] = c.grad_output[0];
  }
  void add_grad_output(std::span<float> into, std::span<const float> g, void* stream) requires OwnSum {
    calls.push_back({static_cast<int>(g[0] / 10.0f) - 1, into[0], g[0], stream});
    for (std::size_t i = 0; i < into.size(); ++i) into[i] += g[i];
  }
};

struct relay {
  using input = pipetype::tensor<float, n>;
  using output = pipetype::tensor<float, n>;
  void forward(const pipetype::forward_ctx<relay>& c) {
    for (std::size_t i = 0; i < n; ++i) c.output[i] = c.input[i];
  }
  void backward(const pipetype::backward_ctx<relay>& c) {
    for (std::size_t i = 0; i < n; ++i) c.grad_input[i] = 2.0f * c.grad_output[i];
  }
};

struct head {
  using input = pipetype::tensor<float, n>;
  using output = pipetype::tensor<float, n>;
  void forward(const pipetype::forward_ctx<head>&) {}
  void backward(const pipetype::backward_ctx<head>& c) {
    const float j = static_cast<float>(c.microbatch + 1);
    for (std::size_t i = 0; i < n; ++i) {
      c.grad_inputs[0][i] = 1.0f * j;   // to stage 1 (edge 1 → 2)
      c.grad_inputs[1][i] = 10.0f * j;  // to stage 0 (edge 0 → 2)
    }
  }
};

template <bool OwnSum>
using model = pipetype::dag<pipetype::nodes<spread<OwnSum>, relay, head>,
                            pipetype::edges<pipetype::edge<0, 1>, pipetype::edge<1, 2>, pipetype::edge<0, 2>>>;

/// `schedule` (one stage per rank) over the model's graph, three ranks.
inline pipetype::runtime_plan plan(const char* schedule, int m) {
  pipetype::schedule_params params;
  params.edges = model<false>::topology().edges;
  return pipetype::build_plan(pipetype::make_schedule(schedule, 3, m, 1, params));
}

/// Stage 0's sums are 12 (j + 1), and its own adds (when it has them) came once per microbatch,
/// the gradient from edge 0 → 1 first.
template <bool OwnSum>
bool sums_in_edge_order(const spread<OwnSum>& s, int m) {
  for (int j = 0; j < m; ++j)
    if (s.seen[static_cast<std::size_t>(j)] != 12.0f * static_cast<float>(j + 1)) return false;
  if constexpr (OwnSum) {
    if (static_cast<int>(s.calls.size()) != m) return false;
    for (const add_call& c : s.calls)
      if (c.into != 2.0f * static_cast<float>(c.microbatch + 1) || c.g != 10.0f * static_cast<float>(c.microbatch + 1))
        return false;
  }
  return true;
}

}  // namespace fan_out
