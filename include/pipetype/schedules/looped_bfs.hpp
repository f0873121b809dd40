// pipetype/schedules/looped_bfs.hpp — looped breadth-first pipeline.
//
// Source: Lamy-Poirier, "Breadth-First Pipeline Parallelism", MLSys'23 (arXiv 2211.05953);
// ordering as PyTorch's ScheduleLoopedBFS.
// Placement: looped, rank r holds stages r, r+p, …, r+(v−1)p (S = p·v).
// Rule: when several local stages have work, the earlier stage runs all its microbatches first:
// rank r runs F of each local stage (ascending) for microbatches 0..m−1, then B of each local
// stage (descending) for microbatches m−1..0.
// Constraints: none; m ≥ p avoids stalls between loops (the first microbatch returns to a
// rank's next chunk after p forward slots).
// Formulas (uniform per-chunk costs, m ≥ p, no communication latency):
//   makespan            m·v·(F + B) + (p − 1)(F + B)
//   peak activations    m·v chunk activations on every rank (GPipe-like)
// Over a stage graph (p·v stages): over_graph (family.hpp) — the chain's stage k is the graph's
// k-th in topological order, on the same rank and in the same place of its list.
#pragma once

#include <string_view>

#include "pipetype/core/schedule.hpp"
#include "pipetype/core/sizes.hpp"
#include "pipetype/graph/placement.hpp"
#include "pipetype/schedules/family.hpp"

namespace pipetype {

constexpr program make_looped_bfs(int p, int m, int v) {
  program_builder b{p, p * v, m};
  b.placement(looped_placement(p, v));
  for (int r = 0; r < p; ++r) {
    b.rank(r);
    for (int c = 0; c < v; ++c)
      for (int mb = 0; mb < m; ++mb) b.add(F(c * p + r, mb));
    for (int c = v - 1; c >= 0; --c)
      for (int mb = m - 1; mb >= 0; --mb) b.add(B(c * p + r, mb));
  }
  return std::move(b).build("looped-bfs");
}

/// looped_bfs for tools that pick a schedule by name (registry.hpp).
struct looped_bfs_family {
  static constexpr std::string_view name = "looped-bfs";
  static constexpr std::string_view summary = "breadth-first over v looped chunks per rank (Lamy-Poirier 2023)";
  static constexpr int chunks = 0;
  static constexpr bool split = false;
  static constexpr const char* error(int, int, int) noexcept { return nullptr; }
  static constexpr program make(int p, int m, int v, const schedule_params&) { return make_looped_bfs(p, m, v); }
};

template <rank_count Ranks, microbatch_count Microbatches, chunk_count Chunks = chunks<2>>
struct looped_bfs {
  using family = looped_bfs_family;
  static constexpr program generate() { return make_looped_bfs(Ranks::value, Microbatches::value, Chunks::value); }
  static constexpr program_extent extent() { return looped_extent(Ranks::value, Microbatches::value, Chunks::value); }
};

}  // namespace pipetype
