// pipetype/mesh/plan.hpp — a plan over a pp × dp mesh, proven at compile time.
//
//   using S = pipetype::one_f_one_b<pipetype::ranks<4>, pipetype::microbatches<8>>;
//   using step = pipetype::mesh_plan<S, pipetype::mesh_t<4, 2>, pipetype::sharded<3>, pipetype::tied<0, 3>>;
//   static_assert(step::facts.collectives == 32);
//   const pipetype::mesh_program mp = step::program();   // at run time, for the executors
//
// The schedule's plan is make_plan's (plan_v<S>). Over it, at compile time: the mesh is checked
// (check_mesh: a side below 1, more ranks than pipetype::limits, `world<N>` that pp × dp is not);
// the collectives are placed (place_collectives) or, when the schedule says its own (a from_text
// schedule whose rows carry UNSHARD, RESHARD and REDUCE_GRAD), read from it; they are checked
// (check_collectives: a tie group naming a stage the plan does not have, a reduction before its
// stage's last weight backward, a compute on a sharded stage, ...); the mesh step is lowered and
// proven (lower_mesh, verify_mesh). A failure is a compile error of the same form as make_plan's:
//
//   pipetype::error<what<_COLLECTIVE_MISPLACED_>, at_stage<9>, because<"a tie group names a stage
//                   the program does not have">, to_fix<"...">, in_schedule<...>>
//
// Options, in any order: sharded<Window> (FSDP / ZeRO-3: reduce-scatter, gathers in a window of
// Window stages; PyTorch's 3 by default), bucketed<N> (each REDUCE_GRAD as N all-reduces, each
// started as the last backward writes its bucket), with_grad_norm (GRAD_NORM last on every rank),
// with_finite_check (FINITE_CHECK before it), with_optimizer (OPT_STEP: each stage's optimizer
// hook in the step), zero<1> (ZeRO-1: the
// optimizer on each replica's shard, PARAM_SYNC after it),
// tied<Stages...> (a tie group; one per tied parameter),
// world<N> (the world the mesh must cover). program() lowers the same step again at run time
// (the compile-time one leaves no storage behind) for the executors: the host mesh_executor takes
// the plan and options(), the CUDA executor the program.
//
// At run time, for a plan known only then, build_mesh (the end of this file) is the same step:
// the same checks, lower_mesh and verify_mesh (and with memory actions check_memory_actions and
// verify_memory), a refusal being std::invalid_argument with the sentence the type's compile
// error carries. Every plan header has this shape: the type, proven at compile time, and its
// run-time twin (compile/plan.hpp: static_plan and build_plan; mesh/memory_plan.hpp: memory_plan
// and plan_memory).
#pragma once

#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "pipetype/compile/diagnostics.hpp"
#include "pipetype/compile/plan.hpp"
#include "pipetype/core/mesh.hpp"
#include "pipetype/core/schedule.hpp"
#include "pipetype/mesh/collectives.hpp"
#include "pipetype/mesh/verify.hpp"
#include "pipetype/mesh/verify_memory.hpp"

