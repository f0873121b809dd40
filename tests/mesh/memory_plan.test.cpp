// mesh/memory_plan.hpp: a step with memory actions as a type, its peaks constants; and its
// run-time twin, plan_memory, over data-parallel replicas.
#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include "memory_test.hpp"

#include <string>
#include <vector>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_memory_plan {

namespace pt = pipetype;
using mesh_test::at_k;
using mesh_test::why;

using S = pt::one_f_one_b<pt::ranks<4>, pt::microbatches<8>>;

// 1F1B holds p = 4 microbatches on rank 0; offloading them all (host link: a copy takes half a
// forward) leaves 2, and the last rank, whose backward follows its forward, keeps its 1
using offloaded = pt::memory_plan<S, pt::saved_bytes<1000>, pt::offloads<pt::memory_policy::all>, pt::host_link<2000>>;
static_assert(offloaded::facts.rejection.ok());
static_assert(offloaded::facts.base_peak_bytes == 4000);
static_assert(offloaded::peak_bytes(0) == 2000);
static_assert(offloaded::peak_bytes(3) == 1000);
static_assert(offloaded::host_peak_bytes(0) <= 4000 && offloaded::facts.offloads > 0);

// recompute everything: rank 0 keeps 3 inputs and one whole activation
using recomputed =
    pt::memory_plan<S, pt::saved_bytes<1000>, pt::kept_bytes<50>, pt::recomputes<pt::memory_policy::all>>;
static_assert(recomputed::peak_bytes(0) == 3 * 50 + 1000);
static_assert(recomputed::facts.recomputes == 4 * 8);

// a limit: the automatic pass offloads until every rank is under it
using limited = pt::memory_plan<S, pt::saved_bytes<1000>, pt::memory_limit<2500>,
                                pt::offloads<pt::memory_policy::automatic>, pt::host_link<4000>>;
static_assert(limited::facts.peak_bytes <= 2500);

// a schedule that says its own memory actions
// (saved: 1 byte a microbatch by default, so the peaks count microbatches): 4 forwards, then their
// backwards; two offloaded while the next forwards run hold 3 at once instead of 4
using written = pt::from_text<"0F0,0OFFLOAD0,0F1,0OFFLOAD1,0F2,0F3,0RELOAD0,0B0,0RELOAD1,0B1,0B2,0B3">;
static_assert(pt::make_memory_plan<written>().offloads == 2);
static_assert(pt::memory_plan<written>::facts.base_peak_bytes == 4);
static_assert(pt::memory_plan<written>::peak_bytes(0) == 3);

TEST_CASE("memory plan: the type's actions are the ones its facts count") {
  const pt::memory_program m = offloaded::actions();
  int offloads = 0;
  for (const pt::memory_action& a : m.ops) offloads += a.what == pt::memory_kind::offload;
  CHECK(offloads == offloaded::facts.offloads);
  CHECK(pt::check_memory_actions(offloaded::plan().compute(), m).ok());
  CHECK(offloaded::memory()[0].base_peak_activations == doctest::Approx(4));
}

