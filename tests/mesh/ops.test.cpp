// mesh/ops.hpp: what a mesh step is made of, its codes, and the reads of mesh_program's flat
// tables (rank_ops, dp_comm, the activation references) on a step made by hand and on a lowered one.
#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include <set>
#include <string>
#include <vector>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_mesh_ops {

namespace pt = pipetype;
using code = pt::mesh_op_code;

TEST_CASE("mesh ops: every code has a name of its own, and is_copy and is_collective pick theirs") {
  std::set<std::string> names;
  for (int c = 0; c <= static_cast<int>(code::recompute); ++c) {
    const auto x = static_cast<code>(c);
    CAPTURE(c);
    const std::string name = pt::mesh_op_name(x);
    CHECK(name != "?");
    names.insert(name);
    CHECK(pt::is_copy(x) == (x == code::offload || x == code::reload));
    CHECK(pt::is_collective(x) == (x == code::all_reduce || x == code::reduce_scatter || x == code::all_gather));
  }
  CHECK(names.size() == static_cast<std::size_t>(code::recompute) + 1);
}

TEST_CASE("mesh ops: rank_ops, dp_comm and the activation references read the program's flat tables") {
  pt::mesh_program mp;
  mp.shape = {.pp = 2, .dp = 2};
  mp.begin = {0, 2, 3, 3, 5};  // global ranks 0..3: two ops, one, none, two
  mp.ops.resize(5);
  mp.ops[3].act = 0;  // reads lowered slot 3 in the pool's slot 1, writes lowered slot 5 into slot 0
  mp.act_map = {2, 3, 1, 0, 5, 0, 1};
  mp.comms = {{pt::mesh_comm_kind::pipeline, 0, 0, {0, 1}}, {pt::mesh_comm_kind::data_parallel, 1, -1, {1, 3}}};
  CHECK(mp.rank_ops(0).size() == 2);
  CHECK(mp.rank_ops(1).size() == 1);
  CHECK(mp.rank_ops(2).empty());
  REQUIRE(mp.rank_ops(3).size() == 2);
  CHECK(&mp.rank_ops(3)[0] == &mp.ops[3]);
  CHECK(mp.dp_comm(1) == 1);
  CHECK(mp.dp_comm(0) == -1);  // no data-parallel group for pipeline rank 0 in this program
  const pt::mesh_op& o = mp.ops[3];
  REQUIRE(mp.act_count(o) == 2);
  CHECK(mp.act_at(o, 0).lowered == 3);
  CHECK(mp.act_at(o, 0).slot == 1);
  CHECK(!mp.act_at(o, 0).writes);
  CHECK(mp.act_at(o, 1).writes);
  CHECK(mp.act_slot(o, 5) == 0);
  CHECK(mp.act_slot(o, 7) == -1);
  CHECK(mp.act_count(mp.ops[0]) == 0);
  CHECK(mp.act_slot(mp.ops[0], 3) == -1);
}

TEST_CASE("mesh ops: a step lowered over two replicas has each replica's pipeline ops and one group per rank") {
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 2, 4));
  REQUIRE(plan.ok());
  const pt::dp_options dp{.dp = 2};
  const pt::mesh m{.pp = 2, .dp = 2};
  const pt::mesh_program mp =
      pt::lower_mesh(plan.compute(), plan.lowered(), m, pt::place_collectives(plan.compute(), dp), dp);
  REQUIRE(mp.begin.size() == 5);
  CHECK(mp.begin.back() == static_cast<int>(mp.ops.size()));
  for (int g = 0; g < m.size(); ++g) {
    CAPTURE(g);
    const int r = m.pipeline_rank(g);
    int computes = 0, lowered_computes = 0;
    for (const pt::mesh_op& o : mp.rank_ops(g)) computes += o.code == code::compute;
    for (const pt::lowered_op& o : plan.lowered().rank_ops(r)) lowered_computes += o.code == pt::op_code::compute;
    CHECK(computes == lowered_computes);
    const int c = mp.dp_comm(r);
    REQUIRE(c >= 0);
    const std::vector<int>& members = mp.comms[static_cast<std::size_t>(c)].members;
    CHECK(members == std::vector<int>{m.global(r, 0), m.global(r, 1)});
    for (const pt::mesh_op& o : mp.rank_ops(g))
      if (pt::is_collective(o.code)) CHECK(o.stream == pt::dp_stream);
  }
}

}  // namespace test_mesh_ops
}  // namespace
