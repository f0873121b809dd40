// A fan-in whose incoming edges carry different types (per_edge<...>, graph/tensors.hpp): an
// image tower of floats and a token tower of ids feed one head; each edge moves its own bytes,
// the head sees each input in its own type, and the gradients are exact under every schedule.
#include <pipetype/host.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_host_per_edge {

namespace pt = pipetype;
namespace ph = pipetype::host;
using namespace std::chrono_literals;

namespace {

std::atomic<int> faults{0};

// out[i] = w[i] · Σ in (3 floats from 4); dW[i] = g[i] · Σ in
struct image_tower {
  using input = pt::tensor<float, 4>;
  using output = pt::tensor<float, 3>;
  using weight_grad = pt::tensor<float, 3>;
  float w[3] = {1, 2, -1};
  float acc[3] = {};
  std::span<float> weight_gradients() { return acc; }
  static float sum(std::span<const float> x) { return x[0] + x[1] + x[2] + x[3]; }
  void forward(const pt::forward_ctx<image_tower>& c) {
    for (std::size_t i = 0; i < 3; ++i) c.output[i] = w[i] * sum(c.input);
  }
  void backward(const pt::backward_ctx<image_tower>& c) {
    for (std::size_t i = 0; i < 3; ++i) c.weight_grad[i] = c.grad_output[i] * sum(c.input);
  }
};

// floats w[i] · ids[i], and the ids passed on (no gradient); dW[i] = g[i] · ids[i]
using tokens = pt::tensors<pt::tensor<float, 2>, pt::no_grad<pt::tensor<std::int32_t, 2>>>;
struct token_tower {
  using input = pt::tensor<std::int32_t, 2>;
  using output = tokens;
  using weight_grad = pt::tensor<float, 2>;
  float w[2] = {3, -2};
  float acc[2] = {};
  std::span<float> weight_gradients() { return acc; }
  void forward(const pt::forward_ctx<token_tower>& c) {
    const auto [f, ids] = c.output;
    for (std::size_t i = 0; i < 2; ++i) {
      f[i] = w[i] * static_cast<float>(c.input[i]);
      ids[i] = c.input[i];
    }
  }
  void backward(const pt::backward_ctx<token_tower>& c) {
    const auto [g, none] = c.grad_output;
    if (!none.empty()) ++faults;
    for (std::size_t i = 0; i < 2; ++i) c.weight_grad[i] = g[i] * static_cast<float>(c.input[i]);
  }
};

// y = Σ a + Σ b[i] · ids[i]; loss ½ (y − t)²
struct head {
  using inputs = pt::per_edge<pt::tensor<float, 3>, tokens>;  // edge 0 → 2, then edge 1 → 2
  using output = pt::tensor<float, 1>;
  using target = pt::tensor<float, 1>;
  static float y_of(const pt::edge_views<true, pt::tensor<float, 3>, tokens>& in) {
    const std::span<const float> a = in.get<0>();
    const auto [b, ids] = in.get<1>();
    if (a.size() != 3 || b.size() != 2 || ids.size() != 2) ++faults;
    float y = a[0] + a[1] + a[2];
    for (std::size_t i = 0; i < 2; ++i) y += b[i] * static_cast<float>(ids[i]);
    return y;
  }
  void forward(const pt::forward_ctx<head>& c) {
    if (c.inputs.size() != 2 || c.input.size() != 3) ++faults;
    const float e = y_of(c.inputs) - c.target[0];
    *c.loss = 0.5f * e * e;
  }
  void backward(const pt::backward_ctx<head>& c) {
    const float dy = c.loss_scale * (y_of(c.inputs) - c.target[0]);
    const std::span<float> ga = c.grad_inputs.get<0>();
    const auto [gb, gids] = c.grad_inputs.get<1>();
    if (ga.size() != 3 || gb.size() != 2 || !gids.empty()) ++faults;  // the ids carry no gradient
    const auto ids = c.inputs.get<1>().get<1>();
    for (std::size_t i = 0; i < 3; ++i) ga[i] = dy;
    for (std::size_t i = 0; i < 2; ++i) gb[i] = dy * static_cast<float>(ids[i]);
  }
};

using model_t = pt::dag<pt::nodes<image_tower, token_tower, head>, pt::edges<pt::edge<0, 2>, pt::edge<1, 2>>>;

}  // namespace

