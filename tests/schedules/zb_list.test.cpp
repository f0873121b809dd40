// zb_list.hpp: a run's figures are the simulator's, it respects the limit, and a cutoff stops it.
#include "sweep.hpp"

namespace pt = pipetype;

TEST_CASE("zb_list: every knob setting gives a valid program with the simulator's figures") {
  for (int p = 1; p <= 5; ++p)
    for (int m = 1; m <= 3 * p; m += 2)
      for (const double limit : {0.0, static_cast<double>(p), 1.5 * p}) {
        const pt::zb_problem pr = sweep::zb_problem_of(
            p, m, limit, pt::cost_model{pt::costs{.f = 1, .b = 2.5, .i = 1.5, .w = 1, .comm = 0.25}});
        const pt::detail::zb_tables z = pt::detail::zb_tables_of(pr);
        for (int k = -1; k <= p; ++k)
          for (int flags = 0; flags < 4; ++flags) {
            CAPTURE(p);
            CAPTURE(m);
            CAPTURE(limit);
            CAPTURE(k);
            CAPTURE(flags);
            const pt::zb_knobs knobs{k, (flags & 1) != 0, (flags & 2) != 0};
            const pt::detail::zb_run r = pt::detail::zb_list_schedule(z, knobs);
            REQUIRE(r.ok);
            const pt::program prog = pt::detail::zb_program_of(pr, r);
            REQUIRE(pt::build_plan(prog, {.mem_limit_units = limit > 0 ? static_cast<int>(2 * limit) : 0}).ok());
            const pt::timeline t = pt::simulate(prog.view(), pr.costs);
            CHECK(t.max_rank_span() == doctest::Approx(r.rank_span));
            CHECK(t.makespan() == doctest::Approx(r.makespan));
            // a cutoff below its span stops the run; one at its span does not
            CHECK_FALSE(pt::detail::zb_list_schedule(z, knobs, r.rank_span * 0.9).ok);
            CHECK(pt::detail::zb_list_schedule(z, knobs, r.rank_span).ok);
          }
      }
}
