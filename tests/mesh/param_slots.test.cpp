// The parameter slots of a sharded mesh step (mesh/lower.hpp) and their proof (verify_mesh's
// verify_param_slots): against an oracle that follows the gathers and releases in issue order,
// and against steps broken on purpose, one wait or one slot at a time.
#include <pipetype/mesh/collectives.hpp>
#include <pipetype/mesh/memory_actions.hpp>
#include <pipetype/mesh/place_memory.hpp>
#include <pipetype/mesh/plan.hpp>
#include <pipetype/mesh/verify.hpp>
#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_param_slots {

namespace pt = pipetype;

pt::mesh_program sharded_step(const pt::runtime_plan& plan, int window, int dp = 2) {
  const pt::dp_options o{.dp = dp, .shard = true, .window = window};
  return pt::build_mesh(plan.compute(), plan.lowered(), pt::mesh{plan.compute().ranks, dp}, o);
}

/// Erases global op i of rank g (a wait, in these tests): the ranks after g begin one op earlier.
void erase_op(pt::mesh_program& mp, int g, int i) {
  mp.ops.erase(mp.ops.begin() + i);
  for (std::size_t h = static_cast<std::size_t>(g) + 1; h < mp.begin.size(); ++h) --mp.begin[h];
}

/// The refusal's sentence, or "" when `mp` proves.
std::string refusal_of(const pt::mesh_program& mp) {
  const pt::verdict v = pt::verify_mesh(mp);
  return v.ok() ? std::string() : pt::describe(v);
}

struct shape {
  const char* name;
  int ranks, microbatches, stages_per_rank;
};
constexpr shape shapes[] = {
    {"1f1b", 4, 8, 1},       {"gpipe", 3, 6, 1}, {"interleaved-1f1b", 2, 4, 2}, {"interleaved-1f1b", 2, 4, 3},
    {"looped-bfs", 2, 4, 3}, {"zb-h1", 3, 6, 1},
};

TEST_CASE(
    "parameter slots: an UNSHARD takes the lowest free slot, a RESHARD returns it, every read names its stage's") {
  for (const shape& sh : shapes)
    for (const int window : {1, 2, 3}) {
      CAPTURE(sh.name);
      CAPTURE(sh.stages_per_rank);
      CAPTURE(window);
      const pt::runtime_plan plan =
          pt::build_plan(pt::make_schedule(sh.name, sh.ranks, sh.microbatches, sh.stages_per_rank));
      REQUIRE(plan.ok());
      const pt::mesh_program mp = sharded_step(plan, window);
      REQUIRE(mp.param_slots.size() == static_cast<std::size_t>(mp.shape.size()));
      for (int g = 0; g < mp.shape.size(); ++g) {
        CAPTURE(g);
        // the oracle: slots taken lowest first at each gather, returned at each release
        std::vector<int> taken, of(static_cast<std::size_t>(plan.compute().stages), -1);
        int most = 0, reads = 0;
        for (const pt::mesh_op& o : mp.rank_ops(g)) {
          if (o.code == pt::mesh_op_code::all_gather) {
            int k = 0;
            while (std::find(taken.begin(), taken.end(), k) != taken.end()) ++k;
            taken.push_back(k);
            most = std::max(most, static_cast<int>(taken.size()));
            CHECK(o.param_slot == k);
            of[static_cast<std::size_t>(o.stage)] = k;
          } else if (o.code == pt::mesh_op_code::release) {
            CHECK(o.param_slot == of[static_cast<std::size_t>(o.stage)]);
            taken.erase(std::find(taken.begin(), taken.end(), o.param_slot));
            of[static_cast<std::size_t>(o.stage)] = -1;
          } else if (o.code == pt::mesh_op_code::compute) {
            ++reads;
            CHECK(o.param_slot >= 0);
            CHECK(o.param_slot == of[static_cast<std::size_t>(o.stage)]);
          } else {
            CHECK(o.param_slot == -1);
          }
        }
        CHECK(taken.empty());  // the step ends with every stage released
        CHECK(reads > 0);
        CHECK(mp.param_slots[static_cast<std::size_t>(g)] == most);
        CHECK(most <= window);
        CHECK(most == std::min(window, sh.stages_per_rank));
      }
    }
}

