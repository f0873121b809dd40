// pipetype/core/step.hpp — one cell of a schedule file as PyTorch writes it.
//
// PyTorch's pipelining runtime (torch.distributed.pipelining, `_PipelineScheduleRuntime`) runs a
// list of actions per rank. Besides the compute actions of a `program` (F, B, I, W and F&B pairs)
// its files carry:
//   transfers   SEND_F / RECV_F / SEND_B / RECV_B   one point-to-point op each, in file order
//   waits       WAIT_SEND_F / WAIT_SEND_B           the compute stream waits for that send
//   markers     UNSHARD / RESHARD / REDUCE_GRAD / WAIT_REDUCE_GRAD   FSDP and data-parallel
//               bookkeeping, no stage-to-stage data; kept in order, never modelled
// A `step` is one of these. The stage of a transfer is PyTorch's: SEND_F at the stage that
// produced the activation, RECV_F at the stage that consumes it (so `0SEND_F3` on one rank
// matches `1RECV_F3` on the next), SEND_B at the stage whose backward produced the gradient,
// RECV_B at the stage that consumes it (`2SEND_B0` matches `1RECV_B0`).
//
// A `step_view` is every rank's steps in file order (rank-major CSR, like program_view). It is
// what `verify_transfers` (compile/verify_transfers.hpp) checks, what io/notation.hpp reads and
// io/write_schedule.hpp writes.
#pragma once

#include <cstdint>
#include <span>

#include "pipetype/core/action.hpp"

namespace pipetype {

enum class step_kind : std::uint8_t {
  compute,  // `what` says F, B, I or W; `overlapped` as in action
  send_f,
  recv_f,
  send_b,
  recv_b,
  wait_send_f,
  wait_send_b,
  unshard,
  reshard,
  reduce_grad,
  wait_reduce_grad,
  offload,  // pipetype's memory actions (mesh/memory_actions.hpp); PyTorch has none
  reload,
  recompute,
};

/// PyTorch's spelling of a non-compute kind ("SEND_F", ...); "" for compute.
constexpr const char* step_kind_name(step_kind k) noexcept {
  switch (k) {
    case step_kind::compute:
      return "";
    case step_kind::send_f:
      return "SEND_F";
    case step_kind::recv_f:
      return "RECV_F";
    case step_kind::send_b:
      return "SEND_B";
    case step_kind::recv_b:
      return "RECV_B";
    case step_kind::wait_send_f:
      return "WAIT_SEND_F";
    case step_kind::wait_send_b:
      return "WAIT_SEND_B";
    case step_kind::unshard:
      return "UNSHARD";
    case step_kind::reshard:
      return "RESHARD";
    case step_kind::reduce_grad:
      return "REDUCE_GRAD";
    case step_kind::wait_reduce_grad:
      return "WAIT_REDUCE_GRAD";
    case step_kind::offload:
      return "OFFLOAD";
    case step_kind::reload:
      return "RELOAD";
    case step_kind::recompute:
      return "RECOMPUTE";
  }
  return "?";
}

constexpr bool is_transfer(step_kind k) noexcept {
  return k == step_kind::send_f || k == step_kind::recv_f || k == step_kind::send_b || k == step_kind::recv_b;
}
constexpr bool is_send_wait(step_kind k) noexcept { return k == step_kind::wait_send_f || k == step_kind::wait_send_b; }
/// Markers carry no stage-to-stage data (FSDP and data-parallel bookkeeping).
constexpr bool is_marker(step_kind k) noexcept {
  return k == step_kind::unshard || k == step_kind::reshard || k == step_kind::reduce_grad ||
         k == step_kind::wait_reduce_grad;
}

/// pipetype's memory actions: OFFLOAD, RELOAD, RECOMPUTE of one (stage, microbatch).
constexpr bool is_memory(step_kind k) noexcept {
  return k == step_kind::offload || k == step_kind::reload || k == step_kind::recompute;
}

struct step {
  step_kind op = step_kind::compute;
  kind what = kind::F;  // compute only
  int stage = 0;
  int microbatch = -1;      // -1: none (markers)
  bool overlapped = false;  // compute only: runs together with the next step (an F&B pair)
  int cell = -1;            // the step's cell in its row, idle cells counted (-1: not from a file)

  constexpr action compute() const noexcept { return {what, stage, microbatch, overlapped}; }
  friend constexpr bool operator==(const step&, const step&) = default;
};

constexpr step compute_step(const action& a, int cell = -1) noexcept {
  return {step_kind::compute, a.what, a.stage, a.microbatch, a.overlapped, cell};
}

struct step_view {
  int ranks = 0;
  std::span<const int> begin;  // [ranks + 1]
  std::span<const step> steps;

  constexpr std::span<const step> rank_steps(int r) const {
    const auto b = static_cast<std::size_t>(begin[static_cast<std::size_t>(r)]);
    const auto e = static_cast<std::size_t>(begin[static_cast<std::size_t>(r) + 1]);
    return steps.subspan(b, e - b);
  }
};

}  // namespace pipetype
