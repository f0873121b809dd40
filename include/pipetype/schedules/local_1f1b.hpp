// pipetype/schedules/local_1f1b.hpp — pipelines with local learning: each stage its own loss.
//
// Source: the local-learning line of pipeline training (PPLL and the decoupled / greedy local
// learning papers before it): the network is cut into blocks, each block trained on a loss of its
// own (a small auxiliary head), and a block's input is detached, so no gradient crosses a block
// boundary. Activations still travel forward.
// Rule: the stage graph's edges are all detached (graph/dag.hpp: `A~B` in the text forms), so a
// stage's backward needs only its own forward; rank r holds stage r (the r-th of the graph's
// topological order) and runs F then B of each microbatch, oldest first: F0 B0 F1 B1 ... — 1F1B
// with no warm-up, which is what 1F1B itself becomes over such a graph. The lowering sends no
// gradient, and every stage is a loss (it writes ctx.loss and reads targets).
// Constraints: none (m ≥ 1). One stage per rank. Over a stage graph (--edges), every edge must be
// detached: an attached one would carry a gradient back to a stage that has already run its
// backward.
// Formulas (uniform costs F and B per stage, no communication latency; with a latency c per hop,
// add (p − 1)c to the makespan): a rank's microbatch j starts at r·F + j(F + B), so
//   makespan            (p − 1)F + m(F + B)         — 1F1B's is (p − 1)(F + B) + m(F + B)
//   bubble              (p − 1)F per rank, the forward fill only: (p − 1)F / ((p − 1)F + m(F + B))
//   peak activations    1 on every rank             — 1F1B's is min(p − r, m) on rank r
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include "pipetype/core/schedule.hpp"
#include "pipetype/graph/dag.hpp"
#include "pipetype/schedules/family.hpp"
#include "pipetype/schedules/one_f_one_b.hpp"

namespace pipetype {

namespace detail {
/// Each rank's F then B of every microbatch, over graph g (its edges all detached).
constexpr program local_one_f_one_b_over(int p, int m, const stage_dag& g) {
  const std::vector<int> order = graph_placement(g, p);
  program_builder b{p, p, m};
  b.graph(g.edges);
  for (int r = 0; r < p; ++r) {
    const int s = order[static_cast<std::size_t>(r)];
    b.place(s, r).rank(r);
    one_f_one_b_rank(b, s, 0, m);
  }
  return std::move(b).build("local-1f1b");
}
}  // namespace detail

/// local-1f1b over the local chain of p stages.
constexpr program make_local_one_f_one_b(int p, int m) {
  return detail::local_one_f_one_b_over(p, m, local_chain_dag(p));
}

/// local-1f1b over a stage graph of p stages whose edges are all detached (std::invalid_argument
/// naming the first edge that is not).
constexpr program make_local_one_f_one_b(int p, int m, const stage_dag& g) {
  for (const stage_edge& e : g.edges)
    if (!e.detached)
      throw std::invalid_argument(
          "local-1f1b runs each stage's backward right after its forward, so every edge "
          "must be detached (A~B): the edge " +
          std::to_string(e.from) + ">" + std::to_string(e.to) +
          " would carry a gradient back to a stage whose backward has already run");
  return detail::local_one_f_one_b_over(p, m, g);
}

/// local_one_f_one_b for tools that pick a schedule by name (registry.hpp).
struct local_one_f_one_b_family {
  static constexpr std::string_view name = "local-1f1b";
  static constexpr std::string_view summary =
      "local learning: every stage its own loss, F then B as each input arrives, no gradient sent";
  static constexpr int chunks = 1;
  static constexpr bool split = false;
  static constexpr const char* error(int, int, int) noexcept { return nullptr; }
  static constexpr bool graphs = true;
  static constexpr bool local = true;  // its model trains every stage on a loss of its own
  static constexpr program make(int p, int m, int, const schedule_params& params) {
    return params.edges.empty() ? make_local_one_f_one_b(p, m)
                                : make_local_one_f_one_b(p, m, stage_dag{p, params.edges});
  }
};

template <rank_count Ranks, microbatch_count Microbatches>
struct local_one_f_one_b {
  using family = local_one_f_one_b_family;
  static constexpr program generate() { return make_local_one_f_one_b(Ranks::value, Microbatches::value); }
};

}  // namespace pipetype
