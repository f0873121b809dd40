// pipetype/mesh/memory_plan.hpp — a step with memory actions: memory_plan, proven at compile time,
// and its run-time twin plan_memory, placed, lowered, proved and timed.
//
//   using S = pipetype::one_f_one_b<pipetype::ranks<4>, pipetype::microbatches<8>>;
//   using step = pipetype::memory_plan<S, pipetype::saved_bytes<1 << 20>,
//                                      pipetype::offloads<pipetype::memory_policy::all>>;
//   static_assert(step::peak_bytes(0) <= 2 << 20);        // rank 0's device peak, a constant
//   static_assert(step::facts.offloads > 0);
//   const pipetype::memory_program mem = step::actions();  // at run time, for tools and executors
//
// The schedule's plan is make_plan's (plan_v<S>). Over it, at compile time: the memory actions are
// the schedule's own (a from_text schedule whose rows carry OFFLOAD, RELOAD, RECOMPUTE) or placed
// (place_memory, mesh/place_memory.hpp, under the default cost model); a limit is checked
// against one microbatch's bytes on every rank; the actions are checked (check_memory_actions: a
// RELOAD before its OFFLOAD, a RECOMPUTE of a forward whose input is offloaded, ...) and counted
// (memory_of) against the limit; the step is lowered onto each rank's copy stream and proven
// (lower_mesh, verify_mesh, verify_memory). A failure is a compile error of make_plan's form:
//
//   pipetype::error<what<_MEMORY_ACTION_MISPLACED_>, at_rank<0>, at_stage<0>, at_microbatch<1>,
//                   because<"a RELOAD before its OFFLOAD">, to_fix<"...">, in_schedule<...>>
//
// Options, in any order: saved_bytes<N...> and kept_bytes<N...> (memory_sizes: per stage, or one
// value for every stage; saved 1 by default, so that peaks count microbatches), memory_limit<B>
// (per rank), offloads<P> and recomputes<P> (memory_policy; none by default), host_link<B> (the
// copy bandwidth, bytes per time unit of the default cost model: F = 1, B = 2).
//
// At run time (the end of this file), plan_memory() is the twin that tools call: place_memory (mesh/place_memory.hpp)
// writes the actions, check_memory_actions checks them, lower_mesh puts them on each rank's copy and compute streams (a
// lone pipeline is a mesh of one replica), verify_mesh and verify_memory prove the result, and simulate_mesh times it
// beside the same step without them:
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
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <type_traits>
#include <vector>

#include "pipetype/compile/diagnostics.hpp"
#include "pipetype/compile/plan.hpp"
#include "pipetype/core/schedule.hpp"
#include "pipetype/mesh/memory_actions.hpp"
#include "pipetype/mesh/place_memory.hpp"
#include "pipetype/mesh/simulate.hpp"
#include "pipetype/mesh/verify.hpp"
#include "pipetype/mesh/verify_memory.hpp"

