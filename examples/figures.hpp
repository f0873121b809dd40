// examples/figures.hpp — how the trainers report what they compared: a largest difference that
// stays NaN once a difference is NaN (std::max drops a NaN, so a gradient that is not a number
// reported a difference of 0 beside "grads_match_reference": false), and a JSON number that is
// null when it is not finite (JSON has no nan or inf); the process's peak resident memory; and a
// run's step times: each since its start, their median.
#pragma once

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

namespace examples {

/// The larger of d and e; NaN when either is.
inline double worst(double d, double e) {
  return std::isnan(d) || std::isnan(e) ? std::numeric_limits<double>::quiet_NaN() : std::max(d, e);
}

/// Milliseconds since `t0`.
inline double since_ms(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

/// The median of `v` (of an even count, the upper middle one); 0 when empty.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

/// v as a JSON number (%.9g), or null when it is not finite.
inline std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char b[32];
  std::snprintf(b, sizeof b, "%.9g", v);
  return b;
}

/// xs as a JSON array of json_number's.
inline std::string json_numbers(const std::vector<double>& xs) {
  std::string out = "[";
  for (std::size_t k = 0; k < xs.size(); ++k) out += (k ? ", " : "") + json_number(xs[k]);
  return out + "]";
}

/// The most memory the process has held resident so far, in MiB (getrusage's ru_maxrss: KiB on Linux).
inline double peak_rss_mib() {
  rusage u{};
  return getrusage(RUSAGE_SELF, &u) == 0 ? static_cast<double>(u.ru_maxrss) / 1024.0 : 0.0;
}

}  // namespace examples
