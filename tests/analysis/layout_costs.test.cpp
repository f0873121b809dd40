#include <pipetype/analysis/layout_costs.hpp>

#include <doctest/doctest.h>

#include <pipetype/analysis/simulate.hpp>
#include <pipetype/compile/plan.hpp>
#include <pipetype/schedules/one_f_one_b.hpp>

#include <vector>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_layout_costs {

namespace pt = pipetype;

TEST_CASE("layout_costs: a stage costs its layers' weight times one layer") {
  const pt::layer_layout l = pt::parse_layout("Et|t*3|t*4|t*2,L");
  REQUIRE(l.ok());
  const pt::cost_model c = pt::layout_costs(l, pt::costs{.f = 1, .b = 2});
  CHECK(c.time(pt::F(0, 0)) == doctest::Approx(1.5));  // E (0.5) + t
  CHECK(c.time(pt::B(1, 3)) == doctest::Approx(6));
  CHECK(c.time(pt::F(2, 0)) == doctest::Approx(4));
  CHECK(c.time(pt::B(3, 0)) == doctest::Approx(6));  // t*2 + L
  const pt::cost_model even =
      pt::layout_costs(l, {.f = 1, .b = 2}, {.embedding = 0, .decoder = 1, .mtp = 1, .loss = 0});
  CHECK(even.time(pt::F(0, 0)) == doctest::Approx(1));
  // the weights alone, as schedule_params::stage_scale takes them
  CHECK(pt::layout_weights(l) == std::vector<double>{1.5, 3, 4, 3});
}

TEST_CASE("layout_costs: an uneven split simulates longer than the even one, and its memory follows the layers") {
  using sched = pt::one_f_one_b<pt::ranks<4>, pt::microbatches<8>>;
  const auto plan = pt::make_plan<sched>();
  const pt::layer_layout even = pt::parse_layout("t*3|t*3|t*3|t*3");
  const pt::layer_layout heavy = pt::parse_layout("t*2|t*2|t*2|t*6");  // the same 12 layers
  const pt::costs layer{.f = 1, .b = 2};
  const double t_even = pt::simulate(plan.compute(), pt::layout_costs(even, layer)).makespan();
  const double t_heavy = pt::simulate(plan.compute(), pt::layout_costs(heavy, layer)).makespan();
  CHECK(t_even == doctest::Approx(3 * pt::simulate(plan.compute(), layer).makespan()));
  // 8 microbatches through the 6-layer stage alone take 8 · 18; the pipeline fills and drains around it
  CHECK(t_heavy > t_even);
  CHECK(t_heavy >= 8 * 18);
  const std::vector<double> peak = pt::layout_peak_activations(plan.compute(), heavy);
  REQUIRE(peak.size() == 4);
  // 1F1B holds p − r activations on rank r: rank 0 holds 4 of its 2-layer stage, rank 3 one of 6
  const double layers[] = {2, 2, 2, 6};
  for (int r = 0; r < 4; ++r) {
    CAPTURE(r);
    CHECK(plan.peak_activations(r) == 4 - r);
    CHECK(peak[static_cast<std::size_t>(r)] == doctest::Approx((4 - r) * layers[r]));
  }
}

TEST_CASE("layout_costs: a layout of many heavy stages stays within the cost bounds (its weights never meet)") {
  // the fuzzer's find: 657 stages, 655 of weight 2, once refused as if their scales multiplied
  const pt::layer_layout l = pt::parse_layout("(t|)*2 (tt|)*655");
  REQUIRE(l.ok());
  CHECK(pt::layout_costs(l, pt::costs{.f = 1e9, .b = 2e9, .comm = 1e9}).error() == nullptr);
}

}  // namespace test_layout_costs
}  // namespace
