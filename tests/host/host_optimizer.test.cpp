// The optimizer in the step on the host mesh executor (dp_options::optimizer, zero): each stage's
// OPT_STEP calls its optimizer_step on the part its replica updates — the whole, or with ZeRO-1
// and FSDP its shard — and ZeRO-1's PARAM_SYNC gathers the updated shards. Checked bitwise
// against the same update run between steps on a step without them, with and without clipping
// by GRAD_NORM's norm, over one to three replicas, one stage a rank or two, tied or not.
#include <pipetype/host.hpp>

#include <doctest/doctest.h>

#include "mesh_stages.hpp"

#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <deque>
#include <stdexcept>
#include <string>
#include <vector>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_host_optimizer {

namespace pt = pipetype;
namespace ph = pipetype::host;
using namespace std::chrono_literals;

using mesh_stages::width;
constexpr std::size_t n = 2 * width;  // a lin stage's parameters

template <bool Lends>
using model_of = pt::chain<mesh_stages::lin<Lends>, mesh_stages::lin<Lends>, mesh_stages::lin<Lends>, mesh_stages::mse>;

template <class Model>
struct run : mesh_stages::replicas_with_batch<Model> {
  using mesh_stages::replicas_with_batch<Model>::replicas_with_batch;
  template <class F>
  void each_lin(int d, F&& f) {
    Model& m = this->models[static_cast<std::size_t>(d)];
    f(0, m.template stage<0>()), f(1, m.template stage<1>()), f(2, m.template stage<2>());
  }
  void zero_grads() {
    for (int d = 0; d < static_cast<int>(this->models.size()); ++d)
      each_lin(d, [](int, auto& st) { std::memset(st.acc, 0, sizeof st.acc); });
  }
  void set_clip(float clip) {
    for (int d = 0; d < static_cast<int>(this->models.size()); ++d) each_lin(d, [&](int, auto& st) { st.clip = clip; });
  }
};

enum class mode { plain, zero, fsdp };
const char* name(mode m) { return m == mode::plain ? "optimizer" : m == mode::zero ? "ZeRO-1" : "FSDP"; }

TEST_CASE("host optimizer: OPT_STEP in the step is the update run after it, with ZeRO-1, FSDP or neither") {
  struct shape {
    const char* schedule;
    int ranks, per_rank;
  };
  const int m = 4, steps = 3;
  for (const shape sh : {shape{"1f1b", 4, 1}, shape{"interleaved-1f1b", 2, 2}})
    for (const int D : {1, 2, 3})
      for (const mode md : {mode::plain, mode::zero, mode::fsdp})
        for (const float clip : {0.0f, 0.05f})
          for (const bool tie : {false, true}) {
            if (md != mode::plain && D == 1) continue;
            CAPTURE(sh.schedule);
            CAPTURE(D);
            CAPTURE(name(md));
            CAPTURE(clip);
            CAPTURE(tie);
            const pt::runtime_plan plan = pt::build_plan(pt::make_schedule(sh.schedule, sh.ranks, m, sh.per_rank));
            REQUIRE(plan.ok());
            const pt::mesh shape{sh.ranks, D};
            pt::dp_options base{.dp = D, .grad_norm = clip > 0};
            if (tie) base.ties = {{0, 2}};  // w of stages 0 and 2
            pt::dp_options o = base;
            o.shard = md == mode::fsdp;
            o.zero = md == mode::zero ? 1 : 0;
            o.optimizer = md != mode::zero;
            run<model_of<false>> ref(D, m), in(D, m);
            in.set_clip(clip);
            ph::mesh_executor a{plan, shape, base, ref.ptrs, {.exec = {.deadline = 20s}}};
            ph::mesh_executor b{plan, shape, o, in.ptrs, {.exec = {.deadline = 20s}}};
            for (int k = 0; k < steps; ++k) {
              a.step(ref.b);
              b.step(in.b);
              // the reference: the same SGD between steps on every replica's whole parameters,
              // scaled by the norm the step under test clipped by (the two sum it in other orders)
              const double norm = clip > 0 ? b.grad_norm() : -1;
              if (clip > 0) CHECK(a.grad_norm() == doctest::Approx(norm).epsilon(1e-12));
              for (int d = 0; d < D; ++d)
                ref.each_lin(d, [&](int, auto& st) {
                  st.clip = clip;
                  st.sgd(st.p, st.acc, st.scale(norm));
                });
              ref.zero_grads();
              in.zero_grads();
            }
            // every replica's parameters: whole (PARAM_SYNC, or each replica updated all), or with
            // FSDP each replica's shard of them (the rest was released)
            for (int d = 0; d < D; ++d)
              for (int s = 0; s < 3; ++s) {
                CAPTURE(d);
                CAPTURE(s);
                float want[n], got[n];
                ref.each_lin(0, [&](int t, auto& st) {
                  if (t == s) std::memcpy(want, st.p, sizeof want);
                });
                in.each_lin(d, [&](int t, auto& st) {
                  if (t != s) return;
                  std::memcpy(got, st.p, sizeof got);
                  const pt::shard_range own =
                      md == mode::plain ? pt::shard_range{0, n} : pt::shard_of(n, D, d);  // its optimizer's part
                  CHECK(st.first == own.begin);
                  CHECK(st.velocity.size() == own.size());
                  if (md == mode::fsdp) CHECK(std::memcmp(got + own.begin, want + own.begin, own.size() * 4) == 0);
                });
                if (md != mode::fsdp) CHECK(std::memcmp(got, want, sizeof got) == 0);
              }
          }
}

