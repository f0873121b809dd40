// mesh/verify_memory.hpp: the proof that a placed step reads only what is there.
#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include "memory_test.hpp"

#include <string>
#include <vector>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_verify_memory {

namespace pt = pipetype;
using mesh_test::at_k;
using mesh_test::why;

TEST_CASE("memory actions: every schedule's placed step passes its checks and proofs") {
  const pt::costs c{.f = 1, .b = 2, .i = 1, .w = 1};
  const pt::memory_sizes z{{1000}, {60}};
  for (const char* name : {"gpipe", "1f1b", "interleaved-1f1b", "looped-bfs", "zb-h1", "zb-h2", "zb-v", "v-min",
                           "v-half", "dualpipe-v", "dualpipe", "zb-auto"})
    for (const pt::memory_policy offload : {pt::memory_policy::all, pt::memory_policy::automatic})
      for (const pt::memory_policy rec : {pt::memory_policy::none, pt::memory_policy::all}) {
        CAPTURE(name);
        const pt::runtime_plan plan = pt::build_plan(pt::make_schedule(name, 4, 8));
        REQUIRE(plan.ok());
        pt::memory_options o = at_k(0.8, offload);
        o.recompute = rec;
        const pt::memory_step s = pt::plan_memory(plan.compute(), plan.lowered(), z, c, o);
        CHECK(why(s.result) == "ok");
        if (!s.result.ok()) continue;
        CHECK(why(pt::verify_memory(plan.compute(), s.actions, s.step)) == "ok");
        for (const pt::rank_memory& r : s.memory) {
          CHECK(r.peak_bytes <= r.base_peak_bytes);
          if (rec == pt::memory_policy::all) CHECK(r.recomputed > 0);
        }
      }
}

TEST_CASE("memory actions: verify_memory refuses a step whose backward may overtake its RELOAD") {
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 4, 8));
  const pt::memory_sizes z{{1000}, {50}};
  const pt::memory_step s =
      pt::plan_memory(plan.compute(), plan.lowered(), z, pt::costs{.f = 1, .b = 2}, at_k(0.5, pt::memory_policy::all));
  REQUIRE(s.result.ok());
  REQUIRE(s.memory[0].offloaded > 0);
  // drop every wait on the compute stream for a RELOAD's event: a backward may read early
  pt::mesh_program broken = s.step;
  int dropped = 0;
  for (int g = 0; g < broken.shape.size() && dropped == 0; ++g) {
    const int b = broken.begin[static_cast<std::size_t>(g)], e = broken.begin[static_cast<std::size_t>(g) + 1];
    for (int i = b; i < e; ++i) {
      pt::mesh_op& o = broken.ops[static_cast<std::size_t>(i)];
      if (o.code != pt::mesh_op_code::reload) continue;
      const int ev = broken.ops[static_cast<std::size_t>(i) + 1].event;  // its record
      for (int j = i + 2; j < e; ++j)
        if (broken.ops[static_cast<std::size_t>(j)].code == pt::mesh_op_code::wait &&
            broken.ops[static_cast<std::size_t>(j)].event == ev &&
            broken.ops[static_cast<std::size_t>(j)].stream == 0) {
          broken.ops[static_cast<std::size_t>(j)].event = broken.ops[static_cast<std::size_t>(b)].record_event >= 0
                                                              ? broken.ops[static_cast<std::size_t>(b)].record_event
                                                              : 0;
          ++dropped;
          break;
        }
      if (dropped) break;
    }
  }
  REQUIRE(dropped == 1);
  CHECK(why(pt::verify_memory(plan.compute(), s.actions, broken)).find("before the RELOAD completes") !=
        std::string::npos);
  // an OFFLOAD's until that does not wait: later work may write where it still reads
  pt::mesh_program early = s.step;
  for (pt::mesh_op& o : early.ops)
    if (o.code == pt::mesh_op_code::wait && o.stream == 0) o.code = pt::mesh_op_code::record, o.stream = 3;
  CHECK_FALSE(pt::verify_memory(plan.compute(), s.actions, early).ok());
}

}  // namespace test_verify_memory
}  // namespace
