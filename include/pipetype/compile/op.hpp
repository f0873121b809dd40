// pipetype/compile/op.hpp — one op of a lowered program, and the small enums it is made of.
//
// The lowered program (lowered.hpp) lists these per rank; an op is a compute, a group, or a
// send / recv inside the group before it, with the events it waits on and records. An owning
// program may hold them as written here (lowered_program, for programs made or edited by hand)
// or packed (packed_ops.hpp, what a built plan keeps); both are read as lowered_op values.
#pragma once

#include <cstdint>

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

}  // namespace pipetype
