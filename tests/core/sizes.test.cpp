#include <pipetype/core/sizes.hpp>

#include <doctest/doctest.h>

namespace pt = pipetype;

static_assert(pt::ranks<4>::value == 4 && pt::microbatches<8>::value == 8 && pt::chunks<2>::value == 2);
static_assert(pt::value_v<pt::stages<6>> == 6);

TEST_CASE("sizes: static sizes read like values") {
  CHECK(pt::value_v<pt::ranks<16>> * pt::value_v<pt::chunks<2>> == 32);
  CHECK(pt::microbatches<1>::value == 1);
}
