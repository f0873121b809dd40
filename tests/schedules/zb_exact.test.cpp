// zb_exact.hpp: the optimum of the model for tiny problems.
#include "sweep.hpp"

#include <pipetype/schedules/zb_exact.hpp>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_zb_exact {

namespace pt = pipetype;

namespace {

pt::zb_problem problem(int p, int m, double limit, pt::costs c) {
  return sweep::zb_problem_of(p, m, limit, pt::cost_model{c});
}

// Every program of the model for p = 2, m = 2, by brute force over each rank's interleavings.
double brute_force(const pt::zb_problem& pr) {
  const pt::detail::zb_tables z = pt::detail::zb_tables_of(pr);
  std::vector<std::vector<int>> orders;  // the valid sequences of one rank: F0 F1 I0 I1 W0 W1 interleaved
  std::vector<int> seq{0, 1, 2, 3, 4, 5};
  do {
    bool ok = true;
    int nf = 0, ni = 0, nw = 0;
    for (int c : seq) {
      const int k = c / 2, j = c % 2;
      if (k == 0) ok = ok && j == nf++;
      if (k == 1) ok = ok && j == ni++ && ni <= nf;
      if (k == 2) ok = ok && j == nw++ && nw <= ni;
    }
    if (ok) orders.push_back(seq);
  } while (std::next_permutation(seq.begin(), seq.end()));
  double best = 1e300;
  for (const auto& a : orders)
    for (const auto& b : orders) {
      pt::detail::zb_orders o{2, 2, a};
      o.code.insert(o.code.end(), b.begin(), b.end());
      if (const pt::detail::zb_run r = pt::detail::zb_evaluate(z, o); r.ok) best = std::min(best, r.rank_span);
    }
  return best;
}

}  // namespace

TEST_CASE("zb_exact: equals brute force on p = 2, m = 2 under several costs and limits") {
  for (const pt::costs c : {pt::costs{.f = 1, .b = 2}, pt::costs{.f = 1, .b = 2, .i = 1.5, .w = 0.5, .comm = 0.5},
                            pt::costs{.f = 2, .b = 1.5, .i = 0.5, .w = 1, .comm = 0.25}})
    for (const double limit : {1.0, 1.5, 0.0}) {
      CAPTURE(c.f);
      CAPTURE(c.i);
      CAPTURE(limit);
      const pt::zb_problem pr = problem(2, 2, limit, c);
      const pt::zb_exact_result e = pt::zb_exact(pr);
      REQUIRE(e.error == nullptr);
      CHECK(e.optimal);
      CHECK(e.rank_span == doctest::Approx(brute_force(pr)));
      CHECK(pt::simulate(e.schedule.view(), pr.costs).max_rank_span() == doctest::Approx(e.rank_span));
    }
}

TEST_CASE("zb_exact: p = 3 and 4, m = 4 - proven, never above zb_auto, never below the bound") {
  for (const pt::costs c :
       {pt::costs{.f = 1, .b = 2, .i = 1.5, .w = 0.5}, pt::costs{.f = 1, .b = 1.9, .i = 1.1, .w = 0.8, .comm = 0.1}})
    for (int p : {3, 4})
      for (const double limit : {static_cast<double>(p), 0.0}) {
        CAPTURE(p);
        CAPTURE(c.i);
        CAPTURE(limit);
        const pt::zb_problem pr = problem(p, 4, limit, c);
        const pt::zb_exact_result e = pt::zb_exact(pr);
        const pt::zb_result a = pt::zb_auto_search(pr);
        CHECK(e.optimal);
        CHECK(e.rank_span <= a.rank_span + 1e-9);
        CHECK(e.rank_span >= a.bound.value() - 1e-9);
        const int units = limit > 0 ? static_cast<int>(2 * limit) : 0;
        CHECK(pt::build_plan(e.schedule, {.mem_limit_units = units}).ok());
      }
}

TEST_CASE("zb_exact: a budget too small is not a proof, and bad problems are named") {
  const pt::zb_problem pr = problem(4, 6, 0, pt::costs{.f = 1, .b = 2, .i = 1.5, .w = 0.5});
  const pt::zb_exact_result e = pt::zb_exact(pr, 1000);
  CHECK_FALSE(e.optimal);
  CHECK(e.rank_span == pt::zb_auto_search(pr).rank_span);  // the incumbent stands
  CHECK(std::string(pt::zb_exact(problem(4, 6, 0.5, pt::costs{.f = 1, .b = 2})).error).find("below one") !=
        std::string::npos);
  CHECK(std::string(pt::zb_exact(problem(2, 2, 0, pt::costs{.f = 1, .b = 1, .i = 1, .w = 0})).error).find("positive") !=
        std::string::npos);
}

}  // namespace test_zb_exact
}  // namespace
