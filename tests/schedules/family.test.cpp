// schedules/family.hpp: what a schedule family is for tools.
#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include <string>
#include <string_view>
#include <vector>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_family {

namespace pt = pipetype;

namespace {
// a user's family: the concept is all it takes
struct reversed_gpipe {
  static constexpr std::string_view name = "reversed-gpipe";
  static constexpr std::string_view summary = "GPipe with the backwards in microbatch order reversed";
  static constexpr int chunks = 1;
  static constexpr bool split = false;
  static constexpr const char* error(int p, int, int) noexcept { return p > 8 ? "at most 8 ranks" : nullptr; }
  static constexpr pt::program make(int p, int m, int, const pt::schedule_params&) { return pt::make_gpipe(p, m); }
};
struct not_a_family {
  static constexpr std::string_view name = "x";
};
}  // namespace

static_assert(pt::schedule_family<reversed_gpipe>);
static_assert(!pt::schedule_family<not_a_family>);
static_assert(pt::schedule_family<pt::zb_auto_family> && pt::schedule_family<pt::dualpipe_family>);
static_assert(pt::family_list<reversed_gpipe, pt::gpipe_family>::size == 2);

TEST_CASE("family: a user's family builds and checks like the built-in ones") {
  CHECK(reversed_gpipe::error(9, 4, 1) != nullptr);
  CHECK(reversed_gpipe::make(2, 4, 1, {}).actions == pt::make_gpipe(2, 4).actions);
  // zb-auto's family carries the costs and the memory limit through schedule_params
  const pt::program p = pt::zb_auto_family::make(3, 6, 1, {pt::costs{.f = 1, .b = 2}, 3});
  CHECK(pt::build_plan(p, {.mem_limit = 3}).ok());
}

