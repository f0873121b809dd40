// verify over a stage graph given as edges (program.hpp, graph/dag.hpp): every producer and
// every consumer, in place of a chain's neighbours.
#include <pipetype/compile/verify.hpp>

#include <doctest/doctest.h>

#include <pipetype/analysis/simulate.hpp>
#include <pipetype/compile/plan.hpp>
#include <pipetype/schedules/registry.hpp>

#include "../graph_programs.hpp"

#include <string>
#include <vector>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_verify_graph {

namespace pt = pipetype;

namespace {

using graph_programs::build;

/// GPipe over stage s on rank s: every forward, then every backward.
pt::program gpipe(int stages, int m, const std::vector<pt::stage_edge>& edges) {
  std::vector<std::vector<pt::action>> order(static_cast<std::size_t>(stages));
  for (int s = 0; s < stages; ++s) {
    for (int j = 0; j < m; ++j) order[static_cast<std::size_t>(s)].push_back(pt::F(s, j));
    for (int j = 0; j < m; ++j) order[static_cast<std::size_t>(s)].push_back(pt::B(s, j));
  }
  return build(stages, stages, m, edges, order);
}

const std::vector<pt::stage_edge> skip{{0, 1}, {1, 2}, {2, 3}, {0, 2}};  // 0 → 1 → 2 → 3, and 0 → 2

int tick_of(const pt::program& p, const pt::program_facts& f, pt::action a) {
  for (std::size_t k = 0; k < p.actions.size(); ++k)
    if (p.actions[k] == a) return f.tick[k];
  return -2;
}

}  // namespace

TEST_CASE("verify graph: a forward waits for every producer, a backward for every consumer") {
  const pt::program p = gpipe(4, 2, skip);
  const pt::program_facts f = pt::check_program(p.view());
  REQUIRE(f.result.ok());
  CHECK(tick_of(p, f, pt::F(2, 0)) == 2);  // after F(1,0) at 1 (and F(0,0) at 0)
  CHECK(tick_of(p, f, pt::B(3, 0)) == 5);
  CHECK(tick_of(p, f, pt::B(2, 0)) == 6);
  CHECK(tick_of(p, f, pt::B(1, 0)) == 7);
  CHECK(tick_of(p, f, pt::B(0, 0)) == 8);  // after B(1,0) at 7 and B(2,0) at 6
  CHECK(f.ticks == 10);
  // with edges, a lane's head is a source and its tail a loss
  CHECK(p.view().lane_head(0));
  CHECK(!p.view().lane_head(2));
  CHECK(p.view().lane_tail(3));
  CHECK(!p.view().lane_tail(0));
}

TEST_CASE("verify graph: a chain written as edges verifies and simulates as the chain") {
  for (const pt::schedule_info& s : pt::schedule_infos) {
    if (pt::schedule_error(s.name, 4, 8, 1)) continue;  // the V schedules hold two stages per rank
    CAPTURE(std::string(s.name));
    pt::program chain = pt::make_schedule(s.name, 4, 8, 1, {});
    if (chain.lanes > 1 || chain.view().has_edges()) continue;  // DualPipe: two lanes; local-1f1b: edges already
    pt::program edged = chain;
    for (int k = 0; k + 1 < chain.stages; ++k) edged.edges.push_back({k, k + 1});
    const pt::program_facts a = pt::check_program(chain.view()), b = pt::check_program(edged.view());
    REQUIRE(a.result.ok());
    REQUIRE(b.result.ok());
    CHECK(a.tick == b.tick);
    CHECK(a.peak_units == b.peak_units);
    const pt::costs c{.f = 1, .b = 2, .comm = 0.25};
    CHECK(pt::simulate(chain.view(), c).start == pt::simulate(edged.view(), c).start);
  }
}

TEST_CASE("verify graph: same-rank order counts every edge") {
  // rank 0 holds stages 0 and 2 (the skip edge 0 → 2 stays on the rank), rank 1 stage 1, rank 2 stage 3
  auto on_three = [](std::vector<pt::action> rank0) {
    return build(3, 4, 1, skip, {std::move(rank0), {pt::F(1, 0), pt::B(1, 0)}, {pt::F(3, 0), pt::B(3, 0)}});
  };
  CHECK(pt::verify(on_three({pt::F(0, 0), pt::F(2, 0), pt::B(2, 0), pt::B(0, 0)}).view()).ok());
  const pt::verdict f = pt::verify(on_three({pt::F(2, 0), pt::F(0, 0), pt::B(2, 0), pt::B(0, 0)}).view());
  CHECK(f.code == pt::errc::action_before_its_input);
  CHECK(std::string(f.detail) == "F before the F of a stage it reads");
  CHECK(f.stage == 2);
  // as a chain, B(0,0) needs only stage 1's gradient; with the skip edge also stage 2's
  const pt::verdict b = pt::verify(on_three({pt::F(0, 0), pt::F(2, 0), pt::B(0, 0), pt::B(2, 0)}).view());
  CHECK(b.code == pt::errc::action_before_its_input);
  CHECK(std::string(b.detail) == "backward before the backward of a stage that reads it");
  CHECK(b.stage == 0);
}

