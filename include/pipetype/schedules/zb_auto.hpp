// pipetype/schedules/zb_auto.hpp — an automatic zero-bubble scheduler that runs at compile time.
//
// Source: Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, §3 (automatic scheduling:
// a heuristic, refined there by an ILP); facts in shared/reference/schedules.md §15. The search
// below is ours.
//
// Problem (`zb_problem`): p ranks with one stage each, m microbatches, a cost model (F, I, W per
// stage and, optionally, per microbatch — unequal sequence lengths make microbatches unequal, as
// WLB-LLM reports — and the transfer latency), and a memory limit in microbatch activations per
// rank. Memory is counted as in the paper: an F holds one activation of its stage, I releases
// half of it and W the other half (`memory_model`, per stage if `stage_memory` says so).
// Output: a program with split backwards that verifies like any other.
//
// Objective: the largest rank span (a rank's last end − its first start). With the optimizer's
// post-validation (paper §4) consecutive steps overlap, so the span, not the isolated step's
// makespan, is the step period; "zero bubble" means every rank's span equals its work.
// Ties go to the shorter makespan, then to the smaller peak.
//
// Search. Candidates are scored on the simulator (analysis/simulate.hpp) and the best kept:
//   • a list scheduler: simulated time runs forward; whenever a rank is free it takes, among the
//     actions whose inputs have arrived, the one that can start first — I before F before W on a
//     tie (I is on the critical path, W on none) — subject to the memory limit (an F that does
//     not fit waits for W's to release memory). Its knobs, all tried:
//       warm-up cap   before its first I, rank r runs at most (p − r) + k forwards, k = 0 .. p,
//                     or as many as memory allows (1F1B's warm-up at k = 0, ZB-H2's at
//                     k = p − r − 1);
//       W filling     a W starts whenever the rank would idle, or only when it ends before the
//                     next input arrives (it never delays a ready I or F);
//       tie order     I before F, or F before I;
//   • the hand-written schedules that fit the limit: 1F1B with each backward split in place,
//     ZB-H1, ZB-H2, GPipe with split backwards.
// So the result is never worse than the best hand-written one-stage-per-rank schedule within
// the same memory, and the list scheduler's 4(p + 2) variants cover the paper's three-flag
// heuristic's decisions (how many warm-up forwards, whether a W may delay the next input,
// whether I preempts F) with a finer warm-up grid.
// Figures (simulator, uniform costs F = I = W, no latency; checked in tests/schedules):
//   limit p     rank span m(F + I + W) + (p − 1)(F + I − W), ZB-H1's
//   limit 2p    rank span m(F + I + W), zero bubble, for m ≥ 2p − 1
// Cost: 4(p + 2) list-scheduler runs and up to 4 hand-written candidates, each simulated:
// O(p²·m) per run. At compile time keep p·m in the low hundreds (docs/05_zero_bubble.md).
#pragma once

#include <stdexcept>
#include <vector>

#include "pipetype/analysis/costs.hpp"
#include "pipetype/analysis/simulate.hpp"
#include "pipetype/compile/verify.hpp"
#include "pipetype/core/sizes.hpp"
#include "pipetype/graph/placement.hpp"
#include "pipetype/schedules/gpipe.hpp"
#include "pipetype/schedules/one_f_one_b.hpp"
#include "pipetype/schedules/schedule.hpp"
#include "pipetype/schedules/zb_h1.hpp"
#include "pipetype/schedules/zb_h2.hpp"

namespace pipetype {

struct zb_problem {
  int ranks = 1;
  int microbatches = 1;
  cost_model costs{};
  /// Peak activations allowed per rank, in microbatch activations (fractions allowed: I and W
  /// each release half of one). 0: no limit.
  double mem_limit = 0;
  memory_model memory{};
  /// Per-stage memory accounting (an I that releases more or less than half); empty: `memory`.
  std::vector<memory_model> stage_memory{};

