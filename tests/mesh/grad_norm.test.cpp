// GRAD_NORM (dp_options::grad_norm): the all-reduce of the ranks' squared gradient norms over the
// whole mesh, each rank's last collective after its reductions; its placement, its refusals, its
// proof, and the hang a rank that orders it before a reduction would cause.
#include <pipetype/mesh/plan.hpp>
#include <pipetype/mesh/simulate.hpp>
#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include "collective_cases.hpp"

#include <algorithm>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_grad_norm {

namespace pt = pipetype;

using collective_cases::misplaced;

TEST_CASE("grad norm: each rank's last collective, after its reductions and ties, one world communicator") {
  for (const collective_cases::shape& sh : collective_cases::shapes)
    for (const int dp : {1, 2})
      for (const bool shard : {false, true})
        for (const bool tie : {false, true}) {
          CAPTURE(sh.name);
          CAPTURE(dp);
          CAPTURE(shard);
          CAPTURE(tie);
          const pt::runtime_plan plan = collective_cases::plan_of(sh);
          REQUIRE(plan.ok());
          const pt::program_view p = plan.compute();
          pt::dp_options o{.dp = dp, .shard = shard, .grad_norm = true};
          if (tie) o.ties = {{0, p.stages - 1}};
          const pt::collective_program c = pt::place_collectives(p, o);
          CHECK(misplaced(p, c, o).empty());
          for (int r = 0; r < p.ranks; ++r) {
            const std::span<const pt::collective> mine = c.rank_ops(r);
            REQUIRE(!mine.empty());
            CHECK(mine.back().what == pt::collective_kind::grad_norm);
            CHECK(mine.back().after == static_cast<int>(p.rank_actions(r).size()) - 1);
          }
          const pt::mesh_program mp = pt::build_mesh(p, plan.lowered(), pt::mesh{p.ranks, dp}, o);
          CHECK(pt::verify_mesh(mp).ok());
          REQUIRE(mp.comms.back().what == pt::mesh_comm_kind::world);
          CHECK(static_cast<int>(mp.comms.back().members.size()) == p.ranks * dp);
          for (int g = 0; g < mp.shape.size(); ++g) {  // the last collective of every rank
            int last = -1, norms = 0;
            for (const pt::mesh_op& x : mp.rank_ops(g))
              if (pt::is_collective(x.code)) {
                last = static_cast<int>(x.code);
                norms += x.code == pt::mesh_op_code::grad_norm;
              }
            CHECK(norms == 1);
            CHECK(last == static_cast<int>(pt::mesh_op_code::grad_norm));
          }
        }
}

TEST_CASE("grad norm: a rank without it, one before a reduction, a second one, one not asked for are refused") {
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 2, 4));
  const pt::program_view p = plan.compute();
  const pt::dp_options o{.dp = 2, .grad_norm = true};
  const pt::collective_program placed = pt::place_collectives(p, o);
  REQUIRE(misplaced(p, placed, o).empty());
  // rank 1 without its GRAD_NORM
  pt::collective_program without = placed;
  without.ops.erase(without.ops.begin() + without.begin[2] - 1);
  --without.begin[2];
  CHECK(misplaced(p, without, o).find("a rank without GRAD_NORM: every other rank's would wait for it forever") !=
        std::string::npos);
  // rank 0's GRAD_NORM before its REDUCE_GRAD (same position, swapped)
  pt::collective_program early = placed;
  std::swap(early.ops[0], early.ops[1]);
  CHECK(misplaced(p, early, o).find("a GRAD_NORM before a REDUCE_GRAD of its rank") != std::string::npos);
  // before the rank's last weight backward (one replica: no reductions, only the norm)
  const pt::dp_options alone{.dp = 1, .grad_norm = true};
  pt::collective_program before_w = pt::place_collectives(p, alone);
  REQUIRE(before_w.ops.size() == 2);
  before_w.ops[0].after = 0;
  CHECK(misplaced(p, before_w, alone).find("a GRAD_NORM before a weight backward of its rank") != std::string::npos);
  // not asked for
  CHECK(misplaced(p, placed, {.dp = 2}).find("a GRAD_NORM without dp_options::grad_norm") != std::string::npos);
  // a second one
  pt::collective_program twice = placed;
  twice.ops.insert(twice.ops.begin() + 2, twice.ops[1]);
  for (std::size_t r = 1; r < twice.begin.size(); ++r) ++twice.begin[r];
  CHECK(misplaced(p, twice, o).find("a collective after the rank's GRAD_NORM") != std::string::npos);
}

