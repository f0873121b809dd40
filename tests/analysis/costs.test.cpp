#include <pipetype/analysis/costs.hpp>

#include <doctest/doctest.h>

#include <limits>
#include <string>
#include <vector>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_costs {

namespace pt = pipetype;

static_assert(pt::cost_source<pt::costs>);
static_assert(pt::cost_source<pt::cost_model>);

TEST_CASE("costs: I and W default to half of B") {
  const pt::costs c{.f = 1, .b = 3};
  CHECK(c.of(pt::kind::I) == 1.5);
  CHECK(c.of(pt::kind::W) == 1.5);
  const pt::costs d{.f = 1, .b = 3, .i = 1, .w = 2};
  CHECK(d.of(pt::kind::I) == 1);
  CHECK(d.of(pt::kind::W) == 2);
}

TEST_CASE("cost_model: the last matching rule wins, microbatch scales multiply") {
  pt::cost_model m{pt::costs{.f = 1, .b = 2, .comm = 0.25}};
  m.stage(-1, pt::kind::F, 2).stage(3, pt::kind::F, 4).microbatch(0, 0.5).microbatch(0, 3);
  CHECK(m.time(pt::F(1, 1)) == 2);
  CHECK(m.time(pt::F(3, 1)) == 4);
  CHECK(m.time(pt::F(3, 0)) == 4 * 1.5);
  CHECK(m.latency(0, 1) == 0.25);
  CHECK(m.base().b == 2);
}

TEST_CASE("cost_model: a stage scale multiplies every kind on that stage, with the microbatch scales") {
  pt::cost_model m{pt::costs{.f = 1, .b = 2, .i = 1.5, .w = 0.5}};
  m.stage_scale(2, 2.0).microbatch(1, 0.5).stage(2, pt::kind::W, 1);
  CHECK(m.time(pt::F(2, 0)) == 2);
  CHECK(m.time(pt::I(2, 0)) == 3);
  CHECK(m.time(pt::W(2, 0)) == 2);    // the override, then the scale
  CHECK(m.time(pt::I(2, 1)) == 1.5);  // 1.5 · 2 · 0.5
  CHECK(m.time(pt::I(1, 0)) == 1.5);  // other stages keep their time
  CHECK(m.time(pt::B(1, 1)) == 1);
}

TEST_CASE("scaled_costs: stages at their rank's speed, microbatches at their scale") {
  const std::vector<int> stage_rank{0, 1, 1, 0};  // a V: stages 1 and 2 on rank 1
  const pt::cost_model c = pt::scaled_costs(pt::costs{.f = 1, .b = 2}, stage_rank, {1, 0.5}, {1, 3});
  CHECK(c.time(pt::F(0, 0)) == 1);
  CHECK(c.time(pt::F(1, 0)) == 2);  // rank 1 at half speed
  CHECK(c.time(pt::B(2, 0)) == 4);
  CHECK(c.time(pt::F(3, 1)) == 3);  // microbatch 1 three times as long
  CHECK(c.time(pt::B(2, 1)) == 12);
  const pt::cost_model same = pt::scaled_costs(pt::costs{.f = 1, .b = 2}, stage_rank, {}, {});
  CHECK(same.time(pt::B(2, 1)) == 2);
}

TEST_CASE("costs: stage_scaled scales each named stage, and leaves the others") {
  const pt::cost_model c = pt::stage_scaled(pt::cost_model{pt::costs{.f = 1, .b = 2}}, {2, 1, 0.5});
  CHECK(c.time(pt::F(0, 3)) == doctest::Approx(2));
  CHECK(c.time(pt::B(1, 0)) == doctest::Approx(2));
  CHECK(c.time(pt::W(2, 0)) == doctest::Approx(0.5));
  CHECK(c.time(pt::F(3, 0)) == doctest::Approx(1));  // past the scales' end
}

TEST_CASE("costs: times and scales that would make simulated figures infinite are refused with a sentence") {
  CHECK(pt::cost_error(pt::costs{}) == nullptr);
  CHECK(pt::cost_error(pt::costs{.f = 0, .b = 0}) == nullptr);  // all zero: times of 0, finite
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  for (const pt::costs c : {pt::costs{.f = inf}, pt::costs{.b = nan}, pt::costs{.comm = 1e300}, pt::costs{.i = nan},
                            pt::costs{.w = 2e12}, pt::costs{.fb = inf}, pt::costs{.f = -1}}) {
    const char* e = pt::cost_error(c);
    REQUIRE(e != nullptr);
    CHECK(std::string(e).starts_with("costs: every time"));
  }
  CHECK(pt::cost_error(pt::costs{.i = -1, .w = -1, .fb = -1}) == nullptr);  // negative: derived from B
  // a speed of 10^-300 divides every time into infinity
  CHECK(pt::scale_error({1, 0.5}, {1, 3}, {0, 2}) == nullptr);  // an empty stage may weigh 0
  CHECK(std::string(pt::scale_error({1e-300, 1}, {})).starts_with("rank speeds must be finite"));
  CHECK(std::string(pt::scale_error({0, 1}, {})).starts_with("rank speeds must be finite"));
  CHECK(std::string(pt::scale_error({}, {1, inf})).starts_with("microbatch scales must be"));
  CHECK(std::string(pt::scale_error({}, {}, {nan})).starts_with("stage scales"));
  // a cost model: its rules too, and scales piling up past 1e30
  CHECK(pt::cost_model{}.error() == nullptr);
  CHECK(pt::cost_model{pt::costs{.f = inf}}.error() != nullptr);
  CHECK(std::string(pt::cost_model{}.stage(0, pt::kind::F, nan).error()).starts_with("cost_model: a stage's"));
  CHECK(std::string(pt::cost_model{}.stage_scale(0, 1e7).error()).starts_with("cost_model: a scale"));
  pt::cost_model piled;
  for (int s = 0; s < 6; ++s) piled.stage_scale(0, 1e6);
  CHECK(std::string(piled.error()).starts_with("cost_model: its scales multiply"));
  pt::cost_model met;  // a stage's and a microbatch's scales meet in one action
  for (int k = 0; k < 3; ++k) met.stage_scale(2, 1e6).microbatch(1, 1e6);
  CHECK(std::string(met.error()).starts_with("cost_model: its scales multiply"));
  // scales of different stages never meet: 655 stages of weight 2 (an uneven layout) stay finite
  pt::cost_model layout;
  for (int s = 0; s < 655; ++s) layout.stage_scale(s, 2);
  CHECK(layout.error() == nullptr);
  CHECK(pt::scaled_costs(pt::costs{}, {0, 1}, {1, 0.5}, {2, 1}).error() == nullptr);
}

}  // namespace test_costs
}  // namespace
