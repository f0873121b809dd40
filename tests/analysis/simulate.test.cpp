#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include "../graph_programs.hpp"

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_simulate {

namespace pt = pipetype;

constexpr auto plan = pt::make_plan<pt::one_f_one_b<pt::ranks<4>, pt::microbatches<8>>>();
// the simulator runs in a constant expression too
static_assert(pt::simulate(plan.compute(), pt::costs{.f = 1, .b = 2}).makespan() == 33);
static_assert(pt::simulate(plan.compute(), pt::costs{.f = 1, .b = 2}).bubble_fraction() == 9.0 / 33.0);

TEST_CASE("simulate: figures of 1F1B, p=4, m=8") {
  const pt::timeline t = pt::simulate(plan.compute(), pt::costs{.f = 1, .b = 2});
  REQUIRE(t.complete);
  CHECK(t.makespan() == 33);
  CHECK(t.max_rank_span() == 33);
  for (int r = 0; r < 4; ++r) {
    CHECK(t.busy(r) == 24);
    CHECK(t.idle(r) == 9);
    CHECK(t.peak_activations(r) == 4 - r);
    // rank r starts after r forwards, ends with its last backward
    CHECK(t.ranks[static_cast<std::size_t>(r)].first_start == r);
  }
  CHECK(t.bubble_fraction() == doctest::Approx(3.0 / 11.0));
}

TEST_CASE("simulate: communication latency delays every crossing input") {
  // 2 ranks, 1 microbatch: F0 (1), comm, F1 (1), B1 (2), comm, B0 (2)
  const pt::program p = pt::make_one_f_one_b(2, 1);
  const pt::timeline t = pt::simulate(p.view(), pt::costs{.f = 1, .b = 2, .comm = 0.5});
  CHECK(t.makespan() == 1 + 0.5 + 1 + 2 + 0.5 + 2);
  CHECK(t.max_rank_span() == t.makespan());
  CHECK(t.ranks[1].span() == 3);
}

TEST_CASE("simulate: rank span is what overlapping steps pay, makespan what one step pays") {
  const pt::program p = pt::make_gpipe(3, 2);
  const pt::timeline t = pt::simulate(p.view(), pt::costs{.f = 1, .b = 1});
  CHECK(t.makespan() == (2 + 3 - 1) * 2);
  // rank 2 starts at 2 and ends at 6; rank 0 starts at 0 and ends at 8
  CHECK(t.ranks[2].span() == 4);
  CHECK(t.max_rank_span() == 8);
}

TEST_CASE("simulate: per-stage and per-microbatch overrides") {
  const pt::program p = pt::make_gpipe(2, 2);
  pt::cost_model c{pt::costs{.f = 1, .b = 2}};
  c.stage(1, pt::kind::F, 3);  // a heavy head
  const pt::timeline t = pt::simulate(p.view(), c);
  // rank 1: F at 1..4, 4..7; B at 7..9, 9..11; rank 0 B at 9..11, 11..13
  CHECK(t.makespan() == 13);
  pt::cost_model d{pt::costs{.f = 1, .b = 2}};
  d.microbatch(1, 2.0);  // microbatch 1 twice as long everywhere
  CHECK(d.time(pt::F(0, 1)) == 2);
  CHECK(d.time(pt::B(1, 0)) == 2);
  d.exact(pt::B(1, 0), 5);
  CHECK(d.time(pt::B(1, 0)) == 5);
  CHECK(d.pair_time(pt::F(0, 0), pt::B(1, 1)) == 1 + 4);
}

TEST_CASE("simulate: costs defaults and the overlapped pair") {
  constexpr pt::costs c{};
  static_assert(c.of(pt::kind::I) == 1 && c.of(pt::kind::W) == 1 && c.pair_time(pt::F(0, 0), pt::B(0, 0)) == 3);
  constexpr pt::costs d{.fb = 2.5};
  static_assert(d.pair_time(pt::F(0, 0), pt::B(0, 0)) == 2.5);
  const pt::program q = pt::parse_schedule("0F0,0F1,(0F2;0B0),0B1,0B2\n");
  const pt::timeline t = pt::simulate(q.view(), pt::costs{.f = 1, .b = 2, .fb = 2.5});
  CHECK(t.start[2] == t.start[3]);
  CHECK(t.end[2] == 4.5);
  CHECK(t.makespan() == 8.5);
}

TEST_CASE("simulate: activation curve follows the memory model") {
  const pt::program p = pt::parse_schedule("0F0,0F1,0I0,0W0,0B1\n");
  const pt::timeline t = pt::simulate(p.view(), pt::costs{});
  CHECK(t.live_after == std::vector<int>{2, 4, 3, 2, 0});
  CHECK(t.peak_activations(0) == 2);
  // F=1, B=2, I=W=1
  const std::vector<pt::activation_point> curve{{0, 0}, {1, 1}, {2, 2}, {3, 1.5}, {4, 1}, {6, 0}};
  CHECK(pt::activation_curve(p.view(), t, 0) == curve);
}

TEST_CASE("simulate: a deadlocked program is reported incomplete") {
  const pt::program p = pt::parse_schedule("0F0,0B0,0F1,0B1\n1F0,1F1,1B0,1B1\n");
  CHECK_FALSE(pt::simulate(p.view()).complete);
}

TEST_CASE("simulate: a plan is simulated with its own memory model") {
  pt::plan_options o;
  o.memory = pt::memory_model{.f = 3, .b = -3, .i = -1, .w = -2, .unit = 3};
  const pt::runtime_plan rp = pt::build_plan(pt::make_one_f_one_b(3, 4), o);
  REQUIRE(rp.ok());
  const pt::timeline t = pt::simulate(rp);
  for (int r = 0; r < 3; ++r) CHECK(t.peak_activations(r) == rp.peak_activations(r));
  CHECK(t.live_after[0] == 3);
  CHECK(rp.peak_activations(0) == 3);
}

TEST_CASE("simulate: with edges a forward starts once every input has arrived") {
  // 0 → 1 → 2 and the skip 0 → 2, stage s on rank s, one microbatch, F 1, B 2, latency 0.5
  const pt::program p = graph_programs::skip3();
  const pt::timeline t = pt::simulate(p.view(), pt::costs{.f = 1, .b = 2, .comm = 0.5});
  REQUIRE(t.complete);
  // F(0) 0–1; F(1) 1.5–2.5; F(2) waits for F(1): 3–4 (F(0) arrived at 1.5); B(2) 4–6;
  // B(1) 6.5–8.5; B(0) waits for both gradients: B(1)'s at 9 (B(2)'s came at 6.5)
  const double starts[] = {0, 9, 1.5, 6.5, 3, 4};
  for (std::size_t k = 0; k < 6; ++k) CHECK(t.start[k] == doctest::Approx(starts[k]));
  CHECK(t.makespan() == doctest::Approx(11));
  // a slow stage 1: F(0) 0–1, F(1) 1.5–6.5, so F(2) waits for stage 1 (7), not the skip input (1.5)
  pt::cost_model slow{pt::costs{.f = 1, .b = 2, .comm = 0.5}};
  slow.stage(1, pt::kind::F, 5);
  CHECK(pt::simulate(p.view(), slow).start[4] == doctest::Approx(7));
  // a slow B(2): B(0) starts when the later of its two consumers' gradients is there
  pt::cost_model slow_b{pt::costs{.f = 1, .b = 2, .comm = 0.5}};
  slow_b.stage(2, pt::kind::B, 10);  // B(2) 4–14, B(1) 14.5–16.5, B(0) at 17 (B(2)'s came at 14.5)
  const pt::timeline u = pt::simulate(p.view(), slow_b);
  CHECK(u.start[3] == doctest::Approx(14.5));
  CHECK(u.start[1] == doctest::Approx(17));
}

}  // namespace test_simulate
}  // namespace
