// Host executor: a sink reads its targets from the batch, writes one loss per microbatch, and
// seeds its backward with the loss scaling's factor; step() returns the losses, and the weight
// gradients are those of the objective f · Σ losses under every schedule.
#include <pipetype/host.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <span>
#include <string>
#include <vector>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_host_losses {

namespace pt = pipetype;
namespace ph = pipetype::host;
using namespace std::chrono_literals;

namespace {

constexpr std::size_t width = 3;

// h' = w ⊙ h; hands its weight gradient g ⊙ h to pipetype.
struct lin {
  using input = pt::tensor<float, width>;
  using output = pt::tensor<float, width>;
  using weight_grad = pt::tensor<float, width>;
  float w[width] = {1, -2, 0.5f};
  float acc[width] = {};
  std::span<float> weight_gradients() { return acc; }
  void forward(const pt::forward_ctx<lin>& c) {
    for (std::size_t i = 0; i < width; ++i) c.output[i] = w[i] * c.input[i];
  }
  void backward_input(const pt::backward_ctx<lin>& c) {
    for (std::size_t i = 0; i < c.grad_input.size(); ++i) c.grad_input[i] = w[i] * c.grad_output[i];
  }
  void backward_weight(const pt::backward_ctx<lin>& c) {
    for (std::size_t i = 0; i < width; ++i) c.weight_grad[i] = c.grad_output[i] * c.input[i];
  }
};

std::atomic<int> faults{0};

// Half the squared error against the microbatch's targets.
struct mse {
  using input = pt::tensor<float, width>;
  using output = pt::tensor<float, 1>;
  using target = pt::tensor<float, width>;
  void forward(const pt::forward_ctx<mse>& c) {
    if (c.loss == nullptr || c.target.size() != width) {
      ++faults;
      return;
    }
    float l = 0;
    for (std::size_t i = 0; i < width; ++i) l += 0.5f * (c.input[i] - c.target[i]) * (c.input[i] - c.target[i]);
    *c.loss = l;
    if (!c.output.empty()) c.output[0] = 2 * l;  // kept only when the executor keeps outputs
  }
  void backward_input(const pt::backward_ctx<mse>& c) {
    if (c.target.size() != width || c.loss_scale == 0) ++faults;
    for (std::size_t i = 0; i < width; ++i) c.grad_input[i] = c.loss_scale * (c.input[i] - c.target[i]);
  }
  void backward_weight(const pt::backward_ctx<mse>&) {}
};

using model_t = pt::chain<lin, lin, lin, mse>;

struct data {
  std::vector<float> x, t;
};
data make_data(int m) {
  data d;
  for (int j = 0; j < m * static_cast<int>(width); ++j) {
    d.x.push_back(static_cast<float>(j % 4 - 1));
    d.t.push_back(static_cast<float>((5 * j) % 3));
  }
  return d;
}

// The losses and f · d(Σ loss)/dw of each lin stage, microbatch after microbatch.
struct reference {
  std::vector<float> losses;
  float g[3][width] = {};
};
reference reference_of(const data& d, int m, float f) {
  const lin l;
  reference r;
  for (int j = 0; j < m; ++j) {
    float h[4][width];
    for (std::size_t i = 0; i < width; ++i) h[0][i] = d.x[static_cast<std::size_t>(j) * width + i];
    for (int s = 0; s < 3; ++s)
      for (std::size_t i = 0; i < width; ++i) h[s + 1][i] = l.w[i] * h[s][i];
    float loss = 0, g[width];
    for (std::size_t i = 0; i < width; ++i) {
      const float e = h[3][i] - d.t[static_cast<std::size_t>(j) * width + i];
      loss += 0.5f * e * e;
      g[i] = f * e;
    }
    r.losses.push_back(loss);
    for (int s = 2; s >= 0; --s)
      for (std::size_t i = 0; i < width; ++i) {
        r.g[s][i] += g[i] * h[s][i];
        g[i] *= l.w[i];
      }
  }
  return r;
}

}  // namespace

TEST_CASE("host losses: step() returns each microbatch's loss, and gradients are the objective's") {
  const int m = 4;
  const data d = make_data(m);
  struct scheduled {
    const char* name;
    int ranks;
  };
  for (const scheduled s : {scheduled{"gpipe", 4}, {"1f1b", 4}, {"interleaved-1f1b", 2}, {"zb-h1", 4}}) {
    CAPTURE(s.name);
    const pt::runtime_plan plan = pt::build_plan(pt::make_schedule(s.name, s.ranks, m, 4 / s.ranks));
    REQUIRE_MESSAGE(plan.ok(), pt::describe(plan.result));
    for (const bool by_sum : {false, true}) {
      model_t model;
      ph::executor ex{plan, model, {.deadline = 20s}};
      faults = 0;
      pt::batch b;
      b.input(d.x).target(d.t);
      if (by_sum) b.scale(pt::loss_scaling::sum());
      const pt::step_losses& l = ex.step(b);
      CHECK(faults.load() == 0);
      const float f = by_sum ? 1.0f : 1.0f / m;
      const reference r = reference_of(d, m, f);
      REQUIRE(l.values.size() == static_cast<std::size_t>(m));
      CHECK(l.sinks == 1);
      CHECK(l.scale == doctest::Approx(f));
      for (int j = 0; j < m; ++j) CHECK(l.at(0, j) == r.losses[static_cast<std::size_t>(j)]);
      double objective = 0;
      for (const float v : r.losses) objective += v;
      CHECK(l.objective() == doctest::Approx(objective * f));
      for (std::size_t i = 0; i < width; ++i) {
        CHECK(model.stage<0>().acc[i] == doctest::Approx(r.g[0][i]));
        CHECK(model.stage<1>().acc[i] == doctest::Approx(r.g[1][i]));
        CHECK(model.stage<2>().acc[i] == doctest::Approx(r.g[2][i]));
      }
    }
  }
}

