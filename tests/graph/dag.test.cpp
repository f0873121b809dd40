#include <pipetype/graph/dag.hpp>

#include <doctest/doctest.h>

#include <pipetype/graph/chain.hpp>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_dag {

namespace pt = pipetype;

namespace {

struct cell {  // one stage type for every node: 4 floats in, 4 out
  using input = pt::tensor<float, 4>;
  using output = pt::tensor<float, 4>;
  void forward(const pt::forward_ctx<cell>&) {}
  void backward(const pt::backward_ctx<cell>&) {}
};

// a skip connection: 0 → 1 → 2 → 3 and 0 → 2
using skip = pt::dag<pt::nodes<cell, cell, cell, cell>,
                     pt::edges<pt::edge<0, 1>, pt::edge<1, 2>, pt::edge<2, 3>, pt::edge<0, 2>>>;
// two towers (0, 1 and 2, 3) into a head (4), both sources and the loss declared
using towers = pt::dag<pt::nodes<cell, cell, cell, cell, cell>,
                       pt::edges<pt::edge<0, 1>, pt::edge<2, 3>, pt::edge<1, 4>, pt::edge<3, 4>>, pt::sources<0, 2>,
                       pt::losses<4>>;

constexpr pt::verdict check(int stages, std::vector<pt::stage_edge> edges, std::vector<int> sources = {},
                            std::vector<int> losses = {}) {
  return pt::check_dag(pt::stage_dag{stages, std::move(edges), std::move(sources), std::move(losses)});
}

// compile time: the rules and the orders
static_assert(pt::check_dag(skip::topology()).ok() && pt::check_dag(towers::topology()).ok());
static_assert(pt::topological_order(towers::topology()) == std::vector<int>{0, 1, 2, 3, 4});
static_assert(pt::is_chain(pt::chain<cell, cell, cell>::topology()) && !pt::is_chain(skip::topology()));
static_assert(check(3, {{0, 1}, {1, 2}, {2, 0}}).code == pt::errc::invalid_graph);

}  // namespace

TEST_CASE("dag: the type form holds its stages and gives its graph as data") {
  skip model;
  CHECK(model.size() == 4);
  int visited = 0;
  model.for_each_stage([&](int i, cell&) { visited += 1 << i; });
  CHECK(visited == 15);
  const pt::stage_dag g = skip::topology();
  CHECK(g.edges.size() == 4);
  CHECK(pt::predecessors(g, 2) == std::vector<int>{1, 0});  // edge order: 1 → 2 comes before 0 → 2
  CHECK(pt::successors(g, 0) == std::vector<int>{1, 2});
  CHECK(towers::topology().sources == std::vector<int>{0, 2});
  CHECK(towers::topology().losses == std::vector<int>{4});
}

TEST_CASE("dag: the topological order takes the lowest ready stage first") {
  // 3 → 1 → 0 and 2 → 0: 2 and 3 are ready first
  CHECK(pt::topological_order({4, {{3, 1}, {1, 0}, {2, 0}}}) == std::vector<int>{2, 3, 1, 0});
  CHECK(pt::topological_order(pt::chain_dag(5)) == std::vector<int>{0, 1, 2, 3, 4});
  CHECK(pt::topological_order({3, {{0, 1}, {1, 0}}}).empty());  // a cycle has no order
  CHECK(pt::topological_order({1, {}}) == std::vector<int>{0});
}