namespace pipetype {

/// The bytes a forward keeps for its backward: one value for every stage, or one per stage.
template <std::int64_t... Bytes>
struct saved_bytes {
  static_assert(sizeof...(Bytes) > 0 && ((Bytes >= 0) && ...), "pipetype::saved_bytes: sizes of at least 0 bytes");
};
/// The bytes a recomputed forward keeps (its input): one value, or one per stage.
template <std::int64_t... Bytes>
struct kept_bytes {
  static_assert(sizeof...(Bytes) > 0 && ((Bytes >= 0) && ...), "pipetype::kept_bytes: sizes of at least 0 bytes");
};
/// The most bytes of saved activations a rank may hold at once.
template <std::int64_t Bytes>
struct memory_limit {
  static_assert(Bytes > 0, "pipetype::memory_limit: a limit of at least one byte");
};
/// How activations are offloaded (memory_policy::none, automatic, all).
template <memory_policy P>
struct offloads {};
/// How forwards are recomputed.
template <memory_policy P>
struct recomputes {};
/// The host link's bandwidth in bytes per time unit of the default cost model.
template <std::int64_t BytesPerUnit>
struct host_link {
  static_assert(BytesPerUnit > 0, "pipetype::host_link: a bandwidth of at least one byte per time unit");
};

/// The compile-time facts of a memory plan: its verdict, and its peaks over the ranks.
struct memory_facts {
  verdict rejection{};               // ok, or the first thing wrong (as make_plan's)
  std::int64_t peak_bytes = 0;       // the largest rank's device peak with the actions
  std::int64_t base_peak_bytes = 0;  // the same without them
  std::int64_t host_peak_bytes = 0;  // the largest rank's host pool
  int offloads = 0, recomputes = 0;
};

namespace detail {

struct memory_request {
  memory_sizes sizes{{1}, {}};
  memory_options options{};
};
template <class O>
struct memory_option {
  static constexpr void apply(memory_request&) {}
};
template <std::int64_t... B>
struct memory_option<saved_bytes<B...>> {
  static constexpr void apply(memory_request& q) { q.sizes.saved = std::vector<std::int64_t>{B...}; }
};
template <std::int64_t... B>
struct memory_option<kept_bytes<B...>> {
  static constexpr void apply(memory_request& q) { q.sizes.kept = std::vector<std::int64_t>{B...}; }
};
template <std::int64_t B>
struct memory_option<memory_limit<B>> {
  static constexpr void apply(memory_request& q) { q.options.limit = B; }
};
template <memory_policy P>
struct memory_option<offloads<P>> {
  static constexpr void apply(memory_request& q) { q.options.offload = P; }
};
template <memory_policy P>
struct memory_option<recomputes<P>> {
  static constexpr void apply(memory_request& q) { q.options.recompute = P; }
};
template <std::int64_t B>
struct memory_option<host_link<B>> {
  static constexpr void apply(memory_request& q) { q.options.copy_bandwidth = static_cast<double>(B); }
};

template <class... Options>
constexpr memory_request memory_request_of() {
  memory_request q;
  (memory_option<Options>::apply(q), ...);
  return q;
}

/// The schedule's own memory actions (a from_text schedule with OFFLOAD, RELOAD, RECOMPUTE).
template <class S>
concept says_memory = requires {
  { S::memory() } -> std::same_as<memory_program>;
};

template <class S, class... Options>
constexpr memory_placement memory_actions_for(program_view p) {
  const memory_request q = memory_request_of<Options...>();
  if constexpr (says_memory<S>) {
    memory_program m = S::memory();
    if (!m.empty()) return {std::move(m), {}};
  }
  return place_memory(p, q.sizes, costs{}, q.options);
}

template <class S, class... Options>
constexpr memory_facts memory_facts_of() {
  const auto& plan = plan_v<S>;
  const program_view p = plan.compute();
  const memory_request q = memory_request_of<Options...>();
  memory_facts f;
  if (f.rejection = check_memory_limit(p, q.sizes, q.options.limit); !f.rejection.ok()) return f;
  const memory_placement placed = memory_actions_for<S, Options...>(p);
  if (f.rejection = placed.result; !f.rejection.ok()) return f;
  if (f.rejection = check_memory_actions(p, placed.actions); !f.rejection.ok()) return f;
  const std::vector<rank_memory> mem = memory_of(p, placed.actions, q.sizes);
  for (int r = 0; r < p.ranks; ++r) {
    const rank_memory& x = mem[static_cast<std::size_t>(r)];
    if (q.options.limit > 0 && x.peak_bytes > q.options.limit) {
      f.rejection =
          refusal(errc::memory_limit_exceeded, "the step's saved activations on this rank exceed the limit").on_rank(r);
      return f;
    }
    f.peak_bytes = std::max(f.peak_bytes, x.peak_bytes);
    f.base_peak_bytes = std::max(f.base_peak_bytes, x.base_peak_bytes);
    f.host_peak_bytes = std::max(f.host_peak_bytes, x.host_peak_bytes);
    f.offloads += x.offloaded;
    f.recomputes += x.recomputed;
  }
  const mesh_program mp = lower_mesh(p, plan.lowered(), mesh{p.ranks, 1}, place_collectives(p, {}), {}, placed.actions);
  f.rejection = verify_mesh(mp);
  return f;
}

/// `f` with verify_memory's verdict on the step, when it holds so far: a constant evaluation of its
/// own (it lowers the step again), so that each stays under the compiler's step limit.
template <class S, class... Options>
constexpr memory_facts with_memory_proof(memory_facts f) {
  if (!f.rejection.ok()) return f;
  const program_view p = plan_v<S>.compute();
  const memory_program actions = memory_actions_for<S, Options...>(p).actions;
  const mesh_program mp = lower_mesh(p, plan_v<S>.lowered(), mesh{p.ranks, 1}, place_collectives(p, {}), {}, actions);
  f.rejection = verify_memory(p, actions, mp);
  return f;
}

/// Per rank, the pools' slots of the step with its actions (one lowering for every rank's).
struct memory_slot_counts {
  int stash = 0, host = 0, activation = 0;
};
template <class S, class... Options>
constexpr auto memory_slot_counts_of() {
  constexpr int R = plan_v<S>.compute().ranks;
  std::array<memory_slot_counts, static_cast<std::size_t>(R)> out{};
  const program_view p = plan_v<S>.compute();
  const memory_program actions = memory_actions_for<S, Options...>(p).actions;
  if (actions.empty()) {  // the lowering's stash and activation slots, and no host pool
    for (std::size_t r = 0; r < out.size(); ++r)
      out[r] = {plan_v<S>.lowered().resources[r].stash_slots, 0, plan_v<S>.lowered().resources[r].activation_slots};
    return out;
  }
  const mesh_program mp = lower_mesh(p, plan_v<S>.lowered(), mesh{p.ranks, 1}, place_collectives(p, {}), {}, actions);
  for (std::size_t r = 0; r < out.size(); ++r) out[r] = {mp.stash_slots[r], mp.host_slots[r], mp.activation_slots[r]};
  return out;
}
template <class S, class... Options>
struct memory_slot_table {
  static constexpr auto value = memory_slot_counts_of<S, Options...>();
};

template <class S, class... Options>
struct memory_planner {
  static constexpr memory_facts counted = memory_facts_of<S, Options...>();  // up to verify_mesh
  static constexpr memory_facts value = with_memory_proof<S, Options...>(counted);
};

template <class S, class... Options>
constexpr memory_facts checked_memory() {
  using P = memory_planner<S, Options...>;
  report_rejection<P, S>();
  return P::value;
}

}  // namespace detail

/// A plan of schedule S with memory actions (see the top of this file), proven at compile time.
template <schedule S, class... Options>
struct memory_plan {
  static constexpr memory_facts facts = detail::checked_memory<S, Options...>();
  /// The pipeline plan (make_plan's).
  static constexpr const auto& plan() { return plan_v<S>; }
  /// The saved bytes and the pass's options the type says.
  static constexpr memory_sizes sizes() { return detail::memory_request_of<Options...>().sizes; }
  static constexpr memory_options options() { return detail::memory_request_of<Options...>().options; }
  /// The step's memory actions: the schedule's own, or placed.
  static constexpr memory_program actions() {
    return detail::memory_actions_for<S, Options...>(plan().compute()).actions;
  }
  /// Per rank, the device and host peaks (memory_of).
  static constexpr std::vector<rank_memory> memory() { return memory_of(plan().compute(), actions(), sizes()); }
  /// Rank r's device peak of saved activations with the actions, a constant.
  static constexpr std::int64_t peak_bytes(int r) { return memory()[static_cast<std::size_t>(r)].peak_bytes; }
  /// Rank r's host pool peak.
  static constexpr std::int64_t host_peak_bytes(int r) { return memory()[static_cast<std::size_t>(r)].host_peak_bytes; }
  /// The step lowered with its actions on one replica, its stash, host and activation slots assigned
  /// (mesh/memory_slots.hpp), as the executors run it.
  static constexpr mesh_program step() {
    const program_view p = plan().compute();
    return lower_mesh(p, plan().lowered(), mesh{p.ranks, 1}, place_collectives(p, {}), {}, actions());
  }
  /// Rank r's device stash slots and host slots with the actions, constants (the pools' sizes
  /// in stashes: an executor's pool is these times the rank's largest stash).
  /// Without actions, the lowering's stash slots (compile/saved_slots.hpp) and no host slots.
  /// All three accessors read one table, lowered once (a constant evaluation of its own).
  static constexpr int stash_slots(int r) { return slots(r).stash; }
  static constexpr int host_slots(int r) { return slots(r).host; }
  /// Rank r's activation slots with the actions (mesh/activation_slots.hpp: an offloaded input
  /// leaves its slot, so fewer may do), a constant; without actions, the lowering's.
  static constexpr int activation_slots(int r) { return slots(r).activation; }

 private:
  static constexpr detail::memory_slot_counts slots(int r) {
    (void)facts;  // a rejected plan is its error<...>, not a failure inside the lowering
    return detail::memory_slot_table<S, Options...>::value[static_cast<std::size_t>(r)];
  }
};

/// The facts of a memory plan, as make_plan gives a plan (a compile error when it is rejected).
template <schedule S, class... Options>
constexpr memory_facts make_memory_plan() {
  return detail::checked_memory<S, Options...>();
}

// ---- at run time: plan_memory ----------------------------------------------------------------

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
  if (out.result = check_mesh_ops(
          replicas, static_cast<long long>(l.ops.size() + placed_collectives.ops.size() + 3 * p.actions.size()));
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
