// pipetype/bind/report.hpp — what every executor reports: how a step failed, when each op ran.
//
// `failure` is one thread's end of a failed step (the host executor has a thread per stream of a
// rank, the device executors one per rank); `failures()` on every executor lists them for the
// last step. `op_time` (compile/lowered.hpp) is one op's measured start and end (host executor with
// executor_options::trace).
#pragma once

#include <string>

#include "pipetype/compile/lowered.hpp"
#include "pipetype/core/action.hpp"

namespace pipetype {

/// Why a step failed on one thread: a stage threw, a wait passed its deadline, a transfer's two
/// ends disagreed, a device call failed (CUDA / NCCL), or another thread's failure stopped it.
enum class failure_cause { stage_threw, timeout, transfer, device, aborted };

/// How one thread (rank, stream) ended a failed step.
struct failure {
  int rank = -1;
  stream_id stream = stream_id::compute;
  int op = -1;         // index in the rank's lowered op list (-1: before its first op)
  std::string action;  // e.g. "2B5", "activation 1F3", "group"
  failure_cause cause = failure_cause::aborted;
  std::string message;
};

}  // namespace pipetype
