#include "sweep.hpp"

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_dualpipe {

namespace pt = pipetype;

constexpr auto plan = pt::make_plan<pt::dualpipe<pt::ranks<8>, pt::microbatches<20>>>();  // the README's figure
static_assert(plan.lanes == 2 && plan.stages == 16 && plan.compute().lane_length() == 8);
static_assert(plan.stage_rank[0] == 0 && plan.stage_rank[7] == 7 && plan.stage_rank[8] == 7 &&
              plan.stage_rank[15] == 0);
static_assert(plan.peak_activations(0) == 9);  // PP + 1

TEST_CASE("dualpipe: bubble (PP/2-1)(F&B + B - 3W) and PP+1 activations, F = I = W") {
  for (int PP = 2; PP <= 8; PP += 2)
    for (int m = 2 * PP; m <= 4 * PP; m += 2) {
      const pt::program prog = pt::make_dualpipe(PP, m);
      CAPTURE(PP);
      CAPTURE(m);
      REQUIRE(pt::build_plan(prog).ok());
      REQUIRE(pt::build_plan(prog, {.comms = pt::comm_policy::per_rank_pair}).ok());
      for (const pt::costs c : {pt::costs{.f = 1, .b = 2}, pt::costs{.f = 3, .b = 6}}) {
        const double F = c.f, B = c.b, W = c.of(pt::kind::W), FB = F + B;
        const pt::timeline t = pt::simulate(prog.view(), c);
        CHECK(sweep::max_span_bubble(t) == (PP / 2 - 1) * (FB + B - 3 * W));
        CHECK(t.max_rank_span() == m * (F + B) + (PP / 2 - 1) * (FB + B - 3 * W));
      }
      for (double pk : sweep::half_peaks(prog)) CHECK(pk == PP + 1);
    }
}

TEST_CASE("dualpipe: two lanes — each microbatch runs through one direction only") {
  const pt::program prog = pt::make_dualpipe(4, 8);
  CHECK(prog.lanes == 2);
  for (const pt::action& a : prog.actions) {
    CAPTURE(pt::to_text(a));
    CHECK((a.stage < 4) == (a.microbatch < 4));  // lane 0: microbatches 0..3; lane 1: 4..7
  }
  CHECK(prog.view().lane_head(0));
  CHECK(prog.view().lane_head(4));
  CHECK(prog.view().lane_tail(3));
  CHECK_FALSE(prog.view().lane_tail(4));
  // the lowering makes no edge between the lanes: 3 + 3 crossing edges, one communicator each
  CHECK(pt::build_plan(prog).lowered().comms.size() == 6);
  CHECK(std::string(pt::dualpipe_error(3, 12)).find("even number of ranks") != std::string::npos);
  CHECK(std::string(pt::dualpipe_error(4, 6)).find("at least 2 x ranks") != std::string::npos);
  CHECK_THROWS_AS(pt::make_dualpipe(4, 9), std::invalid_argument);
}

TEST_CASE("lanes: a microbatch outside its lane, or lanes that do not divide, are rejected") {
  pt::program_builder b{2, 4, 2};
  b.lanes(2);
  b.rank(0).add(pt::F(0, 0)).add(pt::F(0, 1));  // microbatch 1 belongs to lane 1 (stages 2, 3)
  const pt::verdict v = pt::verify(std::move(b).build().view());
  CHECK(v.code == pt::errc::index_out_of_range);
  CHECK(std::string(v.detail).find("another lane") != std::string::npos);
  pt::program_builder odd{2, 3, 2};
  odd.lanes(2).rank(0).add(pt::F(0, 0));
  CHECK(pt::verify(std::move(odd).build().view()).code == pt::errc::invalid_lanes);
}

}  // namespace test_dualpipe
}  // namespace
