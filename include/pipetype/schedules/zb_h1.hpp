// pipetype/schedules/zb_h1.hpp — ZB-H1, the zero-bubble schedule within 1F1B's memory.
//
// Source: Qi, Wan, Huang, Lin, "Zero Bubble Pipeline Parallelism", ICLR 2024 (§3.1, "ZB-H1");
// ordering as PyTorch's ScheduleInterleavedZeroBubble with one stage per rank.
// Idea: split each backward into I (gradient for the stage input, on the critical path) and W
// (gradient for the weights, needed only by the optimizer). Rank r keeps 1F1B's warm-up, runs
// F and I in the steady state, and delays its W's by r steady steps so that the W's fill the
// bubble at the tail.
// Rule: rank r warms up with w = min(p − r − 1, m) forwards; then for each remaining forward
// F, I, and W (oldest first) once r steady steps have passed; the cooldown is I then W in the
// same way; the remaining W's close the list.
// Constraints: none (m ≥ 1; m ≥ p reaches the steady state). One stage per rank, split stages.
// Over a stage graph (make_zb_h1(p, m, g); graph/dag.hpp): rank r holds the r-th stage of the
// topological order, as 1F1B's graph form; a stage warms up with as many forwards as its longest
// path to a loss has edges (d), and delays its W's by D − d steady steps, D the longest such
// path in the graph — on a chain d = p − r − 1 and D − d = r, the rule above.
// Formulas (uniform costs F, I, W; no communication latency; m ≥ p):
//   makespan = rank span   m(F + I + W) + (p − 1)(F + I − W)
//                          (bubble (p − 1)(F + I − W): a third of 1F1B's when F = I = W)
//   peak activations       p − r/2 on rank r (m ≥ p): 1F1B's p on rank 0, half an activation
//                          more per rank further down, as each delayed W holds half of one
//                          (memory_model units: F holds one activation, I releases half, W the rest)
#pragma once

#include <string_view>

#include "pipetype/core/schedule.hpp"
#include "pipetype/core/sizes.hpp"
#include "pipetype/graph/dag.hpp"
#include "pipetype/graph/placement.hpp"
#include "pipetype/schedules/family.hpp"

namespace pipetype {

namespace detail {
/// Stage s's list: `warmup` forwards, then F, I and (after `delay` steady steps) W, then the W's left.
constexpr void zb_h1_rank(program_builder& b, int s, int warmup, int delay, int m) {
  int f = 0, i = 0, w = 0, steps = 0;
  for (int k = 0; k < warmup; ++k) b.add(F(s, f++));
  while (i < m) {
    if (f < m) b.add(F(s, f++));
    b.add(I(s, i++));
    if (steps++ >= delay) b.add(W(s, w++));
  }
  while (w < m) b.add(W(s, w++));
}
}  // namespace detail

constexpr program make_zb_h1(int p, int m) {
  program_builder b{p, p, m};
  b.placement(looped_placement(p, 1));
  for (int r = 0; r < p; ++r) {
    b.rank(r);
    detail::zb_h1_rank(b, r, (p - r - 1) < m ? (p - r - 1) : m, r, m);
  }
  return std::move(b).build("zb-h1");
}

/// ZB-H1 over a stage graph of p stages (see the header comment).
constexpr program make_zb_h1(int p, int m, const stage_dag& g) {
  const std::vector<int> order = detail::graph_placement(g, p);
  const std::vector<int> depth = detail::depth_to_loss(g, order);
  int deepest = 0;
  for (const int d : depth) deepest = d > deepest ? d : deepest;
  program_builder b{p, p, m};
  b.graph(g.edges);
  for (int r = 0; r < p; ++r) {
    const int s = order[static_cast<std::size_t>(r)];
    const int d = depth[static_cast<std::size_t>(s)];
    b.place(s, r).rank(r);
    detail::zb_h1_rank(b, s, d < m ? d : m, deepest - d, m);
  }
  return std::move(b).build("zb-h1");
}

/// The extent of a one-stage-per-rank schedule with split backwards (F, I, W per microbatch).
constexpr program_extent split_extent(int p, int m) { return {p, p, m, 3 * p * m, p > 1 ? p - 1 : 0, true}; }

/// zb_h1 for tools that pick a schedule by name (registry.hpp).
struct zb_h1_family {
  static constexpr std::string_view name = "zb-h1";
  static constexpr std::string_view summary =
      "zero bubble within 1F1B memory: W's delayed to fill the tail (Qi et al. 2024)";
  static constexpr int chunks = 1;
  static constexpr bool split = true;
  static constexpr const char* error(int, int, int) noexcept { return nullptr; }
  static constexpr bool graphs = true;
  static constexpr program make(int p, int m, int, const schedule_params& params) {
    return params.edges.empty() ? make_zb_h1(p, m) : make_zb_h1(p, m, stage_dag{p, params.edges});
  }
};

template <rank_count Ranks, microbatch_count Microbatches>
struct zb_h1 {
  using family = zb_h1_family;
  static constexpr program generate() { return make_zb_h1(Ranks::value, Microbatches::value); }
  static constexpr program_extent extent() { return split_extent(Ranks::value, Microbatches::value); }
};

}  // namespace pipetype
