// pipetype/schedules/interleaved_1f1b.hpp — interleaved 1F1B (virtual pipeline).
//
// Source: Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
// Megatron-LM", SC'21; ordering as Megatron-LM's forward_backward_pipelining_with_interleaving,
// with PyTorch's relaxed microbatch rule (ScheduleInterleaved1F1B).
// Placement: looped, rank r holds stages r, r+p, …, r+(v−1)p (S = p·v).
// Rule: microbatches go through the chunks in rounds of n = m / max(1, ⌊m/p⌋) (= p when p | m):
// the k-th forward of a rank runs chunk ⌊k/n⌋ mod v, the k-th backward chunk v−1−(⌊k/n⌋ mod v),
// each chunk taking its microbatches in order. Rank r warms up with
// min((v−1)·n + 2(p−1−r), m·v) forwards, then alternates 1F1B, then drains.
// Constraints: Megatron requires m mod p = 0; like PyTorch we accept any m with
// m mod max(1, ⌊m/p⌋) = 0 (e.g. p=4: m=3, m=10) and reject the rest with a message.
// Formulas (uniform per-chunk costs F, B; m a multiple of p; no communication latency):
//   makespan            m·v·(F + B) + (p − 1)(F + B)   (bubble (p−1)(F+B) = 1/v of 1F1B's in
//                                                      full-stage time)
//   peak activations    min((v−1)·p + 2(p−1−r) + 1, m·v) chunk activations on rank r
// Differences: with m = p Megatron runs all forwards first; we keep the general rule (as PyTorch).
// Over a stage graph (schedule_params::edges, p·v stages): over_graph (family.hpp) — chunk c of
// rank r runs the graph's (c·p + r)-th stage in topological order, the chain's loop over the graph.
#pragma once

#include <string_view>

#include <stdexcept>

#include "pipetype/core/schedule.hpp"
#include "pipetype/core/sizes.hpp"
#include "pipetype/graph/placement.hpp"
#include "pipetype/schedules/family.hpp"

namespace pipetype {

/// Why (p, m, v) is not a valid interleaved 1F1B, or nullptr.
constexpr const char* interleaved_1f1b_error(int p, int m, int v) noexcept {
  if (p < 1 || m < 1 || v < 1) return "interleaved_1f1b: ranks, microbatches and chunks must be positive";
  const int rounds = m / p > 1 ? m / p : 1;
  if (m % rounds != 0)
    return "interleaved_1f1b: microbatches must be a multiple of ranks, or of max(1, microbatches / ranks) "
           "(PyTorch's relaxed rule)";
  return nullptr;
}

constexpr program make_interleaved_1f1b(int p, int m, int v) {
  if (const char* e = interleaved_1f1b_error(p, m, v)) throw std::invalid_argument(e);
  const int rounds = m / p > 1 ? m / p : 1;
  const int n = m / rounds;  // microbatches per round
  const int S = p * v;
  program_builder b{p, S, m};
  b.placement(looped_placement(p, v));
  std::vector<int> next_f(static_cast<std::size_t>(S), 0), next_b(static_cast<std::size_t>(S), 0);
  for (int r = 0; r < p; ++r) {
    b.rank(r);
    for (int s = 0; s < S; ++s) next_f[static_cast<std::size_t>(s)] = next_b[static_cast<std::size_t>(s)] = 0;
    const int total = m * v;
    int warmup = (v - 1) * n + 2 * (p - 1 - r);
    if (warmup > total) warmup = total;
    auto fwd = [&](int k) {
      const int s = ((k / n) % v) * p + r;
      b.add(F(s, next_f[static_cast<std::size_t>(s)]++));
    };
    auto bwd = [&](int k) {
      const int s = (v - 1 - ((k - warmup) / n) % v) * p + r;
      b.add(B(s, next_b[static_cast<std::size_t>(s)]++));
    };
    for (int k = 0; k < warmup; ++k) fwd(k);
    for (int k = warmup; k < total; ++k) {
      fwd(k);
      bwd(k);
    }
    for (int k = total; k < total + warmup; ++k) bwd(k);
  }
  return std::move(b).build("interleaved-1f1b");
}

/// interleaved_1f1b for tools that pick a schedule by name (registry.hpp).
struct interleaved_1f1b_family {
  static constexpr std::string_view name = "interleaved-1f1b";
  static constexpr std::string_view summary = "1F1B over v looped chunks per rank (Megatron virtual pipeline)";
  static constexpr int chunks = 0;
  static constexpr bool split = false;
  static constexpr const char* error(int p, int m, int v) noexcept { return interleaved_1f1b_error(p, m, v); }
  static constexpr program make(int p, int m, int v, const schedule_params&) { return make_interleaved_1f1b(p, m, v); }
};

template <rank_count Ranks, microbatch_count Microbatches, chunk_count Chunks = chunks<2>>
struct interleaved_1f1b {
  using family = interleaved_1f1b_family;
  static_assert(interleaved_1f1b_error(Ranks::value, Microbatches::value, Chunks::value) == nullptr,
                "interleaved_1f1b: microbatches must be a multiple of ranks, or of max(1, microbatches / "
                "ranks) (PyTorch's relaxed rule)");
  static constexpr program generate() {
    return make_interleaved_1f1b(Ranks::value, Microbatches::value, Chunks::value);
  }
  static constexpr program_extent extent() { return looped_extent(Ranks::value, Microbatches::value, Chunks::value); }
};

}  // namespace pipetype
