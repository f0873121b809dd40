// pipetype/host/collective.hpp — NCCL's collectives between threads of one process.
//
// The host executor's stand-in for ncclAllReduce, ncclReduceScatter and ncclAllGather on the
// communicators a mesh program made (mesh/lower.hpp), with the semantics its proof
// assumed (NCCL user guide, "Collective operations"): every member of a communicator issues the
// same collectives on it in the same order, and a collective completes on no member before every
// member has reached it. A member's call blocks until all have arrived; the last to arrive does
// the arithmetic for all of them, then every member returns.
//
// The arithmetic is fixed, so that every run and every member gets the same bits:
//   all-reduce      element i becomes Σ_k part_k[i], summed left to right over the members in
//                   the communicator's order (increasing global rank: a DP group's replicas in
//                   replica order, a tie group's ranks in pipeline order) and, within a member,
//                   over its arrays in order (a rank holding two stages of a tie group: stage
//                   order); every array of every member receives the sum;
//   reduce-scatter  the same sums, each written only to the member owning the element's shard
//                   (core/mesh.hpp shard_of: member k owns ⌈n/members⌉ elements from k·⌈n/members⌉);
//                   outside its shard a member keeps its own partial sums (as the device
//                   executor, which copies only its shard back from NCCL's in-place result);
//   all-gather      member k's shard of its array is copied into every member's array (of
//                   parameters pipetype holds: member k's shard, into every member's slot);
//                   UNSHARD's, and ZeRO-1's PARAM_SYNC after each member updated its shard;
//   GRAD_NORM       the sum, in double, over the members in order and each member's parts in
//                   order, of Σ x² over the part (itself summed in element order): every member
//                   gets the same total (mesh_binding.hpp says which parts a member has);
//   FINITE_CHECK    the same sum over the same parts, and every member gets whether it is finite
//                   (it is not when any element is not, or a square overflows a double).
// A `local_sum` (a tie group within one rank) is the all-reduce of one member; a `release` (FSDP's
// RESHARD) fills what the member does not own with NaN when asked to (collective_call::poison),
// so that a stage computing on released parameters shows it in its loss instead of silently
// reading stale numbers.
//
// Waits have the executor's deadline; abort(reason) wakes every waiter, as the point-to-point
// fabric does. Members whose calls disagree (another stage, another size) fail together.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "pipetype/bind/stage_entry.hpp"
#include "pipetype/mesh/verify.hpp"
#include "pipetype/core/mesh.hpp"
#include "pipetype/host/channel.hpp"

namespace pipetype::host {

class collectives;

/// One member's side of one collective (or of a local sum or release): what a bound dp-stream
/// op's `obj` points to. Filled once, when the program is bound.
struct collective_call {
  mesh_op_code what = mesh_op_code::all_reduce;
  int comm = -1;                    // the mesh communicator; −1: local (local_sum, release)
  int member = 0;                   // this rank's position among the communicator's members
  int members = 1;                  // the communicator's size (a release: the DP group's, for its shards)
  int rank = -1;                    // the global rank issuing it (messages)
  int stage = -1;                   // REDUCE_GRAD, UNSHARD, RESHARD
  int tie = -1;                     // TIE
  int bucket = -1;                  // a bucket of a REDUCE_GRAD (its part of the gradient: `parts` point at it)
  std::size_t offset = 0, whole = 0;  // a bucket: where its part begins in the stage's array, and that array's
                                      // elements (a reduce-scatter keeps each member's shard_of the whole)
  std::vector<std::byte*> parts;    // this member's arrays: a stage's gradients or parameters; a tie: its stages'
  std::size_t elems = 0, size = 0;  // per array: elements and element size
  reduce_fn reduce = nullptr;       // sums (all-reduce, reduce-scatter, local sum)
  poison_fn poison = nullptr;       // a release: what fills the parts it does not own (nullptr: nothing)
  // parameters pipetype holds (a lending stage, mesh_binding.hpp): an all-gather's own shard, which
  // every member's part (its parameter slot) receives at the shard's place; a release then poisons
  // the whole slot. nullptr: the part is the stage's own array, holding its shard in place
  const std::byte* shard = nullptr;
  bool held = false;
  // GRAD_NORM: this member's parts of the squared norm, each [begin, end) of one array, in order
  // (none: it adds nothing), and where the total goes on this member
  struct norm_part {
    const std::byte* array = nullptr;
    std::size_t begin = 0, end = 0;
    sumsq_fn sumsq = nullptr;
  };
  std::vector<norm_part> norm_parts;
  double* norm_sum = nullptr;  // GRAD_NORM: where the total goes
  char* finite = nullptr;      // FINITE_CHECK: where whether it is finite goes
  collectives* fabric = nullptr;
  std::string label;  // "REDUCE_GRAD(3) on communicator 5", for messages
};

class collectives {
 public:
  /// `members[c]`: communicator c's global ranks, increasing (an empty list: not a collective's).
  collectives(std::vector<std::vector<int>> members, std::chrono::milliseconds deadline)
      : deadline_(deadline), comms_(members.size()) {
    for (std::size_t c = 0; c < members.size(); ++c) {
      comms_[c].members = std::move(members[c]);
      comms_[c].at.assign(comms_[c].members.size(), nullptr);
    }
  }
  collectives(const collectives&) = delete;
  collectives& operator=(const collectives&) = delete;

