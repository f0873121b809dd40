// mesh/memory_slots.hpp: lower_mesh gives a step with memory actions its stash and host slots,
// and verify_memory proves them. Checked: for every schedule and policy the executors' tests sweep,
// each rank's stash pool is memory_of's peak in stashes (an independent count in program order)
// and the proof holds; 1F1B's rank 0 needs 2 stash slots instead of 4 with every activation
// offloaded, as a constant of a plan that is a type; and three mutations the proof refuses: every
// stash in slot 0, a forward writing into a slot its OFFLOAD still copies out of, and a RELOAD
// reading another microbatch's host slot. The activation slots are
// tests/mesh/activation_slots.test.cpp's.
#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "../host/memory_modes.hpp"
#include "memory_test.hpp"

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_memory_slots {

namespace pt = pipetype;
using mesh_test::make_step;
using mesh_test::ops_where;
using mesh_test::step;
using mesh_test::verify;

// 1F1B, p = 4, m = 8, one byte saved a microbatch, every activation offloaded: the slots are constants
using offloaded = pt::memory_plan<pt::one_f_one_b<pt::ranks<4>, pt::microbatches<8>>,
                                  pt::offloads<pt::memory_policy::all>, pt::host_link<2>>;
static_assert(offloaded::facts.base_peak_bytes == 4);
static_assert(offloaded::stash_slots(0) == 2 && offloaded::peak_bytes(0) == 2);  // 2 stash slots instead of 4
static_assert(offloaded::host_slots(0) == 4 && offloaded::stash_slots(3) == 1);
// without actions: the lowering's stash slots (p − r on rank r) and no host pool
using plain = pt::memory_plan<pt::one_f_one_b<pt::ranks<4>, pt::microbatches<8>>>;
static_assert(plain::stash_slots(0) == 4 && plain::stash_slots(3) == 1 && plain::host_slots(0) == 0);

// the activation slots with the actions are constants too, never more than the lowering's (an
// offloaded input leaves its slot: p = 8 below; a larger plan as a type needs pipetype_large_plans)
static_assert(offloaded::activation_slots(1) <= plain::activation_slots(1) && plain::activation_slots(1) == 5);
static_assert(offloaded::activation_slots(0) == plain::activation_slots(0));  // stage 0 reads the batch

TEST_CASE("memory slots: every rank's stash pool is its planned peak, and the proof holds") {
  for_each_memory_mode([](const char* name, pt::memory_policy offload, pt::memory_policy recompute) {
    const step s = make_step(name, offload, recompute);
    const pt::memory_sizes one{{1}, {0}};
    const std::vector<pt::rank_memory> planned = pt::memory_of(s.plan.compute(), s.actions, one, pt::stash_model);
    pt::memory_sizes inputs{{1}, std::vector<std::int64_t>(static_cast<std::size_t>(s.plan.compute().stages), 1)};
    inputs.kept[0] = 0;
    const std::vector<pt::rank_memory> moved = pt::memory_of(s.plan.compute(), s.actions, inputs, pt::stash_model);
    REQUIRE(s.mesh.stash_slots.size() == planned.size());
    for (std::size_t g = 0; g < planned.size(); ++g) {
      CAPTURE(g);
      CHECK(s.mesh.stash_slots[g] == planned[g].peak_bytes);
      // a host slot per microbatch on the host: a recomputed forward's OFFLOAD moves its input, which
      // a first stage has none of (it reads the batch)
      CHECK(s.mesh.host_slots[g] == moved[g].host_peak_bytes);
      // an offloaded input leaves its slot: never more activation slots than the lowering's
      CHECK(s.mesh.activation_slots[g] <= s.plan.lowered().resources[g].activation_slots);
    }
    const pt::verdict v = verify(s, s.mesh);
    CHECK_MESSAGE(v.ok(), pt::describe(v));
  });
}

TEST_CASE("memory slots: 1F1B's rank 0 holds 2 stashes instead of 4 with every activation offloaded") {
  const step s = make_step("1f1b", pt::memory_policy::all, pt::memory_policy::none);
  CHECK(s.mesh.stash_slots == std::vector<int>{2, 2, 2, 1});
  CHECK(s.mesh.host_slots[0] == 4);
  CHECK(s.mesh.host_slots[3] == 0);  // the last rank offloads nothing
}

TEST_CASE("memory slots: the proof refuses a slot written while its holder may still use it") {
  const step s = make_step("1f1b", pt::memory_policy::all, pt::memory_policy::none);
  REQUIRE(verify(s, s.mesh).ok());
  const auto b = static_cast<std::size_t>(s.mesh.begin[0]);

  SUBCASE("every stash in slot 0") {
    pt::mesh_program bad = s.mesh;
    for (pt::mesh_op& o : bad.ops)
      if (o.stash_slot >= 0) o.stash_slot = 0;
    const pt::verdict v = verify(s, bad);
    REQUIRE_FALSE(v.ok());
    CHECK(std::string(v.detail).find("stash slot") != std::string::npos);
  }

  SUBCASE("a forward's slot freed when its OFFLOAD is issued, not at its until") {
    // the first forward after an OFFLOAD and before the action that waits for the copy, moved into
    // the slot the copy still reads (with every op of its microbatch that used its own slot)
    const auto ops = s.mesh.rank_ops(0);
    const std::span<const pt::memory_action> mine = s.actions.rank_ops(0);
    int action = -1;
    std::size_t memory = 0, into = 0;
    int moved_stage = -1, moved_mb = -1, from = -1;
    std::vector<std::pair<int, int>> copying;  // OFFLOADs not yet waited for: (slot, until)
    for (std::size_t i = 0; i < ops.size() && moved_stage < 0; ++i) {
      const pt::mesh_op& o = ops[i];
      if (o.code == pt::mesh_op_code::compute) {
        ++action;
        std::erase_if(copying, [&](const std::pair<int, int>& c) { return c.second <= action; });
        if (o.what == pt::kind::F && !o.scratch && !copying.empty() && copying.front().first != o.stash_slot)
          moved_stage = o.stage, moved_mb = o.microbatch, from = o.stash_slot,
          into = static_cast<std::size_t>(copying.front().first);
      } else if (pt::is_copy(o.code) || o.code == pt::mesh_op_code::recompute) {
        const pt::memory_action& a = mine[memory++];
        if (o.code == pt::mesh_op_code::offload && o.stash_slot >= 0) copying.emplace_back(o.stash_slot, a.until);
      }
    }
    REQUIRE(moved_stage >= 0);
    pt::mesh_program bad = s.mesh;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      pt::mesh_op& o = bad.ops[b + i];
      if (o.stage == moved_stage && o.microbatch == moved_mb && o.stash_slot == from)
        o.stash_slot = static_cast<int>(into);
    }
    const pt::verdict v = verify(s, bad);
    REQUIRE_FALSE(v.ok());
    CHECK(std::string(v.detail) == "a stash slot may be written while an op of its previous holder still uses it");
  }

  SUBCASE("an OFFLOAD or a RELOAD with no device slot") {
    for (const pt::mesh_op_code code : {pt::mesh_op_code::offload, pt::mesh_op_code::reload}) {
      const std::vector<std::size_t> copies =
          ops_where(s.mesh, [code](const pt::mesh_op& o) { return o.code == code && o.stash_slot >= 0; });
      REQUIRE(!copies.empty());
      pt::mesh_program bad = s.mesh;
      bad.ops[b + copies[0]].stash_slot = -1;
      const pt::verdict v = verify(s, bad);
      REQUIRE_FALSE(v.ok());
      CHECK(std::string(v.detail) == (code == pt::mesh_op_code::offload ? "an OFFLOAD copies from no stash slot"
                                                                        : "a RELOAD copies into no stash slot"));
    }
  }

  SUBCASE("a RELOAD reading another microbatch's host slot") {
    const std::vector<std::size_t> reloads =
        ops_where(s.mesh, [](const pt::mesh_op& o) { return o.code == pt::mesh_op_code::reload && o.host_slot >= 0; });
    REQUIRE(reloads.size() >= 2);
    pt::mesh_program bad = s.mesh;
    std::swap(bad.ops[b + reloads[0]].host_slot, bad.ops[b + reloads[1]].host_slot);
    REQUIRE(bad.ops[b + reloads[0]].host_slot != s.mesh.ops[b + reloads[0]].host_slot);
    const pt::verdict v = verify(s, bad);
    REQUIRE_FALSE(v.ok());
    CHECK(std::string(v.detail) == "a RELOAD reads another microbatch's host slot");
  }
}

