// examples/plain_number.hpp — what the example tools accept as a number on the command line.
//
// Only plain decimals: digits, and for a fractional option one '.' between digits. strtol and
// strtod also take a sign, leading spaces, hex (`0x10` is 16 to strtod), octal-looking zeros,
// exponents and "inf"; a tool that quietly reads `--ranks 0x10` as 16 is worse than one that
// says no.
#pragma once

#include <string_view>

namespace examples {

inline bool plain_number(std::string_view v, bool fraction) {
  if (v.empty() || v.front() < '0' || v.front() > '9' || v.back() < '0' || v.back() > '9') return false;
  if (v.size() > 1 && v.front() == '0' && v[1] != '.') return false;  // 010, 0x10
  bool dot = false;
  for (const char c : v) {
    if (c == '.' && fraction && !dot) {
      dot = true;
      continue;
    }
    if (c < '0' || c > '9') return false;
  }
  return true;
}

}  // namespace examples
