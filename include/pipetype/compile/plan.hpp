// pipetype/compile/plan.hpp — generate → verify → lower → verify, at compile time or run time.
//
//   constexpr auto plan = pipetype::make_plan<pipetype::one_f_one_b<ranks<4>, microbatches<8>>>();
//   static_assert(plan.peak_activations(0) == 4);
//
// `make_plan<Schedule, options>()` runs the whole pipeline in a constant expression and returns a
// `static_plan<shape>`: a literal value holding the compute program, its ticks, the lowered ops,
// communicators and per-rank resources in std::arrays sized exactly. A schedule that fails any
// check does not compile; the compiler names an `error<what<...>, at_rank<...>, ...>` type
// (diagnostics.hpp). `build_plan(program, options)` is the run-time twin (same code), returning
// a `runtime_plan` whose `result` carries the same verdict as a value.
//
// Compile cost: the pipeline runs once per plan, into arrays sized by cheap upper bounds, and is
// then copied into exact arrays;
// see bench/compile_cost.sh for measurements and docs/03_diagnostics.md for the limit flags.
#pragma once

#include <array>
#include <cstddef>

#include "pipetype/compile/diagnostics.hpp"
#include "pipetype/compile/lower.hpp"
#include "pipetype/compile/verify.hpp"
#include "pipetype/compile/verify_lowered.hpp"
#include "pipetype/schedules/schedule.hpp"

namespace pipetype {

struct plan_options {
  int mem_limit = 0;  // peak activations allowed per rank; 0 = no limit
  memory_model memory{};
  comm_policy comms = comm_policy::per_edge;
};

/// The run-time plan: owning tables and the verdict.
struct runtime_plan {
  program compute;
  program_facts facts;
  lowered_program lowered;
  verdict result;

  constexpr bool ok() const noexcept { return result.ok(); }
  constexpr double peak_activations(int r) const {
    return static_cast<double>(facts.peak_units[static_cast<std::size_t>(r)]) / unit;
  }
  int unit = 2;
};

constexpr runtime_plan build_plan(program prog, const plan_options& opt = {}) {
  runtime_plan out;
  out.unit = opt.memory.unit;
  out.compute = std::move(prog);
  out.facts = check_program(out.compute.view(), {opt.mem_limit, opt.memory});
  out.result = out.facts.result;
  if (!out.result.ok()) return out;
  out.lowered = lower(out.compute.view(), out.facts.tick, opt.comms);
  out.result = verify_lowered(out.lowered.view());
  return out;
}

/// Sizes of a static plan and, for a rejected schedule, where it failed. Structural, so it can
/// be a template argument.
struct plan_shape {
  int ranks = 0, stages = 0, microbatches = 0, actions = 0, ops = 0, comms = 0;
  errc code = errc::ok;
  int rank = -1, stage = -1, microbatch = -1, index = -1, line = -1, column = -1;
  char kind = '?';

  friend constexpr bool operator==(const plan_shape&, const plan_shape&) = default;
};

/// A verified, lowered plan as a literal value. `Z` sizes the arrays; `used` says how much of
/// them is filled (equal to Z for the plans make_plan returns).
template <plan_shape Z>
struct static_plan {
  static constexpr plan_shape shape = Z;
  static constexpr int ranks = Z.ranks;
  static constexpr int stages = Z.stages;
  static constexpr int microbatches = Z.microbatches;

  plan_shape used = Z;
  const char* name = "";
  int ticks = 0;
  int unit = 2;
  comm_policy policy = comm_policy::per_edge;
  std::array<int, static_cast<std::size_t>(Z.stages)> stage_rank{};
  std::array<int, static_cast<std::size_t>(Z.ranks) + 1> action_begin{};
  std::array<action, static_cast<std::size_t>(Z.actions)> actions{};
  std::array<int, static_cast<std::size_t>(Z.actions)> tick{};
  std::array<int, static_cast<std::size_t>(Z.ranks)> peak_units{};
  std::array<int, static_cast<std::size_t>(Z.ranks) + 1> op_begin{};
  std::array<lowered_op, static_cast<std::size_t>(Z.ops)> ops{};
  std::array<comm_desc, static_cast<std::size_t>(Z.comms)> comms{};
  std::array<rank_resources, static_cast<std::size_t>(Z.ranks)> resources{};

