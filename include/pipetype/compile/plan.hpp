// pipetype/compile/plan.hpp — generate → verify → lower → verify, at compile time or run time.
// Example:
//   #include <pipetype/schedules/one_f_one_b.hpp>
//   constexpr auto plan = pipetype::make_plan<pipetype::one_f_one_b<pipetype::ranks<4>, pipetype::microbatches<8>>>();
//   static_assert(plan.peak_activations(0) == 4);
//
// `plan_v<Schedule, options>` runs the whole pipeline in a constant expression and names the
// result, a `static_plan<shape>`: a literal value holding the compute program, its ticks, the
// lowered ops, communicators and per-rank resources in std::arrays (exact for the compute
// program, capacity-sized for ops and communicators, read through ops() and comms()).
// `make_plan<Schedule, options>()` returns a copy of it. A schedule that fails any check does
// not compile; the compiler names an `error<what<...>, at_rank<...>, ...>` type
// (diagnostics.hpp). `build_plan(program, options)` is the run-time twin (same code), returning
// a `runtime_plan` whose `result` carries the same verdict as a value.
//
// Compile cost: the pipeline runs once per plan; see bench/README.md for measurements and
// docs/03_diagnostics.md for the flags that lift the compilers' constexpr limits.
#pragma once

#include <array>
#include <cstddef>
#include <type_traits>
#include <vector>

#include "pipetype/analysis/simulate.hpp"
#include "pipetype/compile/diagnostics.hpp"
#include "pipetype/compile/lower.hpp"
#include "pipetype/compile/verify.hpp"
#include "pipetype/compile/verify_lowered.hpp"
#include "pipetype/core/schedule.hpp"
#include "pipetype/core/verdict.hpp"
#include "pipetype/detail/scratch.hpp"

namespace pipetype {

struct plan_options {
  int mem_limit = 0;  // peak activations allowed per rank; 0 = no limit
  memory_model memory{};
  comm_policy comms = comm_policy::per_edge;
  /// The limit in memory_model units, for fractions of an activation (with the default model,
  /// 7 means 3.5 activations: I and W each release half of one); wins over mem_limit when > 0.
  int mem_limit_units = 0;
  group_policy groups = group_policy::automatic;  // lowered.hpp
};

/// The run-time plan: owning tables and the verdict. Read it through the same accessors as a
/// `static_plan` (compute(), lowered(), ops(), comms(), rank_ops(r), ticks(),
/// peak_activations(r)); the owning tables are there for tools that edit a plan.
struct runtime_plan {
  program compute_table;
  program_facts facts;
  packed_program lowered_table;  // ops packed (packed_ops.hpp); copy_of(lowered()) to edit them
  verdict result;
  memory_model memory{};

  constexpr bool ok() const noexcept { return result.ok(); }
  constexpr program_view compute() const { return compute_table.view(); }
  constexpr lowered_view lowered() const { return lowered_table.view(); }
  constexpr op_span ops() const { return lowered_table.ops; }
  constexpr std::span<const comm_desc> comms() const { return lowered_table.comms; }
  constexpr op_span rank_ops(int r) const { return lowered().rank_ops(r); }
  constexpr int ticks() const noexcept { return facts.ticks; }
  constexpr double peak_activations(int r) const {
    return static_cast<double>(facts.peak_units[static_cast<std::size_t>(r)]) / memory.unit;
  }
};

constexpr runtime_plan build_plan(program prog, const plan_options& opt = {}) {
  runtime_plan out;
  out.memory = opt.memory;
  out.compute_table = std::move(prog);
  out.facts = check_program(out.compute(), {opt.mem_limit, opt.memory, opt.mem_limit_units});
  out.result = out.facts.result;
  if (!out.result.ok()) return out;
  out.lowered_table = lower_packed(out.compute(), out.facts.tick, opt.comms, opt.groups);
  // a large plan's lowering tables go back to the system before verify_lowered takes its own (a
  // small plan's are too few to be worth a walk of the heap)
  if (!out.lowered_table.ops.is_plain()) detail::return_free_pages();
  out.result = verify_lowered(out.lowered());
  return out;
}

/// Sizes of a static plan and, for a rejected schedule, where it failed. Structural, so it can
/// be a template argument.
struct plan_shape {
  int ranks = 0, stages = 0, microbatches = 0, actions = 0, ops = 0, comms = 0;
  int edges = 0, slot_lists = 0;  // a stage graph's edges (0: a chain) and its ops' slot lists
  bool split = false;             // some backward is split into I and W: the executors need stages that offer that
  errc code = errc::ok;
  int rank = -1, stage = -1, microbatch = -1, index = -1, line = -1, column = -1;
  char kind = '?';

