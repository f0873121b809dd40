// pipetype/detail/stable_sort.hpp — a stable sort that runs in constant evaluation.
//
// std::stable_sort is constexpr only from C++26 and std::sort is not stable. The passes that
// order memory actions, candidates or placements sort in make_plan's constant evaluation and at
// run time over up to millions of elements, where an insertion sort made them quadratic: this is
// a bottom-up merge sort, O(n log n) comparisons and n elements of scratch.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace pipetype::detail {

/// Sorts v by `less`, keeping the order of equal elements.
template <class T, class Less>
constexpr void stable_sort(std::vector<T>& v, Less less) {
  const std::size_t n = v.size();
  if (n < 2) return;
  bool sorted = true;  // (already sorted is common: one pass, no copy)
  for (std::size_t i = 1; i < n && sorted; ++i) sorted = !less(v[i], v[i - 1]);
  if (sorted) return;
  std::vector<T> buf(v);
  std::vector<T>* from = &v;
  std::vector<T>* to = &buf;
  for (std::size_t width = 1; width < n; width *= 2) {
    for (std::size_t lo = 0; lo < n; lo += 2 * width) {
      const std::size_t mid = lo + width < n ? lo + width : n, hi = lo + 2 * width < n ? lo + 2 * width : n;
      std::size_t a = lo, b = mid, out = lo;
      while (a < mid && b < hi) (*to)[out++] = less((*from)[b], (*from)[a]) ? (*from)[b++] : (*from)[a++];
      while (a < mid) (*to)[out++] = (*from)[a++];
      while (b < hi) (*to)[out++] = (*from)[b++];
    }
    std::swap(from, to);
  }
  if (from != &v) v = std::move(*from);
}

}  // namespace pipetype::detail
