// pipetype/bind/part.hpp — the stages one rank holds: what a process that runs one rank binds.
//
// A device executor runs one rank of a plan, usually one process per GPU; that process needs
// only the stages the plan puts on its rank. A model_part holds them, erased, at their model
// stage indices, with the model's stage graph (so the executor can check that the plan runs it):
//
//   const std::vector<int> mine = pipetype::stages_on(plan.compute(), rank);  // e.g. {1, 5}
//   pipetype::model_part part{plan.compute().lane_length()};                   // a chain of L stages
//   for (int s : mine) part.hold(s, my_stages[s]);                             // the user's objects
//   pipetype::cuda::executor ex{plan, part, driver, {.rank = rank, .comms = comms}};
//
// The executor checks the part against the plan before it allocates anything: it must hold
// every stage the plan runs on the rank and no other (one sentence naming the stage otherwise).
// Its batch lists the inputs of the sources it holds and the targets of the sinks it holds (a
// one-array batch: a row of its sources only), and the step's lengths whether it holds a source
// or not: every rank must size a microbatch's transfers alike (batch::lengths).
// Edges between two held stages are checked as a whole model's are; an edge to a stage on
// another rank cannot be seen from here, so each transfer is sized by its end on this rank (the
// stage that sends it, or the stage that reads it), which is what the other rank's end must match.
#pragma once

#include <algorithm>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "pipetype/bind/stage_entry.hpp"
#include "pipetype/core/program.hpp"
#include "pipetype/graph/dag.hpp"

namespace pipetype {

/// The model stages rank r runs under `p` (each plan stage s is model stage s % lane length), in
/// increasing order.
inline std::vector<int> stages_on(const program_view& p, int r) {
  const int L = p.lane_length();
  std::vector<int> out;
  for (const action& a : p.rank_actions(r)) out.push_back(a.stage % L);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

/// The stages one rank holds, erased (bind/stage_entry.hpp), by model stage index, with the
/// model's stage graph. The objects stay the caller's.
class model_part {
 public:
  /// A part of a chain of `stages` model stages.
  explicit model_part(int stages) : model_part(chain_dag(stages)) {}
  /// A part of a model whose stage graph is `graph` (a dag's topology()).
  explicit model_part(stage_dag graph)
      : graph_(std::move(graph)), entries_(static_cast<std::size_t>(graph_.stages > 0 ? graph_.stages : 0)) {}

  /// Holds `s` as model stage `index`. shape_error when the model has no such stage or it is
  /// held already.
  template <stage S>
  model_part& hold(int index, S& s) {
    if (index < 0 || index >= graph_.stages)
      throw shape_error("pipetype::model_part: stage " + std::to_string(index) + " is not one of the model's " +
                        std::to_string(graph_.stages));
    if (holds(index)) throw shape_error("pipetype::model_part: stage " + std::to_string(index) + " is held twice");
    entries_[static_cast<std::size_t>(index)] = detail::entry_of(s);
    return *this;
  }
  bool holds(int index) const noexcept {
    return index >= 0 && index < graph_.stages && entries_[static_cast<std::size_t>(index)].obj != nullptr;
  }
  const stage_dag& topology() const noexcept { return graph_; }
  /// One entry per model stage; a stage not held has no object (obj == nullptr) and no shapes.
  const std::vector<stage_entry>& entries() const noexcept { return entries_; }

 private:
  stage_dag graph_;
  std::vector<stage_entry> entries_;
};

namespace detail {

/// `part` fits rank r of `p`: it holds every model stage the plan runs there and no other.
inline void check_part(const program_view& p, const model_part& part, int r, const std::string& who) {
  const std::vector<int> mine = stages_on(p, r);
  for (const int s : mine)
    if (!part.holds(s))
      throw shape_error(who + ": rank " + std::to_string(r) + " runs stage " + std::to_string(s) +
                        " (the plan places it there), but its part does not hold it");
  for (int s = 0; s < static_cast<int>(part.entries().size()); ++s)
    if (part.holds(s) && !std::binary_search(mine.begin(), mine.end(), s))
      throw shape_error(who + ": rank " + std::to_string(r) + "'s part holds stage " + std::to_string(s) +
                        ", which the plan does not run on rank " + std::to_string(r) +
                        " (give each rank only its stages: pipetype::stages_on)");
}

}  // namespace detail
}  // namespace pipetype