TEST_CASE("parameter slots: an unsharded step has none, and a step whose gathers have none is refused") {
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 2, 4));
  REQUIRE(plan.ok());
  const pt::dp_options o{.dp = 2};
  const pt::mesh_program plain = pt::build_mesh(plan.compute(), plan.lowered(), pt::mesh{2, 2}, o);
  CHECK(plain.param_slots.empty());
  for (const pt::mesh_op& x : plain.ops) CHECK(x.param_slot == -1);
  // one replica, sharded: nothing to gather, so no slots either
  const pt::dp_options one{.dp = 1, .shard = true};
  CHECK(pt::build_mesh(plan.compute(), plan.lowered(), pt::mesh{2, 1}, one).param_slots.empty());

  pt::mesh_program mp = sharded_step(plan, 3);
  mp.param_slots.clear();
  CHECK(refusal_of(mp).find("a step with UNSHARD or RESHARD has no parameter slots") != std::string::npos);
  mp = sharded_step(plan, 3);
  mp.param_slots.pop_back();
  CHECK(refusal_of(mp).find("one count per global rank") != std::string::npos);
  mp = sharded_step(plan, 3);
  mp.param_slots[0] = 0;
  CHECK(refusal_of(mp).find("past the rank's pool") != std::string::npos);
}

TEST_CASE("parameter slots: a gather into a reused slot waits for its previous holder's RESHARD, or is refused") {
  // two stages a rank and a window of one: each gather reuses slot 0, which the other stage held
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("interleaved-1f1b", 2, 4, 2));
  REQUIRE(plan.ok());
  const pt::mesh_program good = sharded_step(plan, 1);
  REQUIRE(pt::verify_mesh(good).ok());
  int broken = 0;
  for (int g = 0; g < good.shape.size(); ++g) {
    // per slot, the event of the RESHARD that last returned it and that RESHARD's stage
    std::vector<int> freed_by(4, -1), freed_stage(4, -1);
    const std::span<const pt::mesh_op> ops = good.rank_ops(g);
    for (std::size_t i = 0; i + 1 < ops.size(); ++i) {
      if (ops[i].code == pt::mesh_op_code::release && ops[i + 1].code == pt::mesh_op_code::record) {
        freed_by.at(static_cast<std::size_t>(ops[i].param_slot)) = ops[i + 1].event;
        freed_stage.at(static_cast<std::size_t>(ops[i].param_slot)) = ops[i].stage;
      }
      if (ops[i].code != pt::mesh_op_code::wait || ops[i].stream != pt::dp_stream) continue;
      std::size_t j = i;  // the gather these waits are for
      while (j < ops.size() && ops[j].code == pt::mesh_op_code::wait) ++j;
      if (j == ops.size() || ops[j].code != pt::mesh_op_code::all_gather) continue;
      const auto k = static_cast<std::size_t>(ops[j].param_slot);
      // the wait for the slot's previous holder, another stage: without it the gather may
      // overwrite what that stage's computes still read
      if (ops[i].event != freed_by.at(k) || freed_stage.at(k) == ops[j].stage) continue;
      pt::mesh_program bad = good;
      erase_op(bad, g, good.begin[static_cast<std::size_t>(g)] + static_cast<int>(i));
      CAPTURE(g);
      CAPTURE(i);
      CHECK(refusal_of(bad).find(
                "an UNSHARD may overwrite a parameter slot while an op of its previous holder still uses it") !=
            std::string::npos);
      ++broken;
    }
  }
  CHECK(broken > 0);
}