  friend constexpr bool operator==(const plan_shape&, const plan_shape&) = default;
};

/// A verified, lowered plan as a literal value. `Z` holds the array capacities: exact for the
/// compute program, an upper bound for the lowered ops and communicators (their exact count is
/// known only after lowering, and copying into exact arrays would double the compile cost);
/// `used` holds the counts. Read the ops and communicators through `ops()` and `comms()`.
template <plan_shape Z>
struct static_plan {
  static constexpr plan_shape shape = Z;
  static constexpr int ranks = Z.ranks;
  static constexpr int stages = Z.stages;
  static constexpr int microbatches = Z.microbatches;

  plan_shape used = Z;
  verdict rejection{};  // why the schedule was rejected (ok for a plan that exists)
  const char* name = "";
  int tick_count = 0;
  memory_model memory{};
  comm_policy policy = comm_policy::per_edge;
  int lanes = 1;
  std::array<int, static_cast<std::size_t>(Z.stages)> stage_rank{};
  int action_begin[Z.ranks + 1]{};
  action actions[Z.actions + 1]{};  // first used.actions
  int tick[Z.actions + 1]{};        // first used.actions
  std::array<int, static_cast<std::size_t>(Z.ranks)> peak_units{};
  // the lowered program: C arrays (one spare element each, so none is empty), which verify_static
  // hands verify_lowered_in as arrays (verify_lowered.hpp says why)
  int op_begin[Z.ranks + 1]{};
  rank_resources resources[Z.ranks + 1]{};                                 // first Z.ranks
  lowered_op op_table[Z.ops + 1]{};                                        // first used.ops are the ops
  comm_desc comm_table[Z.comms + 1]{};                                     // first used.comms
  std::array<stage_edge, static_cast<std::size_t>(Z.edges)> edge_table{};  // exact
  int list_table[Z.slot_lists + 1]{};                                      // first used.slot_lists

