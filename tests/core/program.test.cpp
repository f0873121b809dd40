#include <pipetype/core/program.hpp>

#include <doctest/doctest.h>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_program {

namespace pt = pipetype;
using pt::B;
using pt::F;

namespace {
constexpr pt::program two_rank() {
  pt::program_builder b{2, 2, 2};
  b.rank(0).add(F(0, 0)).add(F(0, 1)).add(B(0, 0)).add(B(0, 1));
  b.rank(1).add(F(1, 0)).add(B(1, 0)).add(F(1, 1)).add(B(1, 1));
  return std::move(b).build("two-rank");
}
}  // namespace

// the builder works in a constant expression
static_assert(two_rank().actions.size() == 8);
static_assert(two_rank().begin[1] == 4);
static_assert(two_rank().stage_rank[1] == 1);

TEST_CASE("program_builder: CSR layout, rank order kept, placement inferred") {
  const pt::program p = two_rank();
  const pt::program_view v = p.view();
  CHECK(v.ranks == 2);
  CHECK(v.rank_actions(1).size() == 4);
  CHECK(v.rank_actions(1)[1] == B(1, 0));
  CHECK(p.stage_rank == std::vector<int>{0, 1});
  CHECK_FALSE(v.split_backward());
  CHECK(p.invalid_rank == pt::no_rank);
}

TEST_CASE("program_builder: pinned placement and overlapped pairs") {
  pt::program_builder b{1, 2, 1};
  b.place(1, 0);
  b.rank(0).add(F(0, 0)).add_overlapped(F(1, 0), B(0, 0)).add(B(1, 0));
  const pt::program p = std::move(b).build();
  REQUIRE(p.actions.size() == 4);
  CHECK(p.actions[1].overlapped);
  CHECK_FALSE(p.actions[2].overlapped);
  CHECK(p.stage_rank[1] == 0);
}

TEST_CASE("program_builder: an action for a rank out of range is remembered") {
  pt::program_builder b{2, 2, 1};
  b.rank(5).add(F(0, 0));
  CHECK(std::move(b).build().invalid_rank == 5);
  pt::program_builder c{2, 2, 1};
  c.add(F(0, 0));  // no rank selected
  CHECK(std::move(c).build().invalid_rank == -1);
}

}  // namespace test_program
}  // namespace