TEST_CASE("memory actions: over data-parallel replicas the step is lowered, proved and timed with its collectives") {
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 4, 8));
  REQUIRE(plan.ok());
  const pt::costs c{.f = 1, .b = 2};
  const pt::memory_sizes z{{1000}, {50}};
  const pt::memory_options o = at_k(0.5, pt::memory_policy::all);
  const pt::memory_step lone = pt::plan_memory(plan.compute(), plan.lowered(), z, c, o);
  REQUIRE(lone.result.ok());
  pt::memory_mesh over;
  over.dp = {.dp = 2};
  over.costs.param_bytes = {4000};
  over.costs.bandwidth = 1000;  // an all-reduce of 2 members: 2 · 1/2 · 4000 / 1000 = 4 time units
  const pt::memory_step s = pt::plan_memory(plan.compute(), plan.lowered(), z, c, o, 0.02, over);
  REQUIRE(s.result.ok());
  CHECK(s.step.shape.dp == 2);
  int collectives = 0, copies = 0, lone_copies = 0;
  for (const pt::mesh_op& op : s.step.ops) collectives += pt::is_collective(op.code), copies += pt::is_copy(op.code);
  for (const pt::mesh_op& op : lone.step.ops) lone_copies += pt::is_copy(op.code);
  CHECK(collectives == 2 * 4);  // a REDUCE_GRAD per stage on each replica
  CHECK(lone_copies > 0);
  CHECK(copies == 2 * lone_copies);  // every replica runs the pipeline's actions
  CHECK(s.actions.ops == lone.actions.ops);
  REQUIRE(s.memory.size() == lone.memory.size());
  for (std::size_t r = 0; r < s.memory.size(); ++r) {
    CAPTURE(r);
    CHECK(s.memory[r].peak_bytes == lone.memory[r].peak_bytes);
    CHECK(s.memory[r].offloaded == lone.memory[r].offloaded);
  }
  // the baseline is the same mesh step without the actions: its collectives' time included
  pt::mesh_costs d = over.costs;
  d.activations = z;
  d.copy_bandwidth = o.copy_bandwidth;
  const pt::mesh_program plain = pt::lower_mesh(plan.compute(), plan.lowered(), {.pp = 4, .dp = 2},
                                                pt::place_collectives(plan.compute(), over.dp), over.dp);
  CHECK(s.base_makespan == doctest::Approx(pt::simulate_mesh(plain, c, d).makespan));
  CHECK(s.base_makespan > lone.base_makespan + 1);
  CHECK(pt::verify_memory(plan.compute(), s.actions, s.step).ok());
  // collectives the options refuse are the answer's result
  pt::memory_mesh sharded = over;
  sharded.dp.shard = true;
  sharded.collectives = pt::place_collectives(plan.compute(), over.dp);  // no UNSHARD for a sharded step
  CHECK(why(pt::plan_memory(plan.compute(), plan.lowered(), z, c, o, 0.02, sharded).result)
            .find("a compute action on a sharded stage") != std::string::npos);
  pt::memory_mesh none = over;
  none.dp.dp = 0;
  CHECK(!pt::plan_memory(plan.compute(), plan.lowered(), z, c, o, 0.02, none).result.ok());
}

TEST_CASE("memory actions: a RECOMPUTE of a sharded stage waits for the gather of the parameters it reads") {
  // a window of one unsharded stage and two stages a rank: each stage is released and gathered
  // again between its forward and its backward, and its RECOMPUTE runs between the gather and the
  // backward. It runs on the compute stream, so it must wait there for the gather's event, as a
  // compute does (the lowering once let it read the released parameters).
  for (const char* name : {"interleaved-1f1b", "looped-bfs"}) {
    CAPTURE(name);
    const pt::runtime_plan plan = pt::build_plan(pt::make_schedule(name, 2, 4, 2));
    REQUIRE(plan.ok());
    pt::memory_options o;
    o.recompute = pt::memory_policy::all;
    const pt::memory_sizes z{{1000}, {50}};
    const pt::memory_placement placed = pt::place_memory(plan.compute(), z, pt::costs{.f = 1, .b = 2}, o);
    REQUIRE(placed.result.ok());
    const pt::dp_options d{.dp = 2, .shard = true, .window = 1};
    const pt::mesh_program mp = pt::build_mesh(plan.compute(), plan.lowered(), pt::mesh{2, 2},
                                               pt::place_collectives(plan.compute(), d), d, placed.actions);
    int recomputes = 0, after_release = 0;
    for (int g = 0; g < 4; ++g) {
      std::vector<int> gather_event(static_cast<std::size_t>(plan.compute().stages), -1);
      std::vector<bool> waited(gather_event.size(), false), released(gather_event.size(), false);
      int gathering = -1;  // the stage whose all-gather's record comes next
      for (const pt::mesh_op& op : mp.rank_ops(g)) {
        if (op.code == pt::mesh_op_code::all_gather) gathering = op.stage;
        if (op.code == pt::mesh_op_code::record && gathering >= 0) {
          gather_event[static_cast<std::size_t>(gathering)] = op.event;
          waited[static_cast<std::size_t>(gathering)] = false;
          gathering = -1;
        }
        if (op.code == pt::mesh_op_code::wait && op.stream == 0)
          for (std::size_t s = 0; s < gather_event.size(); ++s)
            if (gather_event[s] == op.event) waited[s] = true, released[s] = false;
        if (op.code == pt::mesh_op_code::release) released[static_cast<std::size_t>(op.stage)] = true;
        if (op.code == pt::mesh_op_code::recompute) {
          CAPTURE(g);
          CAPTURE(op.stage);
          CAPTURE(op.microbatch);
          ++recomputes;
          after_release += gather_event[static_cast<std::size_t>(op.stage)] >= 0 && op.microbatch > 0;
          CHECK(waited[static_cast<std::size_t>(op.stage)]);
          CHECK(!released[static_cast<std::size_t>(op.stage)]);
        }
      }
    }
    CHECK(recomputes == 2 * plan.compute().stages * 4);  // every forward, on each replica
    CHECK(after_release > 0);
  }
}

}  // namespace test_memory_plan
}  // namespace
