// pipetype/analysis/layout_costs.hpp — costs and memory of an uneven split (graph/layer_layout.hpp).
//
// A layout says how many layers of each kind every stage holds. With the times of one decoder
// layer as `per_layer` (F, B, I, W, communication), stage s costs per_layer × weight(s), where
// weight(s) = layer_weights::of(its layers): an empty stage costs nothing, a stage of four
// layers four times one of one. Activation memory follows the same weights: a forward of stage s
// holds weight(s) layer-activations until its backward (or W) lets them go.
//
//   constexpr auto L = pipetype::parse_layout("E|t*3|t*4|t*4|t*3,L");
//   const auto c = pipetype::layout_costs(L, pipetype::costs{.f = 1, .b = 2});
//   const auto t = pipetype::simulate(plan.compute(), c);
//   const auto peak = pipetype::layout_peak_activations(plan.compute(), L);   // per rank
#pragma once

#include <cstddef>
#include <vector>

#include "pipetype/analysis/costs.hpp"
#include "pipetype/core/memory.hpp"
#include "pipetype/core/program.hpp"
#include "pipetype/graph/layer_layout.hpp"

namespace pipetype {

/// Each stage's weight, in stage order (schedule_params::stage_scale takes them).
constexpr std::vector<double> layout_weights(const layer_layout& layout, layer_weights weights = {}) {
  std::vector<double> out;
  for (const stage_layers& s : layout.stages) out.push_back(weights.of(s));
  return out;
}

/// The cost model of a layout: `per_layer` scaled by each stage's weight.
constexpr cost_model layout_costs(const layer_layout& layout, costs per_layer, layer_weights weights = {}) {
  return stage_scaled(cost_model{per_layer}, layout_weights(layout, weights));
}

/// Per rank, the most layer-activations (decoder-layer equivalents) it holds at once when it
/// runs its actions in order: each action changes its rank's live units by the memory model's
/// delta of its kind, scaled by its stage's weight. Stages past the layout weigh nothing.
constexpr std::vector<double> layout_peak_activations(program_view p, const layer_layout& layout,
                                                      layer_weights weights = {}, memory_model mem = {}) {
  std::vector<double> peak(static_cast<std::size_t>(p.ranks > 0 ? p.ranks : 0), 0.0);
  const bool forwards_only = is_forward_only(p);  // an activation lives only through its F
  for (int r = 0; r < p.ranks; ++r) {
    double live = 0, most = 0;
    for (const action& a : p.rank_actions(r)) {
      const double w =
          a.stage >= 0 && a.stage < layout.size() ? weights.of(layout.stages[static_cast<std::size_t>(a.stage)]) : 0.0;
      live += w * mem.delta(a.what) / mem.unit;
      if (live > most) most = live;
      if (forwards_only) live -= w * mem.delta(a.what) / mem.unit;
    }
    peak[static_cast<std::size_t>(r)] = most;
  }
  return peak;
}

}  // namespace pipetype
