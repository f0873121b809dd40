// Helpers shared by the schedule tests: sweeps and PyTorch's schedule-plan checks.
#pragma once

#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace sweep {

namespace pt = pipetype;

/// A zb_auto problem: p ranks, m microbatches, a memory limit in activations (0: none).
inline pt::zb_problem zb_problem_of(int p, int m, double limit, pt::cost_model c) {
  pt::zb_problem pr;
  pr.ranks = p;
  pr.microbatches = m;
  pr.costs = std::move(c);
  pr.mem_limit = limit;
  return pr;
}

/// 1F1B with each backward split in place (I then W), as a program: zb_auto scores it from
/// zb_orders_of(make_one_f_one_b) (a B counts as its I then its W).
inline pt::program zb_one_f_one_b_split(int p, int m) {
  const pt::program base = pt::make_one_f_one_b(p, m);
  pt::program_builder b{p, p, m};
  b.placement(base.stage_rank);
  for (int r = 0; r < p; ++r) {
    b.rank(r);
    for (const pt::action& a : base.view().rank_actions(r)) {
      if (a.what == pt::kind::B)
        b.add(pt::I(a.stage, a.microbatch)).add(pt::W(a.stage, a.microbatch));
      else
        b.add(a);
    }
  }
  return std::move(b).build("1f1b-split");
}

/// GPipe with split backwards, as a program (zb_auto writes its orders directly).
inline pt::program zb_gpipe_split(int p, int m) {
  pt::program_builder b{p, p, m};
  b.placement(pt::looped_placement(p, 1));
  for (int r = 0; r < p; ++r) {
    b.rank(r);
    for (int j = 0; j < m; ++j) b.add(pt::F(r, j));
    for (int j = 0; j < m; ++j) b.add(pt::I(r, j)).add(pt::W(r, j));
  }
  return std::move(b).build("gpipe-split");
}

/// The checks of PyTorch's TestSchedulePlan._validate_pipeline_order, on lock-step ticks:
/// a microbatch starts with F on stage 0; F at s is followed by F at s+1 (or B at S-1 after
/// F at S-1); B at s by B at s-1; nothing after B at stage 0; indices in range; a microbatch
/// never twice in one time step. Returns "" or what failed.
inline std::string pytorch_plan_checks(const pt::program& p) {
  const pt::program_facts f = pt::check_program(p.view());
  if (!f.result.ok()) return pt::describe(f.result);
  struct ev {
    int tick;
    pt::action a;
  };
  std::vector<std::vector<ev>> by_mb(static_cast<std::size_t>(p.microbatches));
  for (std::size_t k = 0; k < p.actions.size(); ++k) {
    const pt::action& a = p.actions[k];
    if (a.microbatch >= p.microbatches || a.stage >= p.stages) return "index out of range";
    by_mb[static_cast<std::size_t>(a.microbatch)].push_back({f.tick[k], a});
  }
  for (auto& seq : by_mb) {
    std::stable_sort(seq.begin(), seq.end(), [](const ev& x, const ev& y) { return x.tick < y.tick; });
    for (std::size_t i = 1; i < seq.size(); ++i)
      if (seq[i].tick == seq[i - 1].tick) return "a microbatch appears twice in one time step";
    if (seq.empty() || seq[0].a.what != pt::kind::F || seq[0].a.stage != 0)
      return "a microbatch does not start with F on stage 0";
    for (std::size_t i = 0; i + 1 < seq.size(); ++i) {
      const pt::action &x = seq[i].a, &y = seq[i + 1].a;
      const int S = p.stages;
      bool ok = false;
      if (x.what == pt::kind::F)
        ok = (x.stage + 1 < S && y.what == pt::kind::F && y.stage == x.stage + 1) ||
             (x.stage == S - 1 && y.what == pt::kind::B && y.stage == S - 1);
      else if (x.what == pt::kind::B)
        ok = x.stage > 0 && y.what == pt::kind::B && y.stage == x.stage - 1;
      if (!ok)
        return "sequential stage order broken after " + std::to_string(x.stage) + pt::kind_char(x.what) +
               std::to_string(x.microbatch);
    }
    if (seq.back().a.what != pt::kind::B || seq.back().a.stage != 0)
      return "a microbatch does not end with B on stage 0";
  }
  return "";
}

/// (num_local_stages, microbatches, group_size) cases of PyTorch's TestSchedulePlan.
inline constexpr int pytorch_grid[][3] = {{2, 2, 2},  {2, 4, 4},   {2, 8, 2},   {2, 8, 4},    {2, 8, 8},
                                          {4, 4, 4},  {4, 8, 4},   {4, 8, 8},   {4, 16, 4},   {4, 32, 4},
                                          {4, 64, 4}, {4, 16, 16}, {4, 32, 32}, {4, 128, 64}, {3, 2, 2},
                                          {3, 8, 2},  {3, 12, 4},  {4, 6, 3},   {4, 10, 5}};

/// Calls f(program, v) for every built-in schedule valid at (p, m, v), p ≤ pmax, m ≤ mmax,
/// v ≤ vmax (the one-chunk schedules at v = 1 only), with p, m and v captured for doctest.
template <class F>
void for_each_builtin(int pmax, int mmax, int vmax, F f) {
  for (int p = 1; p <= pmax; ++p)
    for (int m = 1; m <= mmax; ++m)
      for (int v = 1; v <= vmax; ++v) {
        CAPTURE(p);
        CAPTURE(m);
        CAPTURE(v);
        for (const pt::schedule_info& s : pt::schedule_infos) {
          if (pt::default_chunks(s) != v && s.chunks != 0) continue;
          if (pt::schedule_error(s.name, p, m, v)) continue;
          CAPTURE(s.name);
          f(pt::make_schedule(s.name, p, m, v), v);
        }
      }
}

inline std::vector<int> peaks(const pt::program& p) {
  const pt::program_facts f = pt::check_program(p.view());
  std::vector<int> out;
  for (int u : f.peak_units) out.push_back(u / 2);
  return out;
}

/// Peak activations per rank, in activations (halves when backwards are split).
inline std::vector<double> half_peaks(const pt::program& p) {
  const pt::program_facts f = pt::check_program(p.view());
  std::vector<double> out;
  for (int u : f.peak_units) out.push_back(u / 2.0);
  return out;
}

/// The largest (rank span − busy time): a rank's bubble when consecutive steps overlap.
inline double max_span_bubble(const pt::timeline& t) {
  double b = 0;
  for (std::size_t r = 0; r < t.ranks.size(); ++r) b = std::max(b, t.ranks[r].span() - t.ranks[r].busy);
  return b;
}

}  // namespace sweep