  constexpr const memory_model& memory_of(int s) const {
    return static_cast<std::size_t>(s) < stage_memory.size() ? stage_memory[static_cast<std::size_t>(s)] : memory;
  }
};

/// The list scheduler's knobs (see the header comment).
struct zb_knobs {
  int warmup_extra = -1;  // k: at most (p − r) + k forwards before the first I; < 0: memory only
  bool fill_only_gaps = false;
  bool forward_first = false;
};

struct zb_result {
  program schedule;
  double rank_span = 0;
  double makespan = 0;
  /// Which candidate won: "list" (with `knobs`) or the name of a hand-written schedule.
  const char* source = "";
  zb_knobs knobs{};
  int candidates = 0;  // how many were scored
};

/// Why the problem cannot be scheduled, or nullptr.
constexpr const char* zb_problem_error(const zb_problem& pr) {
  if (pr.ranks < 1 || pr.microbatches < 1) return "zb_auto: ranks and microbatches must be positive";
  if (pr.mem_limit < 0) return "zb_auto: the memory limit must not be negative";
  for (int s = 0; s < pr.ranks; ++s) {
    const memory_model& mm = pr.memory_of(s);
    if (mm.f <= 0 || mm.unit <= 0 || mm.i > 0 || mm.w > 0 || mm.f + mm.i + mm.w != 0)
      return "zb_auto: a stage's memory model must have F hold a positive amount that I and W release";
    if (pr.mem_limit > 0 && pr.mem_limit * mm.unit < mm.f)
      return "zb_auto: the memory limit is below one microbatch activation";
  }
  return nullptr;
}

namespace detail {

/// Units of memory allowed on stage s (a large number when unlimited).
constexpr int zb_limit_units(const zb_problem& pr, int s) {
  if (pr.mem_limit <= 0) return never;
  return static_cast<int>(pr.mem_limit * pr.memory_of(s).unit + 1e-9);
}

/// True when every rank's running memory stays within the limit.
constexpr bool zb_fits(program_view p, const zb_problem& pr) {
  for (int r = 0; r < p.ranks; ++r) {
    int live = 0;
    for (const action& a : p.rank_actions(r)) {
      live += pr.memory_of(a.stage).delta(a.what);
      if (live > zb_limit_units(pr, a.stage)) return false;
    }
  }
  return true;
}

/// One run of the list scheduler. Returns an empty program (no actions) if it cannot finish
/// (a limit that lets no forward start).
constexpr program zb_list_schedule(const zb_problem& pr, const zb_knobs& knobs) {
  const int P = pr.ranks, m = pr.microbatches;
  const auto at = [m](int r, int j) {
    return static_cast<std::size_t>(r) * static_cast<std::size_t>(m) + static_cast<std::size_t>(j);
  };
  constexpr double unknown = -1;
  std::vector<double> fend(static_cast<std::size_t>(P * m), unknown), gend(fend);
  std::vector<double> free_at(static_cast<std::size_t>(P), 0.0);
  std::vector<int> nf(static_cast<std::size_t>(P), 0), ni(nf), nw(nf), live(nf);
  program_builder b{P, P, m};
  b.placement(looped_placement(P, 1));
  const cost_model& c = pr.costs;
  for (int placed = 0, total = 3 * P * m; placed < total; ++placed) {
    int best_rank = -1;
    kind best_kind = kind::F;
    double best_start = 0;
    int best_rank_prio = 0;
    for (int r = 0; r < P; ++r) {
      const std::size_t ru = static_cast<std::size_t>(r);
      const double t = free_at[ru];
      // candidates: (start, priority) per kind; unknown when the input has not been scheduled
      double s_i = unknown, s_f = unknown, s_w = unknown;
      if (ni[ru] < nf[ru]) {
        double ready = fend[at(r, ni[ru])];
        if (r + 1 < P) {
          const double g = gend[at(r + 1, ni[ru])];
          ready = g == unknown ? unknown : (g + c.latency(r + 1, r) > ready ? g + c.latency(r + 1, r) : ready);
        }
        if (ready != unknown) s_i = ready > t ? ready : t;
      }
      const memory_model& mm = pr.memory_of(r);
      const bool warm_ok = knobs.warmup_extra < 0 || ni[ru] > 0 || nf[ru] < (P - r) + knobs.warmup_extra;
      if (nf[ru] < m && warm_ok && live[ru] + mm.f <= zb_limit_units(pr, r)) {
        double ready = 0;
        if (r > 0) {
          const double e = fend[at(r - 1, nf[ru])];
          ready = e == unknown ? unknown : e + c.latency(r - 1, r);
        }
        if (ready != unknown) s_f = ready > t ? ready : t;
      }
      if (nw[ru] < ni[ru]) s_w = t;
      // choose: earliest start; ties I, F, W (or F, I, W)
      kind k = kind::W;
      double s = unknown;
      const kind first = knobs.forward_first ? kind::F : kind::I;
      const kind second = knobs.forward_first ? kind::I : kind::F;
      const double s_first = knobs.forward_first ? s_f : s_i;
      const double s_second = knobs.forward_first ? s_i : s_f;
      if (s_first != unknown) k = first, s = s_first;
      if (s_second != unknown && (s == unknown || s_second < s)) k = second, s = s_second;
      if (s_w != unknown) {
        const double w_end = t + c.time(W(r, nw[ru]));
        if (s == unknown || s_w < s) {
          // a W would run now; with fill_only_gaps it must end before the next input arrives
          if (!knobs.fill_only_gaps || s == unknown || w_end <= s) k = kind::W, s = s_w;
        }
      }
      if (s == unknown) continue;
      const int prio = k == kind::I ? 0 : k == kind::F ? 1 : 2;
      if (best_rank < 0 || s < best_start || (s == best_start && prio < best_rank_prio)) {
        best_rank = r, best_kind = k, best_start = s, best_rank_prio = prio;
      }
    }
    if (best_rank < 0) return program{};
    const int r = best_rank;
    const std::size_t ru = static_cast<std::size_t>(r);
    const memory_model& mm = pr.memory_of(r);
    action a{};
    if (best_kind == kind::F) {
      a = F(r, nf[ru]++);
      live[ru] += mm.f;
    } else if (best_kind == kind::I) {
      a = I(r, ni[ru]++);
      live[ru] += mm.i;
    } else {
      a = W(r, nw[ru]++);
      live[ru] += mm.w;
    }
    const double end = best_start + c.time(a);
    if (a.what == kind::F) fend[at(r, a.microbatch)] = end;
    if (a.what == kind::I) gend[at(r, a.microbatch)] = end;
    free_at[ru] = end;
    b.rank(r).add(a);
  }
  return std::move(b).build("zb-auto");
}

/// 1F1B with each backward split in place (I then W): the baseline every split schedule beats.
constexpr program zb_one_f_one_b_split(int p, int m) {
  program base = make_one_f_one_b(p, m);
  program_builder b{p, p, m};
  b.placement(base.stage_rank);
  for (int r = 0; r < p; ++r) {
    b.rank(r);
    for (const action& a : base.view().rank_actions(r)) {
      if (a.what == kind::B)
        b.add(I(a.stage, a.microbatch)).add(W(a.stage, a.microbatch));
      else
        b.add(a);
    }
  }
  return std::move(b).build("1f1b-split");
}

constexpr program zb_gpipe_split(int p, int m) {
  program_builder b{p, p, m};
  b.placement(looped_placement(p, 1));
  for (int r = 0; r < p; ++r) {
    b.rank(r);
    for (int j = 0; j < m; ++j) b.add(F(r, j));
    for (int j = 0; j < m; ++j) b.add(I(r, j)).add(W(r, j));
  }
  return std::move(b).build("gpipe-split");
}

}  // namespace detail

/// Runs the search and says which candidate won. Throws std::invalid_argument for a problem
/// that cannot be scheduled (zb_problem_error).
constexpr zb_result zb_auto_search(const zb_problem& pr) {
  if (const char* e = zb_problem_error(pr)) throw std::invalid_argument(e);
  const int P = pr.ranks, m = pr.microbatches;
  zb_result best;
  bool have = false;
  memory_model uniform = pr.memory;
  auto consider = [&](program prog, const char* source, const zb_knobs& knobs) {
    if (prog.actions.empty() || !detail::zb_fits(prog.view(), pr)) return;
    ++best.candidates;
    const timeline t = simulate(prog.view(), pr.costs, uniform);
    if (!t.complete) return;
    const double span = t.max_rank_span(), ms = t.makespan();
    if (have && (span > best.rank_span || (span == best.rank_span && ms >= best.makespan))) return;
    have = true;
    best.schedule = std::move(prog);
    best.rank_span = span;
    best.makespan = ms;
    best.source = source;
    best.knobs = knobs;
  };
  const bool fill[2] = {false, true};
  const bool fwd[2] = {false, true};
  for (int k = -1; k <= P; ++k)
    for (bool gaps : fill)
      for (bool ff : fwd) {
        const zb_knobs kn{k, gaps, ff};
        consider(detail::zb_list_schedule(pr, kn), "list", kn);
      }
  consider(make_zb_h1(P, m), "zb-h1", {});
  consider(make_zb_h2(P, m), "zb-h2", {});
  consider(detail::zb_one_f_one_b_split(P, m), "1f1b-split", {});
  consider(detail::zb_gpipe_split(P, m), "gpipe-split", {});
  if (!have) throw std::invalid_argument("zb_auto: no schedule fits the memory limit");
  best.schedule.name = "zb-auto";
  return best;
}

/// The best schedule found for the problem (see zb_auto_search).
constexpr program make_zb_auto(const zb_problem& pr) { return zb_auto_search(pr).schedule; }

/// The compile-time form: costs as a type with `static constexpr pipetype::costs value` (uniform)
/// or `static constexpr pipetype::cost_model model()` (per stage / microbatch), and the memory
/// limit in whole microbatch activations per rank (0: none; use the run-time form for halves).
///
///   struct my_costs { static constexpr pipetype::costs value{.f = 1, .b = 2}; };
///   using s = pipetype::zb_auto<ranks<4>, microbatches<8>, my_costs, 4>;
template <class Ranks, class Microbatches, class Costs, int MemLimit = 0>
struct zb_auto {
  static_assert(MemLimit >= 0, "zb_auto: the memory limit must not be negative (0 means none)");
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
    return pr;
  }
  static_assert(zb_problem_error(problem()) == nullptr,
                "zb_auto: the problem cannot be scheduled (a memory limit below one activation?)");
  static constexpr program generate() { return make_zb_auto(problem()); }
  static constexpr program_extent extent() { return split_extent(Ranks::value, Microbatches::value); }
};

}  // namespace pipetype