  constexpr program_view compute() const {
    return {name,
            used.ranks,
            used.stages,
            used.microbatches,
            stage_rank,
            action_begin,
            std::span<const action>(actions).first(static_cast<std::size_t>(used.actions)),
            -1,
            {}};
  }
  constexpr lowered_view lowered() const {
    return {used.ranks,
            policy,
            op_begin,
            std::span<const lowered_op>(ops).first(static_cast<std::size_t>(used.ops)),
            std::span<const comm_desc>(comms).first(static_cast<std::size_t>(used.comms)),
            resources};
  }
  constexpr double peak_activations(int r) const {
    return static_cast<double>(peak_units[static_cast<std::size_t>(r)]) / unit;
  }
  constexpr std::span<const lowered_op> rank_ops(int r) const { return lowered().rank_ops(r); }
};

namespace detail {

/// Upper bounds for the arrays, from the compute program alone (cheap): every action is one
/// compute op; every transfer is a send and a recv; a rank has at most one group per transfer
/// end and at most one record and one wait per compute op or group.
constexpr plan_shape capacity_of(const program& prog) {
  plan_shape z;
  z.ranks = prog.ranks > 0 ? prog.ranks : 0;
  z.stages = prog.stages > 0 ? prog.stages : 0;
  z.microbatches = prog.microbatches > 0 ? prog.microbatches : 0;
  z.actions = static_cast<int>(prog.actions.size());
  int crossing = 0;
  for (int s = 0; s + 1 < z.stages; ++s) {
    const int a = prog.stage_rank[static_cast<std::size_t>(s)], b = prog.stage_rank[static_cast<std::size_t>(s + 1)];
    crossing += (a != b || a < 0) ? 1 : 0;
  }
  const int ends = 4 * crossing * z.microbatches;  // 2 tensors per edge and microbatch, 2 ends each
  z.ops = 3 * z.actions + 5 * ends;
  z.comms = crossing > z.ranks * z.ranks ? crossing : z.ranks * z.ranks;
  if (z.comms > crossing && crossing < z.ranks * z.ranks) z.comms = crossing + z.ranks * z.ranks;
  return z;
}

template <plan_shape Cap, class F>
constexpr static_plan<Cap> build_static(F make_program, const plan_options& opt) {
  static_plan<Cap> s;
  const runtime_plan p = build_plan(make_program(), opt);
  plan_shape& z = s.used;
  z.code = p.result.code;
  z.rank = p.result.rank;
  z.stage = p.result.stage;
  z.microbatch = p.result.microbatch;
  z.index = p.result.index;
  z.line = p.result.line;
  z.column = p.result.column;
  z.kind = p.result.kind;
  z.ranks = p.compute.ranks;
  z.stages = p.compute.stages;
  z.microbatches = p.compute.microbatches;
  z.actions = static_cast<int>(p.compute.actions.size());
  z.ops = static_cast<int>(p.lowered.ops.size());
  z.comms = static_cast<int>(p.lowered.comms.size());
  if (!p.result.ok()) return s;
  s.name = p.compute.name;
  s.ticks = p.facts.ticks;
  s.unit = opt.memory.unit;
  s.policy = opt.comms;
  auto copy = [](const auto& from, auto& to) {
    const auto* f = from.data();
    auto* t = to.data();
    for (std::size_t i = 0; i < from.size(); ++i) t[i] = f[i];
  };
  copy(p.compute.stage_rank, s.stage_rank);
  copy(p.compute.begin, s.action_begin);
  copy(p.compute.actions, s.actions);
  copy(p.facts.tick, s.tick);
  copy(p.facts.peak_units, s.peak_units);
  copy(p.lowered.begin, s.op_begin);
  copy(p.lowered.ops, s.ops);
  copy(p.lowered.comms, s.comms);
  copy(p.lowered.resources, s.resources);
  return s;
}

template <plan_shape Z, plan_shape Cap>
constexpr static_plan<Z> shrink(const static_plan<Cap>& from) {
  static_plan<Z> s;
  s.name = from.name;
  s.ticks = from.ticks;
  s.unit = from.unit;
  s.policy = from.policy;
  auto copy = [](const auto& f, auto& t) {
    for (std::size_t i = 0; i < t.size(); ++i) t[i] = f[i];
  };
  copy(from.stage_rank, s.stage_rank);
  copy(from.action_begin, s.action_begin);
  copy(from.actions, s.actions);
  copy(from.tick, s.tick);
  copy(from.peak_units, s.peak_units);
  copy(from.op_begin, s.op_begin);
  copy(from.ops, s.ops);
  copy(from.comms, s.comms);
  copy(from.resources, s.resources);
  return s;
}

template <class Schedule, plan_options Options>
struct planner {
  static constexpr plan_shape cap = capacity_of(Schedule::generate());
  // The one full run of generate → verify → lower → verify, into arrays sized by `cap`.
  static constexpr static_plan<cap> full = build_static<cap>([] { return Schedule::generate(); }, Options);
  static constexpr plan_shape used = full.used;
};

}  // namespace detail

/// Generates, verifies and lowers `Schedule` at compile time. A rejected schedule is a compile
/// error naming `error<what<...>, at_rank<...>, at_stage<...>, at_microbatch<...>, at_action<...>>`.
template <schedule Schedule, plan_options Options = plan_options{}>
constexpr auto make_plan() {
  using P = detail::planner<Schedule, Options>;
  constexpr plan_shape z = P::used;
  if constexpr (z.code != errc::ok) {
    (void)
        detail::report<detail::error_for_t<z.code, z.rank, z.stage, z.microbatch, z.kind, z.index, z.line, z.column>>{};
    return static_plan<plan_shape{}>{};
  } else {
    return detail::shrink<plan_shape{z.ranks, z.stages, z.microbatches, z.actions, z.ops, z.comms}>(P::full);
  }
}

/// The type of a schedule's plan.
template <schedule Schedule, plan_options Options = plan_options{}>
using plan_t = decltype(make_plan<Schedule, Options>());

}  // namespace pipetype
