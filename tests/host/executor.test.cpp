// Host executor: every schedule trains the MLP of examples/mlp.hpp with gradients bitwise equal
// to the unpipelined reference; faults end the step on every rank with an error naming the place.
#include <pipetype/host.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "mlp.hpp"

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_host_executor {

namespace pt = pipetype;
namespace ph = pipetype::host;
using namespace std::chrono_literals;

namespace {

struct run_result {
  double loss = 0, ref_loss = 0, diff = -1;
  bool bitwise = false;
};

// One step of `plan` against the reference, on fresh models of 8 layers.
run_result one_step(const pt::runtime_plan& plan) {
  REQUIRE_MESSAGE(plan.ok(), pt::describe(plan.result));
  const int S = plan.compute().lane_length(), m = plan.compute().microbatches;
  auto model = mlp::make_model(8, S), ref = mlp::make_model(8, S);
  ph::executor ex{plan, model, {.deadline = 20s}};
  const mlp::batch b = mlp::make_batch(m, 0);
  std::vector<double> losses, ref_losses;
  mlp::attach(model, b, losses, m);
  ex.step(b.inputs);
  mlp::reference_step(ref, b, ref_losses, m);
  run_result r;
  r.loss = mlp::mean_loss(losses);
  r.ref_loss = mlp::mean_loss(ref_losses);
  r.diff = mlp::max_grad_diff(model, ref, &r.bitwise);
  return r;
}

void check_bitwise(const pt::runtime_plan& plan) {
  const run_result r = one_step(plan);
  CHECK(r.bitwise);
  CHECK(r.diff == 0.0);
  CHECK(std::memcmp(&r.loss, &r.ref_loss, sizeof(double)) == 0);
}

// A custom zero-bubble-like schedule in PyTorch's notation, with the backward split into I and W.
constexpr const char* split_text = R"(0F0,0F1,0F2,0I0,0F3,0I1,0W0,0I2,0W1,0I3,0W2,0W3
1F0,1I0,1F1,1I1,1W0,1F2,1I2,1W1,1F3,1I3,1W2,1W3)";

}  // namespace

TEST_CASE("host executor: every built-in schedule gives gradients and loss bitwise equal to the reference") {
  struct cfg {
    int p, m, v;
  };
  for (const pt::schedule_info& info : pt::schedule_infos)
    for (const cfg c :
         {cfg{1, 3, 1}, cfg{2, 4, 1}, cfg{3, 5, 1}, cfg{4, 8, 1}, cfg{2, 4, 2}, cfg{4, 8, 2}, cfg{3, 6, 3}}) {
      if (pt::schedule_error(info.name, c.p, c.m, c.v) || info.local) continue;  // (local: host_local.test.cpp)
      for (const pt::comm_policy policy : {pt::comm_policy::per_edge, pt::comm_policy::per_rank_pair}) {
        CAPTURE(info.name);
        CAPTURE(c.p);
        CAPTURE(c.m);
        CAPTURE(c.v);
        // one group per tick with per-edge communicators; one per peer with one per rank pair
        const pt::group_policy groups =
            policy == pt::comm_policy::per_edge ? pt::group_policy::per_tick : pt::group_policy::per_peer;
        check_bitwise(pt::build_plan(pt::make_schedule(info.name, c.p, c.m, c.v), {.comms = policy, .groups = groups}));
      }
    }
}

TEST_CASE("host executor: zb-auto at limits p and 2p, with unequal costs, matches the reference bitwise") {
  for (const double limit : {4.0, 8.0})
    for (const pt::costs c : {pt::costs{.f = 1, .b = 2}, pt::costs{.f = 1, .b = 2, .i = 1.5, .w = 0.5}}) {
      CAPTURE(limit);
      const pt::program prog = pt::make_schedule("zb-auto", 4, 8, 1, {c, limit});
      const auto plan = pt::build_plan(prog, {.mem_limit = static_cast<int>(limit)});
      REQUIRE(plan.ok());
      check_bitwise(plan);
    }
}

