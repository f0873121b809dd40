#include <pipetype/core/sizes.hpp>

#include <doctest/doctest.h>

#include <string>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_sizes {

namespace pt = pipetype;

static_assert(pt::ranks<4>::value == 4 && pt::microbatches<8>::value == 8 && pt::chunks<2>::value == 2);
static_assert(pt::value_v<pt::stages<6>> == 6);

TEST_CASE("sizes: static sizes read like values") {
  CHECK(pt::value_v<pt::ranks<16>> * pt::value_v<pt::chunks<2>> == 32);
  CHECK(pt::microbatches<1>::value == 1);
}

TEST_CASE("sizes: edges are under pipetype::limits, alone and times the microbatches") {
  namespace lim = pt::limits;
  CHECK(lim::exceeded(4, 4, 8, 64) == nullptr);
  CHECK(lim::exceeded(4, 4, 1, 64, lim::edges) == nullptr);
  CHECK(std::string(lim::exceeded(4, 4, 1, 64, lim::edges + 1LL)) ==
        "more than 1048576 edges (pipetype::limits::edges)");
  CHECK(lim::exceeded(4, 4, 4, 64, lim::cells / 4) == nullptr);
  CHECK(std::string(lim::exceeded(4, 4, 5, 64, lim::cells / 4)) ==
        "edges x microbatches above 4194304 (pipetype::limits::cells)");
  // the earlier limits keep their words and come first
  CHECK(std::string(lim::exceeded(lim::ranks + 1LL, 4, 5, 64, lim::edges + 1LL)) ==
        "more than 16384 ranks (pipetype::limits::ranks)");
}

}  // namespace test_sizes
}  // namespace
