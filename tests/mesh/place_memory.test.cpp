// mesh/place_memory.hpp: the pass that places memory actions under a limit.
#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include "memory_test.hpp"

#include <string>
#include <vector>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_place_memory {

namespace pt = pipetype;
using mesh_test::at_k;
using mesh_test::why;

TEST_CASE("memory actions: 1F1B p=8 m=32 with full offload keeps 8 microbatches down to at most 3 on rank 0") {
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 8, 32));
  REQUIRE(plan.ok());
  const pt::costs c{.f = 1, .b = 2};
  const pt::memory_sizes z{{1000}, {60}};
  for (const double k : {0.5, 0.8, 1.0}) {
    CAPTURE(k);
    const pt::memory_step s = pt::plan_memory(plan.compute(), plan.lowered(), z, c, at_k(k, pt::memory_policy::all));
    REQUIRE(s.result.ok());
    CHECK(s.k == doctest::Approx(k));
    CHECK(s.memory[0].base_peak_activations == doctest::Approx(8));
    CHECK(s.memory[0].peak_activations <= 3);
    CHECK(s.memory[0].offloaded == 32);              // every microbatch of rank 0
    CHECK(s.makespan <= 1.02 * s.base_makespan);     // the target: ≤ 2 % at k ≤ 1
    CHECK(s.memory[0].host_peak_bytes <= 8 * 1000);  // never more on the host than it held
    CHECK(s.memory[7].offloaded == 0);               // the last rank's F→B gap holds no round trip
    // the proofs hold for the step the executors would issue
    CHECK(why(pt::check_memory_actions(plan.compute(), s.actions)) == "ok");
    CHECK(why(pt::verify_mesh(s.step)) == "ok");
    CHECK(why(pt::verify_memory(plan.compute(), s.actions, s.step)) == "ok");
  }
  // k > 1: automatic offloads a share that costs at most 2 %, and says what it did
  for (const double k : {1.2, 1.7}) {
    CAPTURE(k);
    const pt::memory_step a =
        pt::plan_memory(plan.compute(), plan.lowered(), z, c, at_k(k, pt::memory_policy::automatic));
    REQUIRE(a.result.ok());
    CHECK(a.makespan <= 1.02 * a.base_makespan);
    CHECK(a.density < 1);
    CHECK(a.memory[0].peak_activations < 8);
    // all: as little memory as the copies allow, and what it costs
    const pt::memory_step f = pt::plan_memory(plan.compute(), plan.lowered(), z, c, at_k(k, pt::memory_policy::all));
    REQUIRE(f.result.ok());
    CHECK(f.memory[0].peak_activations <= 3);
    CHECK(f.cost() > 0.02);
  }
}

TEST_CASE("memory actions: recompute keeps only the input until the RECOMPUTE before the backward") {
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 4, 8));
  const pt::memory_sizes z{{1000}, {50}};
  const pt::memory_placement r =
      pt::place_memory(plan.compute(), z, pt::costs{.f = 1, .b = 2}, {.recompute = pt::memory_policy::all});
  REQUIRE(r.result.ok());
  const auto mem = pt::memory_of(plan.compute(), r.actions, z);
  // rank 0 holds 4 microbatches at its peak: 3 inputs kept and one whole activation rebuilt
  CHECK(mem[0].base_peak_bytes == 4000);
  CHECK(mem[0].peak_bytes == 3 * 50 + 1000);
  CHECK(mem[0].recomputed == 8);
  // a RECOMPUTE costs a forward: the step is longer only where it is not hidden in a bubble
  pt::mesh_costs d;
  d.activations = z;
  const pt::mesh_program with = pt::lower_mesh(plan.compute(), plan.lowered(), {.pp = 4, .dp = 1},
                                               pt::place_collectives(plan.compute(), {}), {}, r.actions);
  CHECK(why(pt::verify_memory(plan.compute(), r.actions, with)) == "ok");
  CHECK(pt::simulate_mesh(with, pt::costs{.f = 1, .b = 2}, d).makespan > 33);  // (m + p − 1)(F + B) = 33 without
}

TEST_CASE("memory actions: a limit is met, or refused in one sentence") {
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 4, 8));
  const pt::memory_sizes z{{1000}, {50}};
  const pt::costs c{.f = 1, .b = 2};
  pt::memory_options o = at_k(0.5, pt::memory_policy::automatic);
  o.limit = 2000;
  const pt::memory_placement ok = pt::place_memory(plan.compute(), z, c, o);
  REQUIRE(ok.result.ok());
  for (const pt::rank_memory& r : pt::memory_of(plan.compute(), ok.actions, z)) CHECK(r.peak_bytes <= 2000);
  o.limit = 999;  // below one microbatch
  CHECK(why(pt::place_memory(plan.compute(), z, c, o).result) ==
        "memory limit exceeded at rank 0, stage 0: the limit is below one microbatch's saved activation of this "
        "stage");
  o.limit = 1000;  // offload alone cannot keep one microbatch: a reload lands beside the next forward
  o.offload = pt::memory_policy::none;
  CHECK(why(pt::place_memory(plan.compute(), z, c, o).result).find("do not bring this rank's saved activations") !=
        std::string::npos);
  o.recompute = pt::memory_policy::automatic;
  o.limit = 1200;
  const pt::memory_placement rec = pt::place_memory(plan.compute(), z, c, o);
  REQUIRE(rec.result.ok());
  for (const pt::rank_memory& r : pt::memory_of(plan.compute(), rec.actions, z)) CHECK(r.peak_bytes <= 1200);
}

}  // namespace test_place_memory
}  // namespace
