// pipetype/compile/verify_lowered.hpp — proves a lowered program completes under NCCL's rules.
//
// The model (shared/reference/nccl_cuda.md A.1, DESIGN.md §4.3):
//   • each rank has two in-order streams (compute, comm); ops of one stream run one at a time;
//   • a record completes at once; a wait completes when the record it refers to — the latest
//     record of that event issued before it on the rank, as CUDA resolves it at call time —
//     has completed;
//   • a group completes when every send/recv in it has met its partner: point-to-point is a
//     blocking rendezvous, the k-th send from a to b on a communicator matches the k-th recv at
//     b from a on it (FIFO per communicator and peer), and everything inside one group
//     progresses together, so a partner counts as met once its group has been reached;
//   • both ends of a communicator must be its members.
// It also checks that every buffer shared by the two streams of a rank is ordered by events
// (no op reads or overwrites a slot that the other stream may still be using).
// If the run stalls, some ops wait on each other in a cycle: `nccl_deadlock` at the first
// stalled op. Any plan this library lowers passes (lower.hpp argues why); the check is the
// proof on the exact ops the executors issue, and it rejects hand-made programs that would hang.
#pragma once

#include <cstddef>
#include <vector>

#include "pipetype/compile/diagnostics.hpp"
#include "pipetype/compile/lowered.hpp"

