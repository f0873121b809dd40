// pipetype/schedules/v_min.hpp — V-Min: the V placement at a third of 1F1B's activation memory.
//
// Source: Qi, Wan, Huang, Lin, "Pipeline Parallelism with Controllable Memory", NeurIPS 2024
// (arXiv 2405.15362), V-Min; built as the authors' greedy builder does (zbv_greedy.py, "min").
// Placement: V shape, rank r holds stage r (chunk 0) and stage 2p − 1 − r (chunk 1). S = 2p.
// Rule: a building block repeated every 6 slots (a slot = one F, I or W of one chunk): rank r
//   runs F(chunk 0) at slot r, F(1) at 2p − 1 − r, I(1) at 2p + x + r, I(0) at 4p + x − 1 − r
//   (x = 2 if p % 3 == 0, else 0), each free slot a pending W; warm-up and cool-down squeezed
//   within the block's memory (v_controllable.hpp, steps 1-3).
// Constraints: none (m ≥ 1); the formulas below hold from m ≥ 2p. Split stages.
// Formulas (uniform per-chunk costs F = I = W; no communication latency; m ≥ 2p):
//   bubble (rank span − per-rank work 6mF)   (4p − 5)F, or (4p − 7)F when p % 3 == 0, whatever
//                                             m: the block's ⅔ of 1F1B's 6(p − 1)F on the same
//                                             layers, less 1F or 3F won back at the two ends
//   peak activations (max over ranks)        2⌊(p + 4)/3⌋ chunk activations = ⌊(p + 4)/3⌋ of a
//                                             rank's share, counting an activation until its W
//                                             (the paper's); pipetype's default (I frees half)
//                                             gives the same except at p = 2 (3 chunks, not 4)
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

/// V-Min's building block: rank r's first F(0), F(1), I(1), I(0) slots, p × 4.
constexpr std::vector<int> v_min_block(int p) {
  const int x = p % 3 == 0 ? 2 : 0;
  std::vector<int> off;
  for (int r = 0; r < p; ++r)
    for (int o : {r, 2 * p - 1 - r, 2 * p + x + r, 4 * p + x - 1 - r}) off.push_back(o);
  return off;
}

constexpr program make_v_min(int p, int m) { return detail::make_v_block_schedule(p, m, v_min_block(p), "v-min"); }

/// v_min for tools that pick a schedule by name (registry.hpp).
struct v_min_family {
  static constexpr std::string_view name = "v-min";
  static constexpr std::string_view summary = "V placement at about a third of 1F1B memory (Qi et al. 2024)";
  static constexpr int chunks = 2;
  static constexpr bool split = true;
  static constexpr const char* error(int, int, int) noexcept { return nullptr; }
  static constexpr program make(int p, int m, int, const schedule_params&) { return make_v_min(p, m); }
};

template <rank_count Ranks, microbatch_count Microbatches>
struct v_min {
  using family = v_min_family;
  static constexpr program generate() { return make_v_min(Ranks::value, Microbatches::value); }
  static constexpr program_extent extent() { return v_split_extent(Ranks::value, Microbatches::value); }
};

}  // namespace pipetype
