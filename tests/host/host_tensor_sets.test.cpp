// Host executor with several tensors per edge (graph/tensors.hpp): hidden states with a gradient
// and token ids without one travel together; only the hidden states' gradient travels back; the
// batch gives each source tensor its own array (bind/batch.hpp), and a batch that does not fit is
// refused before anything runs.
#include <pipetype/host.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_host_tensor_sets {

namespace pt = pipetype;
namespace ph = pipetype::host;
using namespace std::chrono_literals;

namespace {

constexpr std::size_t width = 4;
using edge = pt::tensors<pt::tensor<float, width>, pt::no_grad<pt::tensor<std::int32_t, width>>>;

std::atomic<int> faults{0};  // what a stage saw that it should not have (checked after the step)

// h' = w ⊙ h + ids, ids passed on; the weight gradient g ⊙ h, the input gradient w ⊙ g. Integer
// data keeps every sum exact, so the expected gradients do not depend on the order of the adds.
struct mid {
  using input = edge;
  using output = edge;
  using weight_grad = pt::tensor<float, width>;
  float w[width] = {};
  float acc[width] = {};
  std::span<float> weight_gradients() { return acc; }
  void forward(const pt::forward_ctx<mid>& c) {
    const auto [h, ids] = c.input;
    const auto [o, oids] = c.output;
    if (h.size() != width || ids.size() != width || o.size() != width || oids.size() != width) ++faults;
    for (std::size_t i = 0; i < width; ++i) {
      o[i] = w[i] * h[i] + static_cast<float>(ids[i]);
      oids[i] = ids[i];
    }
  }
  void backward_input(const pt::backward_ctx<mid>& c) {
    const auto [g, gids] = c.grad_output;
    const auto [gi, gids_in] = c.grad_input;
    if (!gids.empty() || !gids_in.empty() || g.size() != width) ++faults;  // ids carry no gradient
    for (std::size_t i = 0; i < gi.size(); ++i) gi[i] = w[i] * g[i];
  }
  void backward_weight(const pt::backward_ctx<mid>& c) {
    const auto [h, ids] = c.input;
    const auto g = c.grad_output.get<0>();
    if (!c.grad_input.get<0>().empty()) ++faults;  // W writes no input gradient
    for (std::size_t i = 0; i < width; ++i) c.weight_grad[i] = g[i] * h[i];
  }
};

// The loss Σ h ⊙ ids: its gradient is ids.
struct sink {
  using input = edge;
  using output = pt::tensor<float, 1>;
  void forward(const pt::forward_ctx<sink>& c) {
    if (!c.output.empty()) ++faults;  // the last stage gives nothing
  }
  void backward_input(const pt::backward_ctx<sink>& c) {
    const auto [h, ids] = c.input;
    const auto [gi, none] = c.grad_input;
    if (!none.empty() || gi.size() != width) ++faults;
    for (std::size_t i = 0; i < width; ++i) gi[i] = static_cast<float>(ids[i]);
  }
  void backward_weight(const pt::backward_ctx<sink>&) {}
};

using model_t = pt::chain<mid, mid, sink>;

model_t make_model() {
  model_t m;
  for (std::size_t i = 0; i < width; ++i) {
    m.stage<0>().w[i] = static_cast<float>(i + 1);
    m.stage<1>().w[i] = static_cast<float>(2 - i);
  }
  return m;
}

struct data {
  std::vector<float> x;
  std::vector<std::int32_t> ids;
};
data make_data(int m) {
  data d;
  for (int j = 0; j < m; ++j)
    for (std::size_t i = 0; i < width; ++i) {
      const int k = static_cast<int>(i);
      d.x.push_back(static_cast<float>((j + 2 * k) % 5 - 2));
      d.ids.push_back((3 * j + k) % 7 - 3);
    }
  return d;
}

// The gradients of Σ_j Σ_i h2 ⊙ ids, by hand: h1 = w0 x + ids, h2 = w1 h1 + ids.
void expected(const model_t& m, const data& d, int microbatches, float* g0, float* g1) {
  for (std::size_t i = 0; i < width; ++i) g0[i] = g1[i] = 0;
  for (int j = 0; j < microbatches; ++j)
    for (std::size_t i = 0; i < width; ++i) {
      const std::size_t k = static_cast<std::size_t>(j) * width + i;
      const float ids = static_cast<float>(d.ids[k]);
      const float h1 = m.stage<0>().w[i] * d.x[k] + ids;
      g1[i] += ids * h1;
      g0[i] += m.stage<1>().w[i] * ids * d.x[k];
    }
}

}  // namespace

