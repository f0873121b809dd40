// pipetype/schedules/dualpipe.hpp — DualPipe: two pipelines in opposite directions, overlapped.
//
// Source: DeepSeek-AI, DeepSeek-V3 Technical Report (2024) §3.2.1; ordering as
// deepseek-ai/DualPipe's dualpipe.py (steps 1–8 below). Figures: DualPipe README's table.
// Placement: PP ranks (even) and a model of PP stages, held twice: direction 0 runs the model
// down the ranks (its stage i on rank i), direction 1 up (its stage i on rank PP − 1 − i). In a
// program that is two lanes of PP stages (program_builder::lanes(2)): stage i of lane 0 on
// rank i, stage PP + i of lane 1 on rank PP − 1 − i. Microbatches 0 .. m/2 − 1 enter at rank 0,
// m/2 .. m − 1 at rank PP − 1. Every rank holds two copies of parameters (2× parameters); the
// executors run both copies on the same stage object and sum the two directions' weight
// gradients in microbatch order (docs/05_zero_bubble.md).
// Rule, rank r with h = min(r, PP − 1 − r), H = PP/2, n = m/2; phase 0 is the direction that
// enters nearer to r (lane 0 on ranks < H, lane 1 above), phase 1 the other; each phase runs
// its microbatches in order, W's in the order their I's ran; (F&B) is an overlapped pair:
//   1. 2(H − h − 1) × F(0)                 2. (h + 1) × [F(0), F(1)]
//   3. (H − h − 1) × [I(1), W, F(1)]       4. (n − PP + h + 1) × [(F(0)&B(1)), (F(1)&B(0))]
//                                             (the two middle ranks run their first F(0), B(1) apart)
//   5. (H − h − 1) × [B(1), (F(1)&B(0))]   6. (h + 1) × [B(1), B(0)], split into I from the middle
//                                             iteration on (the parity of h decides which first)
//   7. (H − h − 1) × [W, I(0)]             8. (h + 1) × W
// Overlapped pairs: see dualpipe_v.hpp (host: run both halves; CUDA: two streams; simulator:
// costs::fb, default F + B).
// Constraints: PP even, m even, m ≥ 2·PP (dualpipe.py's assertions). Stages with split backwards.
// Formulas (uniform costs F = I = W, B = I + W, F&B = F + B; no communication latency):
//   bubble (rank span − per-rank work)  (PP/2 − 1)(F&B + B − 3W)   (README)
//   peak activations                    PP + 1 on every rank        (README)
// Over a stage graph of PP stages (make_dualpipe(PP, m, g), or schedule_params::edges): each
// direction runs its own copy of the graph, relabelled by over_graph (family.hpp) — the lane's
// i-th stage is the graph's i-th stage in topological order, so rank r runs that stage of
// direction 0 and the (PP − 1 − r)-th of direction 1, and the program carries both copies' edges.
// The peak above is the chain's: a fan-in holds one activation per input, so a graph's may be
// higher.
#pragma once

#include <string_view>

#include <stdexcept>
#include <vector>

#include "pipetype/core/schedule.hpp"
#include "pipetype/core/sizes.hpp"
#include "pipetype/schedules/dualpipe_v.hpp"
#include "pipetype/schedules/family.hpp"

namespace pipetype {

/// Why (PP, m) is not a valid DualPipe, or nullptr.
constexpr const char* dualpipe_error(int PP, int m) noexcept {
  if (PP < 2 || PP % 2 != 0) return "dualpipe: needs an even number of ranks, at least 2";
  if (m < 2 * PP || m % 2 != 0) return "dualpipe: needs an even number of microbatches, at least 2 x ranks";
  return nullptr;
}

/// The placement of DualPipe's 2·PP stage copies: lane 0 down the ranks, lane 1 up.
constexpr std::vector<int> dualpipe_placement(int PP) {
  std::vector<int> out(static_cast<std::size_t>(2 * PP), 0);
  for (int i = 0; i < PP; ++i) {
    out[static_cast<std::size_t>(i)] = i;
    out[static_cast<std::size_t>(PP + i)] = PP - 1 - i;
  }
  return out;
}

constexpr program make_dualpipe(int PP, int m) {
  if (const char* e = dualpipe_error(PP, m)) throw std::invalid_argument(e);
  const int H = PP / 2, n = m / 2;
  program_builder b{PP, 2 * PP, m};
  b.lanes(2).placement(dualpipe_placement(PP));
  for (int r = 0; r < PP; ++r) {
    const int down = r, up = PP + (PP - 1 - r);  // this rank's stage of lane 0 and of lane 1
    const int stage[2] = {r < H ? down : up, r < H ? up : down};
    const int first_mb[2] = {r < H ? 0 : n, r < H ? n : 0};
    b.rank(r);
    detail::dualpipe_rank(b, stage, first_mb, r < PP - 1 - r ? r : PP - 1 - r, H, n);
  }
  return std::move(b).build("dualpipe");
}

/// DualPipe over the stage graph `g` of PP stages: both directions run a copy of it (see above).
constexpr program make_dualpipe(int PP, int m, const stage_dag& g) {
  if (g.stages != PP)
    throw std::invalid_argument(
        "dualpipe: the stage graph must have as many stages as ranks (each direction holds "
        "one copy of it, a stage per rank)");
  return over_graph(make_dualpipe(PP, m), g);
}

/// dualpipe for tools that pick a schedule by name (registry.hpp).
struct dualpipe_family {
  static constexpr std::string_view name = "dualpipe";
  static constexpr std::string_view summary =
      "two directions over two parameter copies, overlapped F&B pairs (DeepSeek-V3)";
  static constexpr int chunks = 1;
  static constexpr bool split = true;
  static constexpr const char* error(int p, int m, int) noexcept { return dualpipe_error(p, m); }
  static constexpr program make(int p, int m, int, const schedule_params&) { return make_dualpipe(p, m); }
};

template <rank_count Ranks, microbatch_count Microbatches>
struct dualpipe {
  using family = dualpipe_family;
  static_assert(dualpipe_error(Ranks::value, Microbatches::value) == nullptr,
                "dualpipe: needs an even number of ranks and an even number of microbatches, at least 2 x ranks");
  static constexpr program generate() { return make_dualpipe(Ranks::value, Microbatches::value); }
  static constexpr program_extent extent() {
    const int PP = Ranks::value, m = Microbatches::value;
    int actions = 0;
    for (int r = 0; r < PP; ++r)
      actions += detail::dualpipe_rank_actions(r < PP - 1 - r ? r : PP - 1 - r, PP / 2, m / 2);
    return {PP, 2 * PP, m, actions, 2 * (PP - 1), true};
  }
};

}  // namespace pipetype
