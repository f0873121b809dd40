#include "sweep.hpp"

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_one_f_one_b {

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

namespace {
// a skip connection over 4 stages, and two towers (0 → 1, 2 → 3) into a head (4), written with
// the towers' stages out of order (3 → 1 → 4 and 2 → 0 → 4) so that the placement must sort them
const pt::stage_dag skip4{4, {{0, 1}, {1, 2}, {2, 3}, {0, 2}}};
const pt::stage_dag towers5{5, {{3, 1}, {2, 0}, {1, 4}, {0, 4}}};
}  // namespace

TEST_CASE("one_f_one_b over a graph: each rank warms up by its longest path to the loss") {
  for (int m = 1; m <= 8; ++m) {
    CAPTURE(m);
    const pt::program skip = pt::make_one_f_one_b(4, m, skip4);
    REQUIRE(pt::verify(skip.view()).ok());
    CHECK(skip.edges == skip4.edges);
    // the skip edge shortens no path: the chain's warm-ups and makespan, and its peaks but on
    // stage 2, which holds both its inputs per microbatch
    std::vector<int> chain_peaks = sweep::peaks(pt::make_one_f_one_b(4, m));
    chain_peaks[2] *= 2;
    CHECK(sweep::peaks(skip) == chain_peaks);
    CHECK(pt::simulate(skip.view(), pt::costs{.f = 1, .b = 2}).makespan() == (m + 3) * 3.0);

    const pt::program towers = pt::make_one_f_one_b(5, m, towers5);
    REQUIRE(pt::verify(towers.view()).ok());
    // topological order, lowest ready first: 2, 0 (now ready), 3, 1, 4; the towers' first
    // stages (2, 3) are 2 edges from the head, their second (0, 1) one; each rank holds
    // min(depth + 1, m) microbatches, the head two activations for each (its two inputs)
    const int stage_of[] = {2, 0, 3, 1, 4}, depth[] = {2, 1, 2, 1, 0};
    const std::vector<int> pk = sweep::peaks(towers);
    for (int r = 0; r < 5; ++r) {
      CAPTURE(r);
      CHECK(towers.stage_rank[static_cast<std::size_t>(stage_of[r])] == r);
      CHECK(pk[static_cast<std::size_t>(r)] == std::min(depth[r] + 1, m) * (r == 4 ? 2 : 1));
    }
    // the two towers run side by side: as long as a chain of 3, not of 5
    CHECK(pt::simulate(towers.view(), pt::costs{.f = 1, .b = 2}).makespan() == (m + 2) * 3.0);
  }
}

TEST_CASE("one_f_one_b over a graph: by name, beside the other families") {
  pt::schedule_params params;
  params.edges = skip4.edges;
  CHECK(pt::make_schedule("1f1b", 4, 8, 1, params).edges == skip4.edges);
  CHECK(pt::make_schedule("gpipe", 4, 8, 1, params).edges == skip4.edges);
  CHECK(pt::make_schedule("zb-h1", 4, 8, 1, params).edges == skip4.edges);
  CHECK(pt::make_schedule("dualpipe", 4, 8, 1, params).view().lane_edges().size() == skip4.edges.size());
  // a graph that breaks a rule still generates, and verify names the rule
  const pt::program bad = pt::make_one_f_one_b(3, 2, pt::stage_dag{3, {{0, 1}, {1, 2}, {2, 0}}});
  CHECK(pt::verify(bad.view()).code == pt::errc::invalid_graph);
}

}  // namespace test_one_f_one_b
}  // namespace
