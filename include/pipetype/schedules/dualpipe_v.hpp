// pipetype/schedules/dualpipe_v.hpp — DualPipeV: DualPipe cut in half, on the V placement.
//
// Source: DeepSeek-AI, DeepSeek-V3 Technical Report (2024) §3.2.1 (DualPipe); the "cut-in-half"
// V variant by Sea AI Lab (blog, 2025) as in deepseek-ai/DualPipe's dualpipev.py and PyTorch's
// ScheduleDualPipeV. Figures: DualPipe README's table.
// Placement: V shape, rank r holds stage r (phase 0) and stage 2R − 1 − r (phase 1), R ranks.
// Overlapped pairs: the steady state runs a forward of one phase together with a full backward
// of the other, written (F&B) — `add_overlapped` in a program, `(0F7;7B3)` in text. What the
// executors do with a pair: the host executor runs both halves, one after the other, on the
// rank's compute thread; a CUDA executor issues the forward and the backward on two streams so
// that their kernels (and the forward's communication) overlap. The simulator charges a pair
// `costs::fb` (default F + B: no overlap benefit unless you say how much).
// Rule, rank r (I = input-gradient half of a split backward; W's run in the order their I's ran):
//   1. 2(R − r − 1) × F(0)                 2. (r + 1) × [F(0), F(1)]
//   3. (R − r − 1) × [I(1), W, F(1)]       4. (m − 2R + r + 1) × [(F(0)&B(1)), (F(1)&B(0))]
//                                             (the last rank runs its first F(0), B(1) apart)
//   5. (R − r − 1) × [B(1), (F(1)&B(0))]   6. (r + 1) × [B(1), B(0)], split into I from the middle
//                                             iteration on (the parity of r decides which of the
//                                             two comes first)
//   7. (R − r − 1) × [W, I(0)]             8. (r + 1) × W
// Constraints: m ≥ 2R (dualpipev.py's assertion). Stages must offer a split backward (steps 3, 6
// and 7 split) as well as running full backwards.
// Formulas (uniform per-chunk costs F = I = W, B = I + W, F&B = F + B; no communication latency):
//   bubble (rank span − per-rank work)  (R − 1)(F&B + B − 3W)   — the README's (PP/2 − 1)(F&B +
//                                       B − 3W) with PP = 2R stages. With unequal costs the
//                                       simulator's figure is exact and the README's an estimate.
//   peak activations                    2R + 1 chunk activations on every rank (README: PP + 1)
// Over a stage graph (2R stages): over_graph (family.hpp) — the V's k-th stage is the graph's
// k-th in topological order, with the chain's pairs and groups.
#pragma once

#include <string_view>

#include <stdexcept>
#include <vector>

#include "pipetype/core/schedule.hpp"
#include "pipetype/core/sizes.hpp"
#include "pipetype/graph/placement.hpp"
#include "pipetype/schedules/family.hpp"