TEST_CASE("host losses: missing targets and a bad scaling are one sentence, and nothing runs") {
  const int m = 2;
  const data d = make_data(m);
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 4, m));
  model_t model;
  ph::executor ex{plan, model, {.deadline = 20s}};
  faults = 0;
  pt::batch no_targets;
  no_targets.input(d.x);
  CHECK_THROWS_WITH_AS(ex.step(no_targets),
                       "pipetype::host: the batch has 0 target arrays; the model's 1 sink take 1 (one per tensor, "
                       "sinks in stage order)",
                       pt::shape_error);
  CHECK_THROWS_WITH_AS(ex.step(std::span<const float>(d.x)),
                       "pipetype::host: the model's sinks take targets; give step() a pipetype::batch with them",
                       pt::shape_error);
  pt::batch zero;
  zero.input(d.x).target(d.t).scale(pt::loss_scaling::per(0));
  CHECK_THROWS_WITH_AS(
      ex.step(zero),
      "pipetype::host: the batch's loss_scaling::per(n) needs n > 0 (the count its losses are divided by)",
      pt::shape_error);
  CHECK(model.stage<0>().acc[0] == 0);  // nothing ran
  pt::batch b;
  b.input(d.x).target(d.t).scale(pt::loss_scaling::per(2.0 * m * width));
  const pt::step_losses& l = ex.step(b);
  CHECK(faults.load() == 0);
  CHECK(l.scale == doctest::Approx(1.0 / (2.0 * m * width)));
  CHECK(!std::isnan(l.at(0, 1)));
}

TEST_CASE("host losses: a forward-only plan computes the sinks' losses and no gradient") {
  const int m = 4;
  const data d = make_data(m);
  for (const char* name : {"1f1b", "zb-h1", "interleaved-1f1b"}) {
    CAPTURE(name);
    const int ranks = std::string(name) == "interleaved-1f1b" ? 2 : 4;
    const pt::program training = pt::make_schedule(name, ranks, m, 4 / ranks);
    const pt::runtime_plan eval_plan = pt::build_plan(pt::forward_only_of(training));
    REQUIRE(eval_plan.ok());
    model_t model;
    faults = 0;
    ph::executor eval{eval_plan, model, {.deadline = 20s}};
    pt::batch b;
    b.input(d.x).target(d.t);
    const std::vector<float> evaluated = eval.step(b).values;
    CHECK(faults.load() == 0);
    for (std::size_t i = 0; i < width; ++i) CHECK(model.stage<0>().acc[i] == 0);  // no backward ran
    const reference r = reference_of(d, m, 1.0f / m);
    CHECK(evaluated == r.losses);
    // the training plan's forwards give the same losses, bit for bit
    ph::executor train{pt::build_plan(training), model, {.deadline = 20s}};
    CHECK(train.step(b).values == evaluated);
  }
}

TEST_CASE("host losses: with keep_outputs a sink's outputs are read after the step") {
  const int m = 4;
  const data d = make_data(m);
  const pt::runtime_plan plan = pt::build_plan(pt::forward_only_of(pt::make_schedule("1f1b", 4, m)));
  model_t model;
  faults = 0;
  ph::executor ex{plan, model, {.deadline = 20s, .keep_outputs = true}};
  pt::batch b;
  b.input(d.x).target(d.t);
  const std::vector<float> losses = ex.step(b).values;
  for (int j = 0; j < m; ++j) {
    const std::span<const float> out = ex.output<float>(0, j);
    REQUIRE(out.size() == 1);
    CHECK(out[0] == 2 * losses[static_cast<std::size_t>(j)]);
    CHECK(ex.output(0, j).size() == sizeof(float));  // as bytes
  }
  CHECK_THROWS_WITH_AS(ex.output<int>(0, 0), "pipetype::host: output(): tensor 0 has elements of another type",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(ex.output(1, 0), "pipetype::host: output(): no sink 1, microbatch 0 (1 sinks, 4 microbatches)",
                       std::invalid_argument);
  model_t other;
  ph::executor plain{plan, other, {.deadline = 20s}};
  plain.step(b);
  CHECK_THROWS_WITH_AS(plain.output(0, 0),
                       "pipetype::host: output(): the executor keeps no outputs (executor_options::keep_outputs)",
                       std::invalid_argument);
  CHECK(faults.load() == 0);
}

TEST_CASE("host losses: replay() runs the captured batch, and walk_rank lends the sinks a loss cell") {
  const int m = 4;
  const data d = make_data(m), other = make_data(m + 1);
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 4, m));
  model_t model;
  ph::executor ex{plan, model, {.deadline = 20s}};
  pt::batch a;
  a.input(d.x).target(d.t);
  const std::vector<float> captured = ex.capture(a).values;
  std::vector<float> x2(other.x.begin(), other.x.begin() + m * static_cast<int>(width)), t2(x2.size(), 7.0f);
  pt::batch b;
  b.input(x2).target(t2).scale(pt::loss_scaling::sum());
  const std::vector<float> stepped = ex.step(b).values;
  CHECK(stepped != captured);
  const pt::step_losses& again = ex.replay();
  CHECK(again.values == captured);
  CHECK(again.scale == doctest::Approx(1.0 / m));    // the captured batch's scaling, not the last step's
  for (int r = 0; r < 4; ++r) ex.walk_rank(r, d.x);  // the sink writes *c.loss: a scratch cell
}

}  // namespace test_host_losses
}  // namespace
