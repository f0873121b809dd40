#include <pipetype/graph/placement.hpp>

#include <doctest/doctest.h>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_placement {

namespace pt = pipetype;

static_assert(pt::looped_rank(5, 4) == 1);
static_assert(pt::v_shape_rank(0, 4) == 0 && pt::v_shape_rank(7, 4) == 0 && pt::v_shape_rank(4, 4) == 3);

TEST_CASE("placement: looped puts stage s on rank s mod p") {
  CHECK(pt::looped_placement(3, 2) == std::vector<int>{0, 1, 2, 0, 1, 2});
}

TEST_CASE("placement: V-shape puts stages r and 2p-1-r on rank r") {
  CHECK(pt::v_shape_placement(3) == std::vector<int>{0, 1, 2, 2, 1, 0});
}

}  // namespace test_placement
}  // namespace