TEST_CASE("grad norm: a rank that issues it before its reduction hangs the mesh, and the proof names the cycle") {
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 2, 4));
  const pt::program_view p = plan.compute();
  const pt::dp_options o{.dp = 2, .grad_norm = true};
  pt::mesh_program mp = pt::build_mesh(p, plan.lowered(), pt::mesh{2, 2}, o);
  // on global rank 0 only, the world's all-reduce moved in front of its DP group's
  const int g = 0;
  int reduce = -1, norm = -1;
  for (int i = mp.begin[static_cast<std::size_t>(g)]; i < mp.begin[static_cast<std::size_t>(g) + 1]; ++i) {
    if (mp.ops[static_cast<std::size_t>(i)].code == pt::mesh_op_code::all_reduce) reduce = i;
    if (mp.ops[static_cast<std::size_t>(i)].code == pt::mesh_op_code::grad_norm) norm = i;
  }
  REQUIRE(reduce >= 0);
  REQUIRE(norm > reduce);
  std::swap(mp.ops[static_cast<std::size_t>(reduce)], mp.ops[static_cast<std::size_t>(norm)]);
  const pt::verdict v = pt::verify_mesh(mp);
  REQUIRE_FALSE(v.ok());
  CHECK(v.code == pt::errc::nccl_deadlock);
  const std::string why = pt::describe(v);
  CHECK(why.find("GRAD_NORM") != std::string::npos);
  CHECK(why.find("REDUCE_GRAD") != std::string::npos);
}

TEST_CASE("grad norm: the simulation charges its latency once per rank, at the step's end") {
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 4, 8));
  const pt::program_view p = plan.compute();
  const pt::costs cost{.f = 1, .b = 2};
  const pt::mesh_costs d{.param_bytes = {5}, .bandwidth = 1, .alpha = 0.25};
  const pt::dp_options with{.dp = 2, .grad_norm = true}, without{.dp = 2};
  const double a = pt::exposed_dp(p, plan.lowered(), {.pp = 4, .dp = 2}, pt::place_collectives(p, with), with, cost, d);
  const double b =
      pt::exposed_dp(p, plan.lowered(), {.pp = 4, .dp = 2}, pt::place_collectives(p, without), without, cost, d);
  CHECK(a == doctest::Approx(b + 0.25));  // rank 0's reduction ends the step; the norm follows it
}

