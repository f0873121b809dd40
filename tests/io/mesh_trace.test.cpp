// io/step_trace.hpp's trace_of(mesh_program, mesh_timeline): a simulated mesh step as drawable
// events — every global rank's computes and its collectives — and how svg and chrome_trace draw
// the data-parallel stream.
#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include <string>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_mesh_trace {

namespace pt = pipetype;

TEST_CASE("mesh trace: every rank's computes and collectives, at the simulated times") {
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 2, 4));
  const pt::dp_options o{.dp = 2, .shard = true};
  const pt::mesh_program mp = pt::build_mesh(plan.compute(), plan.lowered(), {2, 2}, o);
  const pt::mesh_costs d{.param_bytes = {4}, .bandwidth = 1};
  const pt::mesh_timeline t = pt::simulate_mesh(mp, pt::costs{}, d);
  REQUIRE(t.completed);
  const pt::step_trace tr = pt::trace_of(mp, t);
  CHECK(tr.ranks == 4);
  CHECK(tr.computes.size() == 4 * plan.compute().actions.size() / 2);  // each global rank its pipeline rank's
  int collectives = 0;
  for (const pt::mesh_op& x : mp.ops) collectives += pt::is_collective(x.code) ? 1 : 0;
  REQUIRE(static_cast<int>(tr.collectives.size()) == collectives);
  double last = 0;
  for (const pt::traced_collective& c : tr.collectives) {
    CHECK(c.end > c.start);  // 4 bytes at 1 byte a unit: every collective takes time
    CHECK((c.name.rfind("REDUCE_GRAD(", 0) == 0 || c.name.rfind("UNSHARD(", 0) == 0));
    last = std::max(last, c.end);
  }
  CHECK(tr.finish() == doctest::Approx(t.makespan));  // the step ends with a collective or a compute
  CHECK(last <= t.makespan);
  const std::string svg = pt::svg(tr, {.title = "1f1b x 2"});
  CHECK(svg.find("class=\"collective\"><title>REDUCE_GRAD(0) rank 0 on communicator") != std::string::npos);
  const std::string json = pt::chrome_trace(tr);
  CHECK(json.find("\"name\": \"data-parallel\"") != std::string::npos);
  CHECK(json.find("\"name\": \"UNSHARD(0)\", \"cat\": \"collective\"") != std::string::npos);
  // a pipeline's trace has no data-parallel thread
  const pt::step_trace plain = pt::trace_of(plan.compute(), pt::simulate(plan));
  CHECK(pt::chrome_trace(plain).find("data-parallel") == std::string::npos);
}

}  // namespace test_mesh_trace
}  // namespace
