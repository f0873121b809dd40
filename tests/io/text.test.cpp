#include <pipetype/compile/plan.hpp>
#include <pipetype/io/text.hpp>
#include <pipetype/schedules/one_f_one_b.hpp>

#include <doctest/doctest.h>

namespace pt = pipetype;

TEST_CASE("to_text: PyTorch's action notation") {
  CHECK(pt::to_text(pt::F(2, 0)) == "2F0");
  CHECK(pt::to_text(pt::I(13, 7)) == "13I7");
  CHECK(pt::to_text(pt::make_one_f_one_b(2, 2).view()) == "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n");
}

TEST_CASE("to_text: an overlapped pair") {
  pt::program_builder b{1, 1, 2};
  b.rank(0).add(pt::F(0, 0)).add_overlapped(pt::F(0, 1), pt::B(0, 0)).add(pt::B(0, 1));
  CHECK(pt::to_text(std::move(b).build().view()) == "0F0,(0F1;0B0),0B1\n");
}

TEST_CASE("listing: the ops of one rank, a group's transfers indented") {
  const pt::runtime_plan plan = pt::build_plan(pt::make_one_f_one_b(2, 1));
  REQUIRE(plan.ok());
  CHECK(pt::listing(plan.lowered.view(), 1) ==
        "group (tick 1) [record e0 when it ends]\n"
        "  recv act 0F0 <- rank 0 comm 0 slot a0\n"
        "[wait e0] compute 1F0 in=a0 out=-\n"
        "compute 1B0 in=a0 grad=- out=g0 [record e0]\n"
        "[wait e0] group (tick 3)\n"
        "  send grad 1B0 -> rank 0 comm 0 slot g0\n");
}
