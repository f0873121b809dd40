// pipetype/io/text.hpp — a program in the text notation (schedules/text.hpp), and one action.
//
//   to_text(F(2, 0))          "2F0"
//   to_text(plan.compute())   "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n"
//
// parse_schedule(to_text(p)) gives back p's actions and placement (placement only as far as
// the actions show it).
#pragma once

#include <string>

#include "pipetype/core/program.hpp"

namespace pipetype {

inline std::string to_text(const action& a) {
  return std::to_string(a.stage) + kind_char(a.what) + std::to_string(a.microbatch);
}

inline std::string to_text(program_view p) {
  std::string out;
  for (int r = 0; r < p.ranks; ++r) {
    const auto acts = p.rank_actions(r);
    for (std::size_t k = 0; k < acts.size(); ++k) {
      if (k) out += ',';
      if (acts[k].overlapped && k + 1 < acts.size()) {
        out += '(' + to_text(acts[k]) + ';' + to_text(acts[k + 1]) + ')';
        ++k;
      } else {
        out += to_text(acts[k]);
      }
    }
    out += '\n';
  }
  return out;
}

}  // namespace pipetype
