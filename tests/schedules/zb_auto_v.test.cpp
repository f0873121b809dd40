// zb_auto_v.hpp: zb_auto on the V placement.
#include "sweep.hpp"

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_zb_auto_v {

namespace pt = pipetype;

namespace {

pt::zb_problem v_problem(int p, int m, double limit, pt::cost_model c) {
  pt::zb_problem pr = sweep::zb_problem_of(p, m, limit, std::move(c));
  pr.placement = pt::search_placement::v;
  return pr;
}

int chunk_units(double limit) { return static_cast<int>(4 * limit); }  // 2 chunk activations, 2 units each

}  // namespace

TEST_CASE("zb_auto_v: equal costs at 1F1B's memory - ZB-V's zero bubble, 2m(F + I + W) per chunk") {
  for (int p = 2; p <= 6; ++p)
    for (int m = 2 * p - 1; m <= 3 * p; ++m) {
      CAPTURE(p);
      CAPTURE(m);
      const pt::zb_result r = pt::zb_auto_search(v_problem(p, m, p, pt::cost_model{pt::costs{.f = 0.5, .b = 1}}));
      CHECK(r.rank_span == doctest::Approx(2.0 * m * 1.5));
      CHECK(r.gap() == doctest::Approx(0));  // the busiest rank's work: optimal
      CHECK(r.schedule.stages == 2 * p);
      CHECK(pt::build_plan(r.schedule, {.mem_limit_units = chunk_units(p)}).ok());
    }
}

TEST_CASE("zb_auto_v: never worse than ZB-V within the same limit, and every answer verifies") {
  const pt::costs kinds[] = {pt::costs{.f = 0.5, .b = 1},
                             pt::costs{.f = 0.5, .b = 1, .i = 0.75, .w = 0.25, .comm = 0.1},
                             pt::costs{.f = 0.5, .b = 1.2, .i = 0.4, .w = 0.8, .comm = 0.25}};
  for (const pt::costs& c : kinds)
    for (int p = 2; p <= 5; ++p)
      for (int m = 1; m <= 3 * p; m += 2)
        for (const double limit : {static_cast<double>(p), 1.5 * p, 0.0}) {
          CAPTURE(p);
          CAPTURE(m);
          CAPTURE(limit);
          CAPTURE(c.i);
          const pt::zb_result r = pt::zb_auto_search(v_problem(p, m, limit, pt::cost_model{c}));
          const pt::plan_options o{.mem_limit_units = limit > 0 ? chunk_units(limit) : 0};
          REQUIRE(pt::build_plan(r.schedule, o).ok());
          CHECK(pt::simulate(r.schedule.view(), c).max_rank_span() == doctest::Approx(r.rank_span));
          const pt::program v = pt::make_zb_v(p, m);
          if (pt::build_plan(v, o).ok()) CHECK(r.rank_span <= pt::simulate(v.view(), c).max_rank_span() + 1e-9);
        }
}

TEST_CASE("zb_auto_v: by name, placement auto keeps the shorter of one stage per rank and the V") {
  for (int p : {2, 4})
    for (int m : {p, 2 * p, 4 * p}) {
      CAPTURE(p);
      CAPTURE(m);
      pt::schedule_params params{pt::costs{.f = 1, .b = 2, .comm = 0.1}, static_cast<double>(p)};
      auto span = [&](pt::search_placement where) {
        params.placement = where;
        const pt::program prog = pt::make_schedule("zb-auto", p, m, 0, params);
        const int v = prog.stages / prog.ranks;  // a chunk costs 1/v of a rank's share
        return pt::simulate(prog.view(), pt::costs{.f = 1.0 / v, .b = 2.0 / v, .comm = 0.1}).max_rank_span();
      };
      const double one = span(pt::search_placement::one_per_rank), v = span(pt::search_placement::v);
      CHECK(span(pt::search_placement::automatic) == doctest::Approx(std::min(one, v)));
      CHECK(v <= one + 1e-9);  // at 1F1B's memory the V is never behind
    }
  pt::zb_problem pr = sweep::zb_problem_of(4, 8, 4, pt::cost_model{});
  pr.placement = pt::search_placement::automatic;
  CHECK(std::string(pt::zb_problem_error(pr)).find("tries both") != std::string::npos);
}

}  // namespace test_zb_auto_v
}  // namespace