  /// Issues `c` from its rank's thread: returns once it is complete on this member; throws
  /// timeout_error, aborted_error or transfer_error (members disagree) otherwise.
  void run(collective_call& c) {
    if (c.comm < 0) return local(c);
    std::unique_lock lock(m_);
    if (!aborted_.empty()) throw aborted_error(aborted_);
    comm_state& s = comms_.at(static_cast<std::size_t>(c.comm));
    if (c.member < 0 || c.member >= static_cast<int>(s.at.size()) || s.at[static_cast<std::size_t>(c.member)])
      throw transfer_error("pipetype::host: rank " + std::to_string(c.rank) + ": " + c.label +
                           " from a member the communicator does not expect");
    s.at[static_cast<std::size_t>(c.member)] = &c;
    const std::uint64_t round = s.rounds;
    if (++s.arrived == static_cast<int>(s.at.size())) {  // the last to arrive does the arithmetic
      s.failed = mismatch(s);
      lock.unlock();
      if (s.failed.empty()) combine(s);
      lock.lock();
      s.arrived = 0;
      std::fill(s.at.begin(), s.at.end(), nullptr);
      ++s.rounds;
      cv_.notify_all();
    } else {
      const auto until = std::chrono::steady_clock::now() + deadline_;
      if (!cv_.wait_until(lock, until, [&] { return s.rounds != round || !aborted_.empty(); }))
        throw timeout_error("pipetype::host: rank " + std::to_string(c.rank) + ": " + c.label + " waited " +
                            std::to_string(deadline_.count()) + " ms for " + missing(s));
      if (s.rounds == round) throw aborted_error(aborted_);
    }
    if (!s.failed.empty()) throw transfer_error(s.failed);
  }

  /// Wakes every waiter; later calls end aborted with the first reason.
  void abort(const std::string& reason) {
    {
      const std::lock_guard lock(m_);
      if (aborted_.empty()) aborted_ = reason.empty() ? std::string("aborted") : reason;
    }
    cv_.notify_all();
  }
  /// Forgets an abort and every half-met call (between steps, after every thread stopped).
  void reset() {
    const std::lock_guard lock(m_);
    aborted_.clear();
    for (comm_state& s : comms_) {
      s.arrived = 0;
      s.failed.clear();
      std::fill(s.at.begin(), s.at.end(), nullptr);
    }
  }
  std::chrono::milliseconds deadline() const noexcept { return deadline_; }

 private:
  struct comm_state {
    std::vector<int> members;
    std::vector<collective_call*> at;  // by member: its call of this round, once it arrived
    int arrived = 0;
    std::uint64_t rounds = 0;  // completed rounds
    std::string failed;        // this round's members disagree
    // the last member's scratch, kept between rounds (a step allocates nothing once warm)
    std::vector<std::byte*> parts;  // every member's arrays, in member order
    std::vector<int> first;         // member k's arrays are parts[first[k] .. first[k+1])
  };

