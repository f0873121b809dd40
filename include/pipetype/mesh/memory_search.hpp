// pipetype/mesh/memory_search.hpp — of several schedules, the fastest under a byte limit once
// offload and recompute may bring each under it.
//
// Under a per-rank byte limit, the schedule that fits as it is need not be the fastest: one that
// holds more activations has a smaller bubble, and offload (nearly free where k ≤ 1) or
// recompute may bring it under the limit for less than the bubble it saves. That is how zb-auto
// searches with memory actions as moves: its searches at each activation limit from the tightest
// up to none are the candidates (pipetype-explore --schedule zb-auto --act-limit-mb L --offload
// auto does this), and fastest_under_limit() plans each one's step with memory actions under the
// limit (plan_memory: placed, lowered, proved, timed) and keeps the shortest modelled step. A
// candidate that fits as it is gets no actions; one that cannot be brought under the limit is
// left out (makespan −1). Ties go to the earlier candidate, so a list that starts with the
// schedule that fits without actions never answers worse than it.
#pragma once

#include <cstddef>
#include <span>
#include <utility>
#include <vector>

#include "pipetype/mesh/memory_plan.hpp"
#include "pipetype/compile/plan.hpp"

namespace pipetype {

struct memory_choice {
  int chosen = -1;                // the candidate kept; −1: none fits under the limit (`result` says why)
  runtime_plan plan;              // its plan
  memory_step step;               // its step with memory actions (none when it fits as it is)
  std::vector<double> makespans;  // per candidate, its modelled step under the limit; −1: it cannot fit
  verdict result{};               // ok, or the first candidate's reason when none fits
};

/// The candidate whose step under `o.limit` (bytes of saved activations per rank) models
/// fastest with the memory actions `o` allows. `sizes_of(view)` gives a candidate's saved bytes
/// (memory_sizes) and `costs_of(view)` its cost model: a V's stage holds half a rank's share.
/// Example, given a, b, z, c (programs a and b, sizes z, costs c):
///   const pipetype::memory_choice best = pipetype::fastest_under_limit(
///       std::vector{a, b}, [&](auto) { return z; }, [&](auto) { return c; },
///       {.offload = pipetype::memory_policy::automatic, .limit = 4'000'000'000, .copy_bandwidth = 25e6});
template <class SizesOf, class CostsOf>
memory_choice fastest_under_limit(std::span<const program> candidates, SizesOf&& sizes_of, CostsOf&& costs_of,
                                  const memory_options& o, const plan_options& po = {}) {
  memory_choice out;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    out.makespans.push_back(-1);
    runtime_plan plan = build_plan(candidates[i], po);
    if (!plan.ok()) {
      if (out.chosen < 0 && out.result.ok()) out.result = plan.result;
      continue;
    }
    memory_step s = plan_memory(plan.compute(), plan.lowered(), sizes_of(plan.compute()), costs_of(plan.compute()), o);
    bool fits = s.result.ok() && s.makespan >= 0;
    for (const rank_memory& r : s.memory) fits = fits && (o.limit <= 0 || r.peak_bytes <= o.limit);
    if (!fits) {
      if (out.chosen < 0 && out.result.ok())
        out.result = s.result.ok() ? verdict{errc::memory_limit_exceeded} : s.result;
      continue;
    }
    out.makespans.back() = s.makespan;
    if (out.chosen < 0 || s.makespan < out.step.makespan * (1 - 1e-12)) {
      out.chosen = static_cast<int>(i);
      out.plan = std::move(plan);
      out.step = std::move(s);
    }
  }
  if (out.chosen >= 0) out.result = {};
  return out;
}

/// The same over a vector of candidates.
template <class SizesOf, class CostsOf>
memory_choice fastest_under_limit(const std::vector<program>& candidates, SizesOf&& sizes_of, CostsOf&& costs_of,
                                  const memory_options& o, const plan_options& po = {}) {
  return fastest_under_limit(std::span<const program>(candidates), std::forward<SizesOf>(sizes_of),
                             std::forward<CostsOf>(costs_of), o, po);
}

}  // namespace pipetype
