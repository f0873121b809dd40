// pipetype/io/text.hpp — lowered ops as text (the notation of compute programs, read and
// written, is io/notation.hpp and io/write_schedule.hpp).
//
//   to_text(op)               one lowered op: "[wait e0] compute 1F0 in=a0 out=- [record e1]",
//                             "send act 0F0 -> rank 1 comm 0 slot a1", ...
//   listing(plan.lowered(), r) every op of rank r, one per line, a group's transfers indented
#pragma once

#include <span>
#include <string>

#include "pipetype/compile/lowered.hpp"
#include "pipetype/io/write_schedule.hpp"

namespace pipetype {

/// `slot_lists`: the plan's (lowered_view::slot_lists), for the ops of a stage graph that read
/// or write several slots; a list is printed a1+a3, in edge order.
inline std::string to_text(const lowered_op& o, std::span<const int> slot_lists = {}) {
  auto slot = [](char pool, int s) { return s < 0 ? std::string("-") : pool + std::to_string(s); };
  auto slots = [&](char pool, std::span<const int> l) {
    std::string t = l.empty() ? "-" : "";
    for (std::size_t k = 0; k < l.size(); ++k) t += (k ? "+" : "") + slot(pool, l[k]);
    return t;
  };
  std::string s = o.wait_event >= 0 ? "[wait e" + std::to_string(o.wait_event) + "] " : "";
  switch (o.code) {
    case op_code::compute: {
      s += "compute " + to_text(action{o.what, o.stage, o.microbatch, false});
      if (o.overlapped) s += " (overlapped with the next)";
      if (o.link >= 0 && static_cast<std::size_t>(o.link) + 3 > slot_lists.size()) {  // lists not given
        s += " slots in list " + std::to_string(o.link);
        break;
      }
      const op_slots sl = lowered_view{.slot_lists = slot_lists}.slots_of(o);
      s += " in=" + slots('a', sl.in);
      if (o.what != kind::F) s += " grad=" + slots('g', sl.grad);
      s += " out=" + slots(o.what == kind::F ? 'a' : 'g', sl.out);
      break;
    }
    case op_code::send:
    case op_code::recv:
      s += std::string(o.code == op_code::send ? "send " : "recv ") + (o.what == kind::F ? "act " : "grad ") +
           std::to_string(o.stage) + (o.what == kind::F ? 'F' : 'B') + std::to_string(o.microbatch) +
           (o.code == op_code::send ? " -> rank " : " <- rank ") + std::to_string(o.peer) + " comm " +
           std::to_string(o.comm) + " slot " + slot(o.what == kind::F ? 'a' : 'g', o.slot) +
           (o.link >= 0 ? " edge " + std::to_string(o.link) : "");
      break;
    case op_code::group:
      s += "group (tick " + std::to_string(o.tick) + ")";
      break;
    case op_code::collective:  // (never lowered: a bound mesh program's)
      s += "collective";
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
    out += (inner ? "  " : "") + to_text(o, L.slot_lists) + '\n';
  }
  return out;
}

}  // namespace pipetype
