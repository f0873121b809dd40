// zb_list.hpp: a run's figures are the simulator's, it respects the limit, and a cutoff stops it.
#include "sweep.hpp"

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_zb_list {

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

namespace {

bool same_run(const pt::detail::zb_run& a, const pt::detail::zb_run& b) {
  if (a.ok != b.ok || a.size() != b.size() || a.rank_span != b.rank_span || a.makespan != b.makespan) return false;
  for (int q = 0; q < a.size(); ++q)
    if (a.placed[q] != b.placed[q]) return false;
  return true;
}

}  // namespace

TEST_CASE("zb_list: a run the memo skips is, step for step, one it already made") {
  int skipped_runs = 0;
  for (int p = 2; p <= 6; ++p)
    for (const int m : {p, 2 * p + 1})
      for (const double limit : {0.0, static_cast<double>(p), 1.5 * p})
        for (const pt::costs c :
             {pt::costs{.f = 1, .b = 2}, pt::costs{.f = 1, .b = 2.5, .i = 1.5, .w = 1, .comm = 0.25}}) {
          const pt::zb_problem pr = sweep::zb_problem_of(p, m, limit, pt::cost_model{c});
          const pt::detail::zb_tables z = pt::detail::zb_tables_of(pr);
          pt::detail::zb_list_memo memo(z);
          std::vector<pt::detail::zb_run> made;
          // the grid, then every rank's cap in turn (as zb_auto's refinement tries them)
          std::vector<pt::zb_knobs> tries;
          for (int k = -1; k <= p; ++k)
            for (int flags = 0; flags < 4; ++flags) tries.push_back({k, (flags & 1) != 0, (flags & 2) != 0});
          for (int r = 0; r < p; ++r)
            for (int k = -1; k <= p; ++k) {
              pt::zb_knobs t{0, true, false};
              t.rank_extra.assign(static_cast<std::size_t>(p), 0);
              t.rank_extra[static_cast<std::size_t>(r)] = k;
              tries.push_back(t);
            }
          for (const pt::zb_knobs& kn : tries) {
            CAPTURE(p);
            CAPTURE(m);
            CAPTURE(limit);
            CAPTURE(kn.warmup_extra);
            bool skipped = false;
            pt::detail::zb_run r = memo.run(z, kn, 0, skipped);
            if (!skipped) {
              made.push_back(std::move(r));
              continue;
            }
            ++skipped_runs;
            const pt::detail::zb_run direct = pt::detail::zb_list_schedule(z, kn);
            bool found = false;
            for (const pt::detail::zb_run& e : made) found = found || same_run(e, direct);
            CHECK_MESSAGE(found, "the memo skipped a run it had not made");
          }
        }
  CHECK(skipped_runs > 100);  // the memo does skip
}

}  // namespace test_zb_list
}  // namespace
