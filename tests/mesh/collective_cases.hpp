// What the tests of a step's collectives share (grad_norm.test.cpp, optimizer.test.cpp): the
// schedules they place them over, a refusal as its sentence, and where an op of a kind is.
#pragma once

#include <pipetype/pipetype.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace collective_cases {

namespace pt = pipetype;

/// A schedule of the registry at a size: one stage a rank, two (interleaved, V) or three.
struct shape {
  const char* name;
  int ranks, microbatches, stages_per_rank;
};
inline constexpr shape shapes[] = {{"1f1b", 4, 8, 1},       {"gpipe", 3, 6, 1}, {"interleaved-1f1b", 2, 4, 2},
                                   {"looped-bfs", 2, 4, 3}, {"zb-h1", 3, 6, 1}, {"zb-v", 2, 4, 2}};
/// The plan of a shape.
inline pt::runtime_plan plan_of(const shape& sh) {
  return pt::build_plan(pt::make_schedule(sh.name, sh.ranks, sh.microbatches, sh.stages_per_rank));
}

/// check_collectives' sentence for `c`; empty when it accepts them.
inline std::string misplaced(pt::program_view p, const pt::collective_program& c, const pt::dp_options& o) {
  const pt::verdict v = pt::check_collectives(p, c, o);
  return v.ok() ? std::string() : pt::describe(v);
}

/// The index in `ops` of rank r's first op (ops[begin[r] .. begin[r + 1])) for which `is` holds; −1: none.
template <class Op, class Is>
int first_of(const std::vector<int>& begin, const std::vector<Op>& ops, int r, Is&& is) {
  for (int i = begin[static_cast<std::size_t>(r)]; i < begin[static_cast<std::size_t>(r) + 1]; ++i)
    if (is(ops[static_cast<std::size_t>(i)])) return i;
  return -1;
}

}  // namespace collective_cases
