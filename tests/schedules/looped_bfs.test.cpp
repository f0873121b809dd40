#include "sweep.hpp"

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_looped_bfs {

namespace pt = pipetype;

constexpr auto plan = pt::make_plan<pt::looped_bfs<pt::ranks<2>, pt::microbatches<4>, pt::chunks<3>>>();
static_assert(plan.stages == 6 && plan.peak_activations(0) == 12);

TEST_CASE("looped_bfs: makespan m·v·(F+B) + (p-1)(F+B) for m >= p, peak m·v") {
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 32; ++m)
      for (int v = 1; v <= 4; ++v) {
        CAPTURE(p);
        CAPTURE(m);
        CAPTURE(v);
        const pt::program prog = pt::make_looped_bfs(p, m, v);
        REQUIRE(pt::verify(prog.view()).ok());
        if (m >= p)
          CHECK(pt::simulate(prog.view(), pt::costs{.f = 1, .b = 2}).makespan() == m * v * 3.0 + (p - 1) * 3.0);
        CHECK(sweep::peaks(prog) == std::vector<int>(static_cast<std::size_t>(p), m * v));
      }
}

TEST_CASE("looped_bfs: PyTorch's schedule-plan test grid") {
  for (const auto& g : sweep::pytorch_grid) {
    CAPTURE(g[0]);
    CAPTURE(g[1]);
    CAPTURE(g[2]);
    CHECK(sweep::pytorch_plan_checks(pt::make_looped_bfs(g[2], g[1], g[0])) == "");
  }
}

TEST_CASE("looped_bfs: earlier stage first, backwards in reverse microbatch order") {
  const pt::program prog = pt::make_looped_bfs(2, 2, 2);
  const auto r0 = prog.view().rank_actions(0);
  const std::vector<pt::action> expect{pt::F(0, 0), pt::F(0, 1), pt::F(2, 0), pt::F(2, 1),
                                       pt::B(2, 1), pt::B(2, 0), pt::B(0, 1), pt::B(0, 0)};
  CHECK(std::vector<pt::action>(r0.begin(), r0.end()) == expect);
}

}  // namespace test_looped_bfs
}  // namespace
