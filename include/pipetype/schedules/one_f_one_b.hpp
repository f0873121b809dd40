// pipetype/schedules/one_f_one_b.hpp — 1F1B (PipeDream-Flush).
//
// Source: Narayanan et al., "PipeDream" (SOSP'19) / "Memory-efficient pipeline-parallel DNN
// training" (ICML'21); ordering as Megatron-LM's forward_backward_pipelining_without_interleaving.
// Rule: rank r warms up with w = min(p − r − 1, m) forwards, then alternates one forward and one
// backward (oldest microbatch first) m − w times, then drains w backwards.
// Constraints: none (m ≥ 1; m ≥ p reaches the steady state). One stage per rank.
// Over a stage graph (graph/dag.hpp, p stages): rank r holds the r-th stage of the graph's
// topological order, and warms up with as many forwards as the longest path from its stage to a
// loss has edges (p − r − 1 in a chain), so that every path through the graph runs as 1F1B.
// Formulas (uniform costs, no communication latency):
//   makespan            (m + p − 1)(F + B)        — same bubble as GPipe, (p − 1)(F + B)
//   peak activations    min(p − r, m) on rank r   — p on rank 0 instead of GPipe's m
#pragma once

#include <string_view>

#include "pipetype/core/schedule.hpp"
#include "pipetype/core/sizes.hpp"
#include "pipetype/graph/dag.hpp"
#include "pipetype/graph/placement.hpp"
#include "pipetype/schedules/family.hpp"

namespace pipetype {

namespace detail {
/// One rank's 1F1B list for stage s: `warmup` forwards, then one forward and one backward
/// (oldest first), then the remaining backwards.
constexpr void one_f_one_b_rank(program_builder& b, int s, int warmup, int m) {
  int f = 0, bw = 0;
  for (int k = 0; k < warmup; ++k) b.add(F(s, f++));
  for (int k = 0; k < m - warmup; ++k) {
    b.add(F(s, f++));
    b.add(B(s, bw++));
  }
  while (bw < m) b.add(B(s, bw++));
}
}  // namespace detail

constexpr program make_one_f_one_b(int p, int m) {
  program_builder b{p, p, m};
  b.placement(looped_placement(p, 1));
  for (int r = 0; r < p; ++r) {
    b.rank(r);
    detail::one_f_one_b_rank(b, r, (p - r - 1) < m ? (p - r - 1) : m, m);
  }
  return std::move(b).build("1f1b");
}

/// 1F1B over a stage graph of p stages (see the header comment).
constexpr program make_one_f_one_b(int p, int m, const stage_dag& g) {
  const std::vector<int> order = detail::graph_placement(g, p);
  const std::vector<int> depth = detail::depth_to_loss(g, order);
  program_builder b{p, p, m};
  b.graph(g.edges);
  for (int r = 0; r < p; ++r) {
    const int s = order[static_cast<std::size_t>(r)];
    b.place(s, r).rank(r);
    detail::one_f_one_b_rank(b, s, depth[static_cast<std::size_t>(s)] < m ? depth[static_cast<std::size_t>(s)] : m, m);
  }
  return std::move(b).build("1f1b");
}

/// one_f_one_b for tools that pick a schedule by name (registry.hpp).
struct one_f_one_b_family {
  static constexpr std::string_view name = "1f1b";
  static constexpr std::string_view summary = "one forward, one backward in steady state (PipeDream-Flush)";
  static constexpr int chunks = 1;
  static constexpr bool split = false;
  static constexpr const char* error(int, int, int) noexcept { return nullptr; }
  static constexpr bool graphs = true;
  static constexpr program make(int p, int m, int, const schedule_params& params) {
    return params.edges.empty() ? make_one_f_one_b(p, m) : make_one_f_one_b(p, m, stage_dag{p, params.edges});
  }
};

template <rank_count Ranks, microbatch_count Microbatches>
struct one_f_one_b {
  using family = one_f_one_b_family;
  static constexpr program generate() { return make_one_f_one_b(Ranks::value, Microbatches::value); }
  static constexpr program_extent extent() { return looped_extent(Ranks::value, Microbatches::value, 1); }
};

}  // namespace pipetype
