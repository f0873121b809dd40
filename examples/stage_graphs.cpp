// stage_graphs — stage graphs beyond a chain, and uneven layouts (docs/10_stage_graphs.md).
//
//   ./stage_graphs
//
// 1. A model with a skip connection as a type: its edges are checked when it compiles (a cycle,
//    an edge to a missing stage or a producer that gives what its consumer does not take would
//    not compile), and its graph is data to compute with.
// 2. A schedule written over that graph, verified over every edge and simulated: stage 0's
//    backward waits for the gradients of both stages that read it.
// 3. An uneven split in Megatron's layout language, its per-stage costs and layer-weighted peaks.
#include <pipetype/pipetype.hpp>

#include "cli.hpp"

#include <cstdio>
#include <iostream>

namespace pt = pipetype;

namespace {

struct block {  // 4 floats in, 4 out (the stage bodies do not matter here)
  using input = pt::tensor<float, 4>;
  using output = pt::tensor<float, 4>;
  void forward(const pt::forward_ctx<block>&) {}
  void backward(const pt::backward_ctx<block>&) {}
};

// 0 → 1 → 2 → 3, and a skip connection 0 → 2
using skip_net = pt::dag<pt::nodes<block, block, block, block>,
                         pt::edges<pt::edge<0, 1>, pt::edge<1, 2>, pt::edge<2, 3>, pt::edge<0, 2>>>;
static_assert(pt::topological_order(skip_net::topology()) == std::vector<int>{0, 1, 2, 3});

// a layout checked at compile time: 5 stages, the loss on the last
using five = pt::layout<"E|t*3|t*4|t*4|t*3,L">;
static_assert(five::stages == 5 && five::stage(4).loss == 1);

}  // namespace

int main(int argc, char** argv) {
  constexpr examples::cli cli{"stage_graphs",
                              "usage: stage_graphs\n  no options: a skip connection as a type, a schedule over its "
                              "graph, and an uneven layout\n  (docs/10_stage_graphs.md)\n"};
  cli.no_options(argc, argv);
  // 1. the graph as data
  const pt::stage_dag g = skip_net::topology();
  std::printf("skip_net: %d stages, edges", g.stages);
  for (const pt::stage_edge& e : g.edges) std::printf(" %d>%d", e.from, e.to);
  std::printf("; stage 2 reads stages");
  for (int s : pt::predecessors(g, 2)) std::printf(" %d", s);
  std::printf("\n");

  // 2. GPipe by hand over the graph, stage s on rank s, 4 microbatches
  pt::program_builder b{4, 4, 4};
  b.graph(g.edges);
  for (int s = 0; s < 4; ++s) {
    b.rank(s);
    for (int j = 0; j < 4; ++j) b.add(pt::F(s, j));
    for (int j = 0; j < 4; ++j) b.add(pt::B(s, j));
  }
  const pt::program p = std::move(b).build("gpipe over skip_net");
  const pt::verdict v = pt::verify(p.view());
  if (!v.ok()) {
    std::cerr << pt::explain(v) << "\n";
    return 1;
  }
  const pt::timeline t = pt::simulate(p.view(), pt::costs{.f = 1, .b = 2, .comm = 0.25});
  std::cout << pt::grid(p.view(), t);
  std::printf("verified over every edge; makespan %g, bubble %.1f%%\n", t.makespan(), 100 * t.bubble_fraction());
  // lowered: one transfer per crossing edge, stage 2's forward reading two slots in edge order
  const pt::runtime_plan lowered = pt::build_plan(p);
  if (!lowered.ok()) {
    std::cerr << pt::explain(lowered.result) << "\n";
    return 1;
  }
  std::printf("lowered: %zu ops on %zu communicators, proved deadlock-free\n", lowered.ops().size(),
              lowered.comms().size());
  for (const pt::lowered_op& o : lowered.rank_ops(2))
    if (o.code == pt::op_code::compute) {
      std::printf("rank 2's first op: %s\n\n", pt::to_text(o, lowered.lowered().slot_lists).c_str());
      break;
    }

  // 3. an uneven split: 1F1B over 5 ranks, one stage each, costs per decoder layer
  const pt::layer_layout layout = five::value();
  const pt::runtime_plan plan = pt::build_plan(pt::make_one_f_one_b(5, 8));
  const pt::timeline u = pt::simulate(plan.compute(), pt::layout_costs(layout, pt::costs{.f = 1, .b = 2}));
  const std::vector<double> peak = pt::layout_peak_activations(plan.compute(), layout);
  std::printf("layout E|t*3|t*4|t*4|t*3,L under 1F1B, p=5 m=8: makespan %g, bubble %.1f%%\n", u.makespan(),
              100 * u.bubble_fraction());
  for (int r = 0; r < 5; ++r)
    std::printf("  rank %d: weight %g (in decoder layers), peak %g layer-activations\n", r,
                pt::layer_weights{}.of(layout.stages[static_cast<std::size_t>(r)]), peak[static_cast<std::size_t>(r)]);
  return 0;
}
