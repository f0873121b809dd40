// schedules/family.hpp: what a schedule family is for tools.
#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include <string>
#include <string_view>
#include <vector>

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

TEST_CASE("family: over_graph runs every one-stage-per-rank chain schedule over a graph") {
  const std::vector<pt::stage_dag> graphs{pt::stage_dag{4, {{0, 1}, {1, 2}, {2, 3}, {0, 2}}},
                                          pt::stage_dag{4, {{0, 2}, {1, 2}, {2, 3}}},
                                          pt::stage_dag{4, {{3, 1}, {2, 0}, {1, 0}}}};  // numbered backwards
  for (const pt::schedule_info& s : pt::schedule_infos) {
    if (s.chunks != 1 || pt::schedule_error(s.name, 4, 6, 1)) continue;
    const pt::program chain = pt::make_schedule(s.name, 4, 6, 1, {});
    if (chain.lanes > 1) continue;  // DualPipe
    CAPTURE(std::string(s.name));
    // over the chain itself: the same program
    const pt::program same = pt::over_graph(chain, pt::chain_dag(4));
    CHECK(same.actions == chain.actions);
    for (const pt::stage_dag& g : graphs) {
      const pt::program p = pt::over_graph(chain, g);
      CHECK(p.edges == g.edges);
      const pt::runtime_plan plan = pt::build_plan(p);
      CHECK_MESSAGE(plan.ok(), pt::describe(plan.result));
      // rank r runs the r-th stage of the topological order with the chain's rank r's kinds
      const std::vector<int> order = pt::topological_order(g);
      for (int r = 0; r < 4; ++r) {
        REQUIRE(p.view().rank_actions(r).size() == chain.view().rank_actions(r).size());
        for (std::size_t k = 0; k < chain.view().rank_actions(r).size(); ++k) {
          CHECK(p.view().rank_actions(r)[k].stage == order[static_cast<std::size_t>(r)]);
          CHECK(p.view().rank_actions(r)[k].what == chain.view().rank_actions(r)[k].what);
        }
      }
    }
  }
  // by name: every one-stage-per-rank family but the chain-only ones takes a graph
  pt::schedule_params params;
  params.edges = graphs[0].edges;
  for (const char* name : {"gpipe", "1f1b", "zb-h1", "zb-h2", "zb-auto"}) {
    CAPTURE(std::string(name));
    CHECK(pt::build_plan(pt::make_schedule(name, 4, 8, 1, params)).ok());
  }
  params.placement = pt::search_placement::v;
  CHECK_THROWS_WITH_AS(pt::make_schedule("zb-auto", 4, 8, 1, params),
                       "zb-auto over a stage graph places one stage per rank (not in a V) so far",
                       std::invalid_argument);
  // not one stage per rank: unchanged, for verify to judge
  const pt::program looped = pt::make_schedule("interleaved-1f1b", 2, 4, 2, {});
  CHECK(pt::over_graph(looped, graphs[0]).edges.empty());
}