TEST_CASE("host per-edge inputs: two towers of different types into one head, gradients exact") {
  const int m = 4;
  std::vector<float> pixels, targets;
  std::vector<std::int32_t> ids;
  for (int j = 0; j < m; ++j) {
    for (int i = 0; i < 4; ++i) pixels.push_back(static_cast<float>((i + j) % 3 - 1));
    for (int i = 0; i < 2; ++i) ids.push_back((2 * j + i) % 5 - 2);
    targets.push_back(static_cast<float>(j % 2));
  }
  // by hand: y = S·Σw_img + Σ w_tok[i] ids[i]², dy = y − t
  float g_img[3] = {}, g_tok[2] = {};
  const image_tower ti;
  const token_tower tt;
  for (int j = 0; j < m; ++j) {
    const auto u = static_cast<std::size_t>(j);
    float S = 0, y = 0;
    for (std::size_t i = 0; i < 4; ++i) S += pixels[4 * u + i];
    for (std::size_t i = 0; i < 3; ++i) y += ti.w[i] * S;
    for (std::size_t i = 0; i < 2; ++i) {
      const auto id = static_cast<float>(ids[2 * u + i]);
      y += tt.w[i] * id * id;
    }
    const float dy = y - targets[u];
    for (std::size_t i = 0; i < 3; ++i) g_img[i] += dy * S;
    for (std::size_t i = 0; i < 2; ++i) {
      const auto id = static_cast<float>(ids[2 * u + i]);
      g_tok[i] += dy * id * id;
    }
  }
  for (const char* name : {"gpipe", "1f1b"}) {
    CAPTURE(std::string(name));
    pt::schedule_params params;
    params.edges = model_t::topology().edges;
    const pt::runtime_plan plan = pt::build_plan(pt::make_schedule(name, 3, m, 1, params));
    REQUIRE_MESSAGE(plan.ok(), pt::describe(plan.result));
    model_t model;
    faults = 0;
    ph::executor ex{plan, model, {.deadline = 20s, .ordered_gradients = false}};
    pt::batch b;
    b.input(pixels).input(ids).target(targets).scale(pt::loss_scaling::sum());
    ex.step(b);
    CHECK(faults.load() == 0);
    for (std::size_t i = 0; i < 3; ++i) CHECK(model.stage<0>().acc[i] == g_img[i]);
    for (std::size_t i = 0; i < 2; ++i) CHECK(model.stage<1>().acc[i] == g_tok[i]);
    // each edge moves its own bytes: 12 from the image tower, 72 (8 floats, then ids at 64) from the
    // token tower; gradients 12 and 8
    std::vector<std::size_t> act, grad;
    for (const ph::bound_rank& r : ex.program().rank)
      for (const pt::bound_op& op : r.ops[1])
        if (op.code == pt::op_code::send) (op.what == pt::kind::F ? act : grad).push_back(op.bytes);
    for (const std::size_t x : act) CHECK((x == 12 || x == 72));
    for (const std::size_t x : grad) CHECK((x == 12 || x == 8));
    CHECK(act.size() == 2 * m);
  }
}

TEST_CASE("host per-edge inputs: a stage with more input types than incoming edges is one sentence") {
  struct two_in {
    using inputs = pt::per_edge<pt::tensor<float, 3>, pt::tensor<float, 3>>;
    using output = pt::tensor<float, 3>;
    void forward(const pt::forward_ctx<two_in>&) {}
    void backward(const pt::backward_ctx<two_in>&) {}
  };
  struct cell {
    using input = pt::tensor<float, 3>;
    using output = pt::tensor<float, 3>;
    void forward(const pt::forward_ctx<cell>&) {}
    void backward(const pt::backward_ctx<cell>&) {}
  };
  pt::chain<cell, two_in> model;  // a chain gives stage 1 one incoming edge
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("gpipe", 2, 2));
  CHECK_THROWS_WITH_AS(
      ph::executor(plan, model),
      "pipetype::host: stage 1 declares 2 per-edge inputs, but the stage graph gives it 1 incoming edges",
      pt::shape_error);
}

}  // namespace test_host_per_edge
}  // namespace
