#include "sweep.hpp"

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_gpipe {

namespace pt = pipetype;

// a compile-time plan of the type form
constexpr auto gpipe_plan = pt::make_plan<pt::gpipe<pt::ranks<3>, pt::microbatches<5>>>();
static_assert(gpipe_plan.peak_activations(0) == 5 && gpipe_plan.peak_activations(2) == 5);

TEST_CASE("gpipe: makespan (m+p-1)(F+B) and peak m on every rank, p in 1..8, m in 1..32") {
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 32; ++m) {
      const pt::program prog = pt::make_gpipe(p, m);
      CAPTURE(p);
      CAPTURE(m);
      REQUIRE(pt::verify(prog.view()).ok());
      const pt::timeline t = pt::simulate(prog.view(), pt::costs{.f = 1, .b = 2});
      CHECK(t.makespan() == (m + p - 1) * 3.0);
      const pt::timeline u = pt::simulate(prog.view(), pt::costs{.f = 1.5, .b = 4});
      CHECK(u.makespan() == (m + p - 1) * 5.5);
      CHECK(sweep::peaks(prog) == std::vector<int>(static_cast<std::size_t>(p), m));
    }
}

TEST_CASE("gpipe: rank r runs all forwards, then all backwards in microbatch order") {
  const pt::program prog = pt::make_gpipe(2, 3);
  const auto r1 = prog.view().rank_actions(1);
  const std::vector<pt::action> expect{pt::F(1, 0), pt::F(1, 1), pt::F(1, 2), pt::B(1, 0), pt::B(1, 1), pt::B(1, 2)};
  CHECK(std::vector<pt::action>(r1.begin(), r1.end()) == expect);
}

TEST_CASE("gpipe over a graph: two towers side by side") {
  // 0 → 2 and 1 → 2: both towers fill at once, so the step is a chain of two
  const pt::stage_dag towers{3, {{0, 2}, {1, 2}}};
  for (int m = 1; m <= 6; ++m) {
    CAPTURE(m);
    const pt::program p = pt::make_gpipe(3, m, towers);
    REQUIRE(pt::verify(p.view()).ok());
    CHECK(sweep::peaks(p) == std::vector<int>{m, m, 2 * m});  // the head holds both towers' outputs
    CHECK(pt::simulate(p.view(), pt::costs{.f = 1, .b = 2}).makespan() == (m + 1) * 3.0);
  }
}

}  // namespace test_gpipe
}  // namespace
