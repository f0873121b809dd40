#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include "../graph_programs.hpp"

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_bounds {

namespace pt = pipetype;

TEST_CASE("bounds: 1F1B's bound is its busiest rank after its head, and GPipe reaches it") {
  // p = 4, m = 8, F = 1, B = 2: rank 3 starts at 3 (three forwards before it) and works 24;
  // the chain of one microbatch is 4 F + 4 B = 12. 1F1B and GPipe take (m + p − 1)(F + B) = 33.
  const pt::costs c{.f = 1, .b = 2};
  const pt::makespan_bound b = pt::makespan_lower_bound(pt::make_one_f_one_b(4, 8).view(), c);
  CHECK(b.busiest_rank == 27);
  CHECK(b.critical_path == 12);
  CHECK(b.value() == 27);
  CHECK(b.gap(33) == doctest::Approx(33.0 / 27 - 1));
  // one microbatch: the chain is the whole step, and the bound is tight
  const pt::program one = pt::make_gpipe(4, 1);
  const pt::makespan_bound b1 = pt::makespan_lower_bound(one.view(), c);
  CHECK(b1.critical_path == 12);
  CHECK(pt::simulate(one.view(), c).makespan() == 12);
  CHECK(b1.gap(12) == 0);
}

TEST_CASE("bounds: latencies lengthen the chain, split backwards end with W, an empty program has none") {
  const pt::costs c{.f = 1, .b = 2, .comm = 0.5};
  // ZB-H1 on 2 ranks, 1 microbatch: F F, I I (half of B each), W on stage 0; two crossings
  const pt::program zb = pt::make_zb_h1(2, 1);
  const pt::makespan_bound b = pt::makespan_lower_bound(zb.view(), c);
  CHECK(b.critical_path == doctest::Approx(1 + 0.5 + 1 + 1 + 0.5 + 1 + 1));
  CHECK(pt::simulate(zb.view(), c).makespan() >= b.value());
  CHECK(pt::makespan_lower_bound(pt::program{}.view()).value() == 0);
}

TEST_CASE("bounds: no built-in schedule beats its bound, under several costs") {
  for (const pt::schedule_info& s : pt::schedule_infos)
    for (const pt::costs& c : {pt::costs{.f = 1, .b = 2}, pt::costs{.f = 1, .b = 3, .i = 1, .w = 2, .comm = 0.25},
                               pt::costs{.f = 2, .b = 2, .comm = 1}})
      for (int m : {4, 8, 13}) {
        if (pt::schedule_error(s.name, 4, m, 0)) continue;
        CAPTURE(s.name);
        CAPTURE(m);
        const pt::program p = pt::make_schedule(s.name, 4, m, 0, {c, 0});
        const pt::makespan_bound b = pt::makespan_lower_bound(p.view(), c);
        const double ms = pt::simulate(p.view(), c).makespan();
        CHECK(b.value() > 0);
        CHECK(ms >= b.value() - 1e-9);
        CHECK(b.gap(ms) >= -1e-12);
      }
}

TEST_CASE("bounds: with edges, the critical path runs through every edge") {
  // 0 → 1 → 2 and the skip 0 → 2, stage s on rank s, one microbatch: forwards 0, 1.5, 3; the
  // loss's backward 4–6; B(1) 6.5–8.5; B(0) after both gradients, 9–11 (simulate gives 11 too)
  const pt::program p = graph_programs::skip3();
  const pt::costs c{.f = 1, .b = 2, .comm = 0.5};
  const pt::makespan_bound bound = pt::makespan_lower_bound(p.view(), c);
  CHECK(bound.critical_path == doctest::Approx(11));
  CHECK(bound.value() <= pt::simulate(p.view(), c).makespan() + 1e-9);
  // the skip edge alone: stage 2 no longer waits for stage 1, but stage 0's backward still waits
  // for both consumers
  const pt::program towers = graph_programs::fan_out3();
  // F(0) 0–1; F(1), F(2) 1.5–2.5; B(1), B(2) 2.5–4.5; B(0) 5–7
  CHECK(pt::makespan_lower_bound(towers.view(), c).critical_path == doctest::Approx(7));
  CHECK(pt::simulate(towers.view(), c).makespan() == doctest::Approx(7));
}

TEST_CASE("bounds: with lanes and edges, a microbatch's path runs through its own lane's copy only") {
  // DualPipe over the skip graph: microbatch 0 runs through lane 0 (stages 0..3) only, so an
  // action it never runs (F of lane 1's stage 5) cannot lengthen its path
  const pt::program p = pt::make_dualpipe(4, 8, pt::stage_dag{4, {{0, 1}, {1, 2}, {2, 3}, {0, 2}}});
  const pt::costs c{.f = 1, .b = 2};
  pt::cost_model ghost{c};
  ghost.exact(pt::F(5, 0), 1000);
  CHECK(pt::makespan_lower_bound(p.view(), ghost).critical_path == pt::makespan_lower_bound(p.view(), c).critical_path);
  CHECK(pt::makespan_lower_bound(p.view(), c).value() <= pt::simulate(p.view(), c).makespan());
}

}  // namespace test_bounds
}  // namespace
