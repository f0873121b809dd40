// The slot-order check both CUDA test files run over issued calls: walk a rank's lowered ops in
// order and, for each slot an op reads or writes, ask whether the slot's last writer happens
// before it (and, for a write, every reader since). What "happens before" means — vector clocks
// over one rank's streams, or over every rank's — and which issued unit an op stands for (a
// compute itself; a transfer its group, or the receiver's copy) are the caller's.
#pragma once

#include <pipetype/pipetype.hpp>

#include <cstddef>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

/// `count` ops, `op_at(n)` the n-th (a lowered op), `unit_of(n)` the issued unit it stands for,
/// `hb(w, x)` whether unit w happens before unit x, `name(u)` a unit for messages, `slot_lists`
/// the plan's (a stage graph's computes with several slots). "" when every read follows its
/// write and every write follows the reads since the last one.
template <class Unit, class OpAt, class UnitOf, class HB, class Name>
std::string slot_order(std::size_t count, OpAt op_at, UnitOf unit_of, HB hb, Name name,
                       std::span<const int> slot_lists = {}) {
  namespace pt = pipetype;
  struct use {
    std::optional<Unit> writer;
    std::vector<Unit> readers;
  };
  std::map<std::pair<int, int>, use> slots;  // (pool: 0 activation, 1 gradient, slot)
  auto touch = [&](int pool, int slot, const Unit& x, bool write) -> std::string {
    if (slot < 0) return "";
    use& s = slots[{pool, slot}];
    const std::string what = std::string(pool ? "gradient" : "activation") + " slot " + std::to_string(slot);
    if (s.writer && *s.writer != x && !hb(*s.writer, x))
      return name(x) + " may run before " + name(*s.writer) + " wrote " + what;
    if (write) {
      for (const Unit& rd : s.readers)
        if (rd != x && !hb(rd, x)) return name(x) + " may overwrite " + what + " before " + name(rd) + " read it";
      s.writer = x;
      s.readers.clear();
    } else {
      s.readers.push_back(x);
    }
    return "";
  };
  for (std::size_t n = 0; n < count; ++n) {
    const pt::lowered_op& o = op_at(n);
    if (o.code == pt::op_code::group) continue;  // its transfers stand for it
    const Unit me = unit_of(n);
    std::string e;
    if (o.code == pt::op_code::send || o.code == pt::op_code::recv) {
      e = touch(o.what == pt::kind::F ? 0 : 1, o.slot, me, o.code == pt::op_code::recv);
    } else {
      // reads: every input, every gradient (a B or I with several also writes their sum into the
      // first); writes: the outputs
      const pt::op_slots sl = pt::lowered_view{.slot_lists = slot_lists}.slots_of(o);
      const bool sums = pt::sums_into_first(o.what, sl.grad.size());
      for (const int x : sl.in)
        if (e.empty()) e = touch(0, x, me, false);
      for (std::size_t k = 0; k < sl.grad.size(); ++k)
        if (e.empty()) e = touch(1, sl.grad[k], me, k == 0 && sums);
      for (const int x : sl.out)
        if (e.empty()) e = touch(o.what == pt::kind::F ? 0 : 1, x, me, true);
    }
    if (!e.empty()) return e + " (" + pt::to_text(o, slot_lists) + ")";
  }
  return "";
}
