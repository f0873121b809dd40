// Host executor with varying tensors (graph/tensors.hpp's varying<...>): a batch's lengths give
// each microbatch its actual extent, the stages see exactly that many elements, only those travel,
// and a length above the maximum is one sentence before anything runs.
#include <pipetype/host.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_host_lengths {

namespace pt = pipetype;
namespace ph = pipetype::host;
using namespace std::chrono_literals;

namespace {

constexpr std::size_t per_token = 2, max_len = 4;
using seq = pt::varying<pt::tensor<float, max_len * per_token>>;  // [length, 2] floats, length ≤ 4

std::atomic<int> faults{0};
std::vector<std::size_t> lens;  // the step's lengths, for the stages to check what they see

// h' = w · h over the microbatch's actual elements; the weight gradient Σ g · h.
struct scale_stage {
  using input = seq;
  using output = seq;
  using weight_grad = pt::tensor<float, 1>;
  float w = 2;
  float acc[1] = {};
  std::span<float> weight_gradients() { return acc; }
  void forward(const pt::forward_ctx<scale_stage>& c) {
    const std::size_t n = lens[static_cast<std::size_t>(c.microbatch)] * per_token;
    if (c.input.size() != n || c.output.size() != n) ++faults;
    for (std::size_t i = 0; i < n && i < c.output.size(); ++i) c.output[i] = w * c.input[i];
  }
  void backward(const pt::backward_ctx<scale_stage>& c) {
    if (c.grad_output.size() != c.input.size() || (!c.grad_input.empty() && c.grad_input.size() != c.input.size()))
      ++faults;
    float g = 0;
    for (std::size_t i = 0; i < c.input.size(); ++i) {
      g += c.grad_output[i] * c.input[i];
      if (!c.grad_input.empty()) c.grad_input[i] = w * c.grad_output[i];
    }
    c.weight_grad[0] = g;
  }
};

struct mse {
  using input = seq;
  using output = pt::tensor<float, 1>;
  using target = seq;
  void forward(const pt::forward_ctx<mse>& c) {
    if (c.target.size() != c.input.size() || c.input.size() != lens[static_cast<std::size_t>(c.microbatch)] * per_token)
      ++faults;
    float l = 0;
    for (std::size_t i = 0; i < c.input.size(); ++i)
      l += 0.5f * (c.input[i] - c.target[i]) * (c.input[i] - c.target[i]);
    *c.loss = l;
  }
  void backward(const pt::backward_ctx<mse>& c) {
    for (std::size_t i = 0; i < c.input.size(); ++i) c.grad_input[i] = c.loss_scale * (c.input[i] - c.target[i]);
  }
};

using model_t = pt::chain<scale_stage, scale_stage, mse>;

}  // namespace

TEST_CASE("host lengths: each microbatch's stages see its length, and the gradients are those of its elements") {
  lens = {4, 1, 3, 0, 2};
  const int m = static_cast<int>(lens.size());
  // microbatch j's actual elements first in its slot of max_len · per_token; the rest never read
  std::vector<float> x(static_cast<std::size_t>(m) * max_len * per_token, 1e30f), t(x.size(), -1e30f);
  std::size_t tokens = 0;
  for (std::size_t j = 0; j < lens.size(); ++j)
    for (std::size_t i = 0; i < lens[j] * per_token; ++i) {
      x[j * max_len * per_token + i] = static_cast<float>((i + j) % 3);
      t[j * max_len * per_token + i] = static_cast<float>(i % 2);
      tokens += i % per_token == 0;
    }
  for (const char* name : {"gpipe", "1f1b"}) {
    CAPTURE(name);
    const pt::runtime_plan plan = pt::build_plan(pt::make_schedule(name, 3, m));
    REQUIRE(plan.ok());
    model_t model;
    ph::executor ex{plan, model, {.deadline = 20s}};
    faults = 0;
    pt::batch b;
    b.input(x).target(t).lengths(lens, max_len).scale(pt::loss_scaling::per(static_cast<double>(tokens)));
    const pt::step_losses& l = ex.step(b);
    CHECK(faults.load() == 0);
    // by hand: h2 = 4x, loss_j = Σ ½(4x − t)², f = 1/tokens; dW1 = f Σ (4x − t)·2x, dW0 = f Σ (4x − t)·2·x
    float g1 = 0, g0 = 0;
    for (std::size_t j = 0; j < lens.size(); ++j) {
      float loss = 0, a = 0;
      for (std::size_t i = 0; i < lens[j] * per_token; ++i) {
        const float xi = x[j * max_len * per_token + i], e = 4 * xi - t[j * max_len * per_token + i];
        loss += 0.5f * e * e;
        a += e * xi;
      }
      CHECK(l.at(0, static_cast<int>(j)) == doctest::Approx(loss));
      g1 += 2 * a;
      g0 += 2 * a;
    }
    CHECK(model.stage<1>().acc[0] == doctest::Approx(g1 / static_cast<float>(tokens)));
    CHECK(model.stage<0>().acc[0] == doctest::Approx(g0 / static_cast<float>(tokens)));
  }
}

TEST_CASE("host lengths: lengths that do not fit are one sentence, and nothing runs") {
  lens = {4, 4};
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 3, 2));
  model_t model;
  ph::executor ex{plan, model, {.deadline = 20s}};
  const std::vector<float> x(2 * max_len * per_token, 1), t(x.size(), 0);
  pt::batch above;
  above.input(x).target(t).lengths(std::vector<std::size_t>{4, 5}, max_len);
  CHECK_THROWS_WITH_AS(ex.step(above), "pipetype::host: the batch's length of microbatch 1 is 5, above the maximum 4",
                       pt::shape_error);
  pt::batch count;
  count.input(x).target(t).lengths(std::vector<std::size_t>{4}, max_len);
  CHECK_THROWS_WITH_AS(ex.step(count), "pipetype::host: the batch has 1 lengths; the plan has 2 microbatches",
                       pt::shape_error);
  pt::batch uneven;
  uneven.input(x).target(t).lengths(std::vector<std::size_t>{2, 2}, 3);
  CHECK_THROWS_WITH_AS(ex.step(uneven),
                       "pipetype::host: stage 0's input tensor 0 varies and holds at most 8 elements, which is no "
                       "multiple of the batch's maximum length 3",
                       pt::shape_error);
  CHECK(model.stage<0>().acc[0] == 0);  // nothing ran
  faults = 0;
  pt::batch full;  // no lengths: every microbatch full
  full.input(x).target(t);
  ex.step(full);
  CHECK(faults.load() == 0);
  CHECK(model.stage<0>().acc[0] != 0);
}

}  // namespace test_host_lengths
}  // namespace
