// core/memory.hpp: how actions change a rank's live activations.
#include <pipetype/core/memory.hpp>

#include <doctest/doctest.h>

#include <initializer_list>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_memory {

namespace pt = pipetype;

// the default: two units per activation; F takes one, B gives it back, I and W half each
static_assert(pt::memory_model{}.delta(pt::kind::F) == 2);
static_assert(pt::memory_model{}.delta(pt::kind::B) == -2);
static_assert(pt::memory_model{}.delta(pt::kind::I) + pt::memory_model{}.delta(pt::kind::W) ==
              pt::memory_model{}.delta(pt::kind::B));
static_assert(pt::memory_model{}.unit == 2);

TEST_CASE("memory: a custom model changes every kind's delta") {
  const pt::memory_model m{.f = 3, .b = -3, .i = -2, .w = -1, .unit = 3};
  CHECK(m.delta(pt::kind::F) == 3);
  CHECK(m.delta(pt::kind::B) == -3);
  CHECK(m.delta(pt::kind::I) == -2);
  CHECK(m.delta(pt::kind::W) == -1);
  int live = 0;
  for (pt::kind k : {pt::kind::F, pt::kind::F, pt::kind::I, pt::kind::W, pt::kind::B}) live += m.delta(k);
  CHECK(live == 0);  // two forwards released by one split and one full backward
}

}  // namespace test_memory
}  // namespace
