#include "sweep.hpp"

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_zb_h1 {

namespace pt = pipetype;

constexpr auto plan = pt::make_plan<pt::zb_h1<pt::ranks<4>, pt::microbatches<8>>>();
static_assert(plan.peak_activations(0) == 4 && plan.peak_activations(1) == 3.5);
static_assert(plan.shape.split && plan.stages == 4);
static_assert(pt::simulate(plan, pt::costs{.f = 1, .b = 2}).max_rank_span() == 8 * 3 + 3 * 1);

TEST_CASE("zb_h1: rank span m(F+I+W) + (p-1)(F+I-W) and peak p - r/2 (1F1B's p on rank 0), p in 1..8, m in p..24") {
  for (int p = 1; p <= 8; ++p)
    for (int m = p; m <= 24; ++m) {
      const pt::program prog = pt::make_zb_h1(p, m);
      CAPTURE(p);
      CAPTURE(m);
      REQUIRE(pt::build_plan(prog).ok());
      for (const pt::costs c : {pt::costs{.f = 1, .b = 2}, pt::costs{.f = 2, .i = 2, .w = 1}}) {
        const double F = c.of(pt::kind::F), I = c.of(pt::kind::I), W = c.of(pt::kind::W);
        const pt::timeline t = pt::simulate(prog.view(), c);
        CHECK(t.max_rank_span() == m * (F + I + W) + (p - 1) * (F + I - W));
        CHECK(t.makespan() == m * (F + I + W) + (p - 1) * (F + I - W));
      }
      const std::vector<double> pk = sweep::half_peaks(prog);
      for (int r = 0; r < p; ++r) CHECK(pk[static_cast<std::size_t>(r)] == p - r / 2.0);
    }
}

TEST_CASE("zb_h1: a third of 1F1B's bubble when F = I = W") {
  const int p = 4, m = 8;
  const pt::costs c{.f = 1, .b = 2};
  const double zb = pt::simulate(pt::make_zb_h1(p, m).view(), c).makespan() - m * 3.0;
  const double ofob = pt::simulate(pt::make_one_f_one_b(p, m).view(), c).makespan() - m * 3.0;
  CHECK(zb * 3 == ofob);
}

TEST_CASE("zb_h1: rank r delays its W's by r steady steps") {
  const pt::program prog = pt::make_zb_h1(3, 4);
  const auto r2 = prog.view().rank_actions(2);  // no warm-up; F I F I, then W's start
  CHECK(r2[0] == pt::F(2, 0));
  CHECK(r2[1] == pt::I(2, 0));
  CHECK(r2[2] == pt::F(2, 1));
  CHECK(r2[3] == pt::I(2, 1));
  CHECK(r2[4] == pt::F(2, 2));
  CHECK(r2[5] == pt::I(2, 2));
  CHECK(r2[6] == pt::W(2, 0));
  CHECK(pt::verify(prog.view()).ok());
}

TEST_CASE("zb_h1 over a graph: the chain's program on a chain, and a W delay of D - d steps") {
  for (int p = 1; p <= 6; ++p)
    for (int m = 1; m <= 10; ++m) {
      CAPTURE(p);
      CAPTURE(m);
      const pt::program chain = pt::make_zb_h1(p, m), graph = pt::make_zb_h1(p, m, pt::chain_dag(p));
      CHECK(chain.actions == graph.actions);
      CHECK(chain.begin == graph.begin);
    }
  // two towers (2 → 0, 3 → 1) into a head (4): the towers' first stages are two edges deep, as on
  // a chain of 3, so the program is that chain's, rank for rank, and it is lowered and proved
  const pt::stage_dag towers{5, {{2, 0}, {3, 1}, {0, 4}, {1, 4}}};
  for (int m = 1; m <= 8; ++m) {
    CAPTURE(m);
    const pt::program p = pt::make_zb_h1(5, m, towers);
    REQUIRE(pt::verify(p.view()).ok());
    CHECK(p.edges == towers.edges);
    CHECK(pt::build_plan(p).ok());
    const pt::costs c{.f = 1, .b = 2};
    const pt::program three = pt::make_zb_h1(3, m);
    CHECK(pt::simulate(p.view(), c).makespan() == pt::simulate(three.view(), c).makespan());
    // the topological order 2, 0, 3, 1, 4 puts the towers' first stages (depth 2, delay 0) on ranks
    // 0 and 2, their second (depth 1, delay 1) on 1 and 3: each list is the chain's rank at that depth
    auto kinds = [](std::span<const pt::action> as) {
      std::string out;
      for (const pt::action& a : as) out += pt::kind_char(a.what);
      return out;
    };
    const int chain_rank[] = {0, 1, 0, 1, 2};
    for (int r = 0; r < 5; ++r)
      CHECK(kinds(p.view().rank_actions(r)) == kinds(three.view().rank_actions(chain_rank[r])));
  }
}

}  // namespace test_zb_h1
}  // namespace
