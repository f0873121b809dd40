// pipetype/schedules/gpipe.hpp — GPipe (fill, then drain).
//
// Source: Huang et al., "GPipe", NeurIPS 2019; ordering as PyTorch's ScheduleGPipe.
// Rule: rank r runs F of its stage for microbatches 0..m−1, then B for 0..m−1.
// Constraints: none (m ≥ 1); one stage per rank (S = p).
// Over a stage graph (graph/dag.hpp, p stages): rank r holds the r-th stage of the graph's
// topological order, and runs the same rule; the program carries the graph's edges.
// Formulas (uniform costs, no communication latency):
//   makespan            (m + p − 1)(F + B)        bubble time (p − 1)(F + B)
//   bubble fraction     (p − 1) / (m + p − 1)     (idle / (ranks × makespan))
//   peak activations    m on every rank            (all microbatches live until the drain)
#pragma once

#include <string_view>

#include "pipetype/core/schedule.hpp"
#include "pipetype/core/sizes.hpp"
#include "pipetype/graph/dag.hpp"
#include "pipetype/graph/placement.hpp"
#include "pipetype/schedules/family.hpp"

namespace pipetype {

constexpr program make_gpipe(int p, int m) {
  program_builder b{p, p, m};
  b.placement(looped_placement(p, 1));
  for (int r = 0; r < p; ++r) {
    b.rank(r);
    for (int mb = 0; mb < m; ++mb) b.add(F(r, mb));
    for (int mb = 0; mb < m; ++mb) b.add(B(r, mb));
  }
  return std::move(b).build("gpipe");
}

/// GPipe over a stage graph of p stages (see the header comment).
constexpr program make_gpipe(int p, int m, const stage_dag& g) {
  const std::vector<int> order = detail::graph_placement(g, p);
  program_builder b{p, p, m};
  b.graph(g.edges);
  for (int r = 0; r < p; ++r) {
    const int s = order[static_cast<std::size_t>(r)];
    b.place(s, r).rank(r);
    for (int mb = 0; mb < m; ++mb) b.add(F(s, mb));
    for (int mb = 0; mb < m; ++mb) b.add(B(s, mb));
  }
  return std::move(b).build("gpipe");
}

/// gpipe for tools that pick a schedule by name (registry.hpp).
struct gpipe_family {
  static constexpr std::string_view name = "gpipe";
  static constexpr std::string_view summary = "all forwards, then all backwards (Huang et al. 2019)";
  static constexpr int chunks = 1;
  static constexpr bool split = false;
  static constexpr const char* error(int, int, int) noexcept { return nullptr; }
  static constexpr bool graphs = true;
  static constexpr program make(int p, int m, int, const schedule_params& params) {
    return params.edges.empty() ? make_gpipe(p, m) : make_gpipe(p, m, stage_dag{p, params.edges});
  }
};

template <rank_count Ranks, microbatch_count Microbatches>
struct gpipe {
  using family = gpipe_family;
  static constexpr program generate() { return make_gpipe(Ranks::value, Microbatches::value); }
  static constexpr program_extent extent() { return looped_extent(Ranks::value, Microbatches::value, 1); }
};

}  // namespace pipetype
