#include <pipetype/compile/lowered.hpp>

#include <doctest/doctest.h>

#include <vector>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_lowered {

namespace pt = pipetype;

TEST_CASE("lowered: a view slices the ops of each rank") {
  pt::lowered_program L;
  L.ranks = 2;
  L.ops.resize(5);
  for (int i = 0; i < 5; ++i) L.ops[static_cast<std::size_t>(i)].tick = i;
  L.begin = {0, 3, 5};
  L.resources.assign(2, pt::rank_resources{});
  const pt::lowered_view v = L.view();
  REQUIRE(v.rank_ops(1).size() == 2);
  CHECK(v.rank_ops(1)[0].tick == 3);
  CHECK(v.rank_ops(0).size() == 3);
}

TEST_CASE("lowered: an op defaults to 'nothing': no slot, no event") {
  const pt::lowered_op o;
  CHECK(o.code == pt::op_code::compute);
  CHECK(o.slot == -1);
  CHECK(o.wait_event == -1);
  CHECK(o.record_event == -1);
  CHECK(o == pt::lowered_op{});
}

}  // namespace test_lowered
}  // namespace
