// pipetype/io/grid.hpp — a schedule as an ASCII grid: ranks as rows, time as columns.
//
//   std::cout << pipetype::grid(plan.compute(), pipetype::simulate(plan.compute(), costs));
//
//   time    0    1    2    3    4    5    6    7    8
//   rank 0 |0F0 |0F1 |    |0B0      |    |0B1      |
//   rank 1 |    |1F0 |1B0      |1F1 |1B1      |
//
// One column is `quantum` time units: by default the largest of 1, 0.5, 0.25, 0.2, 0.1, ... that
// every start and end is a multiple of, so fractional costs (F = 1.5) draw every action at its
// true width; an action spans as many columns as it lasts, starting at the column its start time
// rounds to. Blank cells are idle time. An overlapped pair
// prints as `(0F7;7B3)`. The width is bounded: when the step would take more than `max_columns`
// columns (costs of 10^9, thousands of microbatches), one column becomes the smallest 1, 2 or 5 ×
// 10^k multiple of the quantum that fits, and the time axis says so; actions shorter than a
// column then print at their start column, one after the other.
#pragma once

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "pipetype/analysis/simulate.hpp"
#include "pipetype/compile/plan.hpp"
#include "pipetype/detail/format.hpp"
#include "pipetype/io/text.hpp"

namespace pipetype {

struct grid_options {
  double quantum = 0;       // time units per column; 0: the largest of 1, 0.5, 0.25, 0.2, 0.1, ...
                            // that every start and end is a multiple of (1 when none is)
  long max_columns = 2000;  // at most this many time columns (0: no bound)
};

namespace detail {
/// The automatic quantum: the largest 1, 0.5, 0.25, 0.2, 0.1, ... 0.01 dividing every time.
inline double grid_quantum(const timeline& t) {
  for (double q : {1.0, 0.5, 0.25, 0.2, 0.1, 0.05, 0.025, 0.02, 0.01}) {
    auto fits = [q](double x) { return detail::abs_of(x / q - detail::round_of(x / q)) < 1e-6; };
    bool all = true;
    for (std::size_t k = 0; k < t.start.size() && all; ++k) all = fits(t.start[k]) && fits(t.end[k]);
    if (all) return q;
  }
  return 1;
}
}  // namespace detail

inline std::string grid(program_view p, const timeline& t, grid_options opt = {}) {
  const double asked = opt.quantum > 0 ? opt.quantum : 1;  // a column other than this is named
  if (opt.quantum <= 0) opt.quantum = detail::grid_quantum(t);
  double q = opt.quantum;
  if (opt.max_columns > 0 && !t.end.empty()) {  // bound the width: scale the quantum
    double t0 = t.start.front(), t1 = t.end.front();
    for (std::size_t k = 0; k < t.end.size(); ++k) t0 = std::min(t0, t.start[k]), t1 = std::max(t1, t.end[k]);
    if ((t1 - t0) / q > static_cast<double>(opt.max_columns))
      q *= detail::nice_at_least((t1 - t0) / q / static_cast<double>(opt.max_columns));
  }
  auto col = [&](double x) { return static_cast<long>(detail::llround_of(x / q)); };
  // labels and width
  std::vector<std::string> label(p.actions.size());
  std::size_t w = 3;
  for (std::size_t k = 0; k < p.actions.size(); ++k) {
    const action& a = p.actions[k];
    if (k > 0 && p.actions[k - 1].overlapped) continue;  // second half of a pair
    label[k] = a.overlapped && k + 1 < p.actions.size() ? '(' + to_text(a) + ';' + to_text(p.actions[k + 1]) + ')'
                                                        : to_text(a);
  }
  long first = 0, last = 0;
  bool any = false;
  for (std::size_t k = 0; k < p.actions.size(); ++k) {
    if (label[k].empty()) continue;
    const long span = col(t.end[k]) - col(t.start[k]);
    // a label must fit in its span: widen the columns if a short action has a long label
    const std::size_t need =
        span > 0 ? (label[k].size() + 1 + static_cast<std::size_t>(span) - 1) / static_cast<std::size_t>(span)
                 : label[k].size();
    w = need > w ? need : w;
    if (!any || col(t.start[k]) < first) first = col(t.start[k]);
    if (!any || col(t.end[k]) > last) last = col(t.end[k]);
    any = true;
  }
  const std::string head = "rank " + std::to_string(p.ranks - 1);
  const std::size_t lead = head.size() + 1;
  std::string out = q != asked ? "(one column = " +
                                     [&] {
                                       char buf[32];
                                       std::snprintf(buf, sizeof buf, "%g", q);
                                       return std::string(buf);
                                     }() +
                                     " time units)\n"
                               : std::string();
  out += "time";
  out.append(lead - 4, ' ');
  for (long c = first; c < last; ++c) {
    std::string n;
    if ((c - first) % 5 == 0) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%g", static_cast<double>(c) * q);
      n = buf;
    }
    if (n.size() > w) n.clear();
    out += ' ' + n;
    out.append(w - n.size(), ' ');
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  out += '\n';
  for (int r = 0; r < p.ranks; ++r) {
    std::string row = "rank " + std::to_string(r);
    row.append(lead - row.size(), ' ');
    long c = first;
    const int b = p.begin[static_cast<std::size_t>(r)], e = p.begin[static_cast<std::size_t>(r) + 1];
    for (int k = b; k < e; ++k) {
      const std::size_t ku = static_cast<std::size_t>(k);
      if (label[ku].empty()) continue;
      const long s = col(t.start[ku]);
      for (; c < s; ++c) row += '|' + std::string(w, ' ');
      const long span = col(t.end[ku]) - s;
      const std::size_t room = span > 0 ? static_cast<std::size_t>(span) * (w + 1) - 1 : label[ku].size();
      row += '|' + label[ku] + std::string(room > label[ku].size() ? room - label[ku].size() : 0, ' ');
      c = s + (span > 0 ? span : 1);
    }
    row += "|\n";
    out += row;
  }
  return out;
}

template <plan_shape Z>
std::string grid(const static_plan<Z>& plan, const timeline& t, grid_options opt = {}) {
  return grid(plan.compute(), t, opt);
}
inline std::string grid(const runtime_plan& plan, const timeline& t, grid_options opt = {}) {
  return grid(plan.compute(), t, opt);
}

}  // namespace pipetype