TEST_CASE("family: over_graph runs every one-lane chain schedule over a graph of as many stages") {
  const std::vector<pt::stage_dag> graphs{pt::stage_dag{4, {{0, 1}, {1, 2}, {2, 3}, {0, 2}}},
                                          pt::stage_dag{4, {{0, 2}, {1, 2}, {2, 3}}},
                                          pt::stage_dag{4, {{3, 1}, {2, 0}, {1, 0}}}};  // numbered backwards
  int families = 0;
  for (const pt::schedule_info& s : pt::schedule_infos) {
    const int v = s.chunks == 1 ? 1 : 2, p = 4 / v;  // four stages either way
    if (pt::schedule_error(s.name, p, 8, v)) continue;
    const pt::program chain = pt::make_schedule(s.name, p, 8, v, {});
    if (chain.lanes > 1) continue;  // DualPipe: two copies of the chain
    CAPTURE(std::string(s.name));
    ++families;
    // over the chain itself: the same program
    const pt::program same = pt::over_graph(chain, pt::chain_dag(4));
    CHECK(same.actions == chain.actions);
    CHECK(same.stage_rank == chain.stage_rank);
    for (const pt::stage_dag& g : graphs) {
      const pt::program prog = pt::over_graph(chain, g);
      CHECK(prog.edges == g.edges);
      const pt::runtime_plan plan = pt::build_plan(prog);
      CHECK_MESSAGE(plan.ok(), pt::describe(plan.result));
      // chain stage k is the graph's k-th stage in topological order, on the same rank, in the same place
      const std::vector<int> order = pt::topological_order(g);
      for (int k = 0; k < 4; ++k)
        CHECK(prog.stage_rank[static_cast<std::size_t>(order[static_cast<std::size_t>(k)])] ==
              chain.stage_rank[static_cast<std::size_t>(k)]);
      for (int r = 0; r < p; ++r) {
        REQUIRE(prog.view().rank_actions(r).size() == chain.view().rank_actions(r).size());
        for (std::size_t i = 0; i < chain.view().rank_actions(r).size(); ++i) {
          const pt::action a = chain.view().rank_actions(r)[i], b = prog.view().rank_actions(r)[i];
          CHECK(b.stage == order[static_cast<std::size_t>(a.stage)]);
          CHECK(b.what == a.what);
          CHECK(b.microbatch == a.microbatch);
        }
      }
      // by name, the same (zb-auto searches the graph's order itself, and 1f1b, zb-h1 warm up by depth)
      pt::schedule_params params;
      params.edges = g.edges;
      if (s.name == "local-1f1b")  // local learning: its graphs' edges are all detached (local_1f1b.test.cpp)
        CHECK_THROWS_WITH_AS(pt::make_schedule(s.name, p, 8, v, params),
                             doctest::Contains("every edge must be detached"), std::invalid_argument);
      else
        CHECK(pt::build_plan(pt::make_schedule(s.name, p, 8, v, params)).ok());
    }
  }
  CHECK(families >= 9);
  pt::schedule_params params;
  params.edges = graphs[0].edges;
  CHECK_THROWS_WITH_AS(pt::make_schedule("dualpipe", 2, 4, 1, params),
                       "the stage graph's edges name 4 stages, but this schedule's program has 2 per lane (2 lanes, "
                       "each a copy of the model)",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(
      pt::make_schedule("interleaved-1f1b", 4, 8, 2, params),
      "the stage graph's edges name 4 stages, but this schedule's program has 8 (2 per rank over 4 ranks)",
      std::invalid_argument);
  params.placement = pt::search_placement::v;
  CHECK_THROWS_WITH_AS(pt::make_schedule("zb-auto", 4, 8, 1, params),
                       "zb-auto over a stage graph places one stage per rank (not in a V) so far",
                       std::invalid_argument);
  // another stage count (per lane): unchanged, for verify to judge
  CHECK(pt::over_graph(pt::make_schedule("dualpipe", 2, 4, 1, {}), pt::chain_dag(4)).edges.empty());
  CHECK(pt::over_graph(pt::make_schedule("1f1b", 2, 4, 1, {}), graphs[0]).edges.empty());
}

TEST_CASE("family: DualPipe runs a copy of the graph in each direction") {
  const std::vector<pt::stage_dag> graphs{pt::stage_dag{4, {{0, 1}, {1, 2}, {2, 3}, {0, 2}}},
                                          pt::stage_dag{4, {{0, 2}, {1, 2}, {2, 3}}},
                                          pt::stage_dag{4, {{3, 1}, {2, 0}, {1, 0}}}};
  const pt::program chain = pt::make_dualpipe(4, 8);
  for (const pt::stage_dag& g : graphs) {
    const pt::program prog = pt::make_dualpipe(4, 8, g);
    REQUIRE(prog.lanes == 2);
    // both lanes' edges, lane 1's shifted by the lane's first stage
    REQUIRE(prog.edges.size() == 2 * g.edges.size());
    for (std::size_t k = 0; k < g.edges.size(); ++k) {
      CHECK(prog.edges[k] == g.edges[k]);
      CHECK(prog.edges[k + g.edges.size()] == pt::stage_edge{g.edges[k].from + 4, g.edges[k].to + 4});
    }
    CHECK(std::vector<pt::stage_edge>(prog.view().lane_edges().begin(), prog.view().lane_edges().end()) == g.edges);
    // each lane's i-th stage is the graph's i-th in topological order, on the chain's rank
    const std::vector<int> order = pt::topological_order(g);
    for (int lane = 0; lane < 2; ++lane)
      for (int k = 0; k < 4; ++k)
        CHECK(prog.stage_rank[static_cast<std::size_t>(lane * 4 + order[static_cast<std::size_t>(k)])] ==
              chain.stage_rank[static_cast<std::size_t>(lane * 4 + k)]);
    const pt::runtime_plan plan = pt::build_plan(prog);
    CHECK_MESSAGE(plan.ok(), pt::describe(plan.result));
    pt::schedule_params params;
    params.edges = g.edges;
    CHECK(pt::make_schedule("dualpipe", 4, 8, 1, params).actions == prog.actions);
  }
  CHECK_THROWS_WITH_AS(pt::make_dualpipe(4, 8, pt::chain_dag(6)), doctest::Contains("as many stages as ranks"),
                       std::invalid_argument);
}

}  // namespace test_family
}  // namespace