TEST_CASE("verify graph: a cross-rank deadlock through a fan-in") {
  // two towers (0, 1) into a head (2); rank 0 runs its second forward only after its first
  // backward, which waits for the head, which waits for that second forward
  const pt::program p = build(3, 3, 2, {{0, 2}, {1, 2}},
                              {{pt::F(0, 0), pt::B(0, 0), pt::F(0, 1), pt::B(0, 1)},
                               {pt::F(1, 0), pt::F(1, 1), pt::B(1, 0), pt::B(1, 1)},
                               {pt::F(2, 0), pt::F(2, 1), pt::B(2, 0), pt::B(2, 1)}});
  const pt::verdict v = pt::verify(p.view());
  REQUIRE(v.code == pt::errc::cross_rank_deadlock);
  REQUIRE(v.cycle_length == 2);
  CHECK(v.cycle[0].rank == 0);
  CHECK(v.cycle[0].needs_kind == 'B');
  CHECK(v.cycle[0].needs_stage == 2);
  CHECK(v.cycle[1].rank == 2);
  CHECK(v.cycle[1].needs_kind == 'F');
  CHECK(v.cycle[1].needs_stage == 0);
}

TEST_CASE("verify graph: the graph's own rules come first") {
  const pt::verdict cycle = pt::verify(gpipe(3, 1, {{0, 1}, {1, 2}, {2, 1}}).view());
  CHECK(cycle.code == pt::errc::invalid_graph);
  CHECK(std::string(cycle.detail) == "the stage graph has a cycle through this stage");
  const pt::verdict missing = pt::verify(gpipe(3, 1, {{0, 1}, {1, 3}}).view());
  CHECK(missing.code == pt::errc::invalid_graph);
  CHECK(missing.stage == 3);
  pt::program laned = gpipe(4, 2, skip);
  laned.lanes = 2;
  const pt::verdict lanes = pt::verify(laned.view());
  CHECK(lanes.code == pt::errc::invalid_graph);
  CHECK(std::string(lanes.detail).starts_with("with several lanes, the edges come lane by lane"));
  // two lanes, each a copy of the chain 0 > 1 (DualPipe over a graph): valid; out of order: not
  pt::program copies = pt::make_dualpipe(2, 4, pt::chain_dag(2));
  REQUIRE(copies.edges == std::vector<pt::stage_edge>{{0, 1}, {2, 3}});
  CHECK(pt::verify(copies.view()).ok());
  copies.edges = {{2, 3}, {0, 1}};
  CHECK(pt::verify(copies.view()).code == pt::errc::invalid_graph);
  copies.edges = {{0, 3}, {2, 5}};  // lane 0 reaches into lane 1
  const pt::verdict across = pt::verify(copies.view());
  CHECK(across.code == pt::errc::invalid_graph);
  CHECK(across.stage == 3);
}

TEST_CASE("verify graph: a fan-in holds an activation per input, in verify and in simulate alike") {
  // GPipe over the skip graph, two microbatches: stage 2 reads stages 1 and 0, so its rank holds
  // 2 microbatches × 2 inputs; every other rank 2 × 1
  const pt::program p = gpipe(4, 2, skip);
  const pt::program_facts f = pt::check_program(p.view());
  REQUIRE(f.result.ok());
  const pt::timeline t = pt::simulate(p.view(), pt::costs{.f = 1, .b = 2});
  const int unit = pt::memory_model{}.unit;
  for (int r = 0; r < 4; ++r) {
    CAPTURE(r);
    CHECK(f.peak_units[static_cast<std::size_t>(r)] == unit * 2 * (r == 2 ? 2 : 1));
    CHECK(t.peak_activations(r) == 2.0 * (r == 2 ? 2 : 1));
  }
  // a memory limit counts them: 3 activations is enough for every rank but stage 2's
  const pt::verdict v = pt::check_program(p.view(), {.mem_limit = 3}).result;
  CHECK(v.code == pt::errc::memory_limit_exceeded);
  CHECK(v.rank == 2);
}

TEST_CASE("verify graph: edges past pipetype::limits are too_large, before the graph is checked") {
  auto with_edges = [](std::size_t edges, int m) {
    pt::program_builder b{1, 3, m};
    b.rank(0).add(pt::F(0, 0)).add(pt::B(0, 0));
    b.graph(std::vector<pt::stage_edge>(edges, pt::stage_edge{0, 1}));  // repeated: refused by size first
    return pt::verify(std::move(b).build().view());
  };
  const pt::verdict many = with_edges(static_cast<std::size_t>(pt::limits::edges) + 1, 1);
  CHECK(many.code == pt::errc::too_large);
  CHECK(pt::describe(many) == "program too large: more than 1048576 edges (pipetype::limits::edges)");
  // each transfer of the lowering is an edge and a microbatch: their product is held under cells
  const pt::verdict cells = with_edges(600000, 8);
  CHECK(cells.code == pt::errc::too_large);
  CHECK(pt::describe(cells) == "program too large: edges x microbatches above 4194304 (pipetype::limits::cells)");
  CHECK(with_edges(2, 8).code == pt::errc::invalid_graph);  // within the limits: the graph's own rules
}

}  // namespace test_verify_graph
}  // namespace