TEST_CASE("memory slots: the proof refuses a backward reading the device slot its stash was offloaded from") {
  // one rank: 0F0 0F1 0B1 0B0, microbatch 0 offloaded after 0F1 until 0B1 and reloaded after it,
  // into slot 0 again: nothing was written there since the OFFLOAD copied it out
  pt::program_builder pb{1, 1, 2};
  pb.rank(0).add(pt::F(0, 0)).add(pt::F(0, 1)).add(pt::B(0, 1)).add(pt::B(0, 0));
  step s{pt::build_plan(std::move(pb).build("reversed")), {}, {}};
  REQUIRE_MESSAGE(s.plan.ok(), pt::describe(s.plan.result));
  s.actions = pt::memory_program_of(s.plan.compute(), {{pt::offload(0, 0, 1, 2), pt::reload(0, 0, 2)}});
  s.mesh = lowered_with_actions(s);
  const std::vector<std::size_t> offloads =
      ops_where(s.mesh, [](const pt::mesh_op& o) { return o.code == pt::mesh_op_code::offload; });
  const std::vector<std::size_t> reloads =
      ops_where(s.mesh, [](const pt::mesh_op& o) { return o.code == pt::mesh_op_code::reload; });
  REQUIRE((offloads.size() == 1 && reloads.size() == 1));
  const auto b = static_cast<std::size_t>(s.mesh.begin[0]);
  REQUIRE(s.mesh.ops[b + reloads[0]].stash_slot == s.mesh.ops[b + offloads[0]].stash_slot);
  REQUIRE(verify(s, s.mesh).ok());
  // the RELOAD made to move nothing (as a recomputed forward's): 0B0 would read the old bytes,
  // which an executor poisons when it offloads
  pt::mesh_program bad = s.mesh;
  bad.ops[b + reloads[0]].kept_only = true;
  const pt::verdict v = verify(s, bad);
  REQUIRE_FALSE(v.ok());
  CHECK(std::string(v.detail) == "an op reads a stash slot that holds another microbatch's stash");
}