namespace pipetype {

/// FSDP / ZeRO-3 over the mesh: parameters sharded, at most `Window` stages gathered at once.
template <int Window = 3>
struct sharded {
  static_assert(Window >= 1, "pipetype::sharded<Window>: a window of at least one stage");
};
/// Gradient buckets: each stage's REDUCE_GRAD split into `N` all-reduces that start as the
/// stage's last weight backward writes their parts (dp_options::buckets; not with sharded<>).
template <int N>
struct bucketed {
  static_assert(N >= 1 && N <= limits::buckets, "pipetype::bucketed<N>: between 1 and 1024 buckets a stage");
};
/// GRAD_NORM in the step: the gradients' squared norm all-reduced over every rank, each rank's
/// last collective (dp_options::grad_norm; global gradient-norm clipping).
struct with_grad_norm {};
/// FINITE_CHECK in the step: whether every gradient is finite, over every rank, before GRAD_NORM
/// and the optimizer (dp_options::finite_check; dynamic loss scaling's skip).
struct with_finite_check {};
/// The optimizer in the step: OPT_STEP, each stage's optimizer hook on its replica's part of its
/// parameters, after the reductions it needs (dp_options::optimizer).
struct with_optimizer {};
/// ZeRO stage `Stage` (1: the optimizer's state sharded over the replicas — REDUCE_GRAD a
/// reduce-scatter, OPT_STEP on the replica's shard, PARAM_SYNC the all-gather after it;
/// dp_options::zero, the optimizer implied). ZeRO-3 is sharded<>.
template <int Stage>
struct zero {
  static_assert(Stage == 1, "pipetype::zero<Stage>: ZeRO-1 (ZeRO-3 is sharded<Window>)");
};
/// A tie group: the plan stages that hold one tied parameter (the embedding and the LM head).
template <int... Stages>
struct tied {};
/// The world the mesh must cover: pp × dp must be N.
template <int N>
struct world {};

/// The compile-time facts of a mesh plan: its verdict, and the size of its proven step.
struct mesh_facts {
  verdict rejection{};  // ok, or the first thing wrong (as make_plan's)
  int collectives = 0, communicators = 0, ops = 0;
  int param_slots = 0;  // sharded: the most parameter slots a rank's pool holds (mesh/lower.hpp)
};

namespace detail {

template <class O>
struct mesh_option {
  static constexpr void apply(dp_options&, int&) {}
};
template <int W>
struct mesh_option<sharded<W>> {
  static constexpr void apply(dp_options& o, int&) { o.shard = true, o.window = W; }
};
template <int N>
struct mesh_option<bucketed<N>> {
  static constexpr void apply(dp_options& o, int&) { o.buckets = N; }
};
template <>
struct mesh_option<with_grad_norm> {
  static constexpr void apply(dp_options& o, int&) { o.grad_norm = true; }
};
template <>
struct mesh_option<with_finite_check> {
  static constexpr void apply(dp_options& o, int&) { o.finite_check = true; }
};
template <>
struct mesh_option<with_optimizer> {
  static constexpr void apply(dp_options& o, int&) { o.optimizer = true; }
};
template <int Z>
struct mesh_option<zero<Z>> {
  static constexpr void apply(dp_options& o, int&) { o.zero = Z; }
};
template <int... S>
struct mesh_option<tied<S...>> {
  static constexpr void apply(dp_options& o, int&) { o.ties.push_back(std::vector<int>{S...}); }
};
template <int N>
struct mesh_option<world<N>> {
  static constexpr void apply(dp_options&, int& w) { w = N; }
};

template <class Mesh, class... Options>
constexpr dp_options mesh_options_of(int& world_size) {
  dp_options o;
  o.dp = Mesh::value.dp;
  (mesh_option<Options>::apply(o, world_size), ...);
  return o;
}

/// The schedule's own collectives (a from_text schedule with UNSHARD, RESHARD, REDUCE_GRAD).
template <class S>
concept says_collectives = requires {
  { S::collectives() } -> std::same_as<collective_program>;
};

template <class S, class Options>
constexpr collective_program mesh_collectives(program_view p, const dp_options& o) {
  if constexpr (says_collectives<S>) {
    collective_program c = S::collectives();
    if (!c.ops.empty()) return c;
  }
  return place_collectives(p, o);
}

constexpr verdict mesh_misfit(const char* why) { return refusal(errc::bad_mesh, why); }

template <class S, class Mesh, class... Options>
constexpr mesh_facts facts_of() {
  const auto& plan = plan_v<S>;
  const program_view p = plan.compute();
  mesh_facts f;
  const mesh m = Mesh::value;
  int world_size = -1;
  const dp_options o = mesh_options_of<Mesh, Options...>(world_size);
  if (f.rejection = check_mesh(m, world_size); !f.rejection.ok()) return f;
  if (m.pp != p.ranks) return f.rejection = mesh_misfit("the mesh's pipeline ranks (pp) are not the plan's ranks"), f;
  if (p.lanes > 1)
    return f.rejection = mesh_misfit("a plan of several lanes (DualPipe) does not run over a mesh yet"), f;
  const collective_program c = mesh_collectives<S, void>(p, o);
  if (f.rejection = check_collectives(p, c, o); !f.rejection.ok()) return f;
  const mesh_program mp = lower_mesh(p, plan.lowered(), m, c, o);
  if (f.rejection = verify_mesh(mp); !f.rejection.ok()) return f;
  for (const mesh_op& x : mp.ops) f.collectives += is_collective(x.code) ? 1 : 0;
  f.communicators = static_cast<int>(mp.comms.size());
  f.ops = static_cast<int>(mp.ops.size());
  for (const int n : mp.param_slots) f.param_slots = f.param_slots > n ? f.param_slots : n;
  return f;
}

template <class S, class Mesh, class... Options>
struct mesh_planner {
  static constexpr mesh_facts value = facts_of<S, Mesh, Options...>();
};

template <class S, class Mesh, class... Options>
constexpr mesh_facts checked_mesh() {
  using P = mesh_planner<S, Mesh, Options...>;
  report_rejection<P, S>();
  return P::value;
}

}  // namespace detail

/// A plan of schedule S over mesh `Mesh` (mesh_t<PP, DP, Order>) with `Options` (see the top of
/// this file), proven at compile time.
template <schedule S, class Mesh, class... Options>
struct mesh_plan {
  static constexpr mesh shape = Mesh::value;
  static constexpr mesh_facts facts = detail::checked_mesh<S, Mesh, Options...>();
  /// The pipeline plan (make_plan's).
  static constexpr const auto& plan() { return plan_v<S>; }
  /// The data-parallel options the type says.
  static constexpr dp_options options() {
    int world_size = -1;
    return detail::mesh_options_of<Mesh, Options...>(world_size);
  }
  /// The step's collectives: the schedule's own, or placed.
  static constexpr collective_program collectives() {
    return detail::mesh_collectives<S, void>(plan().compute(), options());
  }
  /// The proven step, lowered again at run time (the executors bind it).
  static mesh_program program() {
    return lower_mesh(plan().compute(), plan().lowered(), shape, collectives(), options());
  }
};

/// The facts of a mesh plan, as make_plan gives a plan: `constexpr auto f =
/// pipetype::make_mesh_plan<S, pipetype::mesh_t<4, 2>>();` (a compile error when it is rejected).
template <schedule S, class Mesh, class... Options>
constexpr mesh_facts make_mesh_plan() {
  return detail::checked_mesh<S, Mesh, Options...>();
}

// ---- at run time: build_mesh, the proven step of a plan known only then -------------------------

namespace detail {
/// build_mesh's checks of its inputs (the mesh, its fit to the plan and the options, the
/// collectives); std::invalid_argument with one sentence (prefixed `who`).
inline void check_mesh_inputs(program_view p, const mesh& m, const collective_program& c, const dp_options& o,
                              const std::string& who) {
  if (const verdict mv = check_mesh(m); !mv.ok()) throw std::invalid_argument(who + ": " + describe(mv));
  if (m.pp != p.ranks)
    throw std::invalid_argument(who + ": the mesh has " + std::to_string(m.pp) + " pipeline ranks (pp), the plan " +
                                std::to_string(p.ranks));
  if (o.dp != m.dp)
    throw std::invalid_argument(who + ": dp_options::dp is " + std::to_string(o.dp) + " but the mesh has " +
                                std::to_string(m.dp) + " replicas");
  if (const verdict cv = check_collectives(p, c, o); !cv.ok()) throw std::invalid_argument(who + ": " + describe(cv));
}
}  // namespace detail

/// The proven mesh step of `p` lowered as `l` on mesh `m` with collectives `c` (options `o`):
/// check_mesh, check_collectives, lower_mesh, verify_mesh; std::invalid_argument with one
/// sentence (prefixed `who`) otherwise. What the executors bind each global rank from (with
/// memory actions: the overload below).
inline mesh_program build_mesh(program_view p, lowered_view l, const mesh& m, const collective_program& c,
                               const dp_options& o, const std::string& who = "pipetype") {
  detail::check_mesh_inputs(p, m, c, o, who);
  mesh_program mp = lower_mesh(p, l, m, c, o);
  if (const verdict v = verify_mesh(mp); !v.ok()) throw std::invalid_argument(who + ": " + describe(v));
  return mp;
}
/// The same with the collectives place_collectives(p, o) writes.
inline mesh_program build_mesh(program_view p, lowered_view l, const mesh& m, const dp_options& o,
                               const std::string& who = "pipetype") {
  return build_mesh(p, l, m, place_collectives(p, o), o, who);
}

/// The proven step of `p` lowered as `l` on mesh `m` with collectives `c` (options `o`) and memory
/// actions `mem`: build_mesh's checks, then check_memory_actions, lower_mesh, verify_mesh and
/// verify_memory; std::invalid_argument with one sentence (prefixed `who`) otherwise.
inline mesh_program build_mesh(program_view p, lowered_view l, const mesh& m, const collective_program& c,
                               const dp_options& o, const memory_program& mem, const std::string& who = "pipetype") {
  detail::check_mesh_inputs(p, m, c, o, who);
  if (const verdict v = check_memory_actions(p, mem); !v.ok()) throw std::invalid_argument(who + ": " + describe(v));
  mesh_program mp = lower_mesh(p, l, m, c, o, mem);
  if (const verdict v = verify_mesh(mp); !v.ok()) throw std::invalid_argument(who + ": " + describe(v));
  if (const verdict v = verify_memory(p, mem, mp); !v.ok()) throw std::invalid_argument(who + ": " + describe(v));
  return mp;
}

}  // namespace pipetype
