#include <pipetype/compile/plan.hpp>
#include <pipetype/io/text.hpp>
#include <pipetype/schedules/one_f_one_b.hpp>

#include <doctest/doctest.h>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_text {

namespace pt = pipetype;

TEST_CASE("listing: the ops of one rank, a group's transfers indented") {
  const pt::runtime_plan plan = pt::build_plan(pt::make_one_f_one_b(2, 1));
  REQUIRE(plan.ok());
  CHECK(pt::listing(plan.lowered(), 1) ==
        "group (tick 1) [record e0 when it ends]\n"
        "  recv act 0F0 <- rank 0 comm 0 slot a0\n"
        "[wait e0] compute 1F0 in=a0 out=-\n"
        "compute 1B0 in=a0 grad=- out=g0 [record e0]\n"
        "[wait e0] group (tick 3)\n"
        "  send grad 1B0 -> rank 0 comm 0 slot g0\n");
}

}  // namespace test_text
}  // namespace
