// Gradient buckets on the host mesh executor (dp_options::buckets): each REDUCE_GRAD runs as N
// all-reduces of bucket_of's parts; a stage's last weight backward may say buckets written
// (backward_ctx::gradients_ready), and their reductions then run while it goes on. Checked:
// the gradients are bitwise those of one bucket (signalled or not, in order or held back), the
// reductions of signalled buckets end before the backward does (and of unsignalled ones start
// after), under FSDP each bucket's reduce-scatter leaves every replica what one bucket's does, and
// a stage with fewer elements than buckets is refused.
#include <pipetype/host.hpp>

#include <doctest/doctest.h>

#include "mesh_stages.hpp"

#include <chrono>
#include <cstddef>
#include <deque>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_host_buckets {

namespace pt = pipetype;
namespace ph = pipetype::host;
using namespace std::chrono_literals;

using mesh_stages::width;  // 5: 10 weight-gradient elements a stage

// h' = w ⊙ h + b, its weight gradient written bucket by bucket from the array's end; with
// `Signal` it says each written (gradients_ready) and, after bucket 0 of the step's last
// backward, pauses `pause` so that a reduction it let start can be seen to end first.
template <bool Signal>
struct blin {
  using input = pt::tensor<float, width>;
  using output = pt::tensor<float, width>;
  using weight_grad = pt::tensor<float, 2 * width>;
  float p[2 * width] = {1, -2, 0.5f, 1.5f, -0.75f, 0.1f, -0.2f, 0.3f, 0, 0.25f};
  float acc[2 * width] = {};
  std::chrono::milliseconds pause{0};
  int buckets_seen = 0;             // the most buckets a backward was told of
  bool throw_after_bucket = false;  // the step's last backward throws once bucket 0 is released
  std::span<float> weight_gradients() { return acc; }
  std::span<float> parameters() { return p; }
  void forward(const pt::forward_ctx<blin>& c) {
    for (std::size_t i = 0; i < width; ++i) c.output[i] = p[i] * c.input[i] + p[width + i];
  }
  void backward_input(const pt::backward_ctx<blin>& c) {
    for (std::size_t i = 0; i < c.grad_input.size(); ++i) c.grad_input[i] = p[i] * c.grad_output[i];
  }
  void backward_weight(const pt::backward_ctx<blin>& c) {
    buckets_seen = std::max(buckets_seen, c.buckets());
    const int n = c.buckets() > 0 ? c.buckets() : 1;
    for (int b = 0; b < n; ++b) {
      const pt::shard_range part = pt::bucket_of(2 * width, n, b);
      for (std::size_t i = part.begin; i < part.end; ++i)
        c.weight_grad[i] = i < width ? c.grad_output[i] * c.input[i] : c.grad_output[i - width];
      if constexpr (Signal) c.gradients_ready(b);
      if (b == 0 && c.buckets() > 0 && throw_after_bucket) throw std::runtime_error("injected after bucket 0");
      if (b == 0 && c.buckets() > 0) std::this_thread::sleep_for(pause);
    }
  }
};

using mesh_stages::mse;  // (its width is this file's)

template <bool Signal>
using model = pt::chain<blin<Signal>, blin<Signal>, blin<Signal>, mse>;

template <bool Signal>
struct run : mesh_stages::replicas_with_batch<model<Signal>> {
  using mesh_stages::replicas_with_batch<model<Signal>>::replicas_with_batch;
  std::vector<float> grads() {
    std::vector<float> g;
    for (model<Signal>& m : this->models) {
      auto add = [&](const auto& s) { g.insert(g.end(), std::begin(s.acc), std::end(s.acc)); };
      add(m.template stage<0>()), add(m.template stage<1>()), add(m.template stage<2>());
    }
    return g;
  }
};

template <bool Signal>
std::vector<float> grads_with(const char* schedule, int stages_per_rank, int buckets, bool shard = false) {
  const int D = 2, m = 4;
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule(schedule, 4 / stages_per_rank, m, stages_per_rank));
  REQUIRE(plan.ok());
  run<Signal> r(D, m);
  ph::mesh_executor ex{plan,
                       pt::mesh{4 / stages_per_rank, D},
                       pt::dp_options{.dp = D, .shard = shard, .buckets = buckets},
                       r.ptrs,
                       {.exec = {.deadline = 20s}}};
  ex.step(r.b);
  ex.step(r.b);  // twice: a second step starts its buckets afresh
  for (model<Signal>& mo : r.models) CHECK(mo.template stage<0>().buckets_seen == (buckets > 1 ? buckets : 0));
  return r.grads();
}

TEST_CASE("host buckets: the gradients are one bucket's, bit for bit, signalled or not, in order or held back") {
  for (const char* schedule : {"1f1b", "zb-h1", "looped-bfs", "interleaved-1f1b"})
    for (int buckets = 2; buckets <= 4; ++buckets) {
      CAPTURE(schedule);
      CAPTURE(buckets);
      const int v = schedule[0] == 'l' || schedule[0] == 'i' ? 2 : 1;
      const std::vector<float> one = grads_with<false>(schedule, v, 1);
      CHECK(grads_with<true>(schedule, v, buckets) == one);
      CHECK(grads_with<false>(schedule, v, buckets) == one);
    }
}

