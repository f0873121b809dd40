// pipetype/schedules/schedule.hpp — what makes a type a schedule.
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
#pragma once

#include <concepts>

#include "pipetype/core/program.hpp"

namespace pipetype {

template <class S>
concept schedule = requires {
  { S::generate() } -> std::same_as<program>;
};

/// Wraps a constexpr callable returning a program as a schedule type:
///   using mine = pipetype::from_function<[] { ...; return std::move(b).build(); }>;
template <auto Fn>
struct from_function {
  static constexpr program generate() { return Fn(); }
};

}  // namespace pipetype
