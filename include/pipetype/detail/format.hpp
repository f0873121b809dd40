// pipetype/detail/format.hpp — small text helpers the drawers share (io/grid, io/svg,
// io/chrome_trace): a round axis step, numbers without trailing zeros, XML and JSON escaping.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace pipetype::detail {

// The few math functions the drawers need, as the builtins of g++ and clang (the compilers
// pipetype supports; they are what <cmath>'s functions call): <cmath> brings C++17's special
// functions as well, 0.06 s of every translation unit that includes pipetype.hpp (g++ 12).
inline bool finite(double x) { return __builtin_isfinite(x); }
inline double floor_of(double x) { return __builtin_floor(x); }
inline double ceil_of(double x) { return __builtin_ceil(x); }
inline double round_of(double x) { return __builtin_round(x); }
inline long long llround_of(double x) { return __builtin_llround(x); }
inline double abs_of(double x) { return __builtin_fabs(x); }

/// The smallest 1, 2 or 5 × 10^k that is at least x (x > 0; 1 for anything else).
inline double nice_at_least(double x) {
  if (!(x > 0) || !finite(x)) return 1;
  double p = __builtin_pow(10.0, floor_of(__builtin_log10(x)));
  if (!(p > 0)) return 1;
  for (;; p *= 10)
    for (double m : {1.0, 2.0, 5.0})
      if (m * p >= x) return m * p;
}

/// x with at most `digits` decimals and no trailing zeros ("2", "0.25", "-1.5"); "0" for a
/// value that is not finite (JSON and SVG have no NaN).
inline std::string decimal(double x, int digits = 3) {
  if (!finite(x)) return "0";
  char buf[400];  // 309 digits of the largest double, a point and the decimals
  std::snprintf(buf, sizeof buf, "%.*f", digits, x);
  std::string s = buf;
  if (s.find('.') != std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  return s == "-0" ? "0" : s;
}

/// Text for an XML attribute or element.
inline std::string xml_escape(std::string_view s) {
  std::string out;
  for (char c : s) switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  return out;
}

/// A JSON string literal, quotes included.
inline std::string json_quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
      out += buf;
    } else
      out += c;
  }
  return out + '"';
}

}  // namespace pipetype::detail
