// pipetype/mesh/memory_step.hpp — a step with memory actions, placed, lowered, proved and timed.
//
// plan_memory() is what tools call: place_memory (mesh/place_memory.hpp) writes the actions,
// check_memory_actions checks them, lower_mesh puts them on each rank's copy and compute streams
// (a lone pipeline is a mesh of one replica), verify_mesh and verify_memory prove the result, and
// simulate_mesh times it beside the same step without them:
//
//   offload all         every activation whose gap holds a round trip, whatever it costs
//   offload automatic   a share (1, 3/4, 2/3, 1/2, 1/3, 1/4, 1/6, 1/8) of the activations the gap
//                       rule allows: of the shares whose step is at most `tolerance` slower than
//                       without, the one with the smallest peak; if none is, the fastest, and
//                       `cost()` says what it costs
// Each share is tried with each way of completing an OFFLOAD (memory_options::overlap 1, 2, 3 and
// predicted), placed on the plain step's timeline and then on the one its copies stretched; `all`
// (memory first) keeps the try with the smallest peak, then the fastest.
//
// The answer holds the actions, the lowered step, per rank its memory (memory_of), both makespans
// and k (offload_ratio); `result` is ok or the one sentence of what failed.
//
// Over data-parallel replicas (docs/12), `memory_mesh` gives the replicas, their collectives and
// what those cost: the step is lowered and proved over the whole mesh, collectives and copy
// streams together, and both makespans are the mesh step's, so the cost of the actions is measured
// against a step that already waits for its gradient reductions. The actions are the same on every
// replica (a replica runs the pipeline's program), and so is each pipeline rank's memory.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "pipetype/mesh/memory_actions.hpp"
#include "pipetype/mesh/simulate.hpp"
#include "pipetype/mesh/place_memory.hpp"
#include "pipetype/mesh/verify_memory.hpp"

namespace pipetype {

struct memory_step {
  memory_program actions;
  mesh_program step;                // the lowered step, its copies on stream copy_stream
  std::vector<rank_memory> memory;  // per rank
  double makespan = 0;              // the step with the actions (simulate_mesh)
  double base_makespan = 0;         // the same step without them
  double k = 0;                     // offload_ratio
  double density = 1;               // the share of the allowed offloads placed
  verdict result{};

