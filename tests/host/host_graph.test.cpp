// The host executor over a stage graph given as edges (docs/10): fan-ins read every input in
// edge order, fan-outs' gradients are summed in edge order, several sources share one batch, and
// a model whose graph is not the plan's is refused by name.
#include <pipetype/host.hpp>

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "fan_out_stages.hpp"
#include "graph_model.hpp"
#include "mlp.hpp"

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_host_graph {

namespace pt = pipetype;
namespace ph = pipetype::host;
namespace gm = graph_model;

namespace {

/// `schedule` over M's graph of 4 stages: one per rank over 4 ranks, or two per rank over 2.
template <class M>
pt::runtime_plan plan_for(const char* schedule, int m) {
  pt::schedule_params params;
  params.edges = M::topology().edges;
  const int v = pt::default_chunks(*pt::find_schedule(schedule));
  return pt::build_plan(pt::make_schedule(schedule, 4 / v, m, v, params));
}

/// Steps `steps` times under `schedule` and against the reference each step: true when every
/// step's gradients and losses are bitwise the reference's.
template <class M>
bool trains_like_reference(const char* schedule, int m, int steps) {
  const pt::runtime_plan plan = plan_for<M>(schedule, m);
  REQUIRE_MESSAGE(plan.ok(), pt::describe(plan.result));
  M model = gm::make<M>(3), ref = gm::make<M>(3);
  ph::executor ex{plan, model};
  int sources = 0;
  for (int s = 0; s < 4; ++s) sources += pt::predecessors(M::topology(), s).empty() ? 1 : 0;
  bool all = true;
  for (int step = 0; step < steps; ++step) {
    const gm::batch b = gm::make_batch(sources, m, static_cast<std::uint64_t>(step));
    std::vector<double> losses, ref_losses;
    gm::attach(model, b, losses, m);
    ex.step(b.inputs);
    gm::reference_step(ref, b, ref_losses, m);
    bool same = false;
    gm::max_grad_diff(model, ref, &same);
    all = all && same && losses == ref_losses;
    for (gm::node* n : gm::nodes_of(model)) n->sgd(0.1f);
    for (gm::node* n : gm::nodes_of(ref)) n->sgd(0.1f);
  }
  return all;
}

}  // namespace

TEST_CASE("host graph: a skip connection and two towers train bitwise like the unpipelined run") {
  for (const char* s : {"gpipe", "1f1b", "zb-h1", "zb-h2", "zb-auto", "interleaved-1f1b", "looped-bfs", "zb-v"})
    for (int m : {1, 3, 8}) {
      CAPTURE(std::string(s));
      CAPTURE(m);
      CHECK(trains_like_reference<gm::skip>(s, m, 3));
      CHECK(trains_like_reference<gm::two_tower>(s, m, 3));
    }
  // a skip that is detached, the first of stage 2's inputs: stage 2 writes the gradient of its
  // second input only, stage 0 learns through stage 1 alone
  for (const char* s : {"gpipe", "1f1b", "zb-h1", "interleaved-1f1b", "zb-v"}) {
    CAPTURE(std::string(s));
    CHECK(trains_like_reference<gm::skip_cut>(s, 3, 3));
  }
  // DualPipeV's F&B pairs, over the graph (m ≥ 2 · ranks)
  CHECK(trains_like_reference<gm::skip>("dualpipe-v", 4, 3));
  CHECK(trains_like_reference<gm::two_tower>("dualpipe-v", 8, 3));
}

TEST_CASE("host graph: two sources read one batch of both their inputs side by side") {
  const pt::runtime_plan plan = plan_for<gm::two_tower>("1f1b", 2);
  gm::two_tower model = gm::make<gm::two_tower>(1);
  ph::executor ex{plan, model};
  CHECK(ex.program().sources == 2);
  CHECK(ex.program().batch_bytes == 2 * gm::act * sizeof(float));
  std::vector<float> half(2 * gm::act);  // one source's worth
  CHECK_THROWS_WITH_AS(ex.step(half), doctest::Contains("(its sources' inputs side by side)"), pt::shape_error);
}

TEST_CASE("host graph: a model whose stage graph is not the plan's is refused by name") {
  gm::skip skip = gm::make<gm::skip>(1);
  CHECK_THROWS_WITH_AS((ph::executor{plan_for<gm::two_tower>("gpipe", 2), skip}),
                       "pipetype::host: the plan runs the stage graph 0>2,1>2,2>3 but the model's is 0>1,1>2,2>3,0>2 "
                       "(the same edges, in the same order)",
                       pt::shape_error);
  // a chain's plan for a dag, and the dag's edges in another order
  CHECK_THROWS_WITH_AS((ph::executor{pt::build_plan(pt::make_gpipe(4, 2)), skip}),
                       doctest::Contains("the plan runs a chain but the model's is 0>1"), pt::shape_error);
  const pt::runtime_plan reordered =
      pt::build_plan(pt::make_gpipe(4, 2, pt::stage_dag{4, {{0, 2}, {0, 1}, {1, 2}, {2, 3}}}));
  REQUIRE(reordered.ok());
  CHECK_THROWS_AS((ph::executor{reordered, skip}), pt::shape_error);
}

TEST_CASE("host graph: a uniform_chain (topology() a member, its size known at run time) is checked too") {
  // a file asking for a skip connection over a chain model: refused, not run as a chain
  const pt::runtime_plan skip_plan = pt::build_plan(pt::make_gpipe(3, 1, pt::stage_dag{3, {{0, 1}, {1, 2}, {0, 2}}}));
  REQUIRE(skip_plan.ok());
  auto model = mlp::make_model(3, 3);
  CHECK_THROWS_WITH_AS((ph::executor{skip_plan, model}),
                       "pipetype::host: the plan runs the stage graph 0>1,1>2,0>2 but the model's is a chain (the same "
                       "edges, in the same order)",
                       pt::shape_error);
  // two towers into a head: a fan-in the chain's stages cannot take
  const pt::runtime_plan towers = pt::build_plan(pt::parse_schedule("edges 0>2, 1>2\n0F0,0B0\n1F0,1B0\n2F0,2B0"));
  REQUIRE(towers.ok());
  CHECK_THROWS_AS((ph::executor{towers, model}), pt::shape_error);
  // the chain it is: runs
  CHECK_NOTHROW((ph::executor{pt::build_plan(pt::make_gpipe(3, 1)), model}));
}

TEST_CASE("host graph: a fan-out's gradients are summed in edge order, by the stage's add_grad_output if it has one") {
  static_assert(pt::adds_grad_output_on_stream<fan_out::spread<true>>);
  static_assert(!pt::adds_grad_output_on_stream<fan_out::spread<false>>);
  for (const char* s : {"gpipe", "1f1b"})
    for (int m : {1, 4}) {
      CAPTURE(std::string(s));
      CAPTURE(m);
      const pt::runtime_plan plan = fan_out::plan(s, m);
      REQUIRE(plan.ok());
      const std::vector<float> batch(fan_out::n * static_cast<std::size_t>(m), 1.0f);
      fan_out::model<true> own;
      ph::executor{plan, own}.step(batch);
      CHECK(fan_out::sums_in_edge_order(own.stage<0>(), m));
      for (const fan_out::add_call& c : own.stage<0>().calls) CHECK(c.stream == nullptr);  // host threads
      fan_out::model<false> plain;                                                         // the same sums by +=
      ph::executor{plan, plain}.step(batch);
      CHECK(fan_out::sums_in_edge_order(plain.stage<0>(), m));
    }
}

}  // namespace test_host_graph
}  // namespace
