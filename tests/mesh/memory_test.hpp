// tests/mesh/memory_test.hpp — what the memory-action tests share: the cost options of a copy,
// and a step of a built-in schedule with its actions placed, lowered and proved (make_step).
#pragma once

#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include <cstddef>
#include <string>
#include <vector>

namespace mesh_test {

/// The options of a step whose saved 1000 bytes copy in k times the F + B of 3 time units:
/// k = 2 · 1000 / bandwidth / 3.
inline pipetype::memory_options at_k(double k, pipetype::memory_policy offload) {
  return {.offload = offload, .copy_bandwidth = 2000.0 / 3 / k};
}

/// A verdict in words ("ok" when it is).
inline std::string why(const pipetype::verdict& v) { return v.ok() ? "ok" : pipetype::describe(v); }

struct step {
  pipetype::runtime_plan plan;
  pipetype::memory_program actions;
  pipetype::mesh_program mesh;
};

/// The step's plan lowered with its actions on one replica, checked and proved (build_mesh).
inline pipetype::mesh_program lowered_with_actions(const step& s) {
  const pipetype::dp_options dp{};
  return pipetype::build_mesh(s.plan.compute(), s.plan.lowered(), pipetype::mesh{s.plan.compute().ranks, 1},
                              pipetype::place_collectives(s.plan.compute(), dp), dp, s.actions);
}

inline step make_step(const std::string& name, pipetype::memory_policy offload, pipetype::memory_policy recompute,
                      int p = 4, int m = 8) {
  step s{pipetype::build_plan(pipetype::make_schedule(name, p, m)), {}, {}};
  REQUIRE_MESSAGE(s.plan.ok(), pipetype::describe(s.plan.result));
  const pipetype::memory_sizes one{{1}, {0}};  // a stash a microbatch, nothing kept by a recomputed forward
  pipetype::memory_options o;
  o.offload = offload;
  o.recompute = recompute;
  o.copy_bandwidth = 1;  // a copy takes one forward: k = 2/3
  const pipetype::memory_placement placed =
      pipetype::place_memory(s.plan.compute(), one, pipetype::costs{.f = 1, .b = 2}, o);
  REQUIRE_MESSAGE(placed.result.ok(), pipetype::describe(placed.result));
  s.actions = placed.actions;
  s.mesh = lowered_with_actions(s);
  return s;
}

inline pipetype::verdict verify(const step& s, const pipetype::mesh_program& mp) {
  return pipetype::verify_memory(s.plan.compute(), s.actions, mp);
}

/// The mesh op index (in global rank g's ops) of each op `pick` accepts.
template <class Pick>
std::vector<std::size_t> ops_where(const pipetype::mesh_program& mp, Pick pick, int g = 0) {
  std::vector<std::size_t> out;
  const auto ops = mp.rank_ops(g);
  for (std::size_t i = 0; i < ops.size(); ++i)
    if (pick(ops[i])) out.push_back(i);
  return out;
}

}  // namespace mesh_test
