// mesh/simulate.hpp: a mesh step's timing (simulate_mesh), the copy lane of memory actions.
#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include "memory_test.hpp"

#include <string>
#include <vector>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_simulate {

namespace pt = pipetype;
using mesh_test::at_k;

TEST_CASE("memory actions: the copy lane is one serial resource per rank") {
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 2, 4));
  const pt::memory_sizes z{{300}, {0}};
  // bandwidth 100: a copy takes 3 time units
  pt::memory_options o = at_k(1, pt::memory_policy::all);
  o.copy_bandwidth = 100;
  const pt::memory_placement placed = pt::place_memory(plan.compute(), z, pt::costs{.f = 1, .b = 2}, o);
  REQUIRE(placed.result.ok());
  const pt::mesh_program mp = pt::lower_mesh(plan.compute(), plan.lowered(), {.pp = 2, .dp = 1},
                                             pt::place_collectives(plan.compute(), {}), {}, placed.actions);
  pt::mesh_costs d;
  d.activations = z;
  d.copy_bandwidth = 100;
  const pt::mesh_timeline t = pt::simulate_mesh(mp, pt::costs{.f = 1, .b = 2}, d);
  REQUIRE(t.completed);
  for (int g = 0; g < 2; ++g) {
    double lane_free = 0;
    for (int i = mp.begin[static_cast<std::size_t>(g)]; i < mp.begin[static_cast<std::size_t>(g) + 1]; ++i) {
      const pt::mesh_op& op = mp.ops[static_cast<std::size_t>(i)];
      if (!pt::is_copy(op.code)) continue;
      CHECK(op.stream == pt::copy_stream);
      CHECK(t.end[static_cast<std::size_t>(i)] - t.start[static_cast<std::size_t>(i)] == doctest::Approx(3));
      CHECK(t.start[static_cast<std::size_t>(i)] >= lane_free - 1e-9);  // never two at once
      lane_free = t.end[static_cast<std::size_t>(i)];
    }
  }
}

}  // namespace test_simulate
}  // namespace
