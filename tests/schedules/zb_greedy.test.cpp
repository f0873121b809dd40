// zb_greedy.hpp: the zero-bubble authors' heuristic, against the figures their own code gives.
#include "sweep.hpp"

#include "../read_file.hpp"

#include <sstream>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_zb_greedy {

namespace pt = pipetype;

namespace {

struct reference_case {
  std::string name;
  int p = 0, m = 0;
  double limit = 0, span = 0;
};

std::vector<reference_case> reference_cases() {
  std::istringstream in(read_test_file(std::string(PIPETYPE_TEST_DATA) + "/zb_reference.txt"));
  std::vector<reference_case> out;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream l(line);
    reference_case c;
    REQUIRE_MESSAGE(static_cast<bool>(l >> c.name >> c.p >> c.m >> c.limit >> c.span), "bad line: " << line);
    out.push_back(c);
  }
  return out;
}

pt::zb_problem problem_of(const reference_case& c) {  // the cases of zb_reference.py
  struct costs_of {
    const char* name;
    double f, i, w, comm;
  };
  const costs_of table[] = {{"F=I=W", 1, 1, 1, 0},   {"I>W", 1, 1.5, 0.5, 0},     {"W>I", 1, 0.75, 1.25, 0},
                            {"comm", 1, 1, 1, 0.25}, {"mixed", 1, 1.1, 0.8, 0.1}, {"mixed+", 1, 1.3, 0.9, 0.5},
                            {"headx2", 1, 1, 1, 0}};
  pt::zb_problem pr;
  pr.ranks = c.p;
  pr.microbatches = c.m;
  pr.mem_limit = c.limit;
  for (const costs_of& k : table)
    if (c.name == k.name)
      pr.costs = pt::cost_model{pt::costs{.f = k.f, .b = k.i + k.w, .i = k.i, .w = k.w, .comm = k.comm}};
  if (c.name == "headx2")
    pr.costs.stage(c.p - 1, pt::kind::F, 2).stage(c.p - 1, pt::kind::I, 2).stage(c.p - 1, pt::kind::B, 3);
  return pr;
}

double greedy_best(const pt::zb_problem& pr) {
  const pt::detail::zb_tables z = pt::detail::zb_tables_of(pr);
  double best = -1;
  for (const bool before : {false, true})
    for (const bool prio : {false, true})
      for (const bool fill : {false, true})
        if (const pt::detail::zb_run r = pt::detail::zb_greedy_schedule(z, {before, prio, fill});
            r.ok && (best < 0 || r.rank_span < best))
          best = r.rank_span;
  return best;
}

}  // namespace

// It runs inside the compiler too.
static_assert(pt::detail::zb_greedy_schedule(pt::detail::zb_tables_of(pt::zb_problem{
                                                 .ranks = 4,
                                                 .microbatches = 8,
                                                 .costs = pt::cost_model{pt::costs{.f = 1, .b = 2}},
                                                 .mem_limit = 4}),
                                             {})
                  .rank_span == 27);  // ZB-H1's 3m + (p − 1)

TEST_CASE("zb_greedy: the same spans as the authors' scheduler on 126 cases, and zb_auto never longer") {
  const std::vector<reference_case> cases = reference_cases();
  REQUIRE(cases.size() == 126);
  for (const reference_case& c : cases) {
    CAPTURE(c.name);
    CAPTURE(c.p);
    CAPTURE(c.m);
    CAPTURE(c.limit);
    const pt::zb_problem pr = problem_of(c);
    CHECK(greedy_best(pr) == doctest::Approx(c.span));
    CHECK(pt::zb_auto_search(pr).rank_span <= c.span + 1e-9);
    pt::zb_problem least = pr;  // what zb_auto<> runs in the compiler by default (zb_effort{})
    least.refine = 0;
    least.local = 0;
    CHECK(pt::zb_auto_search(least).rank_span <= c.span + 1e-9);
  }
}