TEST_CASE("host executor: dualpipe runs one stage object in two directions, gradients bitwise equal") {
  for (const int p : {2, 4})
    for (const pt::comm_policy policy : {pt::comm_policy::per_edge, pt::comm_policy::per_rank_pair}) {
      CAPTURE(p);
      check_bitwise(pt::build_plan(pt::make_dualpipe(p, 2 * p + 2), {.comms = policy}));
    }
}

TEST_CASE("host executor: a custom text schedule that splits the backward (I, W) matches the reference bitwise") {
  check_bitwise(pt::build_plan(pt::parse_schedule(split_text, "zb-text")));
}

// One step of a compile-time plan (4 model stages, 4 microbatches) against the reference.
template <class Plan>
bool static_plan_matches(const Plan& plan, std::uint64_t seed) {
  auto model = mlp::make_model(8, 4), ref = mlp::make_model(8, 4);
  ph::executor ex{plan, model};
  const mlp::batch b = mlp::make_batch(4, seed);
  std::vector<double> l, rl;
  mlp::attach(model, b, l, 4);
  ex.step(b.inputs);
  mlp::reference_step(ref, b, rl, 4);
  bool same = false;
  mlp::max_grad_diff(model, ref, &same);
  return same;
}

TEST_CASE("host executor: a compile-time plan runs too") {
  constexpr auto plan = pt::make_plan<pt::interleaved_1f1b<pt::ranks<2>, pt::microbatches<4>, pt::chunks<2>>>();
  CHECK(static_plan_matches(plan, 3));
}

TEST_CASE("host executor: a compile-time zero-bubble plan (V placement, split backwards) runs too") {
  constexpr auto plan = pt::make_plan<pt::zb_v<pt::ranks<2>, pt::microbatches<4>>>();
  static_assert(plan.shape.split);
  CHECK(static_plan_matches(plan, 5));
}

TEST_CASE("host executor: 20 steps lower the loss under every schedule") {
  for (const pt::schedule_info& info : pt::schedule_infos) {
    if (info.local) continue;  // another objective (host_local.test.cpp)
    CAPTURE(info.name);
    const int p = 4, m = 8, v = pt::default_chunks(info);
    const auto plan = pt::build_plan(pt::make_schedule(info.name, p, m, v));
    auto model = mlp::make_model(8, p * v);
    ph::executor ex{plan, model};
    std::vector<double> losses;
    double first = 0, last = 0;
    for (int step = 0; step < 20; ++step) {
      const mlp::batch b = mlp::make_batch(m, static_cast<std::uint64_t>(step));
      mlp::attach(model, b, losses, m);
      ex.step(b.inputs);
      for (mlp::stage& s : model.stages()) s.sgd(0.5f);
      (step == 0 ? first : last) = mlp::mean_loss(losses);
    }
    CHECK(last < 0.8 * first);
  }
}

// ---- faults --------------------------------------------------------------------------------

namespace {

// A stage that adds one going forward, passes the gradient back, and calls `hook` first.
struct probe {
  using input = pt::tensor<float, 4>;
  using output = pt::tensor<float, 4>;
  std::function<void(char, int, int)> hook;  // (kind, stage, microbatch)
  std::atomic<int>* calls = nullptr;
  void forward(const pt::forward_ctx<probe>& c) {
    if (calls) ++*calls;
    if (hook) hook('F', c.stage, c.microbatch);
    for (std::size_t i = 0; i < c.output.size(); ++i) c.output[i] = c.input[i] + 1;
  }
  void backward(const pt::backward_ctx<probe>& c) {
    if (calls) ++*calls;
    if (hook) hook('B', c.stage, c.microbatch);
    for (std::size_t i = 0; i < c.grad_input.size(); ++i)
      c.grad_input[i] = c.grad_output.empty() ? 1 : c.grad_output[i];
  }
};

pt::uniform_chain<probe> probes(int n, std::function<void(char, int, int)> hook, std::atomic<int>* calls = nullptr) {
  std::vector<probe> v(static_cast<std::size_t>(n));
  for (probe& x : v) {
    x.hook = hook;
    x.calls = calls;
  }
  return pt::uniform_chain<probe>(std::move(v));
}

}  // namespace

