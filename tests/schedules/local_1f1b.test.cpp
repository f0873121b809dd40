#include "sweep.hpp"

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_local_1f1b {

namespace pt = pipetype;

constexpr auto plan = pt::make_plan<pt::local_one_f_one_b<pt::ranks<4>, pt::microbatches<8>>>();
static_assert(plan.ok() && plan.ranks == 4 && plan.stages == 4 && plan.microbatches == 8);
static_assert(plan.peak_activations(0) == 1 && plan.peak_activations(3) == 1);

TEST_CASE("local_1f1b: makespan (p-1)F + m(F+B), bubble the fill only, peak 1 on every rank, p in 1..8, m in 1..24") {
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 24; ++m) {
      const pt::program prog = pt::make_local_one_f_one_b(p, m);
      CAPTURE(p);
      CAPTURE(m);
      REQUIRE(pt::verify(prog.view()).ok());
      for (const pt::stage_edge& e : prog.edges) CHECK(e.detached);
      for (const auto& [f, b] : {std::pair{1.0, 2.0}, std::pair{2.0, 3.0}}) {
        const pt::timeline t = pt::simulate(prog.view(), pt::costs{.f = f, .b = b});
        const double makespan = (p - 1) * f + m * (f + b);
        CHECK(t.makespan() == makespan);
        CHECK(t.bubble_fraction() == doctest::Approx((p - 1) * f / makespan));
        // 1F1B over the same costs with its gradients travelling back: (p - 1)(F + B) longer fill and drain
        CHECK(pt::simulate(pt::make_one_f_one_b(p, m).view(), pt::costs{.f = f, .b = b}).makespan() ==
              (p - 1) * (f + b) + m * (f + b));
      }
      // a latency c per hop adds (p - 1)c: only the forwards cross
      CHECK(pt::simulate(prog.view(), pt::costs{.f = 1, .b = 2, .comm = 0.5}).makespan() == (p - 1) * 1.5 + m * 3.0);
      for (const int pk : sweep::peaks(prog)) CHECK(pk == 1);
    }
}

TEST_CASE("local_1f1b: F then B of each microbatch, no gradient sent, and 1F1B over its graph is the same program") {
  const pt::program prog = pt::make_local_one_f_one_b(3, 4);
  for (int r = 0; r < 3; ++r) {
    const auto acts = prog.view().rank_actions(r);
    REQUIRE(acts.size() == 8);
    for (int j = 0; j < 4; ++j) {
      CHECK(acts[static_cast<std::size_t>(2 * j)] == pt::F(r, j));
      CHECK(acts[static_cast<std::size_t>(2 * j + 1)] == pt::B(r, j));
    }
  }
  const pt::runtime_plan plan3 = pt::build_plan(prog);
  REQUIRE(plan3.ok());
  int activations = 0, gradients = 0;
  for (const pt::lowered_op& o : plan3.ops())
    if (o.code == pt::op_code::send) (o.what == pt::kind::F ? activations : gradients) += 1;
  CHECK(activations == 2 * 4);
  CHECK(gradients == 0);
  // 1F1B warms up by the gradient path to a loss, which a detached edge cuts: no warm-up at all
  pt::schedule_params params;
  params.edges = pt::local_chain_dag(3).edges;
  const pt::program by_1f1b = pt::make_schedule("1f1b", 3, 4, 1, params);
  CHECK(by_1f1b.actions == prog.actions);
  CHECK(pt::make_schedule("local-1f1b", 3, 4).actions == prog.actions);
  // each stage is a loss: the sinks of the binding
  for (int s = 0; s < 3; ++s) CHECK(prog.view().loss(s));
  CHECK(!pt::make_one_f_one_b(3, 4).view().loss(0));
}

TEST_CASE("local_1f1b: over a local graph of towers, and refused over an edge that carries a gradient") {
  pt::schedule_params params;
  params.edges = {{3, 1, true}, {2, 0, true}, {1, 4, true}, {0, 4, true}};
  const pt::program towers = pt::make_schedule("local-1f1b", 5, 6, 1, params);
  REQUIRE(pt::verify(towers.view()).ok());
  CHECK(towers.edges == params.edges);
  // the towers' heads start at once; the head waits only for its inputs' forwards
  CHECK(pt::simulate(towers.view(), pt::costs{.f = 1, .b = 2}).makespan() == 2 * 1.0 + 6 * 3.0);
  params.edges[2].detached = false;
  CHECK_THROWS_WITH_AS(pt::make_schedule("local-1f1b", 5, 6, 1, params),
                       "local-1f1b runs each stage's backward right after its forward, so every edge must be detached "
                       "(A~B): the edge 1>4 would carry a gradient back to a stage whose backward has already run",
                       std::invalid_argument);
  // and the PyTorch writer says why it cannot write it
  CHECK_THROWS_WITH_AS(pt::to_csv(pt::make_local_one_f_one_b(2, 2).view()), doctest::Contains("detached edges"),
                       std::invalid_argument);
  // the text form keeps them: 0~1
  const std::string text = pt::to_text(pt::make_local_one_f_one_b(2, 2).view());
  CHECK(text.find("edges 0~1") != std::string::npos);
  const pt::program back = pt::parse_schedule(text);
  CHECK(back.edges == pt::make_local_one_f_one_b(2, 2).edges);
}

}  // namespace test_local_1f1b
}  // namespace
