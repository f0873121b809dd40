// pipetype/compile/lowered.hpp — the lowered program: what an executor issues, op by op.
//
// Per rank, an ordered list of ops, each bound to a stream:
//   compute      run one action (F/B/I/W) on the compute stream, reading and writing slots
//   group        one NCCL group on the communication stream: ncclGroupStart, then the send /
//   send / recv  recv ops that directly follow it (point-to-point transfers to `peer` on
//                communicator `comm`, from / into a buffer slot), then ncclGroupEnd
// and a compute or group op may carry
//   wait_event   cudaStreamWaitEvent(stream, event) issued just before it
//   record_event cudaEventRecord(event, stream) issued just after it (after ncclGroupEnd)
// A wait refers to the latest record of that event issued before it on the rank, as CUDA
// resolves it at call time.
// All fields are small integers fixed when the plan is built. The host executor issues the
// same list on host threads; the record backend checks it call by call.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "pipetype/compile/packed_ops.hpp"

namespace pipetype {

struct comm_desc {
  int rank_a = -1;  // lower rank
  int rank_b = -1;
  int stage = -1;  // per_edge: the edge's source stage; per_rank_pair: -1
  int edge = -1;   // per_edge in a program with stage-graph edges: the edge's index; otherwise -1

  friend constexpr bool operator==(const comm_desc&, const comm_desc&) = default;
};

/// What one rank must allocate once, before any step: slots per pool (a pool's bytes are its
/// slots times the largest block of the rank's stages that it holds) and the events, groups and
/// transfers it issues.
struct rank_resources {
  int activation_slots = 0;
  int gradient_slots = 0;
  int events = 0;
  int groups = 0;
  int transfers = 0;
  int stash_slots = 0;        // what stages save for their backwards besides their inputs
  int weight_grad_slots = 0;  // weight gradients handed to pipetype, held until added in order

  friend constexpr bool operator==(const rank_resources&, const rank_resources&) = default;
};

/// The slots one compute op reads and writes, each list in edge order (graph/dag.hpp):
///   in    the activation of each input (F, B, I, W; empty on a source: it reads the batch)
///   grad  the gradient from each consumer (B, I, W; empty on a loss: it has its own loss). A B
///         or I with several sums them, in this order, into the first before the stage runs,
///         and a later W reads that sum from the first
///   out   F: its one output (every consumer reads it or is sent it); B, I: the gradient for
///         each input; W: none
/// A chain's ops keep one slot per list in lowered_op's own fields; ops of a stage-graph
/// program with several keep [n_in, n_grad, n_out, slots...] at slot_lists[link].
struct op_slots {
  std::span<const int> in, grad, out;
};

/// True when a compute op of kind `what` with `grads` incoming gradients sums them into the first
/// (a write to that slot as well as a read): a B or I of a stage with several consumers.
constexpr bool sums_into_first(kind what, std::size_t grads) noexcept { return grads > 1 && what != kind::W; }

struct lowered_view {
  int ranks = 0;
  comm_policy policy = comm_policy::per_edge;
  std::span<const int> begin{};  // [ranks + 1]
  op_span ops{};                 // packed or plain (packed_ops.hpp)
  std::span<const comm_desc> comms{};
  std::span<const rank_resources> resources{};  // [ranks]
  std::span<const int> slot_lists{};            // see op_slots

  /// The slots of compute op `o` (one of ops; a listed one must index slot_lists, as verify_lowered checks).
  /// A chain's op keeps its slots in its own fields, so the result points into `o`: give it an op
  /// that outlives the result (op_span's ops are values; keep the one read in a variable).
  constexpr op_slots slots_of(const lowered_op&& o) const = delete;
  constexpr op_slots slots_of(const lowered_op& o) const {
    if (o.link < 0 || o.code != op_code::compute) {
      const auto one = [](const int& s) { return std::span<const int>(&s, s >= 0 ? 1 : 0); };
      return {one(o.slot), one(o.grad_slot), one(o.out_slot)};
    }
    const auto k = static_cast<std::size_t>(o.link);
    const auto ni = static_cast<std::size_t>(slot_lists[k]), ng = static_cast<std::size_t>(slot_lists[k + 1]);
    const auto no = static_cast<std::size_t>(slot_lists[k + 2]);
    return {slot_lists.subspan(k + 3, ni), slot_lists.subspan(k + 3 + ni, ng), slot_lists.subspan(k + 3 + ni + ng, no)};
  }

  constexpr op_span rank_ops(int r) const {
    const auto b = static_cast<std::size_t>(begin[static_cast<std::size_t>(r)]);
    const auto e = static_cast<std::size_t>(begin[static_cast<std::size_t>(r) + 1]);
    return ops.subspan(b, e - b);
  }
};

/// What a lowered program holds besides its ops: each rank's first op, the communicators, each
/// rank's resources and the compute ops' slot lists.
struct lowered_tables {
  int ranks = 0;
  comm_policy policy = comm_policy::per_edge;
  std::vector<int> begin;
  std::vector<comm_desc> comms;
  std::vector<rank_resources> resources;
  std::vector<int> slot_lists;  // see op_slots
};

/// A lowered program with its ops as plain lowered_op values: what lower() returns and what a
/// program made or edited by hand is written in.
struct lowered_program : lowered_tables {
  std::vector<lowered_op> ops;

  constexpr lowered_view view() const { return {ranks, policy, begin, ops, comms, resources, slot_lists}; }
};

/// The same program with its ops packed (packed_ops.hpp), about a fifth of the size: what a
/// built plan keeps (lower_packed, build_plan).
struct packed_program : lowered_tables {
  packed_ops ops;

  constexpr lowered_view view() const { return {ranks, policy, begin, ops, comms, resources, slot_lists}; }
};

/// A plain copy of any lowered program, to edit its ops (a built plan's: copy_of(plan.lowered())).
constexpr lowered_program copy_of(lowered_view l) {
  lowered_program out;
  out.ranks = l.ranks;
  out.policy = l.policy;
  out.begin.assign(l.begin.begin(), l.begin.end());
  out.ops.reserve(l.ops.size());
  for (std::size_t i = 0; i < l.ops.size(); ++i) out.ops.push_back(l.ops[i]);
  out.comms.assign(l.comms.begin(), l.comms.end());
  out.resources.assign(l.resources.begin(), l.resources.end());
  out.slot_lists.assign(l.slot_lists.begin(), l.slot_lists.end());
  return out;
}

/// One op's measured run time in the last traced step, in seconds from the step's start (what the
/// host executor's trace() lists, per rank and stream in the lowered order; io/step_trace.hpp
/// turns it into a drawable step). A group's transfers keep start = end = -1: the group carries
/// the time.
struct op_time {
  int rank = -1;
  stream_id stream = stream_id::compute;
  op_code code = op_code::compute;
  kind what = kind::F;
  int stage = -1, microbatch = -1;
  double start = 0, end = 0;
  const char* name = nullptr;  // a mesh step's collective: "REDUCE_GRAD(1) on communicator 5" (the executor's label)
};

}  // namespace pipetype
