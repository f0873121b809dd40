#include "sweep.hpp"

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_zb_h2 {

namespace pt = pipetype;

constexpr auto plan = pt::make_plan<pt::zb_h2<pt::ranks<4>, pt::microbatches<8>>>();
static_assert(plan.peak_activations(0) == 7);  // 2p − 1
static_assert(pt::simulate(plan, pt::costs{.f = 1, .b = 2}).max_rank_span() == 8 * 3);

TEST_CASE("zb_h2: zero bubble (rank span = m(F+I+W)) for m >= 2p-1 when F = I = W, peak 2p-1") {
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 40; ++m) {
      const pt::program prog = pt::make_zb_h2(p, m);
      CAPTURE(p);
      CAPTURE(m);
      REQUIRE(pt::build_plan(prog).ok());
      const pt::timeline t = pt::simulate(prog.view(), pt::costs{.f = 1, .b = 2});
      if (m >= 2 * p - 1) {
        CHECK(t.max_rank_span() == 3.0 * m);
        CHECK(t.makespan() == 3.0 * m + (p - 1));  // one isolated step: the fill of F's remains
        CHECK(sweep::max_span_bubble(t) == 0);
      } else {
        CHECK(t.max_rank_span() > 3.0 * m - 1e-9);
      }
      const std::vector<double> pk = sweep::half_peaks(prog);
      CHECK(*std::max_element(pk.begin(), pk.end()) <= 2 * p - 1);
      if (m >= 2 * p - 1) CHECK(pk[0] == 2 * p - 1);
    }
}

TEST_CASE("zb_h2: warm-up of 2(p-r)-1 forwards, never worse than zb_h1's span") {
  const pt::program prog = pt::make_zb_h2(4, 8);
  for (int r = 0; r < 4; ++r) {
    const auto acts = prog.view().rank_actions(r);
    int f = 0;
    while (acts[static_cast<std::size_t>(f)].what == pt::kind::F) ++f;
    CHECK(f == 2 * (4 - r) - 1);
  }
  for (const pt::costs c : {pt::costs{.f = 1, .b = 2}, pt::costs{.f = 1, .i = 1.5, .w = 0.5}})
    CHECK(pt::simulate(prog.view(), c).max_rank_span() <= pt::simulate(pt::make_zb_h1(4, 8).view(), c).max_rank_span());
}

}  // namespace test_zb_h2
}  // namespace
