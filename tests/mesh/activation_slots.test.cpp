// mesh/activation_slots.hpp: the activation pool of a step with memory actions: each reference
// in a slot of the rank's pool, which is never larger than the lowering's own (1F1B p=8's rank 1
// needs 4 instead of 9); an offloaded input out with its OFFLOAD, back with its RELOAD, read by its
// backward where the RELOAD put it; and three mutations the proof refuses: a slot reused too
// early, a backward reading a slot its input was offloaded from, and a RELOAD that brings back what
// its OFFLOAD did not take.
#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include "memory_test.hpp"

#include <cstddef>
#include <string>
#include <vector>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_activation_slots {

namespace pt = pipetype;
using mesh_test::at_k;
using mesh_test::make_step;
using mesh_test::ops_where;
using mesh_test::step;
using mesh_test::verify;

pt::memory_step offloaded(const pt::runtime_plan& plan) {
  return pt::plan_memory(plan.compute(), plan.lowered(), pt::memory_sizes{{1000}, {50}}, {.f = 1, .b = 2},
                         at_k(0.25, pt::memory_policy::all));
}

TEST_CASE("activation slots: every reference is in the rank's pool, which is no larger than the lowering's") {
  for (const char* name : {"gpipe", "1f1b", "interleaved-1f1b", "zb-h1"}) {
    CAPTURE(name);
    const pt::runtime_plan plan = pt::build_plan(pt::make_schedule(name, 4, 8));
    REQUIRE(plan.ok());
    const pt::memory_step s = offloaded(plan);
    REQUIRE(s.result.ok());
    const pt::mesh_program& mp = s.step;
    REQUIRE(mp.activation_slots.size() == 4);
    for (int g = 0; g < 4; ++g) {
      CAPTURE(g);
      const int slots = mp.activation_slots[static_cast<std::size_t>(g)];
      CHECK(slots <= plan.lowered().resources[static_cast<std::size_t>(g)].activation_slots);
      for (const pt::mesh_op& o : mp.rank_ops(g))
        for (int k = 0; k < mp.act_count(o); ++k) {
          const pt::mesh_program::act_ref x = mp.act_at(o, k);
          CHECK(x.slot >= 0);
          CHECK(x.slot < slots);
          CHECK(x.lowered >= 0);
        }
    }
    CHECK(pt::verify_memory(plan.compute(), s.actions, s.step).ok());
  }
}

TEST_CASE(
    "activation slots: an offloaded input goes out with its OFFLOAD and back with its RELOAD, where its backward reads "
    "it") {
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("gpipe", 4, 8));
  REQUIRE(plan.ok());
  const pt::memory_step s = offloaded(plan);
  REQUIRE(s.result.ok());
  const pt::mesh_program& mp = s.step;
  for (int g = 0; g < 4; ++g) {
    CAPTURE(g);
    const auto ops = mp.rank_ops(g);
    int moving = 0;  // OFFLOADs that move their forward's input
    for (std::size_t k = 0; k < ops.size(); ++k) {
      const pt::mesh_op& off = ops[k];
      if (off.code != pt::mesh_op_code::offload || mp.act_count(off) == 0) continue;
      ++moving;
      CAPTURE(off.stage);
      CAPTURE(off.microbatch);
      // its RELOAD, later on the rank: the same lowered slots, now written
      std::size_t back = k + 1;
      while (back < ops.size() && !(ops[back].code == pt::mesh_op_code::reload && ops[back].stage == off.stage &&
                                    ops[back].microbatch == off.microbatch))
        ++back;
      REQUIRE(back < ops.size());
      const pt::mesh_op& rel = ops[back];
      REQUIRE(mp.act_count(rel) == mp.act_count(off));
      for (int q = 0; q < mp.act_count(off); ++q) {
        CHECK(!mp.act_at(off, q).writes);
        CHECK(mp.act_at(rel, q).writes);
        CHECK(mp.act_at(rel, q).lowered == mp.act_at(off, q).lowered);
        // the microbatch's backward after the RELOAD finds the input where the RELOAD put it
        bool read = false;
        for (std::size_t j = back + 1; j < ops.size(); ++j) {
          const pt::mesh_op& b = ops[j];
          if (b.code != pt::mesh_op_code::compute || b.what == pt::kind::F || b.stage != off.stage ||
              b.microbatch != off.microbatch)
            continue;
          CHECK(mp.act_slot(b, mp.act_at(rel, q).lowered) == mp.act_at(rel, q).slot);
          read = true;
          break;
        }
        CHECK(read);
      }
    }
    CHECK((g == 0 ? moving == 0 : moving > 0));  // stage 0 reads the batch: no input to move
  }
}