  // an all-gather: UNSHARD's, or ZeRO-1's PARAM_SYNC (each member's shard of its own parameters)
  static constexpr bool gathers(mesh_op_code c) {
    return c == mesh_op_code::all_gather || c == mesh_op_code::param_sync;
  }
  // the members not arrived yet, for a timeout's message
  static std::string missing(const comm_state& s) {
    std::string out;
    for (std::size_t k = 0; k < s.at.size(); ++k)
      if (!s.at[k]) out += (out.empty() ? "rank " : ", rank ") + std::to_string(s.members[k]);
    return out.empty() ? std::string("the last member to finish the sum") : out + " to reach it";
  }
  static std::string mismatch(const comm_state& s) {
    const collective_call& a = *s.at.front();
    for (const collective_call* b : s.at)
      if (b->what != a.what ||
          (a.what != mesh_op_code::grad_norm && a.what != mesh_op_code::finite_check &&  // (each its own parts)
           (b->stage != a.stage || b->tie != a.tie || b->bucket != a.bucket || b->elems != a.elems ||
            b->size != a.size || b->parts.empty() || (gathers(a.what) && b->parts.size() != 1) || b->held != a.held)))
        return "pipetype::host: ranks " + std::to_string(a.rank) + " and " + std::to_string(b->rank) +
               " issue different collectives at one position of a communicator: " + a.label + " (" +
               std::to_string(a.elems) + " elements) and " + b->label + " (" + std::to_string(b->elems) + ")";
    return {};
  }

  static void local(collective_call& c) {
    if (c.what == mesh_op_code::local_sum && c.reduce)
      c.reduce(c.parts.data(), static_cast<int>(c.parts.size()), 0, c.elems, 0, static_cast<int>(c.parts.size()));
    if (c.what == mesh_op_code::release && c.poison) {
      const shard_range own = c.held ? shard_range{0, 0} : shard_of(c.elems, c.members, c.member);
      for (std::byte* p : c.parts) {
        c.poison(p, 0, own.begin);
        c.poison(p, own.end, c.elems);
      }
    }
  }

  // The elements of a reduce-scatter's parts that member k of n keeps: its shard_of them, or for a
  // bucket its shard of the stage's whole array within the bucket (relative to the bucket's start).
  static shard_range scattered(const collective_call& a, int n, int k) {
    if (a.bucket < 0) return shard_of(a.elems, n, k);
    const shard_range sh = shard_of(a.whole, n, k);
    const std::size_t b = std::max(sh.begin, a.offset), e = std::min(sh.end, a.offset + a.elems);
    return b < e ? shard_range{b - a.offset, e - a.offset} : shard_range{0, 0};
  }
  // Every member arrived and agrees: the arithmetic of the top of this file.
  static void combine(comm_state& s) {
    const collective_call& a = *s.at.front();
    const int n = static_cast<int>(s.at.size());
    if (a.what == mesh_op_code::grad_norm || a.what == mesh_op_code::finite_check) {
      double total = 0;
      for (const collective_call* c : s.at)
        for (const collective_call::norm_part& q : c->norm_parts) total += q.sumsq(q.array, q.begin, q.end);
      for (collective_call* c : s.at) {
        if (c->norm_sum) *c->norm_sum = total;
        if (c->finite) *c->finite = std::isfinite(total) ? 1 : 0;
      }
      return;
    }
    if (gathers(a.what)) {
      for (int k = 0; k < n; ++k) {
        const shard_range own = shard_of(a.elems, n, k);
        const collective_call& from = *s.at[static_cast<std::size_t>(k)];
        const std::byte* src = from.held ? from.shard : from.parts.front() + own.begin * a.size;
        for (int j = 0; j < n; ++j)
          if ((j != k || from.held) && own.size() > 0)
            std::memcpy(s.at[static_cast<std::size_t>(j)]->parts.front() + own.begin * a.size, src,
                        own.size() * a.size);
      }
      return;
    }
    std::vector<std::byte*>& parts = s.parts;
    std::vector<int>& first = s.first;
    parts.clear();
    first.assign(1, 0);
    for (const collective_call* c : s.at) {
      parts.insert(parts.end(), c->parts.begin(), c->parts.end());
      first.push_back(static_cast<int>(parts.size()));
    }
    const int all = static_cast<int>(parts.size());
    if (a.what == mesh_op_code::reduce_scatter) {
      for (int k = 0; k < n; ++k) {
        const shard_range own = scattered(a, n, k);
        a.reduce(parts.data(), all, own.begin, own.end, first[static_cast<std::size_t>(k)],
                 first[static_cast<std::size_t>(k) + 1]);
      }
    } else {
      a.reduce(parts.data(), all, 0, a.elems, 0, all);
    }
  }

  std::chrono::milliseconds deadline_;
  std::mutex m_;
  std::condition_variable cv_;
  std::vector<comm_state> comms_;
  std::string aborted_;
};

}  // namespace pipetype::host