TEST_CASE("host executor: a stage that throws ends the step on every rank, naming rank, stage, microbatch, action") {
  const auto plan = pt::build_plan(pt::make_schedule("1f1b", 4, 8));
  auto model = probes(4, [](char k, int s, int j) {
    if (k == 'F' && s == 1 && j == 2) throw std::runtime_error("nan in layer norm");
  });
  ph::executor ex{plan, model, {.deadline = 10s}};
  std::vector<float> batch(8 * 4, 0.0f);
  try {
    ex.step(batch);
    FAIL("the step should have failed");
  } catch (const ph::step_error& e) {
    const std::string what = e.what();
    CHECK(what.find("rank 1, stage 1, microbatch 2, action 1F2 threw: nan in layer norm") != std::string::npos);
    CHECK(e.cause() == ph::failure_cause::stage_threw);
    CHECK_THROWS_WITH_AS(std::rethrow_exception(e.stage_exception()), "nan in layer norm", std::runtime_error);
    // every rank ended with an error: rank 1 the stage's, the others aborted by it
    std::vector<int> seen(4, 0);
    for (const ph::failure& f : e.failures()) {
      seen[static_cast<std::size_t>(f.rank)] = 1;
      if (f.rank != 1) CHECK(f.cause == ph::failure_cause::aborted);
    }
    CHECK(seen == std::vector<int>{1, 1, 1, 1});
    CHECK(ex.failures().size() == e.failures().size());  // the executor keeps the last step's
  }
  // the executor is usable again (its rank threads and fabric too): the next steps run clean
  model.stage(1).hook = nullptr;
  CHECK_NOTHROW(ex.step(batch));
  CHECK(ex.failures().empty());
  CHECK_NOTHROW(ex.step(batch));
}

TEST_CASE("host executor: a deadline that is not positive is refused at construction") {
  const auto plan = pt::build_plan(pt::make_schedule("1f1b", 2, 4));
  auto model = probes(2, [](char, int, int) {});
  CHECK_THROWS_WITH_AS((ph::executor{plan, model, {.deadline = 0ms}}),
                       "pipetype::host: executor_options::deadline must be positive, got 0 ms", std::invalid_argument);
  CHECK_THROWS_AS((ph::executor{plan, model, {.deadline = -5ms}}), std::invalid_argument);
  CHECK_NOTHROW((ph::executor{plan, model, {.deadline = 1ms}}));
}

TEST_CASE("host executor: capture and replay run the step again on the captured batch") {
  const auto plan = pt::build_plan(pt::make_schedule("1f1b", 2, 4));
  std::vector<std::string> seen;
  std::mutex m;
  auto model = probes(2, [&](char k, int s, int j) {
    std::lock_guard lock(m);
    seen.push_back(std::string(1, k) + std::to_string(s) + std::to_string(j));
  });
  ph::executor ex{plan, model};
  std::vector<float> batch(4 * 4, 0.0f);
  CHECK_THROWS_AS(ex.replay(), std::logic_error);  // nothing captured yet
  ex.capture(batch);
  const std::size_t one_step = seen.size();
  CHECK(one_step == 2 * 2 * 4);  // 2 stages × F and B × 4 microbatches
  ex.replay();
  ex.replay();
  CHECK(seen.size() == 3 * one_step);
  std::vector<float> short_batch(3);
  CHECK_THROWS_AS(ex.capture(short_batch), pt::shape_error);
}

