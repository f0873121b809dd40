// pipetype/detail/fixed_string.hpp — a string literal usable as a template argument.
#pragma once

#include <cstddef>
#include <string_view>

namespace pipetype::detail {

template <std::size_t N>
struct fixed_string {
  char data[N]{};
  constexpr fixed_string(const char (&s)[N]) {  // NOLINT(google-explicit-constructor)
    for (std::size_t i = 0; i < N; ++i) data[i] = s[i];
  }
  /// The first N − 1 characters at `s` (stopping at its end), for a string known only as a pointer.
  struct from_pointer {};
  constexpr fixed_string(const char* s, from_pointer) {
    for (std::size_t i = 0; i + 1 < N && s[i]; ++i) data[i] = s[i];
  }
  constexpr std::string_view view() const { return {data, N - 1}; }
};

}  // namespace pipetype::detail
