// mesh/plan.hpp: a plan over a mesh, proven at compile time — its facts are constants, the
// schedule's own UNSHARD/RESHARD/REDUCE_GRAD are its collectives when it writes them, and the
// step program() lowers at run time is the proven one. (The rejections: tests/compile_fail/mesh_*.)
#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_mesh_plan {

namespace pt = pipetype;

using S = pt::one_f_one_b<pt::ranks<4>, pt::microbatches<8>>;

// plain: one REDUCE_GRAD per stage and replica, on 4 DP groups
constexpr pt::mesh_facts plain = pt::make_mesh_plan<S, pt::mesh_t<4, 2>>();
static_assert(plain.rejection.ok() && plain.collectives == 4 * 2);
// sharded and tied: gathers too, and a tie group's all-reduce per replica on both of its ranks
using step = pt::mesh_plan<S, pt::mesh_t<4, 2, pt::mesh_order::pp_inner>, pt::sharded<1>, pt::tied<0, 3>, pt::world<8>>;
static_assert(step::facts.rejection.ok());
static_assert(step::facts.collectives > plain.collectives);
static_assert(step::shape.order == pt::mesh_order::pp_inner);

// a schedule that says its own collectives (PyTorch's notation): they are the step's
using own =
    pt::from_text<"0UNSHARD,0F0,0F1,0B0,0B1,0REDUCE_GRAD,0RESHARD\n1UNSHARD,1F0,1B0,1F1,1B1,1REDUCE_GRAD,1RESHARD">;
constexpr pt::mesh_facts written = pt::make_mesh_plan<own, pt::mesh_t<2, 2>, pt::sharded<>>();
static_assert(written.rejection.ok() && written.collectives == 2 * 2 * 2);  // a gather and a reduction per rank

TEST_CASE("mesh plan: the step lowered at run time is the one proven at compile time") {
  const pt::mesh_program mp = step::program();
  CHECK(pt::verify_mesh(mp).ok());
  int collectives = 0;
  for (const pt::mesh_op& o : mp.ops) collectives += pt::is_collective(o.code) ? 1 : 0;
  CHECK(collectives == step::facts.collectives);
  CHECK(static_cast<int>(mp.comms.size()) == step::facts.communicators);
  CHECK(static_cast<int>(mp.ops.size()) == step::facts.ops);
  const pt::dp_options o = step::options();
  CHECK(o.shard);
  CHECK(o.window == 1);
  REQUIRE(o.ties.size() == 1);
  CHECK(o.ties[0] == std::vector<int>{0, 3});
  // the written collectives are read, not placed: a window of 1 would have placed others
  const pt::collective_program c = pt::mesh_plan<own, pt::mesh_t<2, 2>, pt::sharded<>>::collectives();
  CHECK(c.ops.size() == 6);
  CHECK(c.ops.front().what == pt::collective_kind::unshard);
  CHECK(c.ops.front().after == -1);
}

}  // namespace test_mesh_plan
}  // namespace
