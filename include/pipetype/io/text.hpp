// pipetype/io/text.hpp — a program in the text notation (schedules/text.hpp), and one action.
//
//   to_text(F(2, 0))          "2F0"
//   to_text(plan.compute())   "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n" (a first line `chains N`
//                             when the stage graph has several chains)
//
// parse_schedule(to_text(p)) gives back p's actions and placement (placement only as far as
// the actions show it).
//
//   to_text(op)               one lowered op: "[wait e0] compute 1F0 in=a0 out=- [record e1]",
//                             "send act 0F0 -> rank 1 comm 0 slot a1", ...
//   listing(plan.lowered(), r) every op of rank r, one per line, a group's transfers indented
#pragma once

#include <string>

#include "pipetype/compile/lowered.hpp"
#include "pipetype/core/program.hpp"

namespace pipetype {

inline std::string to_text(const action& a) {
  return std::to_string(a.stage) + kind_char(a.what) + std::to_string(a.microbatch);
}

inline std::string to_text(program_view p) {
  std::string out = p.chains > 1 ? "chains " + std::to_string(p.chains) + "\n" : "";
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

inline std::string to_text(const lowered_op& o) {
  auto slot = [](char pool, int s) { return s < 0 ? std::string("-") : pool + std::to_string(s); };
  std::string s = o.wait_event >= 0 ? "[wait e" + std::to_string(o.wait_event) + "] " : "";
  switch (o.code) {
    case op_code::compute:
      s += "compute " + to_text(action{o.what, o.stage, o.microbatch, false});
      if (o.overlapped) s += " (overlapped with the next)";
      s += " in=" + slot('a', o.slot);
      if (o.what != kind::F) s += " grad=" + slot('g', o.grad_slot);
      s += " out=" + slot(o.what == kind::F ? 'a' : 'g', o.out_slot);
      break;
    case op_code::send:
    case op_code::recv:
      s += std::string(o.code == op_code::send ? "send " : "recv ") + (o.what == kind::F ? "act " : "grad ") +
           std::to_string(o.stage) + (o.what == kind::F ? 'F' : 'B') + std::to_string(o.microbatch) +
           (o.code == op_code::send ? " -> rank " : " <- rank ") + std::to_string(o.peer) + " comm " +
           std::to_string(o.comm) + " slot " + slot(o.what == kind::F ? 'a' : 'g', o.slot);
      break;
    case op_code::group:
      s += "group (tick " + std::to_string(o.tick) + ")";
      break;
  }
  if (o.record_event >= 0)
    s += o.code == op_code::group ? " [record e" + std::to_string(o.record_event) + " when it ends]"
                                  : " [record e" + std::to_string(o.record_event) + "]";
  return s;
}

inline std::string listing(lowered_view L, int rank) {
  std::string out;
  for (const lowered_op& o : L.rank_ops(rank)) {
    const bool inner = o.code == op_code::send || o.code == op_code::recv;
    out += (inner ? "  " : "") + to_text(o) + '\n';
  }
  return out;
}

}  // namespace pipetype
