// examples/figures.hpp — how the trainers report what they compared: a largest difference that
// stays NaN once a difference is NaN (std::max drops a NaN, so a gradient that is not a number
// reported a difference of 0 beside "grads_match_reference": false), and a JSON number that is
// null when it is not finite (JSON has no nan or inf).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

namespace examples {

/// The larger of d and e; NaN when either is.
inline double worst(double d, double e) {
  return std::isnan(d) || std::isnan(e) ? std::numeric_limits<double>::quiet_NaN() : std::max(d, e);
}

/// v as a JSON number (%.9g), or null when it is not finite.
inline std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char b[32];
  std::snprintf(b, sizeof b, "%.9g", v);
  return b;
}

}  // namespace examples