TEST_CASE("activation slots: 1F1B p=8's rank 1 needs 4 activation slots instead of 9 with every input offloaded") {
  const step s = make_step("1f1b", pt::memory_policy::all, pt::memory_policy::none, 8, 16);
  CHECK(s.plan.lowered().resources[1].activation_slots == 9);
  CHECK(s.mesh.activation_slots[1] == 4);
  CHECK(s.mesh.activation_slots[0] == s.plan.lowered().resources[0].activation_slots);
  // rank 1's copies move its input with its stash; rank 0's move only the stash (stage 0 reads the batch)
  for (const int g : {0, 1})
    for (const std::size_t i : ops_where(
             s.mesh, [](const pt::mesh_op& o) { return pt::is_copy(o.code) && !o.kept_only; }, g)) {
      CAPTURE(g);
      CHECK(s.mesh.act_count(s.mesh.rank_ops(g)[i]) == g);
    }
}

TEST_CASE("activation slots: a recomputed forward's OFFLOAD moves its input, into a host slot of its own") {
  const step s = make_step("1f1b", pt::memory_policy::all, pt::memory_policy::all, 8, 16);
  int moved = 0;
  for (const pt::mesh_op& o : s.mesh.rank_ops(1))
    if (o.code == pt::mesh_op_code::offload && o.kept_only) {
      CHECK(s.mesh.act_count(o) == 1);
      CHECK(o.host_slot >= 0);
      ++moved;
    }
  CHECK(moved > 0);
  CHECK(s.mesh.activation_slots[1] < s.plan.lowered().resources[1].activation_slots);
  for (const pt::mesh_op& o : s.mesh.rank_ops(0))  // stage 0 reads the batch: nothing to move, no slot
    if (o.code == pt::mesh_op_code::offload && o.kept_only) CHECK((s.mesh.act_count(o) == 0 && o.host_slot < 0));
}

TEST_CASE("activation slots: the proof refuses a slot reused too early and an input read where it is not") {
  const step s = make_step("1f1b", pt::memory_policy::all, pt::memory_policy::none, 8, 16);
  REQUIRE(verify(s, s.mesh).ok());
  const auto b = static_cast<std::size_t>(s.mesh.begin[1]);
  const std::vector<std::size_t> reloads = ops_where(
      s.mesh, [](const pt::mesh_op& o) { return o.code == pt::mesh_op_code::reload && o.act >= 0; }, 1);
  REQUIRE(!reloads.empty());
  const std::size_t reload = static_cast<std::size_t>(s.mesh.ops[b + reloads[0]].act);
  REQUIRE(s.mesh.act_map[reload] == 1);  // one input: (lowered slot, slot, writes) at reload + 1

  SUBCASE("every activation in slot 0") {
    pt::mesh_program bad = s.mesh;
    for (const pt::mesh_op& o : bad.rank_ops(1))
      for (int k = 0; k < bad.act_count(o); ++k) bad.act_map[static_cast<std::size_t>(o.act + 2 + 3 * k)] = 0;
    const pt::verdict v = verify(s, bad);
    REQUIRE_FALSE(v.ok());
    CHECK(std::string(v.detail) ==
          "an activation slot may be written while an op of its previous holder still uses it");
  }

  SUBCASE("a RELOAD into a slot of its own, while its backward reads the one it left") {
    pt::mesh_program bad = s.mesh;
    bad.act_map[reload + 2] = bad.activation_slots[1]++;
    const pt::verdict v = verify(s, bad);
    REQUIRE_FALSE(v.ok());
    CHECK(std::string(v.detail) == "an op reads an activation slot that holds another activation");
  }

  SUBCASE("a RELOAD bringing back another lowered slot than its OFFLOAD took") {
    pt::mesh_program bad = s.mesh;
    bad.act_map[reload + 1] += 1;
    const pt::verdict v = verify(s, bad);
    REQUIRE_FALSE(v.ok());
    CHECK(std::string(v.detail) == "a RELOAD brings back an activation its OFFLOAD did not take");
  }
}

}  // namespace test_activation_slots
}  // namespace
