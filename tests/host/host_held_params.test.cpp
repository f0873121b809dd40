// FSDP that frees (graph/stage.hpp, lends_parameters): under a sharded host mesh a stage that
// lends its parameters reads them from ctx.params, where pipetype gathered them into a slot of the
// rank's pool; pipetype holds only each replica's shard and the slots the plan sized. Checked
// against an unpipelined run, with the stages' own arrays poisoned after binding (nothing may read
// them), with an optimizer that updates only the shards, and against the plan's slot counts.
#include <pipetype/host.hpp>

#include <doctest/doctest.h>

#include "mesh_stages.hpp"

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <deque>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_host_held_params {

namespace pt = pipetype;
namespace ph = pipetype::host;
using namespace std::chrono_literals;

using mesh_stages::width;
template <bool Lends>
using lin = mesh_stages::lin<Lends>;
using mesh_stages::mse;
auto& calls = mesh_stages::lent_calls;
auto& calls_without = mesh_stages::lent_calls_without;

using lending = pt::chain<lin<true>, lin<true>, lin<true>, mse>;
using mixed = pt::chain<lin<true>, lin<false>, lin<true>, mse>;  // the middle stage keeps its own
using plain = pt::chain<lin<false>, lin<false>, lin<false>, mse>;

template <class Model>
struct replicas {
  std::deque<Model> models;
  std::vector<Model*> ptrs;
  explicit replicas(int n) {
    for (int d = 0; d < n; ++d) ptrs.push_back(&models.emplace_back());
  }
  template <std::size_t S>
  auto& stage(int d) {
    return models[static_cast<std::size_t>(d)].template stage<S>();
  }
};

struct data {
  std::vector<float> x, t;
  pt::batch b;
  explicit data(int microbatches) {
    for (int j = 0; j < microbatches * static_cast<int>(width); ++j) {
      x.push_back(static_cast<float>(j % 7 - 3) * 0.37f);
      t.push_back(static_cast<float>((5 * j) % 3) * 0.5f);
    }
    b.input(x).target(t);
  }
};

/// Every lin stage's accumulated gradients on replica d, stage by stage.
template <class Model>
std::vector<float> grads_of(replicas<Model>& r, int d) {
  std::vector<float> g;
  auto add = [&](const auto& s) { g.insert(g.end(), std::begin(s.acc), std::end(s.acc)); };
  add(r.template stage<0>(d)), add(r.template stage<1>(d)), add(r.template stage<2>(d));
  return g;
}
template <class Model>
void zero_grads(replicas<Model>& r) {
  for (Model& m : r.models) {
    for (float& v : m.template stage<0>().acc) v = 0;
    for (float& v : m.template stage<1>().acc) v = 0;
    for (float& v : m.template stage<2>().acc) v = 0;
  }
}

/// Fills every lending stage's own parameters with NaN: pipetype copied its shards at binding
/// and must never read the arrays again.
template <class S>
void poison_own(S& s) {
  if constexpr (S::lends_parameters)
    for (float& v : s.p) v = std::numeric_limits<float>::quiet_NaN();
}

/// Plain SGD on replica d's parameters of stage S: on the shard pipetype holds when the stage
/// lends them, else on the stage's own array (only the replica's shard of the summed gradient is
/// the whole sum under FSDP: the shard is all a replica updates).
template <std::size_t S, class Model>
void sgd(ph::mesh_executor<Model>& ex, replicas<Model>& r, int d, bool shard, int D) {
  auto& st = r.template stage<S>(d);
  const std::span<float> held = ex.template parameter_shard<float>(d, static_cast<int>(S));
  const pt::shard_range own = shard ? pt::shard_of(2 * width, D, d) : pt::shard_range{0, 2 * width};
  for (std::size_t i = own.begin; i < own.end; ++i) {
    float& v = held.empty() ? st.p[i] : held[i - own.begin];
    v -= 0.125f * st.acc[i];
  }
}

/// Trains `Model` for two steps on dp D (sharded or not) and returns each step's losses and the
/// gradients of replica 0 (its own shard's when sharded), for comparing runs.
struct run_result {
  std::vector<float> losses;
  std::vector<std::vector<float>> grads;  // per step, per replica: the whole summed gradient's elements it owns
};
template <class Model>
run_result train(const pt::runtime_plan& plan, int ranks, int D, bool shard, bool tied, bool poison,
                 std::vector<ph::param_pool_use>* pools = nullptr, pt::mesh_program* program = nullptr) {
  replicas<Model> reps(D);
  pt::dp_options o{.dp = D, .shard = shard};
  if (tied) o.ties = {{0, 2}};
  ph::mesh_executor ex{plan, pt::mesh{ranks, D}, o, reps.ptrs, {.exec = {.deadline = 20s}}};
  if (poison)
    for (Model& m : reps.models)
      poison_own(m.template stage<0>()), poison_own(m.template stage<1>()), poison_own(m.template stage<2>());
  data x(D * plan.compute().microbatches);
  run_result out;
  for (int step = 0; step < 2; ++step) {
    const pt::step_losses& l = ex.step(x.b);
    out.losses.insert(out.losses.end(), l.values.begin(), l.values.end());
    for (int d = 0; d < D; ++d) {
      const std::vector<float> g = grads_of(reps, d);
      const pt::shard_range own = shard ? pt::shard_of(2 * width, D, d) : pt::shard_range{0, 2 * width};
      std::vector<float> mine;
      for (std::size_t s = 0; s < 3; ++s)
        for (std::size_t i = own.begin; i < own.end; ++i) mine.push_back(g[s * 2 * width + i]);
      out.grads.push_back(mine);
      sgd<0>(ex, reps, d, shard, D), sgd<1>(ex, reps, d, shard, D), sgd<2>(ex, reps, d, shard, D);
    }
    zero_grads(reps);
  }
  if (pools) *pools = ex.parameter_pools();
  if (program) *program = ex.program();
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i]) && !(std::isnan(a[i]) && std::isnan(b[i]))) return false;
  return true;
}

