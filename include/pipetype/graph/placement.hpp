// pipetype/graph/placement.hpp — which rank holds which stage.
//
//   looped   rank r holds stages r, r+p, r+2p, ...  (v chunks per rank; Megatron's virtual
//            pipeline and breadth-first PP).  S = p·v.
//   v_shape  rank r holds stages r and 2p−1−r (ZB-V, DualPipeV).  S = 2p. The loss is on rank 0.
//   explicit any stage → rank table (from the builder or inferred from a text schedule).
//
// A placement is a table `stage_rank[s]`; these functions fill one. All constexpr.
#pragma once

#include <vector>

namespace pipetype {

/// Rank of stage `s` under the looped placement with `p` ranks.
constexpr int looped_rank(int s, int p) noexcept { return s % p; }

/// Rank of stage `s` under the V-shape placement with `p` ranks (S = 2p).
constexpr int v_shape_rank(int s, int p) noexcept { return s < p ? s : 2 * p - 1 - s; }

constexpr std::vector<int> looped_placement(int p, int v) {
  std::vector<int> out(static_cast<std::size_t>(p * v), 0);
  for (int s = 0; s < p * v; ++s) out[static_cast<std::size_t>(s)] = looped_rank(s, p);
  return out;
}

constexpr std::vector<int> v_shape_placement(int p) {
  std::vector<int> out(static_cast<std::size_t>(2 * p), 0);
  for (int s = 0; s < 2 * p; ++s) out[static_cast<std::size_t>(s)] = v_shape_rank(s, p);
  return out;
}

}  // namespace pipetype