TEST_CASE("finite check: right before GRAD_NORM on every rank, the optimizer after both, its refusals") {
  for (const collective_cases::shape& sh : collective_cases::shapes)
    for (const bool norm : {false, true}) {
      CAPTURE(sh.name);
      CAPTURE(norm);
      const pt::runtime_plan plan = collective_cases::plan_of(sh);
      const pt::program_view p = plan.compute();
      const pt::dp_options o{.dp = 2, .grad_norm = norm, .finite_check = true, .zero = 1};
      const pt::collective_program c = pt::place_collectives(p, o);
      REQUIRE(misplaced(p, c, o).empty());
      for (int r = 0; r < p.ranks; ++r) {
        const std::span<const pt::collective> mine = c.rank_ops(r);
        std::size_t at = 0;
        while (at < mine.size() && mine[at].what != pt::collective_kind::finite_check) ++at;
        REQUIRE(at < mine.size());
        if (norm) CHECK(mine[at + 1].what == pt::collective_kind::grad_norm);
        for (std::size_t k = at + 1 + (norm ? 1 : 0); k < mine.size(); ++k)  // then only the optimizer's
          CHECK(
              (mine[k].what == pt::collective_kind::optimizer_step || mine[k].what == pt::collective_kind::param_sync));
      }
      const pt::mesh_program mp = pt::build_mesh(p, plan.lowered(), pt::mesh{p.ranks, 2}, o);
      CHECK(pt::verify_mesh(mp).ok());
      CHECK(mp.comms.back().what == pt::mesh_comm_kind::world);
    }
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 2, 4));
  const pt::program_view p = plan.compute();
  const pt::dp_options o{.dp = 2, .grad_norm = true, .finite_check = true, .optimizer = true};
  const pt::collective_program placed = pt::place_collectives(p, o);
  REQUIRE(misplaced(p, placed, o).empty());
  // rank 0: REDUCE_GRAD(0), FINITE_CHECK, GRAD_NORM, OPT_STEP(0)
  REQUIRE(placed.begin[1] == 4);
  REQUIRE(placed.ops[1].what == pt::collective_kind::finite_check);
  pt::collective_program swapped = placed;  // GRAD_NORM first
  std::swap(swapped.ops[1], swapped.ops[2]);
  CHECK(misplaced(p, swapped, o).find("a collective after the rank's GRAD_NORM") != std::string::npos);
  pt::collective_program early = placed;  // OPT_STEP before both
  std::rotate(early.ops.begin() + 1, early.ops.begin() + 3, early.ops.begin() + 4);
  CHECK(misplaced(p, early, {.dp = 2, .finite_check = true, .optimizer = true})
            .find("an OPT_STEP before the rank's FINITE_CHECK: it must know whether to skip the update") !=
        std::string::npos);
  CHECK(misplaced(p, placed, {.dp = 2, .grad_norm = true, .optimizer = true})
            .find("a FINITE_CHECK without dp_options::finite_check") != std::string::npos);
  pt::collective_program before = placed;  // before the rank's REDUCE_GRAD
  std::swap(before.ops[0], before.ops[1]);
  CHECK(misplaced(p, before, o).find("a FINITE_CHECK before a REDUCE_GRAD of its rank") != std::string::npos);
  const pt::dp_options bare{.dp = 2, .finite_check = true};  // rank 0 without one: REDUCE_GRAD(0) alone
  pt::collective_program without = pt::place_collectives(p, bare);
  REQUIRE(without.begin[1] == 2);
  without.ops.erase(without.ops.begin() + 1);
  for (std::size_t r = 1; r < without.begin.size(); ++r) --without.begin[r];
  CHECK(misplaced(p, without, bare).find("a rank without FINITE_CHECK") != std::string::npos);
  // in the step: a rank that issues GRAD_NORM first meets its peers' FINITE_CHECK on the world's
  // communicator, which the proof names
  pt::mesh_program mp = pt::build_mesh(p, plan.lowered(), pt::mesh{2, 2}, o);
  int check = -1, norm = -1;
  for (int i = mp.begin[0]; i < mp.begin[1]; ++i) {
    if (mp.ops[static_cast<std::size_t>(i)].code == pt::mesh_op_code::finite_check) check = i;
    if (mp.ops[static_cast<std::size_t>(i)].code == pt::mesh_op_code::grad_norm) norm = i;
  }
  REQUIRE(check >= 0);
  REQUIRE(norm == check + 1);
  std::swap(mp.ops[static_cast<std::size_t>(check)], mp.ops[static_cast<std::size_t>(norm)]);
  const pt::verdict v = pt::verify_mesh(mp);
  REQUIRE_FALSE(v.ok());
  CHECK(v.code == pt::errc::collective_mismatch);
}

// the compile-time plan: with_grad_norm as an option, its collective on every global rank
using normed = pt::mesh_plan<pt::one_f_one_b<pt::ranks<4>, pt::microbatches<8>>, pt::mesh_t<4, 2>, pt::with_grad_norm>;
static_assert(normed::facts.rejection.ok());
static_assert(normed::facts.collectives == 4 * 2 + 8);  // a REDUCE_GRAD a stage a replica, a GRAD_NORM a rank
static_assert(normed::options().grad_norm);
using checked = pt::mesh_plan<pt::one_f_one_b<pt::ranks<4>, pt::microbatches<8>>, pt::mesh_t<4, 2>,
                              pt::with_finite_check, pt::with_grad_norm>;
static_assert(checked::facts.collectives == 4 * 2 + 8 + 8);  // and a FINITE_CHECK a global rank

}  // namespace test_grad_norm
}  // namespace
