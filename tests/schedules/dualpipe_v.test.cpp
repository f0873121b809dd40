#include "sweep.hpp"

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_dualpipe_v {

namespace pt = pipetype;

constexpr auto plan = pt::make_plan<pt::dualpipe_v<pt::ranks<4>, pt::microbatches<10>>>();  // PyTorch's test case
static_assert(plan.stages == 8 && plan.peak_activations(0) == 9);                           // PP + 1
static_assert(plan.shape.split);

TEST_CASE("dualpipe_v: bubble (R-1)(F&B + B - 3W) and PP+1 chunk activations, F = I = W") {
  for (int R = 1; R <= 6; ++R)
    for (int m = 2 * R; m <= 4 * R + 2; ++m) {
      const pt::program prog = pt::make_dualpipe_v(R, m);
      CAPTURE(R);
      CAPTURE(m);
      REQUIRE(pt::build_plan(prog).ok());
      REQUIRE(pt::build_plan(prog, {.comms = pt::comm_policy::per_rank_pair}).ok());
      for (const pt::costs c : {pt::costs{.f = 1, .b = 2}, pt::costs{.f = 2, .b = 4}}) {
        const double F = c.f, B = c.b, W = c.of(pt::kind::W), FB = F + B;
        const pt::timeline t = pt::simulate(prog.view(), c);
        CHECK(sweep::max_span_bubble(t) == (R - 1) * (FB + B - 3 * W));
        CHECK(t.max_rank_span() == 2 * m * (F + B) + (R - 1) * (FB + B - 3 * W));
      }
      for (double pk : sweep::half_peaks(prog)) CHECK(pk == 2 * R + 1);
    }
}

TEST_CASE("dualpipe_v: the steady state is overlapped F&B pairs and every W follows its I") {
  const pt::program prog = pt::make_dualpipe_v(4, 10);
  int pairs = 0;
  for (const pt::action& a : prog.actions) pairs += a.overlapped ? 1 : 0;
  // rank r runs 2(m − 2R + r + 1) − [r = R − 1] + (R − r − 1) pairs
  int want = 0;
  for (int r = 0; r < 4; ++r) want += 2 * (10 - 8 + r + 1) - (r == 3 ? 1 : 0) + (4 - r - 1);
  CHECK(pairs == want);
  CHECK(pt::verify(prog.view()).ok());
  CHECK_THROWS_AS(pt::make_dualpipe_v(4, 7), std::invalid_argument);
}

TEST_CASE("dualpipe_v: an F&B pair that overlaps (fb < F + B) shortens the step") {
  const pt::program prog = pt::make_dualpipe_v(4, 12);
  const double plain = pt::simulate(prog.view(), pt::costs{.f = 1, .b = 2}).max_rank_span();
  const double overlapped = pt::simulate(prog.view(), pt::costs{.f = 1, .b = 2, .fb = 2.5}).max_rank_span();
  CHECK(overlapped < plain);
}

}  // namespace test_dualpipe_v
}  // namespace
