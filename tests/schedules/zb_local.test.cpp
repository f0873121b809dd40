// zb_local.hpp: moves keep the model, the search never makes a candidate worse, and it improves
// the weak ones.
#include "sweep.hpp"

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_zb_local {

namespace pt = pipetype;

TEST_CASE("zb_local: a move keeps microbatch order and each action after its input") {
  pt::detail::zb_orders o{1, 2, {0, 1, 2, 4, 3, 5}};         // F0 F1 I0 W0 I1 W1
  CHECK_FALSE(pt::detail::zb_move_keeps_order(o, 0, 0, 1));  // F0 past F1
  CHECK_FALSE(pt::detail::zb_move_keeps_order(o, 0, 0, 2));  // F0 past its own I0
  CHECK(pt::detail::zb_move_keeps_order(o, 0, 1, 2));        // F1 after I0
  CHECK_FALSE(pt::detail::zb_move_keeps_order(o, 0, 3, 2));  // W0 before its I0
  CHECK(pt::detail::zb_move_keeps_order(o, 0, 3, 4));        // W0 after I1
  CHECK_FALSE(pt::detail::zb_move_keeps_order(o, 0, 3, 5));  // W0 past W1
  pt::detail::zb_move(o, 0, 1, 2);
  CHECK(o.code == std::vector<int>{0, 2, 1, 4, 3, 5});
  pt::detail::zb_move(o, 0, 2, 1);
  CHECK(o.code == std::vector<int>{0, 1, 2, 4, 3, 5});
}

TEST_CASE("zb_local: from 1F1B split in place it finds a shorter program and never a longer one") {
  for (int p = 2; p <= 5; ++p)
    for (int m = p; m <= 3 * p; m += p) {
      CAPTURE(p);
      CAPTURE(m);
      pt::zb_problem pr;
      pr.ranks = p;
      pr.microbatches = m;
      pr.costs = pt::cost_model{pt::costs{.f = 1, .b = 2.3, .i = 1.2, .w = 1.1, .comm = 0.1}};
      pr.mem_limit = 2.0 * p;
      const pt::detail::zb_tables z = pt::detail::zb_tables_of(pr);
      const pt::program base = sweep::zb_one_f_one_b_split(p, m);
      const pt::detail::zb_run start = pt::detail::zb_evaluate(z, pt::detail::zb_orders_of(z, base.actions));
      REQUIRE(start.ok);
      long long budget = 1LL << 30;
      const pt::detail::zb_local_result l = pt::detail::zb_local_search(z, start, 4, budget, 0);
      REQUIRE(l.run.ok);
      CHECK(l.run.rank_span < start.rank_span);  // 1F1B's bubble holds W's that can move
      CHECK(l.moves > 0);
      const pt::program prog = pt::detail::zb_program_of(pr, l.run);
      REQUIRE(pt::build_plan(prog, {.mem_limit_units = 4 * p}).ok());
      CHECK(pt::simulate(prog.view(), pr.costs).max_rank_span() == doctest::Approx(l.run.rank_span));
      // without budget nothing moves
      long long none = 0;
      CHECK(pt::detail::zb_local_search(z, start, 4, none, 0).moves == 0);
    }
}

}  // namespace test_zb_local
}  // namespace