TEST_CASE("host executor: a stage stalled past the deadline ends the step with a timeout naming the stall") {
  const auto plan = pt::build_plan(pt::make_schedule("gpipe", 3, 4));
  auto model = probes(3, [](char k, int s, int j) {
    if (k == 'F' && s == 2 && j == 1) std::this_thread::sleep_for(600ms);
  });
  ph::executor ex{plan, model, {.deadline = 150ms}};
  std::vector<float> batch(4 * 4, 0.0f);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    ex.step(batch);
    FAIL("the step should have timed out");
  } catch (const ph::step_error& e) {
    const std::string what = e.what();
    CHECK(e.cause() == ph::failure_cause::timeout);
    CHECK(what.find("150 ms") != std::string::npos);
    INFO(what);
    CHECK(what.find("still inside a stage: rank 2 in 2F1") != std::string::npos);
    std::vector<int> seen(3, 0);
    for (const ph::failure& f : e.failures()) seen[static_cast<std::size_t>(f.rank)] = 1;
    CHECK(seen == std::vector<int>{1, 1, 1});
  }
  // no thread was left behind: step() returned once the stalled stage came back
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
}

TEST_CASE("host executor: sizes that do not fit are rejected before anything runs") {
  std::atomic<int> calls{0};
  const auto plan = pt::build_plan(pt::make_schedule("1f1b", 2, 4));
  auto model = probes(2, nullptr, &calls);
  ph::executor ex{plan, model};
  std::vector<float> wrong(4 * 4 - 1, 0.0f);
  CHECK_THROWS_WITH_AS(ex.step(wrong),
                       "pipetype::host: step() got a batch of 15 elements; the plan has 4 microbatches of 4 "
                       "(stage 0's input), so 16",
                       pt::shape_error);
  CHECK(calls.load() == 0);

  auto three = probes(3, nullptr);
  CHECK_THROWS_WITH_AS(ph::executor(plan, three), "pipetype::host: the plan has 2 stages but the model has 3",
                       pt::shape_error);
}

namespace {
// Stages whose sizes are known at run time.
struct resize {
  using input = pt::tensor<float, pt::dynamic>;
  using output = pt::tensor<float, pt::dynamic>;
  std::size_t in = 4, out = 4;
  std::size_t input_extent() const { return in; }
  std::size_t output_extent() const { return out; }
  void forward(const pt::forward_ctx<resize>& c) {
    for (std::size_t i = 0; i < c.output.size(); ++i) c.output[i] = c.input[i % c.input.size()] * 2;
  }
  void backward(const pt::backward_ctx<resize>&) {}
};
}  // namespace

TEST_CASE("host executor: run-time extents are checked link by link at construction") {
  const auto plan = pt::build_plan(pt::make_schedule("1f1b", 2, 2));
  pt::uniform_chain<resize> bad(std::vector<resize>{{4, 6}, {5, 1}});
  CHECK_THROWS_WITH_AS(ph::executor(plan, bad),
                       "pipetype::host: the edge 0 -> 1: stage 0 gives 6 elements but stage 1 takes 5",
                       pt::shape_error);
  pt::uniform_chain<resize> good(std::vector<resize>{{4, 6}, {6, 1}});
  CHECK_NOTHROW(ph::executor(plan, good));
}

namespace {
// A heterogeneous chain: int tokens in, floats through, a scalar loss at the end.
struct embed {
  using input = pt::tensor<int, 2>;
  using output = pt::tensor<float, 2, 3>;
  std::vector<float> seen;
  void forward(const pt::forward_ctx<embed>& c) {
    for (std::size_t r = 0; r < 2; ++r)
      for (std::size_t k = 0; k < 3; ++k)
        c.output[r * 3 + k] = static_cast<float>(c.input[r] * 10) + static_cast<float>(k);
  }
  void backward(const pt::backward_ctx<embed>& c) {
    CHECK(c.grad_input.empty());  // stage 0 has no input gradient to give
    seen.insert(seen.end(), c.grad_output.begin(), c.grad_output.end());
  }
};
struct head {
  using input = pt::tensor<float, 6>;
  using output = pt::tensor<float, 1>;
  using stash = pt::tensor<float, 1>;
  std::vector<float> sums;
  void forward(const pt::forward_ctx<head>& c) {
    CHECK(c.output.empty());  // the last stage has no output buffer
    float s = 0;
    for (float x : c.input) s += x;
    c.stash[0] = s;
    sums.push_back(s);
  }
  void backward(const pt::backward_ctx<head>& c) {
    CHECK(c.grad_output.empty());
    for (float& g : c.grad_input) g = c.stash[0];
  }
};
}  // namespace

