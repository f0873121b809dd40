#include "sweep.hpp"

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_zb_v {

namespace pt = pipetype;

constexpr auto plan = pt::make_plan<pt::zb_v<pt::ranks<4>, pt::microbatches<8>>>();
static_assert(plan.stages == 8 && plan.stage_rank[0] == 0 && plan.stage_rank[7] == 0 && plan.stage_rank[4] == 3);
static_assert(plan.peak_activations(0) == 8);  // 2p chunk activations = p of a rank's share

TEST_CASE("zb_v: zero bubble (rank span = 2m(F+I+W) per chunk) for m >= 2p-1 when F = I = W, peak 2p chunks") {
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 32; ++m) {
      const pt::program prog = pt::make_zb_v(p, m);
      CAPTURE(p);
      CAPTURE(m);
      REQUIRE(pt::build_plan(prog).ok());
      REQUIRE(pt::build_plan(prog, {.comms = pt::comm_policy::per_rank_pair}).ok());
      const pt::timeline t = pt::simulate(prog.view(), pt::costs{.f = 1, .b = 2});
      if (m >= 2 * p - 1) {
        CHECK(t.max_rank_span() == 6.0 * m);
        CHECK(sweep::max_span_bubble(t) == 0);
        for (double pk : sweep::half_peaks(prog)) CHECK(pk == 2 * p);
      }
    }
}

TEST_CASE("zb_v: the V placement: rank 0 holds the first and the last stage") {
  const pt::program prog = pt::make_zb_v(3, 5);
  CHECK(prog.stage_rank == std::vector<int>{0, 1, 2, 2, 1, 0});
  const auto r0 = prog.view().rank_actions(0);
  for (int k = 0; k < 5; ++k) CHECK(r0[static_cast<std::size_t>(k)] == pt::F(0, k));  // 2(p − r) − 1 forwards
  CHECK(r0[5] == pt::F(5, 0));
}

}  // namespace test_zb_v
}  // namespace