TEST_CASE("parameter slots: a read outside its stage's slot or before its gather is refused") {
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("interleaved-1f1b", 2, 4, 2));
  REQUIRE(plan.ok());
  const pt::mesh_program good = sharded_step(plan, 2);
  REQUIRE(pt::verify_mesh(good).ok());
  // a compute that names the other slot
  {
    pt::mesh_program bad = good;
    for (pt::mesh_op& o : bad.ops)
      if (o.code == pt::mesh_op_code::compute) {
        o.param_slot = 1 - o.param_slot;
        break;
      }
    CHECK(refusal_of(bad).find("reads its parameters from no slot its stage is gathered into") != std::string::npos);
  }
  // the compute stream's wait for a gather, dropped: the first compute after it may read early
  {
    const std::span<const pt::mesh_op> ops = good.rank_ops(0);
    int gather_event = -1;
    bool dropped = false;
    for (std::size_t i = 0; i + 1 < ops.size() && !dropped; ++i) {
      if (ops[i].code == pt::mesh_op_code::all_gather) gather_event = ops[i + 1].event;
      if (ops[i].code == pt::mesh_op_code::wait && ops[i].stream == 0 && ops[i].event == gather_event) {
        pt::mesh_program bad = good;
        erase_op(bad, 0, static_cast<int>(i));
        CHECK(refusal_of(bad).find("before their UNSHARD completes") != std::string::npos);
        dropped = true;
      }
    }
    CHECK(dropped);
  }
  // a RESHARD that names a slot its stage is not in
  {
    pt::mesh_program bad = good;
    for (pt::mesh_op& o : bad.ops)
      if (o.code == pt::mesh_op_code::release) {
        o.param_slot = 1 - o.param_slot;
        break;
      }
    CHECK(refusal_of(bad).find("a RESHARD of a parameter slot its stage is not gathered into") != std::string::npos);
  }
}

TEST_CASE("parameter slots: a RECOMPUTE reads its stage's slot, and without its wait for the gather is refused") {
  // the step of the RECOMPUTE that once raced its gather (tests/mesh/memory_plan.test.cpp): the
  // proof of the slots now refuses it on its own
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("interleaved-1f1b", 2, 4, 2));
  REQUIRE(plan.ok());
  pt::memory_options mo;
  mo.recompute = pt::memory_policy::all;
  const pt::memory_placement placed =
      pt::place_memory(plan.compute(), pt::memory_sizes{{1000}, {50}}, pt::costs{.f = 1, .b = 2}, mo);
  REQUIRE(placed.result.ok());
  const pt::dp_options d{.dp = 2, .shard = true, .window = 1};
  const pt::mesh_program good = pt::build_mesh(plan.compute(), plan.lowered(), pt::mesh{2, 2},
                                               pt::place_collectives(plan.compute(), d), d, placed.actions);
  int recomputes = 0, refused = 0;
  for (int g = 0; g < good.shape.size(); ++g) {
    const std::span<const pt::mesh_op> ops = good.rank_ops(g);
    std::vector<int> slot_of(static_cast<std::size_t>(plan.compute().stages), -1);
    int gather_event = -1;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const pt::mesh_op& o = ops[i];
      if (o.code == pt::mesh_op_code::all_gather) slot_of[static_cast<std::size_t>(o.stage)] = o.param_slot;
      if (o.code == pt::mesh_op_code::all_gather) gather_event = ops[i + 1].event;
      if (o.code != pt::mesh_op_code::recompute) continue;
      ++recomputes;
      CHECK(o.param_slot == slot_of[static_cast<std::size_t>(o.stage)]);
      // the wait right before it on the compute stream for the latest gather: drop it
      if (i > 0 && ops[i - 1].code == pt::mesh_op_code::wait && ops[i - 1].event == gather_event) {
        pt::mesh_program bad = good;
        erase_op(bad, g, good.begin[static_cast<std::size_t>(g)] + static_cast<int>(i) - 1);
        const std::string why = refusal_of(bad);
        CAPTURE(why);
        CHECK(why.find("before their UNSHARD completes") != std::string::npos);
        CHECK(why.find("RECOMPUTE") != std::string::npos);
        ++refused;
      }
    }
  }
  CHECK(recomputes == 2 * plan.compute().stages * 4);
  CHECK(refused > 0);
}

TEST_CASE("parameter slots: a mesh plan's facts say the most slots a rank holds") {
  using S = pt::interleaved_1f1b<pt::ranks<2>, pt::microbatches<4>, pt::chunks<3>>;
  static_assert(pt::mesh_plan<S, pt::mesh_t<2, 2>, pt::sharded<2>>::facts.param_slots == 2);
  static_assert(pt::mesh_plan<S, pt::mesh_t<2, 2>, pt::sharded<1>>::facts.param_slots == 1);
  static_assert(pt::mesh_plan<S, pt::mesh_t<2, 2>>::facts.param_slots == 0);
  CHECK(pt::mesh_plan<S, pt::mesh_t<2, 2>, pt::sharded<3>>::program().param_slots == std::vector<int>{3, 3, 3, 3});
}

}  // namespace test_param_slots

