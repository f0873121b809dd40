// pipetype/core/schedule.hpp — what makes a type a schedule, and its sizes before generation.
//
// A schedule is any type with a `static constexpr pipetype::program generate()` (the compute
// program: every rank's ordered actions). The built-in generators are such types, and so is a
// user's own:
//
//   struct mine {
//     static constexpr pipetype::program generate() { /* program_builder ... */ }
//   };
//   constexpr auto plan = pipetype::make_plan<mine>();
//
// Every generator also has a run-time twin (`make_one_f_one_b(p, m)` ...) sharing the same code,
// which the explorer CLI uses with sizes from the command line.
//
// The concept lives in core/ so that compile/ (make_plan) needs no schedule family and the
// families need nothing from compile/.
#pragma once

#include <concepts>

#include "pipetype/core/program.hpp"

namespace pipetype {

/// The sizes of a program, known without building it. A schedule type may provide
/// `static constexpr program_extent extent()`; make_plan then sizes its tables from it instead of
/// generating the program twice (generation is a noticeable share of the compile time).
struct program_extent {
  int ranks = 0;
  int stages = 0;
  int microbatches = 0;
  int actions = 0;         // exactly the number of actions generate() returns
  int crossing_edges = 0;  // an upper bound on the stage-graph edges whose stages are on two ranks
  bool split = false;      // exactly: some backward is split into I and W (the stages must offer that)
  int edges = 0;           // exactly the edges the program carries (graph/dag.hpp; 0: a chain)
};

/// The extent of a schedule on the looped placement (v chunks per rank) with one F and one B per
/// stage and microbatch.
constexpr program_extent looped_extent(int p, int m, int v) {
  return {p, p * v, m, 2 * p * v * m, p > 1 ? p * v - 1 : 0};
}

template <class S>
concept schedule = requires {
  { S::generate() } -> std::same_as<program>;
};

/// The forward-only schedule of schedule S (core/program.hpp's forward_only_of): its F actions in
/// its order, for evaluation and inference plans.
///   constexpr auto eval = pipetype::make_plan<pipetype::forward_only<pipetype::one_f_one_b<...>>>();
template <schedule S>
struct forward_only {
  static constexpr program generate() { return forward_only_of(S::generate()); }
};

/// Wraps a constexpr callable returning a program as a schedule type:
///   using mine = pipetype::from_function<[] { ...; return std::move(b).build(); }>;
template <auto Fn>
struct from_function {
  static constexpr program generate() { return Fn(); }
};

}  // namespace pipetype
