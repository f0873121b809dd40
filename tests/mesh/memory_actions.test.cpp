// mesh/memory_actions.hpp: the checks of a step's OFFLOAD, RELOAD and RECOMPUTE, their
// program-order accounting (memory_of) and the sizes it refuses.
#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include "memory_test.hpp"

#include <string>
#include <vector>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_memory_actions {

namespace pt = pipetype;
using mesh_test::why;

pt::program one_rank() {  // 0F0 0F1 0B0 0B1 on one rank, one stage
  pt::program_builder b{1, 1, 2};
  b.rank(0).add(pt::F(0, 0)).add(pt::F(0, 1)).add(pt::B(0, 0)).add(pt::B(0, 1));
  return std::move(b).build("two");
}

pt::memory_program on_rank0(const pt::program& p, std::vector<pt::memory_action> ops) {
  return pt::memory_program_of(p.view(), {std::move(ops)});
}

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
