// Memory actions (mesh/memory_actions.hpp): the checks, the program-order accounting, the
// lowering onto a copy stream (mesh/lower.hpp) and its proofs (verify_mesh,
// verify_memory), the pass (mesh/place_memory.hpp) and the copy lane's cost (mesh/simulate.hpp).
#include <pipetype/mesh/memory_actions.hpp>
#include <pipetype/mesh/memory_step.hpp>
#include <pipetype/mesh/simulate.hpp>
#include <pipetype/mesh/place_memory.hpp>
#include <pipetype/mesh/verify_memory.hpp>
#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include <string>
#include <vector>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_memory_actions {

namespace pt = pipetype;

pt::program one_rank() {  // 0F0 0F1 0B0 0B1 on one rank, one stage
  pt::program_builder b{1, 1, 2};
  b.rank(0).add(pt::F(0, 0)).add(pt::F(0, 1)).add(pt::B(0, 0)).add(pt::B(0, 1));
  return std::move(b).build("two");
}

pt::memory_program on_rank0(const pt::program& p, std::vector<pt::memory_action> ops) {
  return pt::memory_program_of(p.view(), {std::move(ops)});
}

std::string why(const pt::verdict& v) { return v.ok() ? "ok" : pt::describe(v); }

TEST_CASE("memory actions: a misplaced OFFLOAD, RELOAD or RECOMPUTE is named in one sentence") {
  const pt::program p = one_rank();
  // ok: offload 0F0 after it, back before its backward
  CHECK(pt::check_memory_actions(p.view(), on_rank0(p, {pt::offload(0, 0, 0, 1), pt::reload(0, 0, 1)})).ok());
  CHECK(why(pt::check_memory_actions(p.view(), on_rank0(p, {pt::offload(0, 1, 0)}))) ==
        "memory action misplaced at rank 0, stage 0, microbatch 1, action 0OFFLOAD1 (index 0): an OFFLOAD before its "
        "forward");
  CHECK(
      why(pt::check_memory_actions(p.view(), on_rank0(p, {pt::reload(0, 0, 1)}))).find("a RELOAD before its OFFLOAD") !=
      std::string::npos);
  CHECK(why(pt::check_memory_actions(p.view(), on_rank0(p, {pt::offload(0, 0, 0, 1)})))
            .find("a backward reads an activation that is offloaded and not reloaded") != std::string::npos);
  CHECK(why(pt::check_memory_actions(p.view(), on_rank0(p, {pt::offload(0, 0, 0, 2), pt::reload(0, 0, 1)})))
            .find("before its OFFLOAD completes") != std::string::npos);
  CHECK(why(pt::check_memory_actions(p.view(), on_rank0(p, {pt::offload(0, 0, 0, 1), pt::recompute(0, 0, 1)})))
            .find("whose input is offloaded") != std::string::npos);
  CHECK(why(pt::check_memory_actions(p.view(), on_rank0(p, {pt::recompute(0, 0, 3)}))) ==
        "memory action misplaced at rank 0, stage 0, microbatch 0, action 0B0 (index 2): a backward of a recomputed "
        "forward runs before its RECOMPUTE");
  CHECK(pt::check_memory_actions(p.view(), on_rank0(p, {pt::recompute(0, 1, 2)})).ok());
  CHECK(why(pt::check_memory_actions(p.view(), on_rank0(p, {pt::recompute(0, 1, 2), pt::recompute(0, 1, 2)})))
            .find("a second RECOMPUTE") != std::string::npos);
  CHECK(why(pt::check_memory_actions(p.view(), on_rank0(p, {pt::offload(3, 0, 0)}))).find("does not run") !=
        std::string::npos);
}

TEST_CASE("memory actions: the program-order peaks count an OFFLOAD to its until and a RELOAD from its issue") {
  const pt::program p = one_rank();
  const pt::memory_sizes z{{100}, {10}};
  // without actions: both forwards live at once
  const auto base = pt::memory_of(p.view(), pt::no_memory_actions(p.view()), z);
  CHECK(base[0].peak_bytes == 200);
  CHECK(base[0].base_peak_bytes == 200);
  CHECK(base[0].peak_activations == doctest::Approx(2));
  // 0F0 offloaded while 0F1 runs, completed before 0B0... reloaded after 0F1: 0F1 and the reload overlap
  const auto off = pt::memory_of(p.view(), on_rank0(p, {pt::offload(0, 0, 0, 1), pt::reload(0, 0, 1)}), z);
  CHECK(off[0].peak_bytes == 200);  // reload issued while 0F1's activation is still live
  CHECK(off[0].host_peak_bytes == 100);
  CHECK(off[0].offloaded == 1);
  // recompute 0F0: its forward keeps 10 bytes until the RECOMPUTE before 0B0
  const auto rec = pt::memory_of(p.view(), on_rank0(p, {pt::recompute(0, 0, 1)}), z);
  CHECK(rec[0].peak_bytes == 200);  // the recompute comes while 0F1 is live
  const auto rec1 = pt::memory_of(p.view(), on_rank0(p, {pt::recompute(0, 1, 2)}), z);
  CHECK(rec1[0].peak_bytes == 110);  // 0F0's 100 and 0F1's kept 10; the RECOMPUTE after 0B0 brings it to 100
  CHECK(rec1[0].recomputed == 1);
}

pt::memory_options at_k(double k, pt::memory_policy offload) {
  // saved 1000 bytes, F + B = 3: k = 2 · 1000 / bandwidth / 3
  return {.offload = offload, .copy_bandwidth = 2000.0 / 3 / k};
}

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

TEST_CASE("memory actions: saved bytes past 2^40 are refused before any sum can wrap") {
  const pt::program p = pt::make_gpipe(4, 64);
  const pt::runtime_plan plan = pt::build_plan(p);
  REQUIRE(plan.ok());
  CHECK(pt::check_memory_sizes({.saved = {pt::limits::saved_bytes}}).ok());
  const pt::verdict big = pt::check_memory_sizes({.saved = {pt::limits::saved_bytes + 1}});
  CHECK(big.code == pt::errc::too_large);
  CHECK(std::string(big.detail).find("saved bytes must be in [0, 2^40]") != std::string::npos);
  const pt::verdict kept = pt::check_memory_sizes({.saved = {10, 10, 10, 10}, .kept = {1, -1, 1, 1}});
  CHECK(kept.code == pt::errc::too_large);
  CHECK(kept.stage == 1);
  // the pass and the step planner refuse them; at the limit, 64 stashes sum without wrapping
  const pt::memory_options o{.recompute = pt::memory_policy::all};
  CHECK(pt::place_memory(p.view(), {.saved = {1LL << 50}}, pt::costs{}, o).result.code == pt::errc::too_large);
  CHECK(pt::plan_memory(p.view(), plan.lowered(), {.saved = {1LL << 50}}, pt::costs{}, o).result.code ==
        pt::errc::too_large);
  const std::vector<pt::rank_memory> at_limit =
      pt::memory_of(p.view(), pt::no_memory_actions(p.view()), {.saved = {pt::limits::saved_bytes}});
  CHECK(at_limit[0].peak_bytes == 64 * pt::limits::saved_bytes);
}

}  // namespace test_memory_actions
}  // namespace