namespace test_param_slots_more {
namespace pt = pipetype;
TEST_CASE("parameter slots: each wait before a gather is needed, or another orders it as well") {
  int slot = 0, own = 0, redundant = 0;
  for (const test_param_slots::shape& sh : test_param_slots::shapes)
    for (const int window : {1, 2, 3}) {
      CAPTURE(sh.name);
      CAPTURE(window);
      const pt::runtime_plan plan =
          pt::build_plan(pt::make_schedule(sh.name, sh.ranks, sh.microbatches, sh.stages_per_rank));
      const pt::mesh_program good = test_param_slots::sharded_step(plan, window);
      for (int g = 0; g < good.shape.size(); ++g) {
        const std::span<const pt::mesh_op> ops = good.rank_ops(g);
        for (std::size_t i = 0; i < ops.size(); ++i) {
          if (ops[i].code != pt::mesh_op_code::wait || ops[i].stream != pt::dp_stream) continue;
          std::size_t j = i;
          while (j < ops.size() && ops[j].code == pt::mesh_op_code::wait) ++j;
          if (j == ops.size() || ops[j].code != pt::mesh_op_code::all_gather) continue;
          pt::mesh_program bad = good;
          test_param_slots::erase_op(bad, g, good.begin[static_cast<std::size_t>(g)] + static_cast<int>(i));
          const std::string why = test_param_slots::refusal_of(bad);
          CAPTURE(why);
          if (why.empty()) {
            ++redundant;
          } else if (why.find("while an op of its previous holder still uses it") != std::string::npos) {
            ++slot;
          } else {
            CHECK(why.find("overwrite its stage's parameters before their previous RESHARD") != std::string::npos);
            ++own;
          }
        }
      }
    }
  CHECK(slot > 0);
  CHECK(own == 0);  // a stage's own RESHARD orders its next gather through the slots' waits, in these steps
  CHECK(redundant > 0);
}

TEST_CASE("parameter slots: a gather into a fresh slot still comes after its stage's previous RESHARD") {
  // a step written by hand over one pipeline rank and two replicas: stage 0 gathered into slot 0,
  // computed, released, then gathered again into slot 1, which no one held. An executor may gather
  // into the stage's own array, so the second gather must wait for the first RESHARD all the same.
  using C = pt::mesh_op_code;
  auto step = [](bool waits) {
    pt::mesh_program mp;
    mp.shape = pt::mesh{1, 2};
    mp.comms.push_back({pt::mesh_comm_kind::data_parallel, 0, -1, {0, 1}});
    std::vector<pt::mesh_op> ops;
    auto add = [&](C code, int stream, int stage, int mb, int slot, int event) {
      pt::mesh_op o;
      o.code = code, o.stream = stream, o.stage = stage, o.microbatch = mb, o.param_slot = slot, o.event = event;
      o.comm = code == C::all_gather ? 0 : -1;
      ops.push_back(o);
    };
    for (int round = 0; round < 2; ++round) {
      if (round == 1 && waits) add(C::wait, pt::dp_stream, -1, -1, -1, 1);
      add(C::all_gather, pt::dp_stream, 0, -1, round, -1);
      add(C::record, pt::dp_stream, -1, -1, -1, 2 * round);
      add(C::wait, 0, -1, -1, -1, 2 * round);
      add(C::compute, 0, 0, round, round, -1);
      add(C::release, 0, 0, -1, round, -1);
      add(C::record, 0, -1, -1, -1, 2 * round + 1);
    }
    for (int g = 0; g < 2; ++g) mp.ops.insert(mp.ops.end(), ops.begin(), ops.end());
    const int n = static_cast<int>(ops.size());
    mp.begin = {0, n, 2 * n};
    mp.events = {4, 4};
    mp.param_slots = {2, 2};
    return mp;
  };
  CHECK(test_param_slots::refusal_of(step(true)).empty());
  CHECK(test_param_slots::refusal_of(step(false))
            .find("an UNSHARD may overwrite its stage's parameters before their previous RESHARD completes") !=
        std::string::npos);
}
}  // namespace test_param_slots_more
}  // namespace
