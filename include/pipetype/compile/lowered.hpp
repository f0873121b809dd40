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

#include "pipetype/core/action.hpp"

namespace pipetype {

/// `collective` appears only in an executor's bound mesh program (host/mesh_binding.hpp): a
/// data-parallel stream's collective, release, or an event's record or wait; a lowered
/// pipeline program never holds one.
enum class op_code : std::uint8_t { compute, send, recv, group, collective };

/// Streams of one rank. The compute stream runs the user's stage code; the communication
/// stream runs the NCCL groups. Events order one after the other where data or a buffer is shared.
enum class stream_id : std::uint8_t { compute = 0, comm = 1 };
inline constexpr int stream_count = 2;

/// How communicators are chosen (docs/08_architecture.md, "Rules").
///   per_edge       one communicator per stage-graph edge s→s+1 that crosses ranks; activations
///                  travel along it and gradients against it. NCCL orders p2p per
///                  (communicator, peer), so unrelated edges never queue behind each other.
///   per_rank_pair  one communicator per pair of ranks that exchange data.
/// Both are proved deadlock-free by verify_lowered for every plan; per_edge is the default.
enum class comm_policy : std::uint8_t { per_edge, per_rank_pair };

/// How a rank's transfers of one lock-step tick are grouped.
///   per_tick   one NCCL group with all of them: transfers to different peers progress
///              together, and a compute that reads one of them waits for the whole group.
///   per_peer   one group per peer, in one peer order per tick for every rank (lowest first, or
///              highest first where the tick's transfers that are read at once come from above),
///              so it stays deadlock-free: a compute waits only for the group with its input, but
///              groups to different peers run one after the other on the communication stream.
///   automatic  (default) per_peer for a program with overlapped F&B pairs (DualPipe,
///              DualPipeV), per_tick otherwise. A pair reads an activation and a gradient in one
///              tick; one group per tick would also make it wait for that tick's transfers with
///              its other neighbour. On host threads this takes DualPipeV from 1.12× to 1.01× of
///              the simulated step, while the chains stay within 1.02× either way
///              (bench/README.md); on GPUs, where per-tick groups let both neighbours' transfers
///              run at once, measure both.
enum class group_policy : std::uint8_t { per_tick, per_peer, automatic };

/// Which buffer pool a slot index refers to.
enum class pool : std::uint8_t { activation, gradient };

struct lowered_op {
  op_code code = op_code::compute;
  stream_id stream = stream_id::compute;
  kind what = kind::F;      // compute: the action's kind; send/recv: F = activation, B = gradient
  bool overlapped = false;  // compute: runs together with the next compute op
  int stage = -1;           // compute: the action's stage; send/recv: the stage that produced the data
  int microbatch = -1;
  int peer = -1;              // send/recv: the other rank
  int comm = -1;              // send/recv: communicator id
  int slot = -1;              // send/recv: slot in the pool of `what`; compute: input activation
                              // (-1: stage 0 reads the user's batch)
  int grad_slot = -1;         // compute B/I/W: incoming gradient (-1: the last stage's own loss)
  int out_slot = -1;          // compute: output (activation slot for F, gradient slot for B/I); -1: none
  int wait_event = -1;        // wait on this event (of the rank's pool) before the op; -1: none
  int record_event = -1;      // record this event after the op; -1: none
  int tick = -1;              // lock-step tick this op belongs to
  int link = -1;              // a program with stage-graph edges (graph/dag.hpp) only, else -1:
                              // send/recv: the edge the data travels (a fan-out sends one output once
                              // per crossing edge); compute: where its slots are in `slot_lists` when
                              // it has several inputs, incoming gradients or outputs (slots_of)
  int stash_slot = -1;        // compute: the stash slot F saves into and its backwards read
                              // (compile/saved_slots.hpp); -1: not a compute op
  int weight_grad_slot = -1;  // compute B/W: the weight-gradient slot it writes; -1: none

  friend constexpr bool operator==(const lowered_op&, const lowered_op&) = default;
};

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
  std::span<const lowered_op> ops{};
  std::span<const comm_desc> comms{};
  std::span<const rank_resources> resources{};  // [ranks]
  std::span<const int> slot_lists{};            // see op_slots

  /// The slots of compute op `o` (one of ops; a listed one must index slot_lists, as verify_lowered checks).
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

  constexpr std::span<const lowered_op> rank_ops(int r) const {
    const auto b = static_cast<std::size_t>(begin[static_cast<std::size_t>(r)]);
    const auto e = static_cast<std::size_t>(begin[static_cast<std::size_t>(r) + 1]);
    return ops.subspan(b, e - b);
  }
};

struct lowered_program {
  int ranks = 0;
  comm_policy policy = comm_policy::per_edge;
  std::vector<int> begin;
  std::vector<lowered_op> ops;
  std::vector<comm_desc> comms;
  std::vector<rank_resources> resources;
  std::vector<int> slot_lists;  // see op_slots

  constexpr lowered_view view() const { return {ranks, policy, begin, ops, comms, resources, slot_lists}; }
};

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
