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
#include "pipetype/graph/placement.hpp"
#include "pipetype/schedules/family.hpp"

namespace pipetype {

constexpr program make_zb_h1(int p, int m) {
  program_builder b{p, p, m};
  b.placement(looped_placement(p, 1));
  for (int r = 0; r < p; ++r) {
    b.rank(r);
    const int warmup = (p - r - 1) < m ? (p - r - 1) : m;
    int f = 0, i = 0, w = 0, steps = 0;
    for (int k = 0; k < warmup; ++k) b.add(F(r, f++));
    while (i < m) {
      if (f < m) b.add(F(r, f++));
      b.add(I(r, i++));
      if (steps++ >= r) b.add(W(r, w++));
    }
    while (w < m) b.add(W(r, w++));
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
  static constexpr program make(int p, int m, int, const schedule_params&) { return make_zb_h1(p, m); }
};

template <rank_count Ranks, microbatch_count Microbatches>
struct zb_h1 {
  using family = zb_h1_family;
  static constexpr program generate() { return make_zb_h1(Ranks::value, Microbatches::value); }
  static constexpr program_extent extent() { return split_extent(Ranks::value, Microbatches::value); }
};

}  // namespace pipetype
