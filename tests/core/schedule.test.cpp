#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_schedule {

namespace pt = pipetype;

// a user's schedule type and a lambda-wrapped one both satisfy the concept
struct two_rank_1f1b {
  static constexpr pt::program generate() {
    pt::program_builder b{2, 2, 2};
    b.rank(0).add(pt::F(0, 0)).add(pt::F(0, 1)).add(pt::B(0, 0)).add(pt::B(0, 1));
    b.rank(1).add(pt::F(1, 0)).add(pt::B(1, 0)).add(pt::F(1, 1)).add(pt::B(1, 1));
    return std::move(b).build("mine");
  }
};
using from_lambda = pt::from_function<[] { return pt::make_one_f_one_b(2, 2); }>;

static_assert(pt::schedule<two_rank_1f1b>);
static_assert(pt::schedule<from_lambda>);
static_assert(pt::schedule<pt::one_f_one_b<pt::ranks<2>, pt::microbatches<2>>>);
static_assert(!pt::schedule<int>);

constexpr auto mine = pt::make_plan<two_rank_1f1b>();
constexpr auto theirs = pt::make_plan<from_lambda>();

TEST_CASE("schedule: a hand-built 1F1B and the generator lower to the same ops") {
  REQUIRE(mine.ops().size() == theirs.ops().size());
  for (std::size_t i = 0; i < mine.ops().size(); ++i) CHECK(mine.ops()[i] == theirs.ops()[i]);
  CHECK(std::string(mine.name) == "mine");
}

}  // namespace test_schedule
}  // namespace
