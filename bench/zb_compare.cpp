// zb_compare — zb-auto against the hand-written schedules, on the simulator.
//
// For a grid of (p, m, costs, memory limit) it prints the best hand-written one-stage-per-rank
// schedule that fits the limit (1F1B, GPipe, ZB-H1, ZB-H2), zb-auto's rank span and which of
// its candidates won, the span of a three-knob search like the reference heuristic's (the list
// scheduler with only its memory-bound warm-up: W filling × tie order), and the lower bound
// (the busiest rank's work). Spans are a rank's last end − first start, the step period when
// steps overlap (zero-bubble paper §4). Run: bash bench/zb_compare.sh
#include <pipetype/pipetype.hpp>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

namespace pt = pipetype;

namespace {

struct cost_case {
  const char* name;
  pt::costs base;
  bool uneven_microbatches;
  bool heavy_head;
};

pt::cost_model model_of(const cost_case& c, int p, int m) {
  pt::cost_model cm{c.base};
  if (c.heavy_head) {  // the loss head's F and I cost twice as much (its full B = I + W follows)
    const double i = c.base.of(pt::kind::I), w = c.base.of(pt::kind::W);
    cm.stage(p - 1, pt::kind::F, 2 * c.base.f).stage(p - 1, pt::kind::I, 2 * i).stage(p - 1, pt::kind::B, 2 * i + w);
  }
  if (c.uneven_microbatches)
    for (int j = 0; j < m; ++j) cm.microbatch(j, 0.5 + static_cast<double>((j * 7) % 5) / 4);  // 0.5 .. 1.5
  return cm;
}

double work_bound(const pt::program& prog, const pt::cost_model& c) {
  double best = 0;
  for (int r = 0; r < prog.ranks; ++r) {
    double w = 0;
    for (const pt::action& a : prog.view().rank_actions(r)) w += c.time(a);
    best = std::max(best, w);
  }
  return best;
}

}  // namespace

int main() {
  const cost_case cases[] = {
      {"F=I=W", pt::costs{.f = 1, .b = 2, .i = 1, .w = 1}, false, false},
      {"I>W", pt::costs{.f = 1, .b = 2, .i = 1.5, .w = 0.5}, false, false},
      {"W>I", pt::costs{.f = 1, .b = 2, .i = 0.75, .w = 1.25}, false, false},
      {"comm", pt::costs{.f = 1, .b = 2, .i = 1, .w = 1, .comm = 0.25}, false, false},
      {"head x2", pt::costs{.f = 1, .b = 2, .i = 1, .w = 1}, false, true},
      {"uneven mb", pt::costs{.f = 1, .b = 2, .i = 1, .w = 1}, true, false},
  };
  std::printf("%-10s %3s %3s %6s | %-12s %9s | %9s %-16s | %9s | %9s %7s\n", "costs", "p", "m", "limit", "best hand",
              "span", "zb-auto", "(winner)", "3-knob", "bound", "gap");
  int wins = 0, ties = 0, rows = 0, beats_knob3 = 0;
  double gap_sum = 0, best_gain = 0;
  for (const cost_case& cc : cases)
    for (int p : {4, 8})
      for (int m : {p, 2 * p, 4 * p})
        for (double limit : {static_cast<double>(p), 1.5 * p, 2.0 * p}) {
          const pt::cost_model c = model_of(cc, p, m);
          const pt::plan_options opt{.mem_limit_units = static_cast<int>(2 * limit)};
          std::string hand = "-";
          double hand_span = 1e300;
          for (const pt::program& h :
               {pt::make_one_f_one_b(p, m), pt::make_gpipe(p, m), pt::make_zb_h1(p, m), pt::make_zb_h2(p, m)}) {
            if (!pt::build_plan(h, opt).ok()) continue;
            const double s = pt::simulate(h.view(), c).max_rank_span();
            if (s < hand_span) hand_span = s, hand = h.name;
          }
          pt::zb_problem pr;
          pr.ranks = p;
          pr.microbatches = m;
          pr.costs = c;
          pr.mem_limit = limit;
          const pt::zb_result r = pt::zb_auto_search(pr);
          double knob3 = 1e300;
          for (bool gaps : {false, true})
            for (bool ff : {false, true}) {
              const pt::detail::zb_run run = pt::detail::zb_list_schedule(pr, {-1, gaps, ff});
              if (run.ok) knob3 = std::min(knob3, run.rank_span);
            }
          const double bound = work_bound(r.schedule, c);
          std::string winner = r.source;
          if (winner == "list")
            winner += " k=" + std::to_string(r.knobs.warmup_extra) + (r.knobs.fill_only_gaps ? " gaps" : "") +
                      (r.knobs.forward_first ? " F1st" : "") + (r.knobs.rank_extra.empty() ? "" : " +ref");
          std::printf("%-10s %3d %3d %6g | %-12s %9.3f | %9.3f %-16s | %9.3f | %9.3f %6.1f%%\n", cc.name, p, m, limit,
                      hand.c_str(), hand_span, r.rank_span, ("(" + winner + ")").c_str(), knob3, bound,
                      100 * (r.rank_span / bound - 1));
          ++rows;
          gap_sum += r.rank_span / bound - 1;
          if (knob3 > r.rank_span + 1e-9) ++beats_knob3;
          best_gain = std::max(best_gain, 1 - r.rank_span / hand_span);
          if (r.rank_span < hand_span - 1e-9) ++wins;
          if (r.rank_span <= hand_span + 1e-9 && r.rank_span >= hand_span - 1e-9) ++ties;
        }
  std::printf(
      "\n%d cases: zb-auto shorter than the best hand-written schedule in %d (by up to %.1f%%), equal in %d, "
      "longer in %d; shorter than the three-knob search in %d; mean gap to the work bound %.2f%%\n",
      rows, wins, 100 * best_gain, ties, rows - wins - ties, beats_knob3, 100 * gap_sum / rows);
  return 0;
}