TEST_CASE("host executor: a chain of different stage types moves typed data both ways") {
  using sched = pt::from_text<R"(0F0,0F1,0B0,0B1
                                 1F0,1B0,1F1,1B1)">;
  constexpr auto plan = pt::make_plan<sched>();
  pt::chain<embed, head> model;
  ph::executor ex{plan, model};
  const std::vector<int> tokens{1, 2, 3, 4};  // microbatch 0: {1, 2}, microbatch 1: {3, 4}
  ex.step(tokens);
  // forward sums: (10+11+12) + (20+21+22) = 96; (30..32) + (40..42) = 216
  CHECK(model.stage<1>().sums == std::vector<float>{96, 216});
  std::vector<float> grads(6, 96.0f);
  grads.insert(grads.end(), 6, 216.0f);
  CHECK(model.stage<0>().seen == grads);
}

TEST_CASE("host executor: a stage that accumulates its own gradients needs its backwards in microbatch order") {
  const auto plan = pt::build_plan(pt::make_schedule("looped-bfs", 2, 4, 2));  // backwards in reverse order
  auto model = probes(4, nullptr);
  CHECK_THROWS_WITH_AS(
      ph::executor(plan, model),
      doctest::Contains("stage 2, microbatch 2, action 2B2 comes after microbatch 3's weight gradient"),
      std::invalid_argument);
  CHECK_NOTHROW(ph::executor(plan, model, {.ordered_gradients = false}));
}

TEST_CASE("host executor: a schedule that splits the backward needs backward_input and backward_weight") {
  const auto plan = pt::build_plan(pt::parse_schedule(split_text));
  auto model = probes(2, nullptr);
  CHECK_THROWS_WITH_AS(ph::executor(plan, model), doctest::Contains("splits the backward"), std::invalid_argument);
}

TEST_CASE("host executor: walking one rank issues each of its compute ops once") {
  std::atomic<int> calls{0};
  const auto plan = pt::build_plan(pt::make_schedule("interleaved-1f1b", 2, 4, 2));
  auto model = probes(4, nullptr, &calls);
  ph::executor ex{plan, model};
  std::vector<float> batch(4 * 4, 0.0f);
  ex.walk_rank(0, batch);
  CHECK(calls.load() == static_cast<int>(plan.compute().rank_actions(0).size()));
}

TEST_CASE("host executor: dualpipe refuses a stage that accumulates its own gradients (two ranks would write it)") {
  // a probe keeps its gradients itself (no weight_grad): the two directions would write it at once
  const auto plan = pt::build_plan(pt::make_dualpipe(2, 4));
  auto model = probes(2, [](char, int, int) {});
  CHECK_THROWS_WITH_AS(ph::executor(plan, model), doctest::Contains("declare a weight_grad"), std::invalid_argument);
}

namespace {

// Counts the calls whose context names another stage than the one this object is in the model.
struct stage_witness {
  using input = pt::tensor<float, 4>;
  using output = pt::tensor<float, 4>;
  using weight_grad = pt::tensor<float, 1>;
  int index = 0;
  std::atomic<int>* wrong = nullptr;
  float grad[1] = {0};
  void check(int s) {
    if (s != index) ++*wrong;
  }
  void forward(const pt::forward_ctx<stage_witness>& c) { check(c.stage); }
  void backward(const pt::backward_ctx<stage_witness>& c) { check(c.stage); }
  void backward_input(const pt::backward_ctx<stage_witness>& c) { check(c.stage); }
  void backward_weight(const pt::backward_ctx<stage_witness>& c) { check(c.stage); }
  std::span<float> weight_gradients() { return grad; }
};

}  // namespace

