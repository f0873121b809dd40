// pipetype/schedules/zb_v.hpp — ZB-V: zero bubble on the V placement within 1F1B's memory.
//
// Source: Qi, Wan, Huang, Lin, "Pipeline Parallelism with Controllable Memory", NeurIPS 2024
// (arXiv 2405.15362) and the ZB paper's v2 §6; ordering as PyTorch's ScheduleZBVZeroBubble
// (the port of the authors' hand-crafted ZB-V).
// Placement: V shape, rank r holds stage r (chunk 0, on the way down) and stage 2p − 1 − r
// (chunk 1, on the way back up); rank 0 holds the first and the last (loss) stage. S = 2p.
// Rule, rank r, with n = max(2p − 1, m) "microbatches" (those ≥ m are skipped):
//   2(p − r) − 1 × F(chunk 0);   r × [F(chunk 1), F(chunk 0)];
//   (p − r) × [F(1), I(1), W(1)];
//   while chunk 1 has forwards left: [F(0) if any left], I(0), W(0), F(1), I(1), W(1);
//   r × [I(0), I(1)];   (p − r) × [I(0), W(0)];   the remaining W(1), then the remaining W(0).
// Constraints: none (m ≥ 1); m ≥ 2p − 1 for the steady state. Split stages.
// Formulas (uniform per-chunk costs F = I = W; no communication latency; m ≥ 2p − 1):
//   rank span           2m(F + I + W) on every rank — zero bubble (per-rank work)
//   peak activations    2p chunk activations on every rank = p activations of a full rank's
//                       model share: 1F1B's memory, with twice its point-to-point volume
// Over a stage graph (2p stages): over_graph (family.hpp) — the V's k-th stage is the graph's
// k-th in topological order (rank r holds the r-th and the (2p − 1 − r)-th).
#pragma once

#include <string_view>

#include "pipetype/core/schedule.hpp"
#include "pipetype/core/sizes.hpp"
#include "pipetype/graph/placement.hpp"
#include "pipetype/schedules/family.hpp"

namespace pipetype {

constexpr program make_zb_v(int p, int m) {
  program_builder b{p, 2 * p, m};
  b.placement(v_shape_placement(p));
  const int n = 2 * p - 1 > m ? 2 * p - 1 : m;
  for (int r = 0; r < p; ++r) {
    b.rank(r);
    const int stage[2] = {r, 2 * p - 1 - r};
    int nf[2] = {0, 0}, ni[2] = {0, 0}, nw[2] = {0, 0};
    auto put = [&](kind k, int c) {
      int& next = k == kind::F ? nf[c] : k == kind::I ? ni[c] : nw[c];
      const int j = next++;
      if (j < m) b.add(action{k, stage[c], j, false});
    };
    for (int k = 0; k < 2 * (p - r) - 1; ++k) put(kind::F, 0);
    for (int k = 0; k < r; ++k) put(kind::F, 1), put(kind::F, 0);
    for (int k = 0; k < p - r; ++k) put(kind::F, 1), put(kind::I, 1), put(kind::W, 1);
    while (nf[1] < n) {
      if (nf[0] < n) put(kind::F, 0);
      put(kind::I, 0), put(kind::W, 0), put(kind::F, 1), put(kind::I, 1), put(kind::W, 1);
    }
    for (int k = 0; k < r; ++k) put(kind::I, 0), put(kind::I, 1);
    for (int k = 0; k < p - r; ++k) put(kind::I, 0), put(kind::W, 0);
    while (nw[1] < n) put(kind::W, 1);
    while (nw[0] < n) put(kind::W, 0);
  }
  return std::move(b).build("zb-v");
}

/// The extent of a V-shape schedule with split backwards: 2p stages, F, I, W per stage and
/// microbatch; every edge but the turn p − 1 → p crosses ranks.
constexpr program_extent v_split_extent(int p, int m) { return {p, 2 * p, m, 6 * p * m, 2 * p - 2, true}; }

/// zb_v for tools that pick a schedule by name (registry.hpp).
struct zb_v_family {
  static constexpr std::string_view name = "zb-v";
  static constexpr std::string_view summary = "zero bubble on the V placement within 1F1B memory (Qi et al. 2024)";
  static constexpr int chunks = 2;
  static constexpr bool split = true;
  static constexpr const char* error(int, int, int) noexcept { return nullptr; }
  static constexpr program make(int p, int m, int, const schedule_params&) { return make_zb_v(p, m); }
};

template <rank_count Ranks, microbatch_count Microbatches>
struct zb_v {
  using family = zb_v_family;
  static constexpr program generate() { return make_zb_v(Ranks::value, Microbatches::value); }
  static constexpr program_extent extent() { return v_split_extent(Ranks::value, Microbatches::value); }
};

}  // namespace pipetype