TEST_CASE("host buckets: under FSDP each bucket's reduce-scatter leaves every replica its shard's sums, as one "
          "bucket does") {
  for (const char* schedule : {"1f1b", "interleaved-1f1b"})
    for (int buckets = 2; buckets <= 4; ++buckets) {
      CAPTURE(schedule);
      CAPTURE(buckets);
      const int v = schedule[0] == 'i' ? 2 : 1;
      const std::vector<float> one = grads_with<true>(schedule, v, 1, true);
      CHECK(grads_with<true>(schedule, v, buckets, true) == one);  // (held sums and partial sums alike)
    }
}

/// On global rank g of a traced step: when the last weight backward of `stage` ended, and when
/// its reduction's bucket b started and ended.
struct seen {
  double backward_start = -1, backward_end = -1, bucket_start = -1, bucket_end = -1;
};
seen trace_of(const std::vector<pt::op_time>& trace, int g, int stage, int last_microbatch, int b) {
  seen s;
  const std::string name = "REDUCE_GRAD(" + std::to_string(stage) + ") bucket " + std::to_string(b) + " on";
  for (const pt::op_time& t : trace) {
    if (t.rank != g) continue;
    if (t.code == pt::op_code::compute && t.stage == stage && t.microbatch == last_microbatch && t.what == pt::kind::B)
      s.backward_start = t.start, s.backward_end = t.end;
    if (t.name && std::string(t.name).rfind(name, 0) == 0) s.bucket_start = t.start, s.bucket_end = t.end;
  }
  return s;
}

TEST_CASE("host buckets: a bucket said written is reduced while its backward goes on, one not said waits for the end") {
  const int D = 2, m = 4;
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 4, m));
  const pt::dp_options o{.dp = D, .buckets = 2};
  const ph::mesh_options traced{.exec = {.deadline = 20s, .trace = true}};
  {
    run<true> r(D, m);
    for (model<true>& mo : r.models) mo.template stage<0>().pause = 300ms;
    ph::mesh_executor ex{plan, pt::mesh{4, D}, o, r.ptrs, traced};
    ex.step(r.b);
    for (int d = 0; d < D; ++d) {
      CAPTURE(d);
      const seen s = trace_of(ex.trace(), ex.shape().global(0, d), 0, m - 1, 0);
      REQUIRE(s.bucket_end >= 0);
      REQUIRE(s.backward_end >= 0);
      CHECK(s.bucket_end < s.backward_end);  // reduced during the 300 ms the backward still ran
    }
  }
  {
    run<false> r(D, m);
    for (model<false>& mo : r.models) mo.template stage<0>().pause = 50ms;
    ph::mesh_executor ex{plan, pt::mesh{4, D}, o, r.ptrs, traced};
    ex.step(r.b);
    for (int d = 0; d < D; ++d) {
      const seen s = trace_of(ex.trace(), ex.shape().global(0, d), 0, m - 1, 0);
      REQUIRE(s.bucket_start >= 0);
      // (after the stage's call, which paused 50 ms after writing it; the op's traced end comes
      // later still, once it has added and published its buckets)
      CHECK(s.bucket_start >= s.backward_start + 0.05);
    }
  }
}

TEST_CASE("host buckets: a stage with fewer weight-gradient elements than buckets is refused") {
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 4, 4));
  run<true> r(2, 4);
  CHECK_THROWS_WITH_AS((ph::mesh_executor{plan, pt::mesh{4, 2}, pt::dp_options{.dp = 2, .buckets = 11}, r.ptrs}),
                       doctest::Contains("stage 0 has 10 weight-gradient elements, fewer than the step's 11 buckets"),
                       pt::shape_error);
}

TEST_CASE(
    "host buckets: a backward that throws after releasing a bucket ends the step on every rank, and the next runs") {
  const int D = 2, m = 4;
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 4, m));
  const pt::dp_options o{.dp = D, .buckets = 2};
  run<true> r(D, m);
  r.models[1].template stage<0>().throw_after_bucket = true;  // replica 1's stage 0, once bucket 0 is out
  ph::mesh_executor ex{plan, pt::mesh{4, D}, o, r.ptrs, {.exec = {.deadline = 20s}}};
  try {
    ex.step(r.b);
    FAIL("the step should have failed");
  } catch (const ph::step_error& e) {
    CHECK(e.cause() == pt::failure_cause::stage_threw);
    CHECK(std::string(e.what()).find("threw: injected after bucket 0") != std::string::npos);
    CHECK(e.failures().size() == ex.failures().size());
    bool other_stopped = false;  // replica 0's rank 0, whose bucket 1 reduction waits for the thrower
    for (const pt::failure& f : e.failures()) other_stopped = other_stopped || f.cause == pt::failure_cause::aborted;
    CHECK(other_stopped);
  }
  // the next step, from zero gradients: what a fresh executor's first step gives
  r.models[1].template stage<0>().throw_after_bucket = false;
  for (model<true>& mo : r.models) {
    for (float& v : mo.template stage<0>().acc) v = 0;
    for (float& v : mo.template stage<1>().acc) v = 0;
    for (float& v : mo.template stage<2>().acc) v = 0;
  }
  ex.step(r.b);
  CHECK(ex.failures().empty());
  run<true> fresh(D, m);
  ph::mesh_executor ex2{plan, pt::mesh{4, D}, o, fresh.ptrs, {.exec = {.deadline = 20s}}};
  ex2.step(fresh.b);
  CHECK(r.grads() == fresh.grads());
}

}  // namespace test_host_buckets
}  // namespace