TEST_CASE("host executor: under dualpipe a stage's context names its model stage in both directions") {
  std::atomic<int> wrong{0};
  std::vector<stage_witness> v(4);
  for (int s = 0; s < 4; ++s) v[static_cast<std::size_t>(s)].index = s, v[static_cast<std::size_t>(s)].wrong = &wrong;
  pt::uniform_chain<stage_witness> model(std::move(v));
  ph::executor ex{pt::build_plan(pt::make_dualpipe(4, 8)), model};
  std::vector<float> batch(4 * 8, 0.0f);
  ex.step(batch);
  CHECK(wrong.load() == 0);
}

TEST_CASE("host executor: a traced step becomes a step_trace: a span per compute, one per group, a transfer per send") {
  for (const char* name : {"1f1b", "zb-h1", "interleaved-1f1b", "dualpipe-v"}) {
    CAPTURE(name);
    const pt::runtime_plan plan = pt::build_plan(pt::make_schedule(name, 4, 8));
    REQUIRE(plan.ok());
    const int S = plan.compute().lane_length(), m = plan.compute().microbatches;
    auto model = mlp::make_model(8, S);
    ph::executor ex{plan, model, {.deadline = 20s, .trace = true}};
    const mlp::batch b = mlp::make_batch(m, 0);
    std::vector<double> losses;
    mlp::attach(model, b, losses, m);
    ex.step(b.inputs);
    const pt::step_trace t = pt::trace_of(ex.trace());
    long computes = 0, sends = 0, groups = 0;
    for (const pt::lowered_op& o : plan.lowered().ops) {
      computes += o.code == pt::op_code::compute;
      sends += o.code == pt::op_code::send;
      groups += o.code == pt::op_code::group;
    }
    CHECK(t.measured);
    CHECK(t.ranks == 4);
    CHECK(static_cast<long>(t.computes.size()) == computes);
    CHECK(static_cast<long>(t.comms.size()) == groups);
    CHECK(static_cast<long>(t.transfers.size()) == sends);
    for (const pt::traced_transfer& x : t.transfers) {
      CAPTURE(x.label());
      CHECK(x.via_comm);
      CHECK(t.comms[static_cast<std::size_t>(x.from_span)].rank == x.from);
      CHECK(t.comms[static_cast<std::size_t>(x.to_span)].rank == x.to);
      CHECK(x.arrived >= x.sent);
    }
    // a rank's computes run one after the other, and its peak is the plan's
    for (std::size_t k = 1; k < t.computes.size(); ++k)
      if (t.computes[k].rank == t.computes[k - 1].rank) CHECK(t.computes[k].start >= t.computes[k - 1].end);
    for (int r = 0; r < 4; ++r) CHECK(t.peak_activations(r) == doctest::Approx(plan.peak_activations(r)));
    const pt::cost_model c = pt::measure_costs(t);
    CHECK(c.base().f > 0);
    CHECK(c.base().comm >= 0);
    CHECK(pt::simulate(plan.compute(), c).complete);
  }
}

TEST_CASE("mlp: a NaN gradient is a NaN difference, which the trainers' JSON prints as null") {
  // std::max(d, NaN) keeps d: the trainers once printed max_abs_grad_diff 0 beside NaN gradients
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> a{1.0f, nan, 3.0f, 4.0f}, b{1.0f, 2.0f, 3.0f, 6.0f};
  double d = 0;
  bool same = true;
  mlp::grad_diff(a, b, d, same);
  CHECK(std::isnan(d));  // and the larger difference after it (2) does not hide it
  CHECK(!same);
  CHECK(examples::json_number(d) == "null");
  CHECK(examples::json_number(std::numeric_limits<double>::infinity()) == "null");
  CHECK(examples::json_number(0) == "0");
  CHECK(examples::json_number(4.82896169) == "4.82896169");
  d = 0, same = true;
  mlp::grad_diff(b, a, d, same);  // a NaN found in either
  CHECK(std::isnan(d));
  CHECK(examples::worst(0.5, 2) == 2);
}

}  // namespace test_host_executor
}  // namespace