  constexpr std::span<const lowered_op> ops() const {
    return std::span<const lowered_op>(op_table, static_cast<std::size_t>(used.ops));
  }
  constexpr std::span<const comm_desc> comms() const {
    return std::span<const comm_desc>(comm_table, static_cast<std::size_t>(used.comms));
  }
  constexpr program_view compute() const {
    return {name,
            used.ranks,
            used.stages,
            used.microbatches,
            stage_rank,
            std::span<const int>(action_begin, static_cast<std::size_t>(Z.ranks) + 1),
            std::span<const action>(actions, static_cast<std::size_t>(Z.actions)),
            no_rank,
            {},
            lanes,
            edge_table};
  }
  constexpr lowered_view lowered() const {
    return {used.ranks,
            policy,
            std::span<const int>(op_begin, static_cast<std::size_t>(Z.ranks) + 1),
            ops(),
            comms(),
            std::span<const rank_resources>(resources, static_cast<std::size_t>(Z.ranks)),
            std::span<const int>(list_table, static_cast<std::size_t>(used.slot_lists))};
  }
  constexpr double peak_activations(int r) const {
    return static_cast<double>(peak_units[static_cast<std::size_t>(r)]) / memory.unit;
  }
  constexpr op_span rank_ops(int r) const { return lowered().rank_ops(r); }
  constexpr int ticks() const noexcept { return tick_count; }
  /// Always true: a static plan exists only for an accepted schedule.
  constexpr bool ok() const noexcept { return true; }
};

namespace detail {

/// Capacities from a program's extent. Exact for the program; for the lowered program: one
/// compute op per action, a send and a recv per transfer (two per crossing edge and
/// microbatch), and at most one group op per transfer end; with a stage graph, its ops' slot
/// lists (three counts and at most one slot per edge end, each action).
constexpr plan_shape capacity_of(const program_extent& e) {
  plan_shape z;
  // past pipetype::limits: no tables at all (verify then reports too_large from the program)
  if (limits::exceeded(e.ranks, e.stages, e.microbatches, e.actions)) return z;
  z.ranks = e.ranks > 0 ? e.ranks : 0;
  z.stages = e.stages > 0 ? e.stages : 0;
  z.microbatches = e.microbatches > 0 ? e.microbatches : 0;
  z.actions = e.actions;
  // a chain has at most stages − 1 crossing edges, whatever an extent() says; a stage graph at
  // most its edges, which verify bounds (no repeated edge: at most stages² of them). This bounds
  // the tables and keeps them in int
  z.edges = e.edges > 0 && e.edges <= z.stages * z.stages ? e.edges : 0;
  const int most = z.edges > 0 ? z.edges : (z.stages > 1 ? z.stages - 1 : 0);
  const int edges = e.crossing_edges < most ? (e.crossing_edges > 0 ? e.crossing_edges : 0) : most;
  const int transfers = 2 * edges * z.microbatches;
  z.ops = z.actions + 2 * transfers + 2 * transfers;
  z.comms = edges;
  z.split = e.split;
  z.slot_lists = z.edges > 0 ? z.actions * (3 + 2 * z.edges) : 0;
  return z;
}

/// The extent of a generated program (when the schedule type does not say).
constexpr program_extent extent_of(const program& prog) {
  program_extent e{prog.ranks,
                   prog.stages,
                   prog.microbatches,
                   static_cast<int>(prog.actions.size()),
                   0,
                   prog.view().split_backward(),
                   static_cast<int>(prog.edges.size())};
  const auto rank_of = [&](int s) {
    return s >= 0 && s < static_cast<int>(prog.stage_rank.size()) ? prog.stage_rank[static_cast<std::size_t>(s)] : -1;
  };
  for (const stage_edge& g : prog.edges) e.crossing_edges += rank_of(g.from) != rank_of(g.to) || rank_of(g.from) < 0;
  if (!prog.edges.empty()) return e;
  for (int s = 0; s + 1 < prog.stages && s + 1 < static_cast<int>(prog.stage_rank.size()); ++s) {
    if (prog.view().lane_tail(s)) continue;  // no edge between two lanes
    const int a = prog.stage_rank[static_cast<std::size_t>(s)], b = prog.stage_rank[static_cast<std::size_t>(s + 1)];
    e.crossing_edges += (a != b || a < 0) ? 1 : 0;
  }
  return e;
}

template <class Schedule>
constexpr program_extent extent_of() {
  if constexpr (requires {
                  { Schedule::extent() } -> std::same_as<program_extent>;
                })
    return Schedule::extent();
  else
    return extent_of(Schedule::generate());
}

/// A generated program frozen into exact arrays: the first of make_plan's constant evaluations.
/// A program that does not fit its capacities is not kept; `early` then holds its verdict.
template <plan_shape Cap>
struct frozen_program {
  bool kept = false;
  verdict early{};
  const char* name = "";
  int ranks = 0, stages = 0, microbatches = 0, lanes = 1, count = 0,
      placed = 0;  // count: actions; placed: stage_rank's
  // what the checks and the lowering read as arrays: C arrays, one spare element each
  int stage_rank[Cap.stages + 1]{};
  int begin[Cap.ranks + 1]{};
  action actions[Cap.actions + 1]{};
  std::array<stage_edge, static_cast<std::size_t>(Cap.edges)> edges{};