TEST_CASE("memory slots: a slot a RELOAD borrowed is not freed by the OFFLOAD it drained for") {
  // one rank: mb 1's OFFLOAD drains slot 0 until action 7, mb 0's RELOAD borrows it, 0B0 frees it,
  // 0F2 takes it and its OFFLOAD drains it until 8; action 7 (0F5) must not find it free
  pt::program_builder pb{1, 1, 6};
  pb.rank(0)
      .add(pt::F(0, 0))
      .add(pt::F(0, 1))
      .add(pt::B(0, 0))
      .add(pt::F(0, 2))
      .add(pt::F(0, 3))
      .add(pt::B(0, 3))
      .add(pt::F(0, 4))
      .add(pt::F(0, 5))
      .add(pt::B(0, 5))
      .add(pt::B(0, 4))
      .add(pt::B(0, 1))
      .add(pt::B(0, 2));
  step s{pt::build_plan(std::move(pb).build("borrowed")), {}, {}};
  REQUIRE_MESSAGE(s.plan.ok(), pt::describe(s.plan.result));
  s.actions =
      pt::memory_program_of(s.plan.compute(), {{pt::offload(0, 0, 0, 1), pt::offload(0, 1, 1, 7), pt::reload(0, 0, 1),
                                                pt::offload(0, 2, 3, 8), pt::reload(0, 1, 9), pt::reload(0, 2, 9)}});
  REQUIRE(pt::check_memory_actions(s.plan.compute(), s.actions).ok());
  s.mesh = lowered_with_actions(s);  // build_mesh: verify_memory refuses a slot freed while it drains
  const std::vector<std::size_t> reloads =
      ops_where(s.mesh, [](const pt::mesh_op& o) { return o.code == pt::mesh_op_code::reload; });
  REQUIRE(!reloads.empty());
  CHECK(s.mesh.ops[static_cast<std::size_t>(s.mesh.begin[0]) + reloads[0]].taken == 0);  // it borrowed
  CHECK(verify(s, s.mesh).ok());
}

}  // namespace test_memory_slots
}  // namespace