TEST_CASE("host tensor sets: ids ride with the hidden states, only the hidden states' gradient comes back") {
  const int m = 6;
  const data d = make_data(m);
  for (const char* name : {"gpipe", "1f1b", "zb-h1", "zb-h2"}) {
    CAPTURE(name);
    const pt::runtime_plan plan = pt::build_plan(pt::make_schedule(name, 3, m));
    REQUIRE(plan.ok());
    model_t model = make_model();
    ph::executor ex{plan, model, {.deadline = 20s}};
    faults = 0;
    pt::batch b;
    b.input(d.x).input(d.ids);
    ex.step(b);
    CHECK(faults.load() == 0);
    float g0[width], g1[width];
    expected(model, d, m, g0, g1);
    for (std::size_t i = 0; i < width; ++i) {
      CHECK(model.stage<0>().acc[i] == g0[i]);
      CHECK(model.stage<1>().acc[i] == g1[i]);
    }
    // an activation moves both tensors (16 bytes of floats, the ids at the next 64 bytes: 80);
    // a gradient only the floats (16)
    std::size_t act = 0, grad = 0;
    for (const ph::bound_rank& r : ex.program().rank)
      for (const pt::bound_op& op : r.ops[1])
        if (op.code == pt::op_code::send || op.code == pt::op_code::recv)
          (op.what == pt::kind::F ? act : grad) = op.bytes;
    CHECK(act == 80);
    CHECK(grad == 16);
  }
}

TEST_CASE("host tensor sets: a batch that does not fit is one sentence, nothing runs, the executor stays usable") {
  const int m = 4;
  const data d = make_data(m);
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 3, m));
  model_t model = make_model();
  ph::executor ex{plan, model, {.deadline = 20s}};
  faults = 0;
  {
    pt::batch b;
    b.input(d.x);
    CHECK_THROWS_WITH_AS(ex.step(b),
                         "pipetype::host: the batch has 1 input arrays; the model's 1 source take 2 (one per tensor, "
                         "sources in stage order)",
                         pt::shape_error);
  }
  {
    pt::batch b;
    b.input(d.ids).input(d.ids);  // int32 where the stage takes float: the same size, another type
    CHECK_THROWS_WITH_AS(ex.step(b),
                         "pipetype::host: the batch's input array 0 (source stage 0, tensor 0) has elements of 4 bytes "
                         "but of another type; the stage takes elements of 4 bytes",
                         pt::shape_error);
  }
  {
    const std::vector<double> wide(d.x.size());
    pt::batch b;
    b.input(d.x).input(wide);
    CHECK_THROWS_WITH_AS(
        ex.step(b),
        "pipetype::host: the batch's input array 1 (source stage 0, tensor 1) has elements of 8 bytes; "
        "the stage takes elements of 4 bytes",
        pt::shape_error);
  }
  {
    const std::vector<std::int32_t> short_ids(d.ids.begin(), d.ids.end() - 1);
    pt::batch b;
    b.input(d.x).input(short_ids);
    CHECK_THROWS_WITH_AS(
        ex.step(b),
        "pipetype::host: the batch's input array 1 (source stage 0, tensor 1) has 15 elements; the plan "
        "has 4 microbatches of 4, so 16",
        pt::shape_error);
  }
  CHECK_THROWS_WITH_AS(ex.step(std::span<const std::byte>()),
                       "pipetype::host: step() got one array, but source stage 0 takes a set of 2 tensors: give it a "
                       "pipetype::batch (one array per tensor)",
                       pt::shape_error);
  for (std::size_t i = 0; i < width; ++i) CHECK(model.stage<0>().acc[i] == 0);  // nothing ran
  pt::batch b;
  b.input(d.x).input(d.ids);
  ex.step(b);
  float g0[width], g1[width];
  expected(model, d, m, g0, g1);
  for (std::size_t i = 0; i < width; ++i) CHECK(model.stage<0>().acc[i] == g0[i]);
  CHECK(faults.load() == 0);
}

TEST_CASE("host tensor sets: edges that do not fit at run time name the edge and the tensor") {
  struct dyn {  // a set whose float extent is known at run time
    using input = pt::tensors<pt::tensor<float, pt::dynamic>, pt::no_grad<pt::tensor<std::int32_t, 2>>>;
    using output = input;
    std::size_t n = 4;
    std::size_t input_extent(std::size_t) const { return n; }
    std::size_t output_extent(std::size_t) const { return n; }
    void forward(const pt::forward_ctx<dyn>&) {}
    void backward(const pt::backward_ctx<dyn>&) {}
  };
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("gpipe", 2, 2));
  pt::uniform_chain<dyn> bad(std::vector<dyn>(2));
  bad.stage(1).n = 3;
  CHECK_THROWS_WITH_AS(ph::executor(plan, bad),
                       "pipetype::host: the edge 0 -> 1: tensor 0: stage 0 gives 4 elements but stage 1 takes 3",
                       pt::shape_error);
  pt::uniform_chain<dyn> good(std::vector<dyn>(2));
  CHECK_NOTHROW(ph::executor(plan, good));
}

}  // namespace test_host_tensor_sets
}  // namespace
