// zero_bubble — the zero-bubble family and the automatic scheduler, at compile time and at run time.
//
// Builds ZB-H1, ZB-V, DualPipeV and zb-auto plans in the compiler (their figures are
// static_asserts below), then prints a comparison for a heavier loss head and unequal
// microbatches, where zb-auto searches at run time with the same code. docs/05_zero_bubble.md.
#include <pipetype/pipetype.hpp>

#include "cli.hpp"

#include <cstdio>

namespace pt = pipetype;

// Costs are types, so a schedule can be searched for inside the compiler.
struct equal_costs {
  static constexpr pt::costs value{.f = 1, .b = 2};  // F = I = W = 1 (B = I + W)
};

using p4 = pt::ranks<4>;
using m8 = pt::microbatches<8>;

constexpr auto h1 = pt::make_plan<pt::zb_h1<p4, m8>>();
constexpr auto v = pt::make_plan<pt::zb_v<p4, m8>>();
constexpr auto dpv = pt::make_plan<pt::dualpipe_v<p4, m8>>();
constexpr auto auto_p = pt::make_plan<pt::zb_auto<p4, m8, equal_costs, 4>>();   // 1F1B's memory
constexpr auto auto_2p = pt::make_plan<pt::zb_auto<p4, m8, equal_costs, 8>>();  // twice that

constexpr double span(const auto& plan, pt::costs c) { return pt::simulate(plan, c).max_rank_span(); }

// ZB-H1: m(F+I+W) + (p-1)(F+I-W) = 24 + 3; zb-auto finds it within 4 activations, and zero
// bubble (rank span = the work, 24) within 8. ZB-V: zero bubble with 2p chunk activations (= p).
static_assert(span(h1, equal_costs::value) == 27 && h1.peak_activations(0) == 4);
static_assert(span(auto_p, equal_costs::value) == 27 && auto_p.peak_activations(0) <= 4);
static_assert(span(auto_2p, equal_costs::value) == 24 && auto_2p.peak_activations(0) <= 8);
static_assert(span(v, pt::costs{.f = 0.5, .b = 1}) == 24 && v.peak_activations(0) == 8);
// DualPipeV: (R-1)(F&B + B - 3W) idle per rank with chunk costs F = I = W = 1/2
static_assert(span(dpv, pt::costs{.f = 0.5, .b = 1}) == 24 + 3 * (1.5 + 1 - 1.5));

int main(int argc, char** argv) {
  constexpr examples::cli cli{
      "zero_bubble",
      "usage: zero_bubble\n  no options: builds ZB-H1, ZB-V, DualPipeV and zb-auto plans at compile time and prints a "
      "comparison\n  for a heavier loss head and unequal microbatches (docs/05_zero_bubble.md)\n"};
  cli.no_options(argc, argv);
  // a loss head twice as heavy and microbatches of unequal length, as measured costs would say
  const int p = 4, m = 8;
  pt::cost_model c{pt::costs{.f = 1, .b = 2}};
  c.stage(p - 1, pt::kind::F, 2).stage(p - 1, pt::kind::I, 2).stage(p - 1, pt::kind::B, 3);
  for (int j = 0; j < m; ++j) c.microbatch(j, j % 3 == 0 ? 1.5 : 0.75);

  std::printf("p = %d, m = %d, heavy head, unequal microbatches; rank span (peak activations on rank 0)\n", p, m);
  std::printf("%-12s %14s %14s\n", "schedule", "limit 4", "limit 8");
  const char* names[] = {"1f1b", "zb-h1", "zb-h2", "zb-auto"};
  for (const char* name : names) {
    std::printf("%-12s", name);
    for (const double limit : {4.0, 8.0}) {
      pt::zb_problem pr;
      pr.ranks = p;
      pr.microbatches = m;
      pr.costs = c;
      pr.mem_limit = limit;
      const pt::program prog =
          std::string_view(name) == "zb-auto" ? pt::zb_auto_search(pr).schedule : pt::make_schedule(name, p, m);
      const pt::runtime_plan plan = pt::build_plan(prog, {.mem_limit = static_cast<int>(limit)});
      if (!plan.ok()) {
        std::printf(" %14s", "over limit");
        continue;
      }
      std::printf(" %8.2f (%3g)", pt::simulate(plan, c).max_rank_span(), plan.peak_activations(0));
    }
    std::printf("\n");
  }
  pt::zb_problem pr;
  pr.ranks = p;
  pr.microbatches = m;
  pr.costs = c;
  pr.mem_limit = 8;
  const pt::zb_result best = pt::zb_auto_search(pr);
  std::printf("\nzb-auto at limit 8: %s won among %d candidates; its grid:\n\n", best.source, best.candidates);
  std::printf("%s", pt::grid(best.schedule.view(), pt::simulate(best.schedule.view(), c)).c_str());
}
