// pipetype/detail/scratch.hpp — a fixed-size array for constant evaluation.
//
// make_plan runs the whole pipeline inside one constant expression. There, building a
// std::vector<int>(n, v) walks libstdc++'s uninitialized_fill machinery one call per element and
// costs several times more than `new int[n]` and a plain loop (measured with g++ 12: 0.9 s against
// 0.15 s for 10^5 ints). Algorithms that run at compile time use this for their temporaries.
#pragma once

#include <cstddef>

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

/// Writes v to a[0, n) in order. A table that a pass then writes out of order (a block of
/// fields, a sort's output) is filled first: g++ keeps a constant array as a sorted list of the
/// elements written so far, so each write into its middle moves every later element.
template <class Arr, class T>
constexpr void fill_in(Arr& a, int n, T v) {
  for (int i = 0; i < n; ++i) a[i] = v;
}

}  // namespace pipetype::detail