TEST_CASE("zb_greedy: each run is a valid program within the limit, with the simulator's figures") {
  for (int p = 1; p <= 5; ++p)
    for (int m = 1; m <= 3 * p; m += 2)
      for (const double limit : {0.0, static_cast<double>(p), 1.5 * p}) {
        pt::zb_problem pr;
        pr.ranks = p;
        pr.microbatches = m;
        pr.costs = pt::cost_model{pt::costs{.f = 1, .b = 2.5, .i = 1.5, .w = 1, .comm = 0.25}};
        pr.mem_limit = limit;
        const pt::detail::zb_tables z = pt::detail::zb_tables_of(pr);
        for (int flags = 0; flags < 8; ++flags) {
          CAPTURE(p);
          CAPTURE(m);
          CAPTURE(limit);
          CAPTURE(flags);
          const pt::detail::zb_run r =
              pt::detail::zb_greedy_schedule(z, {(flags & 1) != 0, (flags & 2) != 0, (flags & 4) != 0});
          if (!r.ok) continue;  // the setting ran out of W's to free memory
          const pt::program prog = pt::detail::zb_program_of(pr, r);
          const int units = limit > 0 ? static_cast<int>(2 * limit) : 0;
          REQUIRE(pt::build_plan(prog, {.mem_limit_units = units}).ok());
          const pt::timeline t = pt::simulate(prog.view(), pr.costs);
          CHECK(t.max_rank_span() == doctest::Approx(r.rank_span));
          CHECK(t.makespan() == doctest::Approx(r.makespan));
        }
      }
}

TEST_CASE("zb_greedy: flags none of a run's decisions depended on give the same run") {
  int shared = 0;
  for (int p = 2; p <= 6; ++p)
    for (const int m : {p, 2 * p + 1, 4 * p})
      for (const double limit : {0.0, static_cast<double>(p), 1.5 * p}) {
        const pt::zb_problem pr = sweep::zb_problem_of(
            p, m, limit, pt::cost_model{pt::costs{.f = 1, .b = 2.2, .i = 1.3, .w = 0.9, .comm = 0.5}});
        const pt::detail::zb_tables z = pt::detail::zb_tables_of(pr);
        for (int bits = 0; bits < 8; ++bits) {
          const pt::zb_greedy_flags fl{(bits & 1) != 0, (bits & 2) != 0, (bits & 4) != 0};
          REQUIRE(pt::detail::zb_greedy_bits(fl) == bits);
          int depends = -1;
          const pt::detail::zb_run r = pt::detail::zb_greedy_schedule(z, fl, 0, &depends);
          REQUIRE(depends >= 0);
          for (int other = 0; other < 8; ++other) {
            if (other == bits || ((other ^ bits) & depends) != 0) continue;
            CAPTURE(p);
            CAPTURE(m);
            CAPTURE(limit);
            CAPTURE(bits);
            CAPTURE(other);
            ++shared;
            const pt::detail::zb_run o =
                pt::detail::zb_greedy_schedule(z, {(other & 1) != 0, (other & 2) != 0, (other & 4) != 0});
            REQUIRE(o.ok == r.ok);
            CHECK(o.rank_span == r.rank_span);
            CHECK(o.makespan == r.makespan);
            bool same = o.size() == r.size();
            for (int q = 0; q < r.size() && same && r.ok; ++q) same = o.placed[q] == r.placed[q];
            CHECK(same);
          }
          if (!r.ok) continue;
          // a cutoff below its span stops the run; one at its span does not
          CHECK_FALSE(pt::detail::zb_greedy_schedule(z, fl, r.rank_span * 0.9).ok);
          CHECK(pt::detail::zb_greedy_schedule(z, fl, r.rank_span).ok);
        }
      }
  CHECK(shared > 50);  // some settings do share their runs
}

}  // namespace test_zb_greedy
}  // namespace