  /// The step's modelled slowdown from the actions (0.02: 2 % slower).
  double cost() const noexcept { return base_makespan > 0 ? makespan / base_makespan - 1 : 0; }
};

/// The replicas a memory step runs over: `dp.dp` of them (1: a lone pipeline), their collectives
/// (`collectives`, a file's own; none given: place_collectives(p, dp)) and the collectives' costs
/// (`costs`: param_bytes, tie_bytes, bandwidth, alpha; its copy fields come from the memory
/// options and sizes).
struct memory_mesh {
  dp_options dp{};
  std::optional<collective_program> collectives{};
  mesh_costs costs{};
};

/// The memory step of `p` lowered as `l`, with saved bytes `z`, under cost model `c` and options
/// `o` (the top of this file), over the replicas of `over`. A mesh the plan cannot run over, or
/// collectives check_collectives refuses, is the answer's `result`.
template <cost_source C = costs>
memory_step plan_memory(program_view p, lowered_view l, const memory_sizes& z, const C& c = {},
                        const memory_options& o = {}, double tolerance = 0.02, const memory_mesh& over = {}) {
  memory_step out;
  const mesh replicas{p.ranks, over.dp.dp};
  const dp_options& dp = over.dp;
  if (out.result = check_memory_sizes(z); !out.result.ok()) return out;
  if (out.result = check_mesh(replicas); !out.result.ok()) return out;
  const collective_program placed_collectives = over.collectives ? *over.collectives : place_collectives(p, dp);
  if (out.result = check_collectives(p, placed_collectives, dp); !out.result.ok()) return out;
  // (each replica: the lowered ops, its collectives, and at most three memory actions per forward)
  if (out.result = check_mesh_ops(replicas, static_cast<long long>(l.ops.size() + placed_collectives.ops.size() +
                                                                   3 * p.actions.size()));
      !out.result.ok())
    return out;
  mesh_costs d = over.costs;
  d.activations = z;
  d.copy_bandwidth = o.copy_bandwidth;
  d.copy_alpha = o.copy_alpha;
  out.k = offload_ratio(p, z, c, o);
  out.base_makespan = simulate_mesh(lower_mesh(p, l, replicas, placed_collectives, dp), c, d).makespan;
  // one try: the actions at a density and spacing, proved and timed
  auto attempt = [&](double density, int overlap, const std::vector<double>* start, const std::vector<double>* end,
                     mesh_timeline* timed) {
    memory_step s;
    s.k = out.k;
    s.base_makespan = out.base_makespan;
    s.density = density;
    memory_options q = o;
    q.density = density;
    q.overlap = overlap;
    memory_placement placed = place_memory(p, z, c, q, {}, start, end);
    s.actions = std::move(placed.actions);
    s.result = placed.result;
    if (s.result.ok()) s.result = check_memory_actions(p, s.actions);
    if (!s.result.ok()) return s;
    s.step = lower_mesh(p, l, replicas, placed_collectives, dp, s.actions);
    s.result = verify_mesh(s.step);
    if (s.result.ok()) s.result = verify_memory(p, s.actions, s.step);
    if (!s.result.ok()) return s;
    mesh_timeline t = simulate_mesh(s.step, c, d);
    s.makespan = t.completed ? t.makespan : -1;
    s.memory = memory_of(p, s.actions, z);
    if (timed) *timed = std::move(t);
    return s;
  };
  // when the actions' step ran (per action of p, from its compute op on its rank)
  const auto action_times = [&](const mesh_program& mp, const mesh_timeline& t, std::vector<double>& start,
                                std::vector<double>& end) {
    start.assign(p.actions.size(), 0), end.assign(p.actions.size(), 0);
    for (int r = 0; r < p.ranks; ++r) {
      auto a = static_cast<std::size_t>(p.begin[static_cast<std::size_t>(r)]);
      for (int i = mp.begin[static_cast<std::size_t>(r)]; i < mp.begin[static_cast<std::size_t>(r) + 1]; ++i)
        if (mp.ops[static_cast<std::size_t>(i)].code == mesh_op_code::compute && a < p.actions.size())
          start[a] = t.start[static_cast<std::size_t>(i)], end[a] = t.end[static_cast<std::size_t>(i)], ++a;
    }
  };
  const auto peak = [](const memory_step& s) {
    std::int64_t most = 0;
    for (const rank_memory& r : s.memory) most = std::max(most, r.peak_bytes);
    return most;
  };
  // of two good tries, the better: within the tolerance (`all`: any) the smaller peak, else the faster
  const auto better = [&](const memory_step& a, const memory_step& b) {
    const double fast = o.offload == memory_policy::all ? 1e300 : out.base_makespan * (1 + tolerance) + 1e-9;
    const bool fa = a.makespan <= fast, fb = b.makespan <= fast;
    if (fa != fb) return fa;
    if (fa && peak(a) != peak(b)) return peak(a) < peak(b);
    return a.makespan < b.makespan;
  };
  const double all_shares[] = {1.0};
  const double some_shares[] = {1.0, 3.0 / 4, 2.0 / 3, 1.0 / 2, 1.0 / 3, 1.0 / 4, 1.0 / 6, 1.0 / 8};
  const std::span<const double> shares = o.offload == memory_policy::automatic ? std::span<const double>(some_shares)
                                                                               : std::span<const double>(all_shares);
  bool have = false;
  for (const double share : shares)
    for (const int overlap : {1, 2, 3, 0}) {
      // placed on the plain step's timeline, then again on the timeline of the step it made, where
      // copies stretched it (the predictions then see the copy stream's backlog)
      std::vector<double> start, end;
      mesh_timeline timed;
      for (int round = 0; round < 3; ++round) {
        memory_step s = attempt(share * o.density, overlap, round ? &start : nullptr, round ? &end : nullptr, &timed);
        if (!s.result.ok()) {
          if (!have && out.result.ok()) out = std::move(s);  // the first failure says why, if nothing succeeds
          break;
        }
        const bool stretched = s.makespan > out.base_makespan * (1 + 1e-9);
        if (stretched) action_times(s.step, timed, start, end);
        if (!have || better(s, out)) out = std::move(s), have = true;
        if (!stretched) break;
      }
    }
  return out;
}

}  // namespace pipetype