TEST_CASE("dag: each rule names the stage and the edge at fault") {
  struct expect {
    pt::verdict got;
    int stage, edge;
    const char* detail;
  };
  const expect cases[] = {
      {check(0, {}), -1, -1, "a stage graph needs at least one stage"},
      {check(3, {{0, 1}, {1, 5}}), 5, 1, "an edge goes to a stage that does not exist"},
      {check(3, {{-1, 1}}), -1, 0, "an edge comes from a stage that does not exist"},
      {check(3, {{0, 1}, {1, 1}}), 1, 1, "an edge goes from a stage to itself"},
      {check(3, {{0, 1}, {1, 2}, {0, 1}}), 0, 2, "an edge appears twice"},
      {check(3, {{0, 1}, {1, 2}}, {7}), 7, -1, "a declared source is not a stage"},
      {check(3, {{0, 1}, {1, 2}}, {1}), 1, -1, "a source stage has an incoming edge"},
      {check(3, {{0, 1}, {1, 2}}, {}, {3}), 3, -1, "a declared loss is not a stage"},
      {check(3, {{0, 1}, {1, 2}}, {}, {0}), 0, -1,
       "a loss stage has an outgoing edge that is not detached (a gradient would come back to it)"},
      {check(4, {{0, 1}, {1, 2}, {2, 3}, {3, 1}}), 1, -1, "the stage graph has a cycle through this stage"},
      {check(4, {{0, 1}, {2, 3}, {1, 3}}, {0}), 2, -1,
       "no edge comes into this stage and it is no source: no source reaches it"},
      {check(4, {{0, 1}, {1, 2}, {1, 3}}, {}, {3}), 2, -1,
       "no edge leaves this stage and it is no loss: it reaches no loss"},
      {check(3, {{0, 1, true}, {1, 2}}, {}, {2}), 0, -1,
       "every edge out of this stage is detached, so no gradient comes back to it, and it is no loss: declare it one "
       "(it computes its own) or attach an edge"},
  };
  for (const expect& c : cases) {
    CAPTURE(c.detail);
    CHECK(c.got.code == pt::errc::invalid_graph);
    CHECK(std::string(c.got.detail) == c.detail);
    CHECK(c.got.stage == c.stage);
    CHECK(c.got.index == c.edge);
  }
  // the stage named for a cycle is on it, also when stages outside it come first
  const pt::verdict v = check(5, {{0, 1}, {1, 2}, {3, 4}, {4, 3}});
  CHECK((v.stage == 3 || v.stage == 4));
  // in one sentence: the stage, the edge, the rule
  CHECK(pt::describe(check(3, {{0, 1}, {1, 5}})) ==
        "invalid stage graph at stage 5, edge 1: an edge goes to a stage that does not exist");
  CHECK(pt::describe(check(0, {})) == "invalid stage graph: a stage graph needs at least one stage");
  CHECK(check(2, {{0, 1}}, {0}, {1}).ok());
  CHECK(check(1, {}, {0}, {0}).ok());  // one stage is its own source and loss
}

TEST_CASE("dag: rule 2 is taken in edge order, whichever fault comes first") {
  // a repeat before an edge out of range is the repeat, and the other way round
  const pt::verdict repeat_first = check(3, {{0, 1}, {1, 2}, {0, 1}, {1, 7}});
  CHECK(std::string(repeat_first.detail) == "an edge appears twice");
  CHECK(repeat_first.index == 2);
  const pt::verdict range_first = check(3, {{0, 1}, {1, 7}, {0, 1}});
  CHECK(std::string(range_first.detail) == "an edge goes to a stage that does not exist");
  CHECK(range_first.index == 1);
  const pt::verdict self_first = check(3, {{0, 1}, {2, 2}, {0, 1}});
  CHECK(std::string(self_first.detail) == "an edge goes from a stage to itself");
  // of two repeated edges, the one that repeats first (not the one written first)
  const pt::verdict second = check(4, {{0, 1}, {1, 2}, {1, 2}, {0, 1}, {2, 3}});
  CHECK(second.index == 2);
  CHECK(second.stage == 1);
  const pt::verdict thrice = check(3, {{0, 1}, {0, 1}, {0, 1}});
  CHECK(thrice.index == 1);
}

TEST_CASE("dag: a dense graph of hundreds of thousands of edges is checked in n log n") {
  // every pair i < j of 700 stages: 244650 edges (pairwise comparison took minutes); one repeated at the end
  pt::stage_dag g;
  g.stages = 700;
  for (int i = 0; i < g.stages; ++i)
    for (int j = i + 1; j < g.stages; ++j) g.edges.push_back({i, j});
  CHECK(pt::check_dag(g).ok());
  CHECK(pt::topological_order(g).size() == 700u);
  const std::vector<int> depth = pt::detail::depth_to_loss(g, pt::topological_order(g));
  CHECK(depth[0] == 699);
  CHECK(depth[699] == 0);
  g.edges.push_back({3, 500});
  const pt::verdict v = pt::check_dag(g);
  CHECK(std::string(v.detail) == "an edge appears twice");
  CHECK(v.index == static_cast<int>(g.edges.size()) - 1);
  CHECK(v.stage == 3);
  // a long cycle behind a long chain: the stage named is on the cycle (the walk back is linear)
  pt::stage_dag c;
  c.stages = 200000;
  for (int s = 0; s + 1 < c.stages; ++s) c.edges.push_back({s, s + 1});
  c.edges.push_back({c.stages - 1, 100000});
  const pt::verdict cyc = pt::check_dag(c);
  CHECK(std::string(cyc.detail) == "the stage graph has a cycle through this stage");
  CHECK(cyc.stage >= 100000);
}

}  // namespace test_dag
}  // namespace
