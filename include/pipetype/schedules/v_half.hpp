// pipetype/schedules/v_half.hpp — V-Half: the V placement at half of 1F1B's activation memory.
//
// Source: Qi, Wan, Huang, Lin, "Pipeline Parallelism with Controllable Memory", NeurIPS 2024
// (arXiv 2405.15362), V-Half; built as the authors' greedy builder does (zbv_greedy.py, "half").
// Placement: V shape, rank r holds stage r (chunk 0) and stage 2p − 1 − r (chunk 1). S = 2p.
// Rule: a building block repeated every 6 slots (a slot = one F, I or W of one chunk): rank r
//   runs F(chunk 0) at slot 2r, F(1) at 3p − 2 − r, I(1) at 3p + x − 1 + 2r, I(0) at
//   6p + x − 2 − r (x = 3 if p is even, else 0), each free slot a pending W; warm-up and
//   cool-down squeezed within the block's memory (v_controllable.hpp, steps 1-3).
// Constraints: none (m ≥ 1); the formulas below hold from m ≥ 2p. Split stages.
// Formulas (uniform per-chunk costs F = I = W; no communication latency; m ≥ 2p):
//   bubble (rank span − per-rank work 6mF)   (3p − 4)F for odd p, (3p − 7)F for even p ≥ 4, 1F
//                                             at p = 2, whatever m: the block's ½ of 1F1B's
//                                             6(p − 1)F on the same layers, less 1F to 4F won
//                                             back at the two ends
//   peak activations (max over ranks)        2⌊(p + 2)/2⌋ chunk activations = ⌊(p + 2)/2⌋ of a
//                                             rank's share, counting an activation until its W
//                                             (the paper's) or with pipetype's default (I frees
//                                             half, W the rest)
// What differs: nothing in the order (the tests' figures are those the authors' script gives;
// its orders were compared op for op at p = 1..8, m = 1..4p + 2); the builder's steps are
// restated, not its code. Its "stage" is our rank. Like the authors', the order is built at unit
// costs: with F, I, W unequal it stays the same and only the timing changes.
// Over a stage graph (2p stages): over_graph (family.hpp), as zb_v.
#pragma once

#include <string_view>
#include <vector>

#include "pipetype/core/schedule.hpp"
#include "pipetype/core/sizes.hpp"
#include "pipetype/schedules/family.hpp"
#include "pipetype/schedules/v_controllable.hpp"
#include "pipetype/schedules/zb_v.hpp"

namespace pipetype {

/// V-Half's building block: rank r's first F(0), F(1), I(1), I(0) slots, p × 4.
constexpr std::vector<int> v_half_block(int p) {
  const int x = p % 2 == 0 ? 3 : 0;
  std::vector<int> off;
  for (int r = 0; r < p; ++r)
    for (int o : {2 * r, 3 * p - 2 - r, 3 * p + x - 1 + 2 * r, 6 * p + x - 2 - r}) off.push_back(o);
  return off;
}

constexpr program make_v_half(int p, int m) { return detail::make_v_block_schedule(p, m, v_half_block(p), "v-half"); }

/// v_half for tools that pick a schedule by name (registry.hpp).
struct v_half_family {
  static constexpr std::string_view name = "v-half";
  static constexpr std::string_view summary = "V placement at about half of 1F1B memory (Qi et al. 2024)";
  static constexpr int chunks = 2;
  static constexpr bool split = true;
  static constexpr const char* error(int, int, int) noexcept { return nullptr; }
  static constexpr program make(int p, int m, int, const schedule_params&) { return make_v_half(p, m); }
};

template <rank_count Ranks, microbatch_count Microbatches>
struct v_half {
  using family = v_half_family;
  static constexpr program generate() { return make_v_half(Ranks::value, Microbatches::value); }
  static constexpr program_extent extent() { return v_split_extent(Ranks::value, Microbatches::value); }
};

}  // namespace pipetype
