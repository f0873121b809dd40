#include "sweep.hpp"

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_interleaved_1f1b {

namespace pt = pipetype;

constexpr auto plan = pt::make_plan<pt::interleaved_1f1b<pt::ranks<2>, pt::microbatches<4>, pt::chunks<2>>>();
static_assert(plan.stages == 4 && plan.stage_rank[2] == 0 && plan.stage_rank[3] == 1);

TEST_CASE("interleaved_1f1b: makespan m·v·(F+B) + (p-1)(F+B) when p divides m, peak as Megatron") {
  for (int p = 1; p <= 8; ++p)
    for (int m = p; m <= 32; m += p)
      for (int v = 1; v <= 4; ++v) {
        CAPTURE(p);
        CAPTURE(m);
        CAPTURE(v);
        REQUIRE(pt::interleaved_1f1b_error(p, m, v) == nullptr);
        const pt::program prog = pt::make_interleaved_1f1b(p, m, v);
        REQUIRE(pt::verify(prog.view()).ok());
        CHECK(pt::simulate(prog.view(), pt::costs{.f = 1, .b = 2}).makespan() == m * v * 3.0 + (p - 1) * 3.0);
        const std::vector<int> pk = sweep::peaks(prog);
        for (int r = 0; r < p; ++r)
          CHECK(pk[static_cast<std::size_t>(r)] == std::min((v - 1) * p + 2 * (p - 1 - r) + 1, m * v));
      }
}

TEST_CASE("interleaved_1f1b: PyTorch's relaxed microbatch rule, and the rest rejected") {
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 32; ++m)
      for (int v = 1; v <= 4; ++v) {
        const int rounds = std::max(1, m / p);
        const bool valid = m % rounds == 0;
        CAPTURE(p);
        CAPTURE(m);
        CHECK((pt::interleaved_1f1b_error(p, m, v) == nullptr) == valid);
        if (valid)
          CHECK(pt::verify(pt::make_interleaved_1f1b(p, m, v).view()).ok());
        else
          CHECK_THROWS_AS(pt::make_interleaved_1f1b(p, m, v), std::invalid_argument);
      }
  CHECK(pt::interleaved_1f1b_error(4, 10, 2) == nullptr);  // rounds 2
  CHECK(pt::interleaved_1f1b_error(4, 3, 2) == nullptr);   // rounds 1
  CHECK(std::string(pt::interleaved_1f1b_error(3, 7, 2)).find("multiple of ranks") != std::string::npos);
}

TEST_CASE("interleaved_1f1b: PyTorch's schedule-plan test grid") {
  for (const auto& g : sweep::pytorch_grid) {
    CAPTURE(g[0]);
    CAPTURE(g[1]);
    CAPTURE(g[2]);
    CHECK(sweep::pytorch_plan_checks(pt::make_interleaved_1f1b(g[2], g[1], g[0])) == "");
  }
}

}  // namespace test_interleaved_1f1b
}  // namespace