TEST_CASE("held parameters: a lending stage under FSDP trains bitwise as one that keeps its own") {
  struct scheduled {
    const char* name;
    int ranks;
  };
  for (const scheduled s : {scheduled{"1f1b", 4}, {"interleaved-1f1b", 2}, {"looped-bfs", 2}, {"zb-h1", 4}})
    for (const int D : {2, 3})
      for (const bool tied : {false, true}) {
        CAPTURE(s.name);
        CAPTURE(D);
        CAPTURE(tied);
        const pt::runtime_plan plan = pt::build_plan(pt::make_schedule(s.name, s.ranks, 4, 4 / s.ranks));
        REQUIRE(plan.ok());
        // the same step with stages that keep their parameters (gathered into their own arrays)
        const run_result want = train<plain>(plan, s.ranks, D, true, tied, false);
        calls = 0, calls_without = 0;
        std::vector<ph::param_pool_use> pools;
        pt::mesh_program mp;
        const run_result got = train<lending>(plan, s.ranks, D, true, tied, true, &pools, &mp);
        CHECK(same_bits(got.losses, want.losses));
        REQUIRE(got.grads.size() == want.grads.size());
        for (std::size_t k = 0; k < got.grads.size(); ++k) CHECK(same_bits(got.grads[k], want.grads[k]));
        CHECK(calls > 0);
        CHECK(calls_without == 0);  // every call read the gathered slot
        // the pools: the plan's slots, at least one in use, and only shards + slots resident
        REQUIRE(pools.size() == static_cast<std::size_t>(mp.shape.size()));
        for (int g = 0; g < mp.shape.size(); ++g) {
          CAPTURE(g);
          const ph::param_pool_use& u = pools[static_cast<std::size_t>(g)];
          const int r = mp.shape.pipeline_rank(g), d = mp.shape.replica(g);
          int lent = 0;  // the rank's lin stages (the last stage, mse, has no parameters to lend)
          std::size_t shard_bytes = 0;
          for (int st = 0; st < 3; ++st)
            if (plan.compute().stage_rank[static_cast<std::size_t>(st)] == r)
              ++lent, shard_bytes += pt::shard_of(2 * width, D, d).size() * sizeof(float);
          CHECK(u.lent == (lent > 0));
          if (!u.lent) continue;
          CHECK(u.slots == mp.param_slots[static_cast<std::size_t>(g)]);
          CHECK(u.high_water >= 1);
          CHECK(u.high_water <= u.slots);
          CHECK(u.stride == 64);  // 10 floats, rounded up to a cache line
          CHECK(u.resident_bytes == shard_bytes + u.stride * static_cast<std::size_t>(u.slots));
        }
      }
}

TEST_CASE("held parameters: stages that lend and stages that keep their own share one step") {
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 4, 4));
  REQUIRE(plan.ok());
  const run_result want = train<plain>(plan, 4, 3, true, true, false);
  const run_result got = train<mixed>(plan, 4, 3, true, true, true);
  CHECK(same_bits(got.losses, want.losses));
  for (std::size_t k = 0; k < got.grads.size(); ++k) CHECK(same_bits(got.grads[k], want.grads[k]));
  // and unsharded: pipetype holds nothing, ctx.params is empty, the stages read their own
  calls = 0, calls_without = 0;
  std::vector<ph::param_pool_use> pools{ph::param_pool_use{true}};
  const run_result unsharded = train<lending>(plan, 4, 2, false, false, false, &pools);
  CHECK(pools.empty());
  CHECK(calls > 0);
  CHECK(calls_without == calls);
  CHECK(same_bits(unsharded.losses, train<plain>(plan, 4, 2, false, false, false).losses));
}

TEST_CASE("held parameters: parameter_shard names what it cannot give in one sentence") {
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 4, 4));
  replicas<lending> reps(2);
  ph::mesh_executor ex{plan, pt::mesh{4, 2}, pt::dp_options{.dp = 2, .shard = true}, reps.ptrs};
  CHECK(ex.parameter_shard<float>(1, 0).size() == 5);
  CHECK(ex.parameter_shard<float>(1, 0)[0] == reps.stage<0>(1).p[5]);  // replica 1 holds elements 5 ..
  CHECK(ex.shard_range_of(1, 0) == pt::shard_range{5, 10});
  CHECK(ex.parameter_shard<float>(0, 3).empty());  // mse: nothing to hold
  CHECK_THROWS_WITH_AS(ex.parameter_shard<double>(0, 0),
                       "pipetype::host: parameter_shard<T>: T is not the size of stage 0's parameters",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(ex.parameter_shard<float>(2, 0),
                       "pipetype::host: replica 2, stage 0 is outside the mesh (2 replicas, 4 stages)",
                       std::invalid_argument);
  replicas<plain> kept(2);
  ph::mesh_executor ex2{plan, pt::mesh{4, 2}, pt::dp_options{.dp = 2, .shard = true}, kept.ptrs};
  CHECK(ex2.parameter_shard<float>(0, 0).empty());  // a stage that keeps its own
  CHECK(ex2.parameter_pools().empty());
}

}  // namespace test_host_held_params
}  // namespace
