// pipetype/core/program.hpp — a compute program: each rank's ordered list of actions.
//
// This is what a schedule generator produces (DESIGN.md §1, "generate"). It says nothing about
// transfers, streams or buffers yet; `lower()` adds those. Storage is rank-major CSR:
// actions of rank r are actions[begin[r] .. begin[r+1]).
//
// `program` owns its tables (std::vector, usable inside constant evaluation); `program_view`
// is the non-owning form every algorithm takes, so the same code reads a run-time program and
// the frozen tables of a compile-time `plan`.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "pipetype/compile/diagnostics.hpp"
#include "pipetype/core/action.hpp"

namespace pipetype {

/// "No rank": the value of `invalid_rank` when every action went to a valid rank.
inline constexpr int no_rank = -2147483647 - 1;

struct program_view {
  const char* name = "";
  int ranks = 0;
  int stages = 0;
  int microbatches = 0;
  std::span<const int> stage_rank;  // [stages]; -1 where no action names the stage
  std::span<const int> begin;       // [ranks + 1]
  std::span<const action> actions;  // [begin[ranks]]
  int invalid_rank = no_rank;       // a rank outside [0, ranks) that the builder was asked for
  verdict source_error{};           // set when the program came from text that did not parse

  constexpr std::span<const action> rank_actions(int r) const {
    const auto b = static_cast<std::size_t>(begin[static_cast<std::size_t>(r)]);
    const auto e = static_cast<std::size_t>(begin[static_cast<std::size_t>(r) + 1]);
    return actions.subspan(b, e - b);
  }
  constexpr int size() const { return static_cast<int>(actions.size()); }
  /// True when some action is a backward split into I and W.
  constexpr bool split_backward() const {
    for (const action& a : actions)
      if (a.what == kind::I || a.what == kind::W) return true;
    return false;
  }
};

struct program {
  const char* name = "";
  int ranks = 0;
  int stages = 0;
  int microbatches = 0;
  std::vector<int> stage_rank;
  std::vector<int> begin;
  std::vector<action> actions;
  /// Set by the builder when an action was added to a rank outside [0, ranks) (-1 also when
  /// no rank was selected first); `no_rank` otherwise.
  int invalid_rank = no_rank;
  /// Set by the text parser when the source did not parse (line, column, reason).
  verdict source_error{};

  constexpr program_view view() const {
    return {name, ranks, stages, microbatches, stage_rank, begin, actions, invalid_rank, source_error};
  }
};

/// The sizes of a program, known without building it. A schedule type may provide
/// `static constexpr program_extent extent()`; make_plan then sizes its tables from it instead of
/// generating the program twice (generation is a noticeable share of the compile time).
struct program_extent {
  int ranks = 0;
  int stages = 0;
  int microbatches = 0;
  int actions = 0;         // exactly the number of actions generate() returns
  int crossing_edges = 0;  // an upper bound on the stage edges s → s+1 whose stages are on two ranks
};

/// The extent of a schedule on the looped placement (v chunks per rank) with one F and one B per
/// stage and microbatch.
constexpr program_extent looped_extent(int p, int m, int v) {
  return {p, p * v, m, 2 * p * v * m, p > 1 ? p * v - 1 : 0};
}

/// Builds a program rank by rank. Usable in a constexpr function:
///
///   constexpr pipetype::program two_rank() {
///     pipetype::program_builder b{/*ranks*/ 2, /*stages*/ 2, /*microbatches*/ 2};
///     b.rank(0).add(F(0, 0)).add(F(0, 1)).add(B(0, 0)).add(B(0, 1));
///     b.rank(1).add(F(1, 0)).add(B(1, 0)).add(F(1, 1)).add(B(1, 1));
///     return std::move(b).build("two-rank");
///   }
///
/// Placement: `place(stage, rank)` pins a stage; stages not pinned are placed on the rank whose
/// list first names them. Nothing is checked here: `verify` does that and names the place.
class program_builder {
 public:
  constexpr program_builder(int ranks, int stages, int microbatches)
      : ranks_(ranks),
        stages_(stages),
        microbatches_(microbatches),
        stage_rank_(static_cast<std::size_t>(stages > 0 ? stages : 0), -1),
        lists_(static_cast<std::size_t>(ranks > 0 ? ranks : 0)) {}

  /// Selects the rank that `add` appends to.
  constexpr program_builder& rank(int r) {
    current_ = r;
    return *this;
  }
  constexpr program_builder& add(action a) {
    if (current_ >= 0 && current_ < ranks_)
      lists_[static_cast<std::size_t>(current_)].push_back(a);
    else if (invalid_rank_ == no_rank)
      invalid_rank_ = current_ == no_rank ? -1 : current_;
    return *this;
  }
  /// Appends an overlapped pair (DualPipe's F&B): both start together on this rank.
  constexpr program_builder& add_overlapped(action forward, action backward) {
    forward.overlapped = true;
    backward.overlapped = false;
    return add(forward).add(backward);
  }
  constexpr program_builder& place(int stage, int r) {
    if (stage >= 0 && stage < stages_) stage_rank_[static_cast<std::size_t>(stage)] = r;
    return *this;
  }
  constexpr program_builder& placement(const std::vector<int>& stage_rank) {
    for (int s = 0; s < stages_ && s < static_cast<int>(stage_rank.size()); ++s)
      stage_rank_[static_cast<std::size_t>(s)] = stage_rank[static_cast<std::size_t>(s)];
    return *this;
  }
  /// Number of actions added to rank r so far.
  constexpr int size(int r) const { return static_cast<int>(lists_[static_cast<std::size_t>(r)].size()); }

  constexpr program build(const char* name = "custom") && {
    program p;
    p.name = name;
    p.ranks = ranks_;
    p.stages = stages_;
    p.microbatches = microbatches_;
    p.begin.push_back(0);
    std::size_t total = 0;
    for (const auto& l : lists_) total += l.size();
    p.actions.reserve(total);
    for (int r = 0; r < ranks_; ++r) {
      for (const action& a : lists_[static_cast<std::size_t>(r)]) {
        p.actions.push_back(a);
        if (a.stage >= 0 && a.stage < stages_ && stage_rank_[static_cast<std::size_t>(a.stage)] < 0)
          stage_rank_[static_cast<std::size_t>(a.stage)] = r;
      }
      p.begin.push_back(static_cast<int>(p.actions.size()));
    }
    p.stage_rank = std::move(stage_rank_);
    p.invalid_rank = invalid_rank_;
    return p;
  }

 private:
  int ranks_;
  int stages_;
  int microbatches_;
  int current_ = no_rank;
  int invalid_rank_ = no_rank;
  std::vector<int> stage_rank_;
  std::vector<std::vector<action>> lists_;
};

}  // namespace pipetype
