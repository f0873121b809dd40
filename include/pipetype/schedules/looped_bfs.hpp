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
#pragma once

#include "pipetype/core/schedule.hpp"
#include "pipetype/core/sizes.hpp"
#include "pipetype/graph/placement.hpp"

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

template <class Ranks, class Microbatches, class Chunks = chunks<2>>
struct looped_bfs {
  static constexpr program generate() { return make_looped_bfs(Ranks::value, Microbatches::value, Chunks::value); }
  static constexpr program_extent extent() { return looped_extent(Ranks::value, Microbatches::value, Chunks::value); }
};

}  // namespace pipetype
