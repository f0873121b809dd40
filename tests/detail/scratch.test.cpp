#include <pipetype/detail/fixed_string.hpp>
#include <pipetype/detail/scratch.hpp>

#include <doctest/doctest.h>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_scratch {

namespace ptd = pipetype::detail;

constexpr int sum_of_filled(int n) {
  ptd::scratch<int> s(n, 3);
  int total = 0;
  for (int i = 0; i < s.size(); ++i) total += s[i];
  ptd::scratch<int> moved(static_cast<ptd::scratch<int>&&>(s));
  return total + moved.size();
}
static_assert(sum_of_filled(4) == 16);
static_assert(sum_of_filled(0) == 0);
static_assert(ptd::fixed_string("abc").view() == "abc");

TEST_CASE("scratch: filled, indexable, movable, at run time too") {
  ptd::scratch<char> s(5, 'x');
  s[2] = 'y';
  CHECK(s.size() == 5);
  CHECK(s.data()[2] == 'y');
  CHECK(sum_of_filled(10) == 40);
}

}  // namespace test_scratch
}  // namespace
