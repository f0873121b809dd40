// pipetype/detail/heap.hpp — binary min-heaps over flat arrays, and a pool that hands out its
// lowest free slot, for the passes that colour intervals (the lowering's slots, the saved slots).
//
// A heap is `size` keys at h[b ..] of any indexable table (a scratch, a plan's C array, a
// pointer): several heaps share one array at different bases, and nothing here allocates, so the
// same code runs inside make_plan's constant evaluation. Each operation is O(log size).
#pragma once

namespace pipetype::detail {

/// Adds `key` to the heap of `size` keys at h[b ..].
template <class H, class K>
constexpr void heap_push(H& h, int b, int& size, K key) {
  int i = size++;
  while (i > 0 && h[b + (i - 1) / 2] > key) h[b + i] = h[b + (i - 1) / 2], i = (i - 1) / 2;
  h[b + i] = key;
}

/// Replaces the least key of the heap (size > 0) by `key`.
template <class H, class K>
constexpr void heap_replace_top(H& h, int b, int size, K key) {
  int i = 0;
  for (int c = 1; c < size; c = 2 * i + 1) {
    c += c + 1 < size && h[b + c + 1] < h[b + c] ? 1 : 0;
    if (h[b + c] >= key) break;
    h[b + i] = h[b + c], i = c;
  }
  h[b + i] = key;
}

/// Removes and returns the least key of the heap (size > 0).
template <class H>
constexpr auto heap_pop(H& h, int b, int& size) {
  const auto top = h[b], key = h[b + --size];
  int i = 0;
  for (int c = 1; c < size; c = 2 * i + 1) {
    c += c + 1 < size && h[b + c + 1] < h[b + c] ? 1 : 0;
    if (h[b + c] >= key) break;
    h[b + i] = h[b + c], i = c;
  }
  if (size > 0) h[b + i] = key;
  return top;
}

/// Slots 0, 1, … handed out lowest free first: `slots` is how many were ever taken, the freed
/// ones wait in a min-heap at `free_at` (room for as many as can be free at once). take() is the
/// lowest freed slot, or a new one; give(k) frees k. O(log n) each, where a scan for the first
/// free slot is O(n) and made plans with thousands of live stashes quadratic.
struct lowest_free {
  int* free_at = nullptr;
  int nfree = 0;
  int slots = 0;

  constexpr int take() { return nfree > 0 ? heap_pop(free_at, 0, nfree) : slots++; }
  constexpr void give(int k) { heap_push(free_at, 0, nfree, k); }
};

}  // namespace pipetype::detail
