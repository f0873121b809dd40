#include "sweep.hpp"

namespace pt = pipetype;

constexpr auto plan = pt::make_plan<pt::one_f_one_b<pt::ranks<4>, pt::microbatches<8>>>();
static_assert(plan.peak_activations(0) == 4 && plan.peak_activations(3) == 1);
static_assert(plan.ranks == 4 && plan.stages == 4 && plan.microbatches == 8);

TEST_CASE("one_f_one_b: makespan (m+p-1)(F+B) and peak min(p-r, m), p in 1..8, m in 1..32") {
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 32; ++m) {
      const pt::program prog = pt::make_one_f_one_b(p, m);
      CAPTURE(p);
      CAPTURE(m);
      REQUIRE(pt::verify(prog.view()).ok());
      CHECK(pt::simulate(prog.view(), pt::costs{.f = 1, .b = 2}).makespan() == (m + p - 1) * 3.0);
      CHECK(pt::simulate(prog.view(), pt::costs{.f = 2, .b = 3}).makespan() == (m + p - 1) * 5.0);
      const std::vector<int> pk = sweep::peaks(prog);
      for (int r = 0; r < p; ++r) CHECK(pk[static_cast<std::size_t>(r)] == std::min(p - r, m));
    }
}

TEST_CASE("one_f_one_b: warm-up of p-r-1 forwards, then alternation") {
  const pt::program prog = pt::make_one_f_one_b(3, 4);
  const auto r0 = prog.view().rank_actions(0);
  CHECK(r0[0] == pt::F(0, 0));
  CHECK(r0[1] == pt::F(0, 1));
  CHECK(r0[2] == pt::F(0, 2));
  CHECK(r0[3] == pt::B(0, 0));
  CHECK(r0[4] == pt::F(0, 3));
  CHECK(r0[5] == pt::B(0, 1));
  CHECK(sweep::pytorch_plan_checks(prog) == "");
}
