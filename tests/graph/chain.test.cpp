// graph/chain.hpp: every model says its stage graph (has_topology), so an executor can always
// compare it with the plan's; a type without topology() is no stage_graph.
#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include <vector>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_chain {

namespace pt = pipetype;

namespace {

struct node {
  using input = pt::tensor<float, 4>;
  using output = pt::tensor<float, 4>;
  void forward(const pt::forward_ctx<node>&) {}
  void backward(const pt::backward_ctx<node>&) {}
};

/// A model with everything an executor reads but its graph: it must not count as one.
struct no_graph {
  using first_stage = node;
  int size() const { return 1; }
  template <class F>
  void for_each_stage(F&&) {}
};
/// A model whose topology() is a member that gives no graph.
struct wrong_graph : no_graph {
  int topology() const { return 0; }
};

using three = pt::chain<node, node, node>;
using uniform = pt::uniform_chain<node>;
using skip = pt::dag<pt::nodes<node, node, node>, pt::edges<pt::edge<0, 1>, pt::edge<1, 2>, pt::edge<0, 2>>>;

// every model type the library has says its graph, static (chain, dag) or a member (uniform_chain)
static_assert(pt::has_topology<three> && pt::stage_graph<three>);
static_assert(pt::has_topology<uniform> && pt::stage_graph<uniform>);
static_assert(pt::has_topology<skip> && pt::stage_graph<skip>);
static_assert(pt::has_topology<const uniform>);
// and a type without one is no model
static_assert(!pt::has_topology<no_graph> && !pt::stage_graph<no_graph>);
static_assert(!pt::has_topology<wrong_graph> && !pt::stage_graph<wrong_graph>);

}  // namespace

TEST_CASE("chain: uniform_chain's topology is the chain of its run-time size") {
  const uniform u{std::vector<node>(5)};
  const pt::stage_dag g = u.topology();
  CHECK(g.stages == 5);
  CHECK(pt::is_chain(g));
  CHECK(pt::is_chain(three::topology()));
  CHECK(!pt::is_chain(skip::topology()));
}

}  // namespace test_chain
}  // namespace
