// Host executor under local learning: a chain whose edges are all detached, every stage a loss of
// its own. Each stage's forward gets a loss to write and an output that still travels on, its
// backward an empty grad_output and grad_input; the losses and weight gradients equal an
// unpipelined run of the same local objectives bit for bit, under local-1f1b and every chain
// schedule run over the local graph.
#include <pipetype/host.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <span>
#include <string>
#include <vector>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_host_local {

namespace pt = pipetype;
namespace ph = pipetype::host;
using namespace std::chrono_literals;

namespace {

constexpr std::size_t width = 3;
constexpr int stages = 4;

std::atomic<int> faults{0};

// h' = w ⊙ h, sent on (but from the last stage), with a local loss ½‖h' − t‖² whose weight gradient f·(h' − t) ⊙ h it
// hands to pipetype; no gradient goes back to the stage before.
struct local_block {
  using input = pt::tensor<float, width>;
  using output = pt::tensor<float, width>;
  using target = pt::tensor<float, width>;
  using weight_grad = pt::tensor<float, width>;
  float w[width] = {};
  float acc[width] = {};
  std::span<float> weight_gradients() { return acc; }
  void forward(const pt::forward_ctx<local_block>& c) {
    // (the last stage's output goes nowhere: empty, as on any chain's last stage)
    if (c.loss == nullptr || c.output.size() != (c.stage + 1 < stages ? width : 0) || c.target.size() != width) {
      ++faults;
      return;
    }
    float l = 0;
    for (std::size_t i = 0; i < width; ++i) {
      const float y = w[i] * c.input[i], e = y - c.target[i];
      if (!c.output.empty()) c.output[i] = y;
      l += 0.5f * e * e;
    }
    *c.loss = l;
  }
  void backward_input(const pt::backward_ctx<local_block>& c) {
    if (!c.grad_input.empty() || !c.grad_output.empty() || c.loss_scale == 0) ++faults;
  }
  void backward_weight(const pt::backward_ctx<local_block>& c) {
    if (!c.grad_output.empty() || c.target.size() != width) ++faults;
    for (std::size_t i = 0; i < width; ++i)
      c.weight_grad[i] = c.loss_scale * (w[i] * c.input[i] - c.target[i]) * c.input[i];
  }
};

std::vector<local_block> blocks() {
  std::vector<local_block> b(stages);
  for (std::size_t s = 0; s < stages; ++s)
    for (std::size_t i = 0; i < width; ++i) b[s].w[i] = 0.5f + 0.25f * float((s + 2 * i) % 5);
  return b;
}

struct data {
  std::vector<float> x, t;
};
data make_data(int m) {
  data d;
  for (int j = 0; j < m * static_cast<int>(width); ++j) {
    d.x.push_back(static_cast<float>(j % 4) - 1.5f);
    d.t.push_back(static_cast<float>((5 * j) % 3) * 0.5f);
  }
  return d;
}

// Every stage's loss per microbatch and its weight gradient, microbatch after microbatch, in one
// thread: the objective f · Σ_s Σ_j loss(s, j), each stage's parameters moved by its own loss only.
struct reference {
  std::vector<float> losses;  // stage-major: stage s, microbatch j at s · m + j
  float g[stages][width] = {};
};
reference reference_of(const data& d, int m, float f) {
  const std::vector<local_block> b = blocks();
  reference r;
  r.losses.assign(static_cast<std::size_t>(stages * m), 0);
  for (int j = 0; j < m; ++j) {
    float h[width], y[width];
    const float* t = d.t.data() + static_cast<std::size_t>(j) * width;
    for (std::size_t i = 0; i < width; ++i) h[i] = d.x[static_cast<std::size_t>(j) * width + i];
    for (int s = 0; s < stages; ++s) {
      const local_block& k = b[static_cast<std::size_t>(s)];
      float l = 0;
      for (std::size_t i = 0; i < width; ++i) {
        y[i] = k.w[i] * h[i];
        const float e = y[i] - t[i];
        l += 0.5f * e * e;
      }
      r.losses[static_cast<std::size_t>(s * m + j)] = l;
      for (std::size_t i = 0; i < width; ++i) {
        r.g[s][i] += f * (k.w[i] * h[i] - t[i]) * h[i];
        h[i] = y[i];
      }
    }
  }
  return r;
}

pt::batch batch_of(const data& d) {
  pt::batch b;
  b.input(d.x);
  for (int s = 0; s < stages; ++s) b.target(d.t);  // every stage is a sink: one target array each
  return b;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

}  // namespace

TEST_CASE("host local: every stage's loss and weight gradient equal the unpipelined run's, bit for bit") {
  const int m = 6;
  const data d = make_data(m);
  struct scheduled {
    const char* name;
    int ranks, chunks;
  };
  pt::schedule_params local;
  local.edges = pt::local_chain_dag(stages).edges;
  for (const scheduled s : {scheduled{"local-1f1b", 4, 1},
                            {"1f1b", 4, 1},
                            {"gpipe", 4, 1},
                            {"zb-h1", 4, 1},
                            {"interleaved-1f1b", 2, 2},
                            {"looped-bfs", 2, 2},
                            {"zb-v", 2, 2}}) {
    CAPTURE(s.name);
    const pt::runtime_plan plan = pt::build_plan(pt::make_schedule(s.name, s.ranks, m, s.chunks, local));
    REQUIRE_MESSAGE(plan.ok(), pt::describe(plan.result));
    int gradients_sent = 0;
    for (const pt::lowered_op& o : plan.ops()) gradients_sent += o.code == pt::op_code::send && o.what != pt::kind::F;
    CHECK(gradients_sent == 0);
    pt::uniform_chain<local_block> model(blocks(), pt::local_learning);
    ph::executor ex{plan, model, {.deadline = 20s}};
    faults = 0;
    const pt::step_losses& l = ex.step(batch_of(d));
    CHECK(faults.load() == 0);
    const reference r = reference_of(d, m, 1.0f / m);
    REQUIRE(l.sinks == stages);
    for (int st = 0; st < stages; ++st)
      for (int j = 0; j < m; ++j) CHECK(same_bits(l.at(st, j), r.losses[static_cast<std::size_t>(st * m + j)]));
    for (int st = 0; st < stages; ++st)
      for (std::size_t i = 0; i < width; ++i) CHECK(same_bits(model.stage(st).acc[i], r.g[st][i]));
  }
}

TEST_CASE("host local: over dp replicas, the replicas' local gradients summed in replica order") {
  const int m = 4, D = 2;
  const data d = make_data(D * m);
  const pt::runtime_plan plan = pt::build_plan(pt::make_local_one_f_one_b(stages, m));
  REQUIRE(plan.ok());
  std::vector<pt::uniform_chain<local_block>> reps;
  for (int r = 0; r < D; ++r) reps.emplace_back(blocks(), pt::local_learning);
  std::vector<pt::uniform_chain<local_block>*> ptrs{&reps[0], &reps[1]};
  ph::mesh_executor ex{plan, pt::mesh{stages, D}, pt::dp_options{.dp = D}, ptrs, {.exec = {.deadline = 20s}}};
  faults = 0;
  const pt::step_losses& l = ex.step(batch_of(d));
  CHECK(faults.load() == 0);
  // each replica's sums from zero over its own microbatches, then added in replica order
  const float f = 1.0f / (D * m);
  float want[stages][width] = {};
  for (int r = 0; r < D; ++r) {
    data part;
    part.x.assign(d.x.begin() + r * m * static_cast<int>(width), d.x.begin() + (r + 1) * m * static_cast<int>(width));
    part.t.assign(d.t.begin() + r * m * static_cast<int>(width), d.t.begin() + (r + 1) * m * static_cast<int>(width));
    const reference own = reference_of(part, m, f);
    for (int st = 0; st < stages; ++st)
      for (std::size_t i = 0; i < width; ++i) want[st][i] += own.g[st][i];
    for (int st = 0; st < stages; ++st)
      for (int j = 0; j < m; ++j)
        CHECK(same_bits(l.at(st, r * m + j), own.losses[static_cast<std::size_t>(st * m + j)]));
  }
  for (const pt::uniform_chain<local_block>& rep : reps)
    for (int st = 0; st < stages; ++st)
      for (std::size_t i = 0; i < width; ++i) CHECK(same_bits(rep.stage(st).acc[i], want[st][i]));
}

TEST_CASE("host local: a plan and a model that disagree about the detached edges are one sentence") {
  const pt::runtime_plan local = pt::build_plan(pt::make_local_one_f_one_b(stages, 2));
  REQUIRE(local.ok());
  pt::uniform_chain<local_block> attached(blocks());
  CHECK_THROWS_WITH_AS((ph::executor{local, attached, {.deadline = 20s}}),
                       "pipetype::host: the plan runs the stage graph 0~1,1~2,2~3 but the model's is a chain (the "
                       "same edges, in the same order)",
                       pt::shape_error);
  // a local loss's output travels on in its slot: keeping it is refused, not left unwritten
  pt::uniform_chain<local_block> kept(blocks(), pt::local_learning);
  CHECK_THROWS_WITH_AS((ph::executor{local, kept, {.keep_outputs = true}}),
                       "pipetype::host: keep_outputs with stage 0, a loss whose output travels on over a detached "
                       "edge: only a last stage's output is kept",
                       std::invalid_argument);
  const pt::runtime_plan chain = pt::build_plan(pt::make_one_f_one_b(stages, 2));
  pt::uniform_chain<local_block> model(blocks(), pt::local_learning);
  CHECK(model.learns_locally());
  CHECK_THROWS_WITH_AS((ph::executor{chain, model, {.deadline = 20s}}),
                       "pipetype::host: the plan runs a chain but the model's is 0~1,1~2,2~3 (the same edges, in the "
                       "same order)",
                       pt::shape_error);
}

}  // namespace test_host_local
}  // namespace
