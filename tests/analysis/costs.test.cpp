#include <pipetype/analysis/costs.hpp>

#include <doctest/doctest.h>

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
