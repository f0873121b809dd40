// zb_model.hpp: the evaluator is the simulator on the model, and the bound holds.
#include "sweep.hpp"

#include <cstdint>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_zb_model {

namespace pt = pipetype;

namespace {

pt::zb_problem problem(int p, int m, double limit, pt::cost_model c) {
  return sweep::zb_problem_of(p, m, limit, std::move(c));
}

pt::cost_model uneven(int p, int m) {  // a heavy head, unequal microbatches, latency
  pt::cost_model c{pt::costs{.f = 1, .b = 2.2, .i = 1.3, .w = 0.9, .comm = 0.2}};
  c.stage(p - 1, pt::kind::F, 1.75);
  for (int j = 0; j < m; j += 3) c.microbatch(j, 1.5);
  return c;
}

}  // namespace

TEST_CASE("zb_model: zb_evaluate gives the simulator's figures for the hand-written schedules") {
  for (int p = 1; p <= 5; ++p)
    for (int m = 1; m <= 2 * p + 1; ++m) {
      CAPTURE(p);
      CAPTURE(m);
      const pt::zb_problem pr = problem(p, m, 0, uneven(p, m));
      const pt::detail::zb_tables z = pt::detail::zb_tables_of(pr);
      for (const pt::program& h : {pt::make_zb_h1(p, m), pt::make_zb_h2(p, m), sweep::zb_gpipe_split(p, m)}) {
        const pt::detail::zb_run run = pt::detail::zb_evaluate(z, pt::detail::zb_orders_of(z, h.actions));
        REQUIRE(run.ok);
        const pt::timeline t = pt::simulate(h.view(), pr.costs);
        CHECK(run.rank_span == doctest::Approx(t.max_rank_span()));
        CHECK(run.makespan == doctest::Approx(t.makespan()));
        // and the program of the run is the same program
        CHECK(pt::simulate(pt::detail::zb_program_of(pr, run).view(), pr.costs).max_rank_span() ==
              doctest::Approx(t.max_rank_span()));
      }
    }
}

TEST_CASE("zb_model: zb_evaluate rejects orders outside the model, over the limit, or that deadlock") {
  const pt::zb_problem pr = problem(2, 2, 1.5, pt::cost_model{pt::costs{.f = 1, .b = 2}});
  const pt::detail::zb_tables z = pt::detail::zb_tables_of(pr);
  auto orders = [&](std::vector<int> r0, std::vector<int> r1) {  // codes kind * m + microbatch
    pt::detail::zb_orders o{2, 2, {}};
    o.code = r0;
    o.code.insert(o.code.end(), r1.begin(), r1.end());
    return o;
  };
  // F0 F1 I0 W0 I1 W1 on both ranks: 1F1B-like with two activations, over a limit of 1.5
  CHECK_FALSE(pt::detail::zb_evaluate(z, orders({0, 1, 2, 4, 3, 5}, {0, 1, 2, 4, 3, 5})).ok);
  // F0 I0 F1 W0 I1 W1: within it
  CHECK(pt::detail::zb_evaluate(z, orders({0, 2, 1, 4, 3, 5}, {0, 2, 1, 4, 3, 5})).ok);
  // F1 before F0: out of microbatch order
  CHECK_FALSE(pt::detail::zb_evaluate(z, orders({1, 0, 2, 4, 3, 5}, {0, 2, 1, 4, 3, 5})).ok);
  // W0 before I0, and I0 before F0
  CHECK_FALSE(pt::detail::zb_evaluate(z, orders({0, 4, 2, 1, 3, 5}, {0, 2, 1, 4, 3, 5})).ok);
  CHECK_FALSE(pt::detail::zb_evaluate(z, orders({2, 0, 1, 4, 3, 5}, {0, 2, 1, 4, 3, 5})).ok);
  // a cutoff below the span stops the evaluation; one above does not
  const pt::detail::zb_run full = pt::detail::zb_evaluate(z, orders({0, 2, 1, 4, 3, 5}, {0, 2, 1, 4, 3, 5}));
  CHECK_FALSE(pt::detail::zb_evaluate(z, orders({0, 2, 1, 4, 3, 5}, {0, 2, 1, 4, 3, 5}), full.rank_span - 0.5).ok);
  CHECK(pt::detail::zb_evaluate(z, orders({0, 2, 1, 4, 3, 5}, {0, 2, 1, 4, 3, 5}), full.rank_span).ok);
}

TEST_CASE("zb_model: the span bound, by hand and below every schedule of the model") {
  // F = I = W = 1, p = 4, m = 8: work 24; rank 0's chain F0, the round trip 3 · (F + I), then all
  // I's and W's: 1 + 6 + 16 = 23
  pt::zb_bound b = pt::zb_span_bound(problem(4, 8, 0, pt::cost_model{pt::costs{.f = 1, .b = 2}}));
  CHECK(b.work == 24);
  CHECK(b.chain == 23);
  CHECK(b.value() == 24);
  CHECK(b.gap(27) == doctest::Approx(27.0 / 24 - 1));
  // with latency 1 the round trip below rank 0 gains 6: 1 + 6 + 6 + 16 = 29
  b = pt::zb_span_bound(problem(4, 8, 0, pt::cost_model{pt::costs{.f = 1, .b = 2, .comm = 1}}));
  CHECK(b.chain == 29);
  CHECK(b.value() == 29);
  for (int p = 1; p <= 5; ++p)
    for (int m = 1; m <= 2 * p + 2; ++m) {
      CAPTURE(p);
      CAPTURE(m);
      const pt::zb_problem pr = problem(p, m, 0, uneven(p, m));
      const double bound = pt::zb_span_bound(pr).value();
      for (const pt::program& h :
           {pt::make_zb_h1(p, m), pt::make_zb_h2(p, m), sweep::zb_gpipe_split(p, m), sweep::zb_one_f_one_b_split(p, m)})
        CHECK(pt::simulate(h.view(), pr.costs).max_rank_span() >= bound - 1e-9);
      CHECK(pt::zb_auto_search(pr).rank_span >= bound - 1e-9);
    }
}

TEST_CASE("zb_model: the hand-written candidates' orders and warm-ups are their programs'") {
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 3 * p; ++m) {
      const pt::detail::zb_tables z = pt::detail::zb_tables_of(sweep::zb_problem_of(p, m, 0, pt::cost_model{}));
      for (const pt::detail::zb_hand h : pt::detail::zb_hands) {
        CAPTURE(p);
        CAPTURE(m);
        CAPTURE(pt::detail::zb_hand_name(h));
        const pt::program prog = h == pt::detail::zb_hand::zb_h1               ? pt::make_zb_h1(p, m)
                                 : h == pt::detail::zb_hand::zb_h2             ? pt::make_zb_h2(p, m)
                                 : h == pt::detail::zb_hand::one_f_one_b_split ? sweep::zb_one_f_one_b_split(p, m)
                                                                               : sweep::zb_gpipe_split(p, m);
        CHECK(pt::detail::zb_hand_orders(h, z).code == pt::detail::zb_orders_of(z, prog.actions).code);
        for (int r = 0; r < p; ++r) {
          int forwards = 0;  // before the rank's first I
          for (const pt::action& a : prog.view().rank_actions(r)) {
            if (a.what != pt::kind::F) break;
            ++forwards;
          }
          CHECK(pt::detail::zb_hand_warmup(h, p, m, r) == forwards);
        }
      }
    }
}

}  // namespace test_zb_model
}  // namespace
