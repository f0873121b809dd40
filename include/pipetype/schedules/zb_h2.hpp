// pipetype/schedules/zb_h2.hpp — ZB-H2, zero bubble with about twice 1F1B's memory.
//
// Source: Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024 (§3.1, "ZB-H2": extra
// forwards in the warm-up fill the bubble before the first backward, and the W's at the tail are
// reordered so that each rank's work becomes one unbroken block — the paper's parallelogram).
// The paper gives the idea and a figure, not a rule; this rule is ours, checked by the simulator.
// Rule: rank r warms up with w = min(2(p − r) − 1, m) forwards — exactly the forwards that fit
// before its first I can arrive when F = I = W. Then for each I: the I; then the next forward if
// one remains, preceded by as many W's (oldest first) as keep the rank within 2p − 1
// activations; once the forwards are done, one W per I. The remaining W's close the list, so a
// rank ends with a run of W's as long as the I-chain that reaches it later (2r + 1 on rank r, at
// least).
// Constraints: none (m ≥ 1). One stage per rank, split stages.
// Formulas (uniform costs F = I = W; no communication latency):
//   rank span           m(F + I + W) on every rank — zero bubble — when m ≥ 2p − 1
//                       (consecutive steps may overlap: the paper's optimizer post-validation)
//   peak activations    min(2(p − r) − 1, m) on rank r in the warm-up; never above 2p − 1
//                       (the paper's (2p − 1)·M on the first rank)
// With unequal costs the rule still holds memory at 2p − 1; the bubble is then what the
// simulator says (zb_auto searches instead).
// Over a stage graph (p stages): over_graph (family.hpp) — rank r runs the graph's r-th stage in
// topological order with the chain's rank r's list (its warm-up, which a graph with shorter paths
// may not need).
#pragma once

#include <string_view>

#include "pipetype/core/schedule.hpp"
#include "pipetype/core/sizes.hpp"
#include "pipetype/graph/placement.hpp"
#include "pipetype/schedules/family.hpp"
#include "pipetype/schedules/zb_h1.hpp"

namespace pipetype {

constexpr program make_zb_h2(int p, int m) {
  program_builder b{p, p, m};
  b.placement(looped_placement(p, 1));
  const int cap = 2 * (2 * p - 1);  // half activations (I and W each release half of one)
  for (int r = 0; r < p; ++r) {
    b.rank(r);
    const int warmup = 2 * (p - r) - 1 < m ? 2 * (p - r) - 1 : m;
    int f = 0, i = 0, w = 0, live = 0;
    for (int k = 0; k < warmup; ++k, live += 2) b.add(F(r, f++));
    while (i < m) {
      b.add(I(r, i++));
      --live;
      if (f < m) {
        for (; live + 2 > cap && w < i; --live) b.add(W(r, w++));
        b.add(F(r, f++));
        live += 2;
      } else if (w < i) {
        b.add(W(r, w++));
        --live;
      }
    }
    while (w < m) b.add(W(r, w++));
  }
  return std::move(b).build("zb-h2");
}

/// zb_h2 for tools that pick a schedule by name (registry.hpp).
struct zb_h2_family {
  static constexpr std::string_view name = "zb-h2";
  static constexpr std::string_view summary =
      "zero bubble with 2p-1 activations: extra warm-up forwards (Qi et al. 2024)";
  static constexpr int chunks = 1;
  static constexpr bool split = true;
  static constexpr const char* error(int, int, int) noexcept { return nullptr; }
  static constexpr program make(int p, int m, int, const schedule_params&) { return make_zb_h2(p, m); }
};

template <rank_count Ranks, microbatch_count Microbatches>
struct zb_h2 {
  using family = zb_h2_family;
  static constexpr program generate() { return make_zb_h2(Ranks::value, Microbatches::value); }
  static constexpr program_extent extent() { return split_extent(Ranks::value, Microbatches::value); }
};

}  // namespace pipetype