TEST_CASE("host optimizer: a stage that lends its parameters steps the shard pipetype holds") {
  const int m = 4, D = 2;
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 4, m));
  run<model_of<false>> ref(D, m);
  run<model_of<true>> in(D, m);
  const pt::dp_options base{.dp = D}, o{.dp = D, .shard = true, .optimizer = true};
  ph::mesh_executor a{plan, pt::mesh{4, D}, base, ref.ptrs, {.exec = {.deadline = 20s}}};
  ph::mesh_executor b{plan, pt::mesh{4, D}, o, in.ptrs, {.exec = {.deadline = 20s}}};
  for (int k = 0; k < 3; ++k) {
    a.step(ref.b);
    b.step(in.b);
    for (int d = 0; d < D; ++d) ref.each_lin(d, [&](int, auto& st) { st.sgd(st.p, st.acc, 1.0f); });
    ref.zero_grads();
    in.zero_grads();
  }
  for (int d = 0; d < D; ++d)
    ref.each_lin(0, [&](int s, auto& st) {
      const std::span<const float> shard = b.parameter_shard<float>(d, s);
      const pt::shard_range own = b.shard_range_of(d, s);
      REQUIRE(shard.size() == own.size());
      CHECK(std::memcmp(shard.data(), st.p + own.begin, shard.size_bytes()) == 0);
    });
}

TEST_CASE("host optimizer: a NaN on one rank skips the step on every rank, and the next step goes on") {
  const int m = 4, D = 2;
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("interleaved-1f1b", 2, m, 2));
  run<model_of<false>> in(D, m), clean(D, m);
  const pt::dp_options o{.dp = D, .grad_norm = true, .finite_check = true, .zero = 1};
  ph::mesh_executor ex{plan, pt::mesh{2, D}, o, in.ptrs, {.exec = {.deadline = 20s}}};
  ph::mesh_executor ref{plan, pt::mesh{2, D}, o, clean.ptrs, {.exec = {.deadline = 20s}}};
  float initial[n];
  in.each_lin(0, [&](int s, auto& st) {
    if (s == 0) std::memcpy(initial, st.p, sizeof initial);
  });
  mesh_stages::nan_at = 1;  // stage 1 of replica 0 and 1, microbatch 1: one NaN in its gradient
  ex.step(in.b);
  mesh_stages::nan_at = -1;
  CHECK_FALSE(ex.gradients_finite());
  CHECK(std::isnan(ex.grad_norm()));
  for (int d = 0; d < D; ++d)
    in.each_lin(d, [&](int, auto& st) {
      CHECK(st.skipped == 1);  // every stage of every replica, though only stage 1's gradient has the NaN
      CHECK(std::memcmp(st.p, initial, sizeof initial) == 0);
    });
  in.zero_grads();
  ex.step(in.b);  // clean: the update the reference's first step makes
  ref.step(clean.b);
  CHECK(ex.gradients_finite());
  CHECK(ref.gradients_finite());
  for (int d = 0; d < D; ++d)
    for (int s = 0; s < 3; ++s) {
      float got[n], want[n];
      in.each_lin(d, [&](int t, auto& st) {
        if (t != s) return;
        std::memcpy(got, st.p, sizeof got);
        CHECK(st.skipped == 1);
      });
      clean.each_lin(d, [&](int t, auto& st) {
        if (t == s) std::memcpy(want, st.p, sizeof want);
      });
      CHECK(std::memcmp(got, want, sizeof got) == 0);
      CHECK(std::memcmp(got, initial, sizeof got) != 0);
    }
}

TEST_CASE("host optimizer: a stage with no parameters() at all needs no hook, and the others step") {
  using model = pt::chain<mesh_stages::lin<false>, mesh_stages::lin<false>, mesh_stages::mse_of<false>>;
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 3, 4));
  mesh_stages::replicas_with_batch<model> r(1, 4);
  ph::mesh_executor ex{plan, pt::mesh{3, 1}, {.dp = 1, .optimizer = true}, r.ptrs, {.exec = {.deadline = 20s}}};
  ex.step(r.b);
  CHECK(r.models[0].stage<0>().velocity.size() == n);  // (its OPT_STEP ran, on all of its parameters)
  CHECK(r.models[0].stage<1>().velocity.size() == n);
}

TEST_CASE("host optimizer: a stage with parameters and no optimizer_step is refused at binding") {
  using bare = mesh_stages::lin<false, false>;
  using model = pt::chain<bare, bare, bare, mesh_stages::mse>;
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 4, 4));
  mesh_stages::replicas_with_batch<model> r(2, 4);
  CHECK_THROWS_WITH_AS((ph::mesh_executor{plan, pt::mesh{4, 2}, {.dp = 2, .zero = 1}, r.ptrs}),
                       "pipetype::host: stage 0 has no `void optimizer_step(const pipetype::optimizer_ctx<S>&)` for "
                       "the step's OPT_STEP (dp_options::optimizer, zero)",
                       pt::shape_error);
}

}  // namespace test_host_optimizer
}  // namespace