  constexpr program_view view() const {
    return {name,
            ranks,
            stages,
            microbatches,
            std::span<const int>(stage_rank, static_cast<std::size_t>(placed)),
            std::span<const int>(begin, static_cast<std::size_t>(ranks) + 1),
            std::span<const action>(actions, static_cast<std::size_t>(count)),
            no_rank,
            {},
            lanes,
            edges};
  }
};

/// The second: the lock-step ticks, the peaks and the verdict of the checks.
template <plan_shape Cap>
struct checked_program {
  verdict result{};
  int ticks = 0;
  int tick[Cap.actions + 1]{};
  std::array<int, static_cast<std::size_t>(Cap.ranks)> peak_units{};
};

template <class From, class To>
constexpr void copy_into(const From& from, To& to) {
  const auto* f = from.data();
  auto* t = to.data();
  for (std::size_t i = 0; i < from.size(); ++i) t[i] = f[i];
}

template <plan_shape Cap>
constexpr frozen_program<Cap> freeze(const program& prog, const plan_options& opt) {
  frozen_program<Cap> out;
  const bool fits = static_cast<int>(prog.actions.size()) <= Cap.actions && prog.ranks <= Cap.ranks &&
                    static_cast<int>(prog.stage_rank.size()) <= Cap.stages &&
                    static_cast<int>(prog.begin.size()) <= Cap.ranks + 1;
  const bool edges_fit = static_cast<int>(prog.edges.size()) == Cap.edges;
  if (!fits || !edges_fit || !prog.source_error.ok() || prog.invalid_rank != no_rank) {
    // not kept: its verdict now (the program's own error first, then what its extent() got wrong)
    verdict v = check_program(prog.view(), {opt.mem_limit, opt.memory, opt.mem_limit_units}).result;
    if (v.ok() && !fits)  // a schedule whose extent() undercounts what generate() returns
      v = refusal(errc::bad_extent, "the schedule's extent() is smaller than the program it generates");
    if (v.ok() && !edges_fit)
      v = refusal(errc::bad_extent,
                  "the schedule's extent().edges is not the number of stage-graph edges it generates");
    out.early = v;
    return out;
  }
  out.kept = true;
  out.count = static_cast<int>(prog.actions.size());
  out.placed = static_cast<int>(prog.stage_rank.size());
  out.name = prog.name;
  out.ranks = prog.ranks;
  out.stages = prog.stages;
  out.microbatches = prog.microbatches;
  out.lanes = prog.lanes;
  for (std::size_t s = 0; s < prog.stage_rank.size(); ++s) out.stage_rank[s] = prog.stage_rank[s];
  for (std::size_t r = 0; r < prog.begin.size(); ++r) out.begin[r] = prog.begin[r];
  for (std::size_t i = 0; i < prog.actions.size(); ++i) out.actions[i] = prog.actions[i];
  copy_into(prog.edges, out.edges);
  return out;
}

template <plan_shape Cap>
constexpr checked_program<Cap> check_frozen(const frozen_program<Cap>& f, const plan_options& opt) {
  checked_program<Cap> out;
  if (!f.kept) {
    out.result = f.early;
    return out;
  }
  const program_view p = f.view();
  using W = check_scratch_fixed<Cap.stages, Cap.stages * Cap.microbatches, Cap.ranks>;
  scratch<W> room(1, unset);
  int* peaks = out.peak_units.data();
  const detail::check_result facts = detail::check_in(
      p, f.actions, f.begin, f.stage_rank, {opt.mem_limit, opt.memory, opt.mem_limit_units}, out.tick, peaks, room[0]);
  out.result = facts.result;
  out.ticks = facts.ticks;
  if (out.result.ok() && p.split_backward() != Cap.split) {  // the executors trust Cap.split
    out.result = refusal(errc::bad_extent, "the schedule's extent().split does not say whether it splits backwards");
  }
  return out;
}

/// The third: passes 1–4 of the lowering (lower_tables.hpp) frozen into arrays — what pass 5 reads,
/// the communicators, slot counts and slot lists. Pass 5 is the fourth evaluation
/// (build_static): in one, the lowering of ZB-H1 with 16 ranks and 128 microbatches took clang
/// past its default steps.
template <plan_shape Cap>
struct lowered_front {
  // transfers at most: two per crossing edge and microbatch (capacity_of); edges: a chain's S − 1
  static constexpr int X = 2 * Cap.comms * Cap.microbatches;
  static constexpr int E = Cap.edges > 0 ? Cap.edges : (Cap.stages > 1 ? Cap.stages - 1 : 0);
  static constexpr int A = Cap.actions, P = Cap.ranks;
  static constexpr int MX = 2 * E * Cap.microbatches + 1;  // transfer_table::max_x
  static constexpr int EX = 2 * X + 2;                     // room for one field of the transfer ends
  verdict result{};
  int ops = 0, comms = 0, slot_lists = 0;
  // passes 1–4 write these in place; C arrays, one spare element each, so none is empty
  int x[9 * MX]{};                          // transfer_table::x
  int compute[3 * A + 1]{};                 // slot_table::compute
  int ends[4 * EX]{};                       // end_table: x, tick, slot, peer (EX each)
  char end_send[EX]{};                      // end_table::send
  int end_begin[P + 1]{};                   // end_table::rank_begin
  int edge_comm[E + 1]{};                   // lower_communicators
  int link[(Cap.edges > 0 ? A : 0) + 1]{};  // slot_table::link
  int lists[Cap.slot_lists + 1]{};          // slot_table::lists
  std::array<rank_resources, static_cast<std::size_t>(P)> resources{};
  std::array<comm_desc, static_cast<std::size_t>(Cap.comms)> comm_table{};
};

/// The tables and scratch of passes 0–4 in make_plan (lower_tables.hpp: what each holds), as arrays
/// bounded by the capacities: T ticks ≤ A actions, a transfer end per transfer side, a buffer per
/// output, per received copy and per gradient (transfer_table::buffers_for).
template <plan_shape Cap>
struct front_room {
  using F = lowered_front<Cap>;
  static constexpr int S = Cap.stages, m = Cap.microbatches, n = S * m, E = F::E, P = F::P, A = F::A;
  static constexpr int MIV = n + 3 * E * m + 1;               // transfer_table::buffers_for
  static constexpr int STRIDE = 2 * (S > E ? S : E) * m + 2;  // slot_table::stride_for
  static constexpr int START = 2 * A + 5 + P;                 // counting sorts: limit() + 1, T + 3, P + 1
  static constexpr int ORDER = MIV > 2 * F::MX + 2 ? MIV : 2 * F::MX + 2;
  int owner[S + 1], posF[n + 1], posG[n + 1], last[n + 1], from[E + 1], to[E + 1], pred_begin[S + 2], pred[E + 1],
      succ_begin[S + 2], succ[E + 1], cut[E + 1], grad_begin[S + 2], grad[E + 1], fill[3 * S + 2];
  int pair[P * P + 1];
  int iv[5 * MIV];
  int of_buffer[2 * STRIDE];
  int start[START], order[ORDER], base[2 * P + 1], nslots[2 * P + 1], nbusy[2 * P + 1], nidle[2 * P + 1];
  long long busy[MIV + 1], idle[MIV + 1];
  int key[2 * F::MX + 2], vote[2 * (A + 3)];
};

/// What passes 1–4 read (lower_tables.hpp, lowering_input: the same names), as references to arrays.
template <plan_shape Cap>
struct static_lowering_input : lowering_shape {
  using R = front_room<Cap>;
  const action (&A)[Cap.actions + 1];
  const int (&tick)[Cap.actions + 1];
  const int (&beg)[Cap.ranks + 1];
  const decltype(R::owner)& owner;
  const decltype(R::posF)& posF;
  const decltype(R::posG)& posG;
  const decltype(R::last)& last;
  const decltype(R::from)& from;
  const decltype(R::to)& to;
  const decltype(R::pred_begin)& pred_begin;
  const decltype(R::pred)& pred;
  const decltype(R::succ_begin)& succ_begin;
  const decltype(R::succ)& succ;
  const decltype(R::cut)& cut;
  const decltype(R::grad_begin)& grad_begin;
  const decltype(R::grad)& grad;
};

template <plan_shape Cap>
constexpr lowered_front<Cap> lower_front(const frozen_program<Cap>& f, const checked_program<Cap>& c,
                                         const plan_options& opt) {
  using F = lowered_front<Cap>;
  using R = front_room<Cap>;
  lowered_front<Cap> out;
  out.result = c.result;
  if (!out.result.ok()) return out;
  const program_view p = f.view();
  const auto fault = [&](const char* why) {
    out.result = refusal(errc::bad_extent, why);
    return out;
  };
  constexpr const char* undercounts = "the schedule's extent() undercounts the edges between stages on different ranks";
  const lowering_shape sh = lowering_shape_of(p, c.tick);
  if (sh.E > F::E || sh.T > F::A) return fault(undercounts);
  scratch<R> room(1, unset);
  R& w = room[0];
  lowering_tables_in(p, f.actions, f.begin, c.tick, sh, w);
  const static_lowering_input<Cap> in{sh,           f.actions, c.tick, f.begin,      w.owner,      w.posF,
                                      w.posG,       w.last,    w.from, w.to,         w.pred_begin, w.pred,
                                      w.succ_begin, w.succ,    w.cut,  w.grad_begin, w.grad};
  std::vector<comm_desc> comms;
  lower_communicators_in(in, opt.comms, comms, out.edge_comm, w.pair);
  int niv = 0, nx = 0;
  lower_transfers_in(in, w.iv, R::MIV, out.x, F::MX, niv, nx);
  const int stride = slot_table::stride_for(sh);
  std::vector<int> lists;
  assign_slots_in(in, w.iv, R::MIV, niv, stride, out.resources.data(), w.of_buffer, out.compute, out.link, lists, w);
  // capacity_of bounds the transfers from a true extent()
  if (nx > F::X || static_cast<int>(comms.size()) > Cap.comms) return fault(undercounts);
  order_ends_in(in, out.x, F::MX, nx, w.of_buffer, stride, resolve(opt.groups, p), out.ends, F::EX, out.end_send,
                out.end_begin, w);
  out.ops = count_ops_in(sh, nx, out.ends, F::EX, out.end_begin);
  if (out.ops > Cap.ops) return fault(undercounts);
  if (static_cast<int>(lists.size()) > Cap.slot_lists) return fault("the plan's slot lists outgrew their capacity");
  out.comms = static_cast<int>(comms.size());
  out.slot_lists = static_cast<int>(lists.size());
  for (int i = 0; i < out.slot_lists; ++i) out.lists[i] = lists[static_cast<std::size_t>(i)];
  copy_into(comms, out.comm_table);
  return out;
}

/// Pass 5's input as references to the frozen arrays (lower.hpp, rank_input: the same fields).
template <plan_shape Cap>
struct static_rank_input {
  using F = lowered_front<Cap>;
  const action (&A)[Cap.actions + 1];
  const int (&tick)[Cap.actions + 1];
  const int (&beg)[Cap.ranks + 1];
  int P, N, MX, EX;
  bool graph;
  const int (&x)[9 * F::MX];
  const int (&edge_comm)[F::E + 1];
  const int (&compute)[3 * F::A + 1];
  const int (&link)[(Cap.edges > 0 ? F::A : 0) + 1];
  const int (&lists)[Cap.slot_lists + 1];
  const int (&rank_begin)[F::P + 1];
  const int (&ends)[4 * F::EX];
  const char (&e_send)[F::EX];
};

/// The fourth: pass 5 of the lowering, written straight into the plan's table (no std::vector
/// of ops and no copy: the cheapest form for the constant evaluator). The fifth,
/// verify_lowered, runs on the result (planner::verified).
template <plan_shape Cap>
constexpr static_plan<Cap> build_static(const frozen_program<Cap>& f, const checked_program<Cap>& c,
                                        const lowered_front<Cap>& front, const plan_options& opt) {
  using F = lowered_front<Cap>;
  static_plan<Cap> s;
  const verdict v = front.result;
  plan_shape& z = s.used;
  s.rejection = v;
  z.code = v.code;
  z.rank = v.rank;
  z.stage = v.stage;
  z.microbatch = v.microbatch;
  z.index = v.index;
  z.line = v.line;
  z.column = v.column;
  z.kind = v.kind;
  if (!v.ok()) return s;
  for (int r = 0; r < F::P; ++r) s.resources[r] = front.resources[static_cast<std::size_t>(r)];
  // a rank has fewer steps (computes and transfer ends) and slots than the plan has ops
  for (int r = 0; r < f.ranks; ++r)
    if (s.resources[r].activation_slots + s.resources[r].gradient_slots > Cap.ops) {
      z.code = errc::bad_extent;
      s.rejection = refusal(errc::bad_extent, "a rank's buffer slots outgrew the plan's capacity");
      return s;
    }
  const static_rank_input<Cap> in{f.actions,   c.tick,          f.begin,    f.ranks,         f.count,       F::MX,
                                  F::EX,       Cap.edges > 0,   front.x,    front.edge_comm, front.compute, front.link,
                                  front.lists, front.end_begin, front.ends, front.end_send};
  int nout = 0;
  {
    scratch<rank_scratch_fixed<Cap.ops, Cap.ops>> room(1, unset);
    s.op_begin[0] = 0;
    const program_view pv = f.view();
    for (int r = 0; r < in.P; ++r) {
      nout = lower_rank_in(in, r, room[0], s.resources[r], s.op_table, nout), s.op_begin[r + 1] = nout;
      assign_saved_slots(s.op_table, s.op_begin[r], nout, f.stages, f.microbatches, pv.lane_length(), s.resources[r]);
    }
  }
  z.ops = nout;
  z.slot_lists = front.slot_lists;
  z.ranks = f.ranks;
  z.stages = f.stages;
  z.microbatches = f.microbatches;
  z.actions = f.count;
  z.comms = front.comms;
  s.name = f.name;
  s.lanes = f.lanes;
  s.tick_count = c.ticks;
  s.memory = opt.memory;
  s.policy = opt.comms;
  for (int k = 0; k < f.placed; ++k) s.stage_rank[static_cast<std::size_t>(k)] = f.stage_rank[k];
  for (int r = 0; r <= f.ranks; ++r) s.action_begin[r] = f.begin[r];
  for (int i = 0; i < f.count; ++i) s.actions[i] = f.actions[i], s.tick[i] = c.tick[i];
  s.peak_units = c.peak_units;
  s.edge_table = f.edges;
  for (int k = 0; k < front.comms; ++k) s.comm_table[k] = front.comm_table[static_cast<std::size_t>(k)];
  for (int i = 0; i < front.slot_lists; ++i) s.list_table[i] = front.lists[i];
  return s;
}

/// The verdict of the whole pipeline: the plan's own, else verify_lowered's on its ops.
template <plan_shape Cap>
constexpr verdict verify_static(const static_plan<Cap>& s) {
  if (!s.rejection.ok()) return s.rejection;
  // scratch as arrays bounded by the capacities (a rank has fewer events and slots per pool than ops)
  scratch<verify_scratch_fixed<Cap.ops, Cap.ops, Cap.ops, 2 * Cap.comms, stream_count * Cap.ranks>> room(1, unset);
  return verify_lowered_in(s.used.ranks, s.used.ops, s.used.comms, s.used.slot_lists, s.op_table, s.op_begin,
                           s.comm_table, s.resources, s.list_table, room[0], Cap.ops, Cap.ops, nullptr);
}

/// What error_of reads for a rejected plan (`value.rejection`).
template <class Planner>
struct verdict_of {
  struct holder {
    verdict rejection;
  };
  static constexpr holder value{Planner::verified};
};

template <class Schedule, plan_options Options>
struct planner {
  static constexpr plan_shape cap = capacity_of(extent_of<Schedule>());
  // generate → check → lower (passes 1–4, then 5) → verify, each its own constant evaluation: each stays within the
  // compilers' per-evaluation limits (g++'s -fconstexpr-ops-limit, clang's -fconstexpr-steps)
  // for far larger plans than one evaluation of the whole, and each result is read in place.
  static constexpr frozen_program<cap> generated = freeze<cap>(Schedule::generate(), Options);
  static constexpr checked_program<cap> checked = check_frozen(generated, Options);
  static constexpr lowered_front<cap> front = lower_front(generated, checked, Options);
  static constexpr static_plan<cap> value = build_static(generated, checked, front, Options);
  static constexpr verdict verified = verify_static(value);
};

template <class Schedule, plan_options Options>
constexpr const auto& checked_plan() {
  using P = planner<Schedule, Options>;
  if constexpr (P::verified.code != errc::ok) {
    (void)report<typename error_of<verdict_of<P>, Schedule>::type>{};
#if defined(__clang__)
    constexpr bool shown = rejected_because(P::verified.detail, how_to_fix(P::verified.code));
    (void)shown;
#endif
  }
  return P::value;
}

}  // namespace detail

/// The plan of `Schedule`, generated, verified and lowered at compile time, as a reference to a
/// constant (no copy: prefer it for plans with thousands of actions). A rejected schedule is a
/// compile error naming `error<what<...>, at_rank<...>, at_stage<...>, at_microbatch<...>,
/// at_action<...>>`.
template <schedule Schedule, plan_options Options = plan_options{}>
inline constexpr const auto& plan_v = detail::checked_plan<Schedule, Options>();

/// The same plan as a value: `constexpr auto plan = pipetype::make_plan<S>();`.
template <schedule Schedule, plan_options Options = plan_options{}>
constexpr auto make_plan() {
  return detail::checked_plan<Schedule, Options>();
}

/// The type of a schedule's plan.
template <schedule Schedule, plan_options Options = plan_options{}>
using plan_t = std::remove_cvref_t<decltype(plan_v<Schedule, Options>)>;

/// Simulates a plan's compute program (compile-time or run-time plan) in the plan's memory model.
template <plan_shape Z, cost_source C = costs>
constexpr timeline simulate(const static_plan<Z>& plan, const C& c = {}) {
  return simulate(plan.compute(), c, plan.memory);
}
template <cost_source C = costs>
constexpr timeline simulate(const runtime_plan& plan, const C& c = {}) {
  return simulate(plan.compute(), c, plan.memory);
}

}  // namespace pipetype
