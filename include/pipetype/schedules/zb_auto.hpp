// pipetype/schedules/zb_auto.hpp — an automatic zero-bubble scheduler that runs at compile time.
//
// Source: Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, §3 (automatic scheduling:
// a heuristic, refined there by an ILP). The search below is ours; zb_model.hpp states the
// problem and the model every candidate is scored on (the largest rank span, then the makespan).
//
// Search. Candidates, in this order, each scored on the model and the best kept:
//   1. the zero-bubble authors' heuristic under its eight flag settings (zb_greedy.hpp), so the
//      result is never worse than that scheduler;
//   2. the hand-written schedules that fit the limit: ZB-H1, ZB-H2, 1F1B with each backward split
//      in place, GPipe with split backwards — so it is never worse than the best of those either
//      (one whose warm-up alone exceeds the limit is not built);
//   3. the list scheduler (zb_list.hpp) over its knobs: every warm-up cap k = -1 .. p, W filling
//      × tie order; then a refinement from the best of those, each rank's warm-up cap in turn,
//      kept when it shortens the span (`zb_problem::refine` passes, default 1);
//   4. a local search from the best so far (zb_local.hpp, `zb_problem::local` passes, default 2):
//      moving W's and F's a place or two in their rank's order.
// Runs that cannot beat the best so far are cut short, and the search stops as soon as a
// candidate reaches the lower bound (`zb_span_bound`): that candidate is optimal on the model.
// Runs it can tell are repeats are not made: a heuristic setting whose flags differ from a run's
// only in ones none of that run's decisions depended on, and a list run that zb_list_memo
// matches (warm-up caps that never bound, a W filling or tie order no choice depended on). They
// are the same runs step for step, so the answer does not change; at p = 8, m = 16 and 1F1B's
// memory, 1 of the 8 heuristic settings and 13 of the grid's 40 list runs are made.
// The result carries the bound (`zb_result::bound`, `gap()`); schedules/zb_exact.hpp gives the
// true optimum for tiny problems, and bench/zb_compare.sh prints all of it.
// Figures (simulator, uniform costs F = I = W, no latency; checked in tests/schedules):
//   limit p     rank span m(F + I + W) + (p − 1)(F + I − W), ZB-H1's
//   limit 2p    rank span m(F + I + W), zero bubble, for m ≥ 2p − 1
// Cost: at most 8 heuristic runs, 4(p + 2) list-scheduler runs plus p(p + 1) per refinement
// pass, and about 8·p·m evaluations per local pass, each O(p·m) steps with flat tables — within
// a budget (`zb_problem::budget`, 2^26 placements, which runs not made do not spend): past it the
// caps tried are -1, 0, 1, 2, 4, ..., p, and the refinement and the local search stop when it is
// spent, so p = 64, m = 512 takes seconds, not minutes. Compile time (g++ 12, zb_auto<> with its
// default zb_effort: no refinement, no local search): bench/compile_cost.sh measures
// zb_auto<8, 16>, about 2 s and 190 MB; p = 8, m = 48 and p = 16, m = 16 still fit g++'s default
// constexpr limits, p = 16, m = 32 needs -fconstexpr-ops-limit (docs/03_diagnostics.md).
// Over a stage graph (p stages, one per rank): the search over the chain of the graph's
// topological order, run over the graph with over_graph (family.hpp), its memory counted as verify
// counts it (a fan-in's rank holds an activation per input); ZB-H1's and 1F1B's graph forms, which
// warm up by depth, are kept instead where shorter within the limit. The search itself does not
// yet see the graph's parallel paths (two towers' forwards could overlap).
#pragma once

#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "pipetype/analysis/costs.hpp"
#include "pipetype/analysis/simulate.hpp"
#include "pipetype/core/memory.hpp"
#include "pipetype/core/schedule.hpp"
#include "pipetype/core/sizes.hpp"
#include "pipetype/graph/placement.hpp"
#include "pipetype/schedules/family.hpp"
#include "pipetype/schedules/one_f_one_b.hpp"
#include "pipetype/schedules/zb_auto_v.hpp"
#include "pipetype/schedules/zb_greedy.hpp"
#include "pipetype/schedules/zb_h1.hpp"
#include "pipetype/schedules/zb_h2.hpp"
#include "pipetype/schedules/zb_list.hpp"
#include "pipetype/schedules/zb_local.hpp"
#include "pipetype/schedules/zb_model.hpp"