namespace pipetype {

namespace detail {

constexpr verdict at_op(errc e, int rank, const lowered_op& o, int index, const char* why) {
  verdict v;
  v.code = e;
  v.rank = rank;
  v.stage = o.stage;
  v.microbatch = o.microbatch;
  v.kind = o.code == op_code::compute || o.code == op_code::send || o.code == op_code::recv ? kind_char(o.what) : '?';
  v.index = index;
  v.detail = why;
  return v;
}

}  // namespace detail

constexpr verdict verify_lowered(lowered_view L) {
  using detail::at_op;
  const int P = L.ranks;
  const std::size_t N = L.ops.size();
  const int C = static_cast<int>(L.comms.size());
  const lowered_op* ops = L.ops.data();
  const int* beg = L.begin.data();
  // group extent of every op inside a group: index of its group_begin
  std::vector<int> group_of_v(N, -1), group_end_of_v(N, -1);
  int* group_of = group_of_v.data();
  int* group_end_of = group_end_of_v.data();
  for (int r = 0; r < P; ++r) {
    int open = -1;
    for (int i = beg[r]; i < beg[r + 1]; ++i) {
      const lowered_op& o = ops[i];
      const int local = i - beg[r];
      if (o.code == op_code::group_begin) {
        if (open >= 0) return at_op(errc::nccl_deadlock, r, o, local, "nested group");
        open = i;
      } else if (o.code == op_code::group_end) {
        if (open < 0) return at_op(errc::nccl_deadlock, r, o, local, "group end without a begin");
        for (int j = open; j <= i; ++j) {
          group_of[j] = open;
          group_end_of[j] = i;
        }
        open = -1;
      } else if (o.code == op_code::send || o.code == op_code::recv) {
        if (o.stream != stream_id::comm)
          return at_op(errc::nccl_deadlock, r, o, local, "transfer outside the communication stream");
        if (open < 0) {  // an ungrouped transfer is a group of one
          group_of[i] = i;
          group_end_of[i] = i;
        }
        if (o.comm < 0 || o.comm >= C)
          return at_op(errc::transfer_mismatch, r, o, local, "communicator id out of range");
        const comm_desc& c = L.comms[static_cast<std::size_t>(o.comm)];
        if (!((c.rank_a == r && c.rank_b == o.peer) || (c.rank_b == r && c.rank_a == o.peer)))
          return at_op(errc::transfer_mismatch, r, o, local, "rank or peer is not a member of the communicator");
      } else if (open >= 0 && o.stream != stream_id::comm) {
        return at_op(errc::nccl_deadlock, r, o, local, "an op of another stream inside a group");
      }
    }
    if (open >= 0) return at_op(errc::nccl_deadlock, r, ops[open], open - beg[r], "group never ends");
  }
  // FIFO matching per (communicator, direction): channel 2c carries rank_a → rank_b, 2c+1 back
  std::vector<int> partner_v(N, -1), rank_of_v(N, 0);
  int* partner = partner_v.data();
  int* rank_of = rank_of_v.data();
  for (int r = 0; r < P; ++r)
    for (int i = beg[r]; i < beg[r + 1]; ++i) rank_of[i] = r;
  {
    std::vector<std::vector<int>> sends(2 * static_cast<std::size_t>(C)), recvs(2 * static_cast<std::size_t>(C));
    for (std::size_t i = 0; i < N; ++i) {
      const lowered_op& o = ops[i];
      if (o.code != op_code::send && o.code != op_code::recv) continue;
      const int src = o.code == op_code::send ? rank_of[i] : o.peer;
      const std::size_t ch =
          2 * static_cast<std::size_t>(o.comm) + (L.comms[static_cast<std::size_t>(o.comm)].rank_a == src ? 0 : 1);
      (o.code == op_code::send ? sends : recvs)[ch].push_back(static_cast<int>(i));
    }
    for (std::size_t ch = 0; ch < sends.size(); ++ch) {
      const auto& s = sends[ch];
      const auto& v = recvs[ch];
      for (std::size_t k = 0; k < s.size() || k < v.size(); ++k) {
        if (k >= s.size() || k >= v.size()) {
          const int i = k < s.size() ? s[k] : v[k];
          const int r = rank_of[i];
          return at_op(errc::transfer_mismatch, r, ops[i], i - beg[r],
                       k < s.size() ? "a send with no matching recv" : "a recv with no matching send");
        }
        const lowered_op& a = L.ops[static_cast<std::size_t>(s[k])];
        const lowered_op& b = L.ops[static_cast<std::size_t>(v[k])];
        if (a.what != b.what || a.stage != b.stage || a.microbatch != b.microbatch) {
          const int r = rank_of[static_cast<std::size_t>(v[k])];
          return at_op(errc::transfer_mismatch, r, b, v[k] - beg[r],
                       "the recv matches (FIFO per communicator and peer) a send of other data");
        }
        partner[static_cast<std::size_t>(s[k])] = v[k];
        partner[static_cast<std::size_t>(v[k])] = s[k];
      }
    }
  }
  // events: each wait refers to the latest earlier record of its event on the rank
  std::vector<int> waits_on_v(N, -1);
  int* waits_on = waits_on_v.data();
  for (int r = 0; r < P; ++r) {
    std::vector<int> last_record;
    for (int i = beg[r]; i < beg[r + 1]; ++i) {
      const lowered_op& o = ops[i];
      const int local = i - beg[r];
      if (o.code != op_code::record && o.code != op_code::wait) continue;
      if (o.event < 0) return at_op(errc::event_misuse, r, o, local, "negative event id");
      if (static_cast<std::size_t>(o.event) >= last_record.size())
        last_record.resize(static_cast<std::size_t>(o.event) + 1, -1);
      if (o.code == op_code::record) {
        last_record[static_cast<std::size_t>(o.event)] = i;
      } else {
        const int rec = last_record[static_cast<std::size_t>(o.event)];
        if (rec < 0) return at_op(errc::event_misuse, r, o, local, "a wait on an event never recorded before it");
        waits_on[i] = rec;
      }
    }
  }
  // buffer hazards between the streams of a rank: replay with "known completed" positions
  for (int r = 0; r < P; ++r) {
    struct use {
      int writer[stream_count] = {-1, -1};
      int reader[stream_count] = {-1, -1};
    };
    std::vector<use> slots[2];
    int known[stream_count] = {-1, -1};  // index on the other stream this stream has waited past
    const int b = beg[r];
    for (int i = b; i < beg[r + 1]; ++i) {
      const lowered_op& o = ops[i];
      const int s = static_cast<int>(o.stream);
      if (o.code == op_code::wait) {
        const int rec = waits_on[i];
        const lowered_op& ro = ops[rec];
        if (static_cast<int>(ro.stream) != s && rec > known[s]) known[s] = rec;
        continue;
      }
      auto touch = [&](kind w, int slot, bool write, int completes_at) -> bool {
        if (slot < 0) return true;
        auto& pool_use = slots[w == kind::F ? 0 : 1];
        if (static_cast<std::size_t>(slot) >= pool_use.size()) pool_use.resize(static_cast<std::size_t>(slot) + 1);
        use& u = pool_use[static_cast<std::size_t>(slot)];
        const int other = 1 - s;
        if (u.writer[other] > known[s]) return false;
        if (write && u.reader[other] > known[s]) return false;
        (write ? u.writer : u.reader)[s] = completes_at;
        return true;
      };
      bool ok = true;
      if (o.code == op_code::send || o.code == op_code::recv)
        ok = touch(o.what, o.slot, o.code == op_code::recv, group_end_of[i]);
      else if (o.code == op_code::compute)
        ok = touch(kind::F, o.slot, false, i) && touch(kind::B, o.grad_slot, false, i) &&
             touch(o.what == kind::F ? kind::F : kind::B, o.out_slot, true, i);
      if (!ok)
        return at_op(errc::event_misuse, r, o, i - b,
                     "a buffer is used before the other stream's use of it is waited for");
    }
  }
  // progress: run every (rank, stream) as far as it can until all finish or none can move
  const std::size_t RS = static_cast<std::size_t>(P) * stream_count;
  std::vector<std::vector<int>> lane(RS);
  for (int r = 0; r < P; ++r)
    for (int i = beg[r]; i < beg[r + 1]; ++i) {
      const lowered_op& o = ops[i];
      lane[static_cast<std::size_t>(r) * stream_count + static_cast<std::size_t>(o.stream)].push_back(i);
    }
  std::vector<std::size_t> pc(RS, 0);
  std::vector<char> done_v(N, 0), reached_v(N, 0);
  char* done = done_v.data();
  char* reached = reached_v.data();  // reached: a group_begin some stream arrived at
  std::size_t remaining = N;
  while (remaining > 0) {
    bool progressed = false;
    for (std::size_t l = 0; l < RS; ++l) {
      while (pc[l] < lane[l].size()) {
        const int i = lane[l][pc[l]];
        const lowered_op& o = ops[i];
        if (o.code == op_code::wait) {
          if (!done[static_cast<std::size_t>(waits_on[i])]) break;
          done[i] = 1;
          ++pc[l];
          --remaining;
          progressed = true;
          continue;
        }
        if (o.code == op_code::group_begin || o.code == op_code::send || o.code == op_code::recv) {
          const int g = group_of[i];
          const int e = group_end_of[i];
          reached[g] = 1;
          bool all = true;
          for (int j = g; j <= e && all; ++j) {
            const lowered_op& x = ops[j];
            if (x.code != op_code::send && x.code != op_code::recv) continue;
            const int pj = partner[j];
            all = reached[static_cast<std::size_t>(group_of[pj])] != 0;
          }
          if (!all) break;
          std::size_t count = 0;
          for (int j = g; j <= e; ++j) {
            done[j] = 1;
            ++count;
          }
          pc[l] += count;
          remaining -= count;
          progressed = true;
          continue;
        }
        done[i] = 1;  // compute, record, stray group_end
        ++pc[l];
        --remaining;
        progressed = true;
      }
    }
    if (!progressed) {
      for (std::size_t l = 0; l < RS; ++l)
        if (pc[l] < lane[l].size()) {
          const int r = static_cast<int>(l / stream_count);
          const int i = lane[l][pc[l]];
          return at_op(errc::nccl_deadlock, r, ops[i], i - beg[r],
                       "this op can never complete: its partners wait on each other in a cycle");
        }
    }
  }
  return {};
}

}  // namespace pipetype