namespace pipetype {

/// Why (ranks, m) is not a valid DualPipeV, or nullptr.
constexpr const char* dualpipe_v_error(int ranks, int m) noexcept {
  if (ranks < 1 || m < 1) return "dualpipe_v: ranks and microbatches must be positive";
  if (m < 2 * ranks) return "dualpipe_v: needs at least 2 x ranks microbatches (the V has 2 x ranks stages)";
  return nullptr;
}

namespace detail {

/// The eight steps of DualPipe's rule on one rank (dualpipe.py's step()), shared by DualPipe and
/// DualPipeV: `stage[ph]` and `first_mb[ph]` are the rank's stage and first microbatch of
/// phase 0 and 1, h its distance from the nearer end, H the ranks per half (R for the V), n the
/// microbatches per phase.
constexpr void dualpipe_rank(program_builder& b, const int (&stage)[2], const int (&first_mb)[2], int h, int H, int n) {
  std::vector<action> pending_w;  // W's of split backwards, in the order their I's ran
  std::size_t next_w = 0;
  int nf[2] = {0, 0}, nb[2] = {0, 0};
  auto fwd = [&](int ph) { return F(stage[ph], first_mb[ph] + nf[ph]++); };
  auto bwd = [&](int ph, bool split) {
    const int j = first_mb[ph] + nb[ph]++;
    if (!split) return B(stage[ph], j);
    pending_w.push_back(W(stage[ph], j));
    return I(stage[ph], j);
  };
  auto weight = [&] { b.add(pending_w[next_w++]); };
  const int rest = H - h - 1;
  for (int k = 0; k < 2 * rest; ++k) b.add(fwd(0));              // 1. nF0
  for (int k = 0; k < h + 1; ++k) b.add(fwd(0)), b.add(fwd(1));  // 2. nF0F1
  for (int k = 0; k < rest; ++k) {                               // 3. nB1W1F1, split
    b.add(bwd(1, true));
    weight();
    b.add(fwd(1));
  }
  for (int k = 0; k < n - 2 * H + h + 1; ++k) {  // 4. the main loop of overlapped pairs
    if (k == 0 && rest == 0) {                   //    the middle rank(s) start apart
      b.add(fwd(0));
      b.add(bwd(1, false));
    } else {
      const action f = fwd(0);
      b.add_overlapped(f, bwd(1, false));
    }
    const action f = fwd(1);
    b.add_overlapped(f, bwd(0, false));
  }
  for (int k = 0; k < rest; ++k) {  // 5. nB1F1B0
    b.add(bwd(1, false));
    const action f = fwd(1);
    b.add_overlapped(f, bwd(0, false));
  }
  bool split = false;  // 6. nB1B0, split from the middle iteration on
  for (int k = 0; k < h + 1; ++k) {
    if (k == (h + 1) / 2 && h % 2 == 1) split = true;
    b.add(bwd(1, split));
    if (k == (h + 1) / 2 && h % 2 == 0) split = true;
    b.add(bwd(0, split));
  }
  for (int k = 0; k < rest; ++k) {  // 7. nWB0, split
    weight();
    b.add(bwd(0, true));
  }
  while (next_w < pending_w.size()) weight();  // 8. nW
}

/// Actions of the rank rule on one rank: 2n F, 2n B or I, and a W for each split backward —
/// 2(H − h − 1) in steps 3 and 7, h + 1 in step 6 (whatever the parity of h).
constexpr int dualpipe_rank_actions(int h, int H, int n) { return 4 * n + 2 * (H - h - 1) + h + 1; }

}  // namespace detail

constexpr program make_dualpipe_v(int R, int m) {
  if (const char* e = dualpipe_v_error(R, m)) throw std::invalid_argument(e);
  program_builder b{R, 2 * R, m};
  b.placement(v_shape_placement(R));
  for (int r = 0; r < R; ++r) {
    const int stage[2] = {r, 2 * R - 1 - r};
    const int first_mb[2] = {0, 0};
    b.rank(r);
    detail::dualpipe_rank(b, stage, first_mb, r, R, m);
  }
  return std::move(b).build("dualpipe-v");
}

/// dualpipe_v for tools that pick a schedule by name (registry.hpp).
struct dualpipe_v_family {
  static constexpr std::string_view name = "dualpipe-v";
  static constexpr std::string_view summary = "DualPipe cut in half: V placement, overlapped F&B pairs (DeepSeek-V3)";
  static constexpr int chunks = 2;
  static constexpr bool split = true;
  static constexpr const char* error(int p, int m, int) noexcept { return dualpipe_v_error(p, m); }
  static constexpr program make(int p, int m, int, const schedule_params&) { return make_dualpipe_v(p, m); }
};

template <rank_count Ranks, microbatch_count Microbatches>
struct dualpipe_v {
  using family = dualpipe_v_family;
  static_assert(dualpipe_v_error(Ranks::value, Microbatches::value) == nullptr,
                "dualpipe_v: needs at least 2 x ranks microbatches (the V has 2 x ranks stages)");
  static constexpr program generate() { return make_dualpipe_v(Ranks::value, Microbatches::value); }
  static constexpr program_extent extent() {
    const int R = Ranks::value, m = Microbatches::value;
    int actions = 0;
    for (int r = 0; r < R; ++r) actions += detail::dualpipe_rank_actions(r, R, m);
    return {R, 2 * R, m, actions, 2 * R - 2, true};
  }
};

}  // namespace pipetype
