// Small programs over stage graphs given as edges, shared by the tests of verify, simulate,
// bounds and step traces.
#pragma once

#include <pipetype/core/program.hpp>

#include <vector>

namespace graph_programs {

/// `order[r]` on rank r, as actions, over `edges`.
inline pipetype::program build(int ranks, int stages, int m, const std::vector<pipetype::stage_edge>& edges,
                               const std::vector<std::vector<pipetype::action>>& order) {
  pipetype::program_builder b{ranks, stages, m};
  b.graph(edges);
  for (int r = 0; r < ranks; ++r) {
    b.rank(r);
    for (const pipetype::action& a : order[static_cast<std::size_t>(r)]) b.add(a);
  }
  return std::move(b).build("graph");
}

/// Stage s on rank s, one microbatch, F then B on each: over `edges` between 3 stages.
inline pipetype::program one_each(const std::vector<pipetype::stage_edge>& edges, const char* name) {
  pipetype::program_builder b{3, 3, 1};
  b.graph(edges);
  for (int s = 0; s < 3; ++s) b.rank(s).add(pipetype::F(s, 0)).add(pipetype::B(s, 0));
  return std::move(b).build(name);
}

/// 0 → 1 → 2 and the skip 0 → 2.
inline pipetype::program skip3() { return one_each({{0, 1}, {1, 2}, {0, 2}}, "skip"); }
/// 0 → 1 and 0 → 2: one stage feeding two losses.
inline pipetype::program fan_out3() { return one_each({{0, 1}, {0, 2}}, "fan-out"); }

}  // namespace graph_programs
