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

// a paged table across pages, read through a field, partly released, then moved
constexpr long long paged_sum(int n) {
  ptd::paged<int> t(n);
  for (int i = 0; i < n; ++i) t[i] = i;
  const ptd::field_of<ptd::paged<int>> second_half{&t, n / 2};
  long long total = 0;
  for (int i = 0; i < n - n / 2; ++i) total += second_half[i];
  t.release(0, n / 2);  // the first half's whole pages go; its last, shared page stays
  ptd::paged<int> moved(static_cast<ptd::paged<int>&&>(t));
  for (int i = n / 2; i < n; ++i) total -= moved[i];
  return total;
}
static_assert(paged_sum(10) == 0);

TEST_CASE("paged: pages of 2^16, indexable across them, released page by page") {
  constexpr int page = ptd::paged<int>::page;
  const int n = 3 * page + 17;
  ptd::paged<int> t(n);
  for (int i = 0; i < n; ++i) t[i] = 7 * i;
  CHECK(t[page - 1] == 7 * (page - 1));
  CHECK(t[page] == 7 * page);
  CHECK(t[n - 1] == 7 * (n - 1));
  // [page / 2, 2 · page + 1) holds one whole page, the second: only it goes
  t.release(page / 2, 2 * page + 1);
  CHECK(t[page / 2 - 1] == 7 * (page / 2 - 1));
  CHECK(t[2 * page] == 14 * page);
  // releasing again, or a range with no whole page, changes nothing
  t.release(page / 2, 2 * page + 1);
  t.release(2 * page + 1, 3 * page);
  CHECK(t[3 * page - 1] == 7 * (3 * page - 1));
  CHECK(paged_sum(5 * page + 3) == 0);
  const ptd::field_of<ptd::paged<int>> tail{&t, 3 * page};
  CHECK(tail[16] == 7 * (n - 1));
}

}  // namespace test_scratch
}  // namespace
