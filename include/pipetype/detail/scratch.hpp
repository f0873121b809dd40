// pipetype/detail/scratch.hpp — a fixed-size array for constant evaluation.
//
// make_plan runs the whole pipeline inside one constant expression. There, building a
// std::vector<int>(n, v) walks libstdc++'s uninitialized_fill machinery one call per element and
// costs several times more than `new int[n]` and a plain loop (measured with g++ 12: 0.9 s against
// 0.15 s for 10^5 ints). Algorithms that run at compile time use this for their temporaries.
// `paged` is the same in pages, for run-time tables read front to back whose read part can be
// handed back while the rest is still read (the lowering's rank-major tables).
#pragma once

#include <cstddef>
#include <type_traits>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace pipetype::detail {

/// Tag: leave the elements unset (for arrays written before they are read; reading an unset
/// element in a constant expression is a compile error, so a mistake cannot go unnoticed there).
struct unset_t {};
inline constexpr unset_t unset{};

template <class T>
class scratch {
 public:
  constexpr scratch(int n, unset_t)
      : size_(n > 0 ? n : 0), data_(new T[static_cast<std::size_t>(size_ > 0 ? size_ : 1)]) {}
  constexpr scratch(int n, T fill)
      : size_(n > 0 ? n : 0), data_(new T[static_cast<std::size_t>(size_ > 0 ? size_ : 1)]) {
    for (int i = 0; i < size_; ++i) data_[i] = fill;
  }
  constexpr ~scratch() { delete[] data_; }
  constexpr scratch(scratch&& o) noexcept : size_(o.size_), data_(o.data_) {
    o.data_ = nullptr;
    o.size_ = 0;
  }
  constexpr scratch& operator=(scratch&& o) noexcept {
    if (this != &o) {
      delete[] data_;
      size_ = o.size_;
      data_ = o.data_;
      o.data_ = nullptr;
      o.size_ = 0;
    }
    return *this;
  }
  scratch(const scratch&) = delete;
  scratch& operator=(const scratch&) = delete;

  constexpr T* data() noexcept { return data_; }
  constexpr const T* data() const noexcept { return data_; }
  constexpr int size() const noexcept { return size_; }
  constexpr T& operator[](int i) noexcept { return data_[i]; }
  constexpr const T& operator[](int i) const noexcept { return data_[i]; }

 private:
  int size_;
  T* data_;
};

/// Consecutive pieces of one allocation (a scratch sized for all of them): next(n) hands out
/// the following n elements.
template <class T>
struct pieces {
  T* at;
  constexpr T* next(int n) noexcept {
    T* piece = at;
    at += n;
    return piece;
  }
};

/// An array of n elements in pages of 2^16 (the last one shorter), each its own allocation, left unset. release(hi)
/// hands back the pages wholly below element hi: a pass that reads a table front to back frees
/// what it has read while it writes its result. Reading a released element is an error.
template <class T>
class paged {
 public:
  static constexpr int shift = 16, page = 1 << shift;
  constexpr explicit paged(int n)
      : pages_(((n > 0 ? n : 0) + page - 1) >> shift),
        table_(new T*[static_cast<std::size_t>(pages_ > 0 ? pages_ : 1)]) {
    // the last page only as long as the table (a small table is one small allocation)
    for (int k = 0; k < pages_; ++k)
      table_[k] = new T[static_cast<std::size_t>(k + 1 < pages_ ? page : n - (static_cast<long long>(k) << shift))];
  }
  constexpr ~paged() {
    for (int k = 0; k < pages_; ++k) delete[] table_[k];
    delete[] table_;
  }
  constexpr paged(paged&& o) noexcept : pages_(o.pages_), table_(o.table_) { o.pages_ = 0, o.table_ = nullptr; }
  paged(const paged&) = delete;
  paged& operator=(const paged&) = delete;
  paged& operator=(paged&&) = delete;

  constexpr T& operator[](int i) noexcept { return table_[i >> shift][i & (page - 1)]; }
  constexpr const T& operator[](int i) const noexcept { return table_[i >> shift][i & (page - 1)]; }
  /// Frees the pages that lie wholly in [lo, hi) (already freed ones are skipped).
  constexpr void release(int lo, int hi) noexcept {
    for (int k = (lo + page - 1) >> shift; k < pages_ && (static_cast<long long>(k) + 1) << shift <= hi; ++k) {
      delete[] table_[k];
      table_[k] = nullptr;
    }
  }

 private:
  int pages_;
  T** table_;
};

/// A block of fields inside an array (a `paged` table, a scratch): field f starts at f · stride.
/// Indexing reads element `offset + i` of the array.
template <class Arr>
struct field_of {
  const Arr* array = nullptr;
  int offset = 0;
  constexpr decltype(auto) operator[](int i) const { return (*array)[offset + i]; }
};

/// Hands the heap's free pages back to the system, at run time on glibc (elsewhere, and in a
/// constant evaluation, nothing). glibc keeps the pages of freed blocks below its mmap threshold
/// (`paged` tables, once its threshold has grown past their size) for later allocations; a larger
/// block allocated later (a check's scratch) takes new pages beside them. Called where a pass has
/// freed most of what it built.
constexpr void return_free_pages() noexcept {
#if defined(__GLIBC__)
  if (!std::is_constant_evaluated()) ::malloc_trim(0);
#endif
}

/// Writes v to a[0, n) in order. A table that a pass then writes out of order (a block of
/// fields, a sort's output) is filled first: g++ keeps a constant array as a sorted list of the
/// elements written so far, so each write into its middle moves every later element.
template <class Arr, class T>
constexpr void fill_in(Arr& a, int n, T v) {
  for (int i = 0; i < n; ++i) a[i] = v;
}

/// The same on a paged table, page by page.
template <class U, class T>
constexpr void fill_in(paged<U>& a, int n, T v) {
  for (int k = 0; static_cast<long long>(k) << paged<U>::shift < n; ++k) {
    const int first = k << paged<U>::shift, last = n - first < paged<U>::page ? n : first + paged<U>::page;
    U* const page = &a[first];
    for (int i = 0; i < last - first; ++i) page[i] = v;
  }
}

}  // namespace pipetype::detail
