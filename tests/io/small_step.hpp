// tests/io/small_step.hpp — what the drawers' tests share: the small step they draw, worked out
// by hand in step_trace.test.cpp, and a substring count.
#pragma once

#include <pipetype/pipetype.hpp>

#include <string>

namespace test_io {

/// 1F1B on 2 ranks, 2 microbatches, F = 1, B = 2, a transfer arriving 0.5 after its producer ends:
///   rank 0  0F0 [0,1]  0F1 [1,2]  0B0 [5,7]  0B1 [8,10]
///   rank 1  1F0 [1.5,2.5]  1B0 [2.5,4.5]  1F1 [4.5,5.5]  1B1 [5.5,7.5]
inline pipetype::step_trace small_step() {
  const pipetype::program p = pipetype::make_one_f_one_b(2, 2);
  pipetype::trace_options o;
  o.latency = 0.5;
  return pipetype::trace_of(p.view(), pipetype::simulate(p.view(), pipetype::costs{.f = 1, .b = 2, .comm = 0.5}), o);
}

/// How often `what` occurs in `s`.
inline std::size_t count(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

}  // namespace test_io
