// pipetype/host/stragglers.hpp — the detector of a plan set (schedules/plan_set.hpp): each rank's
// speed from the last step's measured compute times.
//
// A traced step (executor_options::trace) records each op's start and end. A rank's measured
// compute time is the sum over its compute ops; its modelled time the sum over its actions of the
// plan's cost model at nominal speed. Their ratio, normalised so that the fastest rank is 1, is
// the rank's speed: what plan_set::choose takes. Waiting for an input is not counted (only compute
// ops are), so a rank stalled by a slow neighbour reads as nominal, and the slow one as slow.
//
//   ph::executor ex{set.plans[k].prog ..., model_k, {.trace = true}};
//   ex.step(batch);
//   const int next = set.choose(ph::measured_speeds(ex.trace(), plan_k.compute(), costs_k), k);
//
// The switch itself is the caller's, between two steps: every rank has finished the step (step()
// returned), so every rank starts the next one under the same plan; the plans' executors were bound
// once, each with its own buffers, and the model's parameters move from one layout to the other
// (a copy) while nothing runs.
#pragma once

#include <algorithm>
#include <vector>

#include "pipetype/analysis/costs.hpp"
#include "pipetype/compile/lowered.hpp"
#include "pipetype/core/program.hpp"

namespace pipetype::host {

/// Each rank's speed in a traced step (see the header comment); 1 where a rank ran nothing.
template <cost_source C>
std::vector<double> measured_speeds(const std::vector<op_time>& trace, program_view plan, const C& costs) {
  const auto P = static_cast<std::size_t>(plan.ranks);
  std::vector<double> modelled(P, 0.0), measured(P, 0.0), speed(P, 1.0);
  for (int r = 0; r < plan.ranks; ++r)
    for (const action& a : plan.rank_actions(r))
      modelled[static_cast<std::size_t>(r)] += static_cast<double>(costs.time(a));
  for (const op_time& t : trace)
    if (t.code == op_code::compute && t.rank >= 0 && static_cast<std::size_t>(t.rank) < P)
      measured[static_cast<std::size_t>(t.rank)] += t.end - t.start;
  double fastest = 0;
  for (std::size_t r = 0; r < P; ++r)
    if (measured[r] > 0 && modelled[r] > 0) fastest = std::max(fastest, modelled[r] / measured[r]);
  if (fastest <= 0) return speed;
  for (std::size_t r = 0; r < P; ++r)
    if (measured[r] > 0 && modelled[r] > 0) speed[r] = modelled[r] / measured[r] / fastest;
  return speed;
}

}  // namespace pipetype::host