namespace pipetype {

namespace detail {

/// The hand-written candidates, in the order zb_auto scores them.
enum class zb_hand { zb_h1, zb_h2, one_f_one_b_split, gpipe_split };
inline constexpr zb_hand zb_hands[] = {zb_hand::zb_h1, zb_hand::zb_h2, zb_hand::one_f_one_b_split,
                                       zb_hand::gpipe_split};

constexpr const char* zb_hand_name(zb_hand h) {
  return h == zb_hand::zb_h1               ? "zb-h1"
         : h == zb_hand::zb_h2             ? "zb-h2"
         : h == zb_hand::one_f_one_b_split ? "1f1b-split"
                                           : "gpipe-split";
}

/// The F's rank r of candidate h runs before its first I, all held at once (the rules in
/// zb_h1.hpp, zb_h2.hpp and one_f_one_b.hpp; GPipe runs them all): a candidate whose warm-up
/// exceeds the limit cannot fit, so zb_auto does not build it.
constexpr int zb_hand_warmup(zb_hand h, int p, int m, int r) {
  const int w = h == zb_hand::gpipe_split ? m : h == zb_hand::zb_h2 ? 2 * (p - r) - 1 : p - r;
  return w < m ? w : m;
}

/// The candidate's orders (a B of 1F1B is its I then its W; GPipe's are written directly).
constexpr zb_orders zb_hand_orders(zb_hand h, const zb_tables& z) {
  const int P = z.P, m = z.m;
  if (h == zb_hand::zb_h1) return zb_orders_of(z, make_zb_h1(P, m).actions);
  if (h == zb_hand::zb_h2) return zb_orders_of(z, make_zb_h2(P, m).actions);
  if (h == zb_hand::one_f_one_b_split) return zb_orders_of(z, make_one_f_one_b(P, m).actions);
  zb_orders o{P, m, std::vector<int>(static_cast<std::size_t>(3 * P * m), 0)};
  int* code = o.code.data();
  for (int r = 0, q = 0; r < P; ++r) {
    for (int j = 0; j < m; ++j) code[q++] = j;
    for (int j = 0; j < m; ++j) code[q++] = m + j, code[q++] = 2 * m + j;
  }
  return o;
}

}  // namespace detail

/// Runs the search and says which candidate won. Throws std::invalid_argument for a problem
/// that cannot be scheduled (zb_problem_error).
constexpr zb_result zb_auto_search(const zb_problem& pr) {
  if (const char* e = zb_problem_error(pr)) throw std::invalid_argument(e);
  if (pr.placement == search_placement::v) return zb_auto_v_search(pr);
  const int P = pr.ranks, m = pr.microbatches;
  const detail::zb_tables tables = detail::zb_tables_of(pr);
  zb_result best;
  best.bound = zb_span_bound(tables);
  const double floor = best.bound.value() * (1 + 1e-12);
  bool have = false;
  detail::zb_run best_run;
  // A candidate's timeline is the simulator's for its program, and it respects the limit.
  auto consider = [&](detail::zb_run run, const char* source) {
    if (!run.ok) return false;
    ++best.candidates;
    if (have && !(run.rank_span < best.rank_span || (run.rank_span == best.rank_span && run.makespan < best.makespan)))
      return false;
    have = true;
    best.rank_span = run.rank_span;
    best.makespan = run.makespan;
    best.source = source;
    best_run = std::move(run);
    return true;
  };
  auto optimal = [&] { return have && best.rank_span <= floor; };
  auto cutoff = [&] { return have ? best.rank_span : 0.0; };
  // 1. the authors' heuristic; a setting that differs from one already run only in flags none of
  // that run's decisions depended on is the same run, and is skipped
  int ran[8] = {}, depended[8] = {}, runs = 0;
  for (const bool before : {false, true})
    for (const bool prio : {false, true})
      for (const bool greedy : {true, false}) {
        const zb_greedy_flags fl{before, prio, greedy};
        const int bits = detail::zb_greedy_bits(fl);
        bool same = false;
        for (int e = 0; e < runs && !same; ++e) same = ((bits ^ ran[e]) & depended[e]) == 0;
        if (same) continue;
        ran[runs] = bits;
        if (consider(detail::zb_greedy_schedule(tables, fl, cutoff(), &depended[runs++]), "greedy")) best.flags = fl;
      }
  // 2. the hand-written schedules, scored on the same model (one whose warm-up cannot fit is skipped)
  for (const detail::zb_hand h : detail::zb_hands) {
    if (optimal()) break;
    bool fits = true;
    for (int r = 0; r < P && fits; ++r)
      fits = detail::zb_hand_warmup(h, P, m, r) * tables.units(r, 0) <= tables.limit(r);
    if (fits)
      consider(detail::zb_evaluate(tables, detail::zb_hand_orders(h, tables), cutoff()), detail::zb_hand_name(h));
  }
  // 3. the list scheduler; the budget: each run costs 3·p·m placements, the grid may spend half
  const long long run_cost = 3LL * P * m;
  long long left = pr.budget;
  std::vector<int> caps, sparse{-1};  // every warm-up cap, and -1, 0, 1, 2, 4, ..., P
  for (int k = -1; k <= P; ++k) caps.push_back(k);
  for (int k = 0; k < P; k = k == 0 ? 1 : 2 * k) sparse.push_back(k);
  sparse.push_back(P);
  const std::vector<int>& grid = 4 * static_cast<long long>(caps.size()) * run_cost <= pr.budget / 2 ? caps : sparse;
  // A run that is the same as one already made (zb_list_memo: caps that never bind) is skipped
  // and costs nothing.
  detail::zb_list_memo memo(tables);
  bool skipped = false;
  bool list_won = false;
  for (const int k : grid) {
    if (optimal() || (k != grid.front() && left < 4 * run_cost)) break;
    for (const bool gaps : {false, true})
      for (const bool ff : {false, true}) {
        const zb_knobs kn{k, gaps, ff};
        if (consider(memo.run(tables, kn, cutoff(), skipped), "list")) best.knobs = kn, list_won = true;
        if (!skipped) left -= run_cost;
      }
  }
  // the refinement: per-rank warm-up caps, one rank at a time, from the best uniform setting (or
  // the memory-bound warm-up when no list run won)
  if (have && pr.refine > 0 && !optimal()) {
    zb_knobs kn = list_won ? best.knobs : zb_knobs{};
    kn.rank_extra.assign(static_cast<std::size_t>(P), kn.warmup_extra);
    for (int pass = 0; pass < pr.refine && left >= run_cost && !optimal(); ++pass) {
      bool improved = false;
      const std::vector<int>& tries =
          static_cast<long long>(P) * static_cast<long long>(caps.size()) * run_cost <= left ? caps : sparse;
      for (int r = 0; r < P && left >= run_cost && !optimal(); ++r)
        for (const int k : tries) {
          if (left < run_cost) break;
          zb_knobs t = kn;
          t.rank_extra[static_cast<std::size_t>(r)] = k;
          if (consider(memo.run(tables, t, cutoff(), skipped), "list")) kn = t, best.knobs = t, improved = true;
          if (!skipped) left -= run_cost;
        }
      if (!improved) break;
    }
  }
  if (!have) throw std::invalid_argument("zb_auto: no schedule fits the memory limit");
  // 4. the local search
  if (pr.local > 0 && !optimal()) {
    detail::zb_local_result l = detail::zb_local_search(tables, std::move(best_run), pr.local, left, floor);
    best_run = std::move(l.run);
    best.rank_span = best_run.rank_span;
    best.makespan = best_run.makespan;
    best.local_moves = l.moves;
  }
  if (best.source != std::string_view{"list"}) best.knobs = {};
  if (best.source != std::string_view{"greedy"}) best.flags = {};
  best.schedule = detail::zb_program_of(pr, best_run);
  return best;
}

/// The best schedule found for the problem (see zb_auto_search).
constexpr program make_zb_auto(const zb_problem& pr) { return zb_auto_search(pr).schedule; }

namespace detail {

/// `prog` with every backward B(s, j) outside an overlapped pair split into I(s, j) then W(s, j),
/// in its place: the same times where B = I + W, the same peaks (I and W each release half).
constexpr program split_backwards(const program& prog) {
  program_builder b{prog.ranks, prog.stages, prog.microbatches};
  b.lanes(prog.lanes).graph(prog.edges);
  for (int s = 0; s < static_cast<int>(prog.stage_rank.size()); ++s)
    if (prog.stage_rank[static_cast<std::size_t>(s)] >= 0) b.place(s, prog.stage_rank[static_cast<std::size_t>(s)]);
  for (int r = 0; r < prog.ranks; ++r) {
    b.rank(r);
    const std::span<const action> acts = prog.view().rank_actions(r);
    for (std::size_t k = 0; k < acts.size(); ++k) {
      const action& a = acts[k];
      const bool paired = a.overlapped || (k > 0 && acts[k - 1].overlapped);
      if (a.what == kind::B && !paired) {
        b.add(I(a.stage, a.microbatch)).add(W(a.stage, a.microbatch));
      } else {
        b.add(a);
      }
    }
  }
  return std::move(b).build(prog.name);
}

/// Over a stage graph: the search's chain schedule over the graph (over_graph), or the graph forms
/// of ZB-H1 and 1F1B (which warm each rank up by its stage's depth, not its chain position) where
/// one has the shorter rank span over the graph — simulated with every edge and within the memory
/// limit as verify counts it. `search` may throw that nothing fits; a graph form that fits wins then.
/// (1F1B's form with its backwards split, each I followed by its W: zb-auto's answers always split.)
template <class Search>
constexpr program best_over_graph(int p, int m, const schedule_params& params, const stage_dag& g, Search search) {
  auto measure = [&](const program& prog) {  // the rank span, or -1 over the memory limit
    const timeline t = simulate(prog.view(), scaled_costs(stage_scaled(cost_model{params.cost}, params.stage_scale),
                                                          prog.stage_rank, params.rank_speed, params.microbatch_scale));
    for (int r = 0; r < p && params.mem_limit > 0; ++r)
      if (t.peak_activations(r) > params.mem_limit + 1e-9) return -1.0;
    return t.complete ? t.max_rank_span() : -1.0;
  };
  program best;
  double best_span = -1;
  std::string failed;  // the search's reason, copied: the exception is gone after its handler
  try {
    best = over_graph(search().schedule, g);
    best_span = measure(best);
  } catch (const std::invalid_argument& e) {
    failed = e.what();
  }
  for (program other : {make_zb_h1(p, m, g), split_backwards(make_one_f_one_b(p, m, g))}) {
    const double span = measure(other);
    if (span >= 0 && (best_span < 0 || span < best_span - 1e-9)) best = std::move(other), best_span = span;
  }
  if (best_span < 0 && !failed.empty()) throw std::invalid_argument(failed);
  best.name = "zb-auto";  // whichever won
  return best;
}

}  // namespace detail

/// zb_auto for tools that pick a schedule by name (registry.hpp): the costs of a rank's share
/// (with rank speeds and microbatch scales), the memory limit and the placement (one stage per
/// rank, a V of two, or the better of both) come from `schedule_params`.
struct zb_auto_family {
  static constexpr std::string_view name = "zb-auto";
  static constexpr std::string_view summary = "automatic zero-bubble search for the given costs and --mem-limit";
  static constexpr int chunks = 1;
  static constexpr bool split = true;
  static constexpr const char* error(int, int, int) noexcept { return nullptr; }
  static constexpr program make(int p, int m, int, const schedule_params& params) {
    // the search's stage k weighs scale[k] (params.stage_scale, in the search's stage order)
    auto search = [&](search_placement where, std::vector<memory_model> stage_memory = {},
                      const std::vector<double>& scale = {}) {
      zb_problem pr;
      pr.ranks = p;
      pr.microbatches = m;
      pr.placement = where;
      pr.mem_limit = params.mem_limit;
      pr.stage_memory = std::move(stage_memory);
      costs c = params.cost;  // a rank's share; on the V each of its two stages holds half of it
      if (where == search_placement::v && params.stage_scale.empty())
        for (double* x : {&c.f, &c.b, &c.i, &c.w, &c.fb})
          if (*x >= 0) *x /= 2;
      pr.costs = scaled_costs(stage_scaled(cost_model{c}, scale.empty() ? params.stage_scale : scale),
                              where == search_placement::v ? v_shape_placement(p) : looped_placement(p, 1),
                              params.rank_speed, params.microbatch_scale);
      return zb_auto_search(pr);
    };
    if (!params.edges.empty()) {  // over a graph: the search over its topological order (over_graph)
      if (params.placement == search_placement::v)
        throw std::invalid_argument("zb-auto over a stage graph places one stage per rank (not in a V) so far");
      // the chain's k-th stage becomes the graph's order[k]-th, which holds an activation per input
      // it reads (core/memory.hpp): the search counts them so, as verify will
      const stage_dag g{p, params.edges};
      const std::vector<int> order = detail::graph_placement(g, p);
      const detail::stage_links links = detail::links_of(p, g.edges);
      std::vector<memory_model> held;
      std::vector<double> scale;  // and weighs what that stage weighs
      for (const int s : order) {
        const int n = detail::inputs_held(links.pred_begin.data(), s);
        memory_model mm;
        for (int* x : {&mm.f, &mm.b, &mm.i, &mm.w}) *x *= n;
        held.push_back(mm);
        const auto su = static_cast<std::size_t>(s);
        if (!params.stage_scale.empty()) scale.push_back(su < params.stage_scale.size() ? params.stage_scale[su] : 1);
      }
      return detail::best_over_graph(p, m, params, g,
                                     [&] { return search(search_placement::one_per_rank, std::move(held), scale); });
    }
    if (params.placement != search_placement::automatic) return search(params.placement).schedule;
    // stage weights name the stages of one placement: p of them one per rank, 2p in a V
    if (!params.stage_scale.empty())
      return search(static_cast<int>(params.stage_scale.size()) == 2 * p ? search_placement::v
                                                                         : search_placement::one_per_rank)
          .schedule;
    zb_result one = search(search_placement::one_per_rank), v = search(search_placement::v);
    return v.rank_span < one.rank_span ? std::move(v.schedule) : std::move(one.schedule);
  }
  /// Over a graph zb-auto searches the chain of the graph's topological order, which orders
  /// every edge (over_graph), and keeps ZB-H1's or 1F1B's graph form where it is shorter
  /// (detail::best_over_graph); its own search does not yet see the graph's parallel paths.
  static constexpr bool graphs = true;
};

/// How much of the search zb_auto<> runs inside the compiler, past the heuristic, the
/// hand-written schedules and the list grid: passes of the per-rank refinement and of the local
/// search (zb_problem::refine, zb_problem::local). Both are off by default there: at p = 8,
/// m = 16 the refinement doubles the compile time and two local passes multiply it by about six
/// (bench/compile_cost.sh), for a few per cent in a few cases (docs/05_zero_bubble.md §5.4). The
/// run-time search and `--schedule zb-auto` run one refinement pass and two local passes.
struct zb_effort {
  int refine = 0;
  int local = 0;
};

/// The compile-time form: costs as a type with `static constexpr pipetype::costs value` (uniform)
/// or `static constexpr pipetype::cost_model model()` (per stage / microbatch), the memory limit
/// in whole microbatch activations per rank (0: none; use the run-time form for halves), and the
/// effort (zb_effort).
///
///   struct my_costs { static constexpr pipetype::costs value{.f = 1, .b = 2}; };
///   using s = pipetype::zb_auto<ranks<4>, microbatches<8>, my_costs, 4>;
///   using t = pipetype::zb_auto<ranks<4>, microbatches<8>, my_costs, 4, zb_effort{.refine = 1, .local = 2}>;
template <rank_count Ranks, microbatch_count Microbatches, class Costs, int MemLimit = 0,
          zb_effort Effort = zb_effort{}>
struct zb_auto {
  using family = zb_auto_family;
  static_assert(MemLimit >= 0, "zb_auto: the memory limit must not be negative (0 means none)");
  static_assert(Effort.refine >= 0 && Effort.local >= 0,
                "zb_auto: the effort's refinement and local-search passes must not be negative");
  static constexpr cost_model model() {
    if constexpr (requires { Costs::model(); })
      return Costs::model();
    else
      return cost_model{Costs::value};
  }
  static constexpr zb_problem problem() {
    zb_problem pr;
    pr.ranks = Ranks::value;
    pr.microbatches = Microbatches::value;
    pr.costs = model();
    pr.mem_limit = MemLimit;
    pr.refine = Effort.refine;
    pr.local = Effort.local;
    return pr;
  }
  static_assert(zb_problem_error(problem()) == nullptr,
                "zb_auto: the problem cannot be scheduled (a memory limit below one activation?)");
  static constexpr program generate() { return make_zb_auto(problem()); }
  static constexpr program_extent extent() { return split_extent(Ranks::value, Microbatches::value); }
};

}  // namespace pipetype
