// zb_compare — zb-auto against the hand-written schedules and the zero-bubble authors' heuristic,
// on the simulator.
//
// For a grid of (p, m, costs, memory limit) it prints the best hand-written one-stage-per-rank
// schedule that fits the limit (1F1B, GPipe, ZB-H1, ZB-H2), the authors' heuristic (zb_greedy,
// its eight settings), zb-auto without and with its local search (and which candidate won), and
// zb-auto's lower bound with the gap to it. A second table takes tiny problems (p = 4, m = 4 and
// 6) to their optimum (zb_exact) and says how far zb-auto is from it. Spans are a rank's last
// end − first start, the step period when steps overlap (zero-bubble paper §4).
// Run: bash bench/zb_compare.sh
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

}  // namespace

int main() {
  const cost_case cases[] = {
      {"F=I=W", pt::costs{.f = 1, .b = 2, .i = 1, .w = 1}, false, false},
      {"I>W", pt::costs{.f = 1, .b = 2, .i = 1.5, .w = 0.5}, false, false},
      {"W>I", pt::costs{.f = 1, .b = 2, .i = 0.75, .w = 1.25}, false, false},
      {"comm", pt::costs{.f = 1, .b = 2, .i = 1, .w = 1, .comm = 0.25}, false, false},
      {"mixed", pt::costs{.f = 1, .b = 1.9, .i = 1.1, .w = 0.8, .comm = 0.1}, false, false},
      {"mixed+", pt::costs{.f = 1, .b = 2.2, .i = 1.3, .w = 0.9, .comm = 0.5}, false, false},
      {"head x2", pt::costs{.f = 1, .b = 2, .i = 1, .w = 1}, false, true},
      {"uneven mb", pt::costs{.f = 1, .b = 2, .i = 1, .w = 1}, true, false},
  };
  std::printf("%-9s %2s %3s %5s | %-7s %8s | %8s | %8s | %8s %-22s | %8s %6s\n", "costs", "p", "m", "limit", "hand",
              "span", "greedy", "no local", "zb-auto", "(winner)", "bound", "gap");
  struct tally {
    int shorter = 0, equal = 0, longer = 0;
    double most = 0;  // the largest gain
    void add(double ours, double theirs) {
      if (ours < theirs - 1e-9)
        ++shorter, most = std::max(most, 1 - ours / theirs);
      else if (ours > theirs + 1e-9)
        ++longer;
      else
        ++equal;
    }
  } vs_hand, vs_greedy, vs_plain;
  int rows = 0, at_bound = 0;
  double gap_sum = 0, gap_max = 0;
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
          const pt::detail::zb_tables tables = pt::detail::zb_tables_of(pr);
          double greedy = 1e300;  // the authors' heuristic: its eight flag settings
          for (bool before : {false, true})
            for (bool prio : {false, true})
              for (bool fill : {false, true})
                if (const auto run = pt::detail::zb_greedy_schedule(tables, {before, prio, fill}); run.ok)
                  greedy = std::min(greedy, run.rank_span);
          pt::zb_problem plain = pr;  // zb-auto without the local search
          plain.local = 0;
          const double no_local = pt::zb_auto_search(plain).rank_span;
          std::string winner = r.source;
          if (winner == "list")
            winner += " k=" + std::to_string(r.knobs.warmup_extra) + (r.knobs.fill_only_gaps ? " gaps" : "") +
                      (r.knobs.forward_first ? " F1st" : "") + (r.knobs.rank_extra.empty() ? "" : " +ref");
          if (r.local_moves > 0) winner += " +" + std::to_string(r.local_moves) + " mv";
          std::printf("%-9s %2d %3d %5g | %-7s %8.3f | %8.3f | %8.3f | %8.3f %-22s | %8.3f %5.1f%%\n", cc.name, p, m,
                      limit, hand.c_str(), hand_span, greedy, no_local, r.rank_span, ("(" + winner + ")").c_str(),
                      r.bound.value(), 100 * r.gap());
          ++rows;
          gap_sum += r.gap();
          gap_max = std::max(gap_max, r.gap());
          if (r.gap() <= 1e-12) ++at_bound;
          vs_hand.add(r.rank_span, hand_span);
          vs_greedy.add(r.rank_span, greedy);
          vs_plain.add(r.rank_span, no_local);
        }
  std::printf("\n%d cases. zb-auto against\n", rows);
  std::printf("  the best hand-written schedule: shorter in %d (by up to %.1f%%), equal in %d, longer in %d\n",
              vs_hand.shorter, 100 * vs_hand.most, vs_hand.equal, vs_hand.longer);
  std::printf("  the authors' heuristic:         shorter in %d (by up to %.1f%%), equal in %d, longer in %d\n",
              vs_greedy.shorter, 100 * vs_greedy.most, vs_greedy.equal, vs_greedy.longer);
  std::printf("  itself without local search:    shorter in %d (by up to %.1f%%), equal in %d, longer in %d\n",
              vs_plain.shorter, 100 * vs_plain.most, vs_plain.equal, vs_plain.longer);
  std::printf("  the lower bound:                reached in %d, mean gap %.2f%%, largest %.2f%%\n", at_bound,
              100 * gap_sum / rows, 100 * gap_max);

  // Tiny problems: the optimum of the model (zb_exact's branch and bound, 20 M nodes at most)
  std::printf("\nThe optimum for p = 4 (zb_exact; 'proven' when the search finished)\n");
  std::printf("%-9s %2s %3s %5s | %8s | %8s | %8s %-7s | %8s | %9s\n", "costs", "p", "m", "limit", "greedy", "zb-auto",
              "optimum", "", "bound", "from opt");
  int proven = 0, tiny = 0, auto_optimal = 0;
  double worst = 0;
  for (const cost_case& cc : cases)
    for (int m : {4, 6})
      for (double limit : {4.0, 6.0, 8.0}) {
        const int p = 4;
        pt::zb_problem pr;
        pr.ranks = p;
        pr.microbatches = m;
        pr.costs = model_of(cc, p, m);
        pr.mem_limit = limit;
        const pt::zb_result r = pt::zb_auto_search(pr);
        const pt::zb_exact_result e = pt::zb_exact(pr, 20'000'000);
        const pt::detail::zb_tables tables = pt::detail::zb_tables_of(pr);
        double greedy = 1e300;
        for (bool before : {false, true})
          for (bool prio : {false, true})
            for (bool fill : {false, true})
              if (const auto run = pt::detail::zb_greedy_schedule(tables, {before, prio, fill}); run.ok)
                greedy = std::min(greedy, run.rank_span);
        ++tiny;
        if (e.optimal) {
          ++proven;
          if (r.rank_span <= e.rank_span + 1e-9) ++auto_optimal;
          worst = std::max(worst, r.rank_span / e.rank_span - 1);
        }
        std::printf("%-9s %2d %3d %5g | %8.3f | %8.3f | %8.3f %-7s | %8.3f | %8.1f%%\n", cc.name, p, m, limit, greedy,
                    r.rank_span, e.rank_span, e.optimal ? "proven" : "best", r.bound.value(),
                    100 * (r.rank_span / e.rank_span - 1));
      }
  std::printf("\n%d tiny cases: the optimum proven in %d; zb-auto optimal in %d of those (at most %.1f%% above)\n",
              tiny, proven, auto_optimal, 100 * worst);
  return 0;
}
