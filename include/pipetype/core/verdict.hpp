// pipetype/core/verdict.hpp — what went wrong and where, as a value.
//
// Every check (compile/verify*.hpp, io/notation.hpp) returns a `verdict`: an error code plus the
// place (rank, stage, microbatch, action kind and index in the rank's list; line and column for
// text schedules) and a short static reason. `describe(v)` renders it as one sentence. The
// compile-time form of a verdict, the `error<what<...>, at_rank<...>, ...>` type a rejected
// schedule is reported as, lives in compile/diagnostics.hpp.
//
// The vocabulary sits in core/ because every layer reports in it: the program carries the
// verdict of the text it was parsed from, and the lowering, the verifiers and the readers
// all return one.
#pragma once

#include <cstdint>
#include <string>

namespace pipetype {

enum class errc : std::uint8_t {
  ok,
  empty_program,            // ranks, stages or microbatches not positive
  rank_out_of_range,        // the builder was asked for a rank outside [0, ranks)
  index_out_of_range,       // an action names a stage or microbatch out of range (lowered: a slot)
  stage_on_two_ranks,       // a stage's actions appear on two ranks (or off its placement)
  missing_action,           // some (stage, microbatch) lacks its F, B, I or W
  duplicate_action,         // an action appears twice
  mixed_backward,           // a (stage, microbatch) has both a full B and an I/W split
  backward_before_forward,  // B/I/W before the F of the same (stage, microbatch) on its rank
  action_before_its_input,  // an action before the same-rank action that produces its input
  invalid_overlap,          // an overlapped pair that is not one forward and one backward
  cross_rank_deadlock,      // ranks wait on each other forever
  memory_limit_exceeded,    // peak activations above the limit
  parse_error,              // text notation: see line / column
  transfer_mismatch,        // lowered: k-th send and k-th recv of a channel carry different data
  nccl_deadlock,            // lowered: rendezvous / group / event order can never complete
  event_misuse,             // lowered: a wait with no earlier record, an event outside the pool, an
                            // event on a transfer, or a buffer the other stream may still use
  invalid_lanes,            // lanes not positive, or not dividing the stages and microbatches
  bad_extent,               // a schedule's extent() disagrees with the program it generates
  too_large,                // a size past pipetype::limits (core/sizes.hpp), refused before any table is made
};

struct verdict {
  errc code = errc::ok;
  int rank = -1;
  int stage = -1;
  int microbatch = -1;
  char kind = '?';  // 'F', 'B', 'I', 'W' or '?'
  int index = -1;   // position in the rank's action list (or lowered op list); -1 when absent
  int line = -1;    // parse errors: 1-based line and column
  int column = -1;
  const char* detail = "";  // a short static reason (parse errors, lowered checks)
  const char* op = "";      // a schedule file's non-compute kind at fault ("RECV_F", ...; core/step.hpp)

  constexpr bool ok() const noexcept { return code == errc::ok; }
  constexpr explicit operator bool() const noexcept { return ok(); }
};

constexpr const char* errc_name(errc e) noexcept {
  switch (e) {
    case errc::ok:
      return "ok";
    case errc::empty_program:
      return "empty program";
    case errc::rank_out_of_range:
      return "rank out of range";
    case errc::index_out_of_range:
      return "index out of range";
    case errc::stage_on_two_ranks:
      return "stage on two ranks";
    case errc::missing_action:
      return "missing action";
    case errc::duplicate_action:
      return "duplicate action";
    case errc::mixed_backward:
      return "full backward mixed with I/W split";
    case errc::backward_before_forward:
      return "backward before forward";
    case errc::action_before_its_input:
      return "action before its input";
    case errc::invalid_overlap:
      return "invalid overlapped pair";
    case errc::cross_rank_deadlock:
      return "cross-rank deadlock";
    case errc::memory_limit_exceeded:
      return "memory limit exceeded";
    case errc::parse_error:
      return "parse error";
    case errc::transfer_mismatch:
      return "transfer mismatch";
    case errc::nccl_deadlock:
      return "NCCL deadlock";
    case errc::event_misuse:
      return "event misuse";
    case errc::invalid_lanes:
      return "invalid lanes";
    case errc::bad_extent:
      return "schedule extent mismatch";
    case errc::too_large:
      return "program too large";
  }
  return "unknown";
}

/// One sentence naming what went wrong and where.
inline std::string describe(const verdict& v) {
  std::string s = errc_name(v.code);
  if (v.ok()) return s;
  if (v.line >= 0) s += " at line " + std::to_string(v.line) + ", column " + std::to_string(v.column);
  if (v.rank != -1 || v.code == errc::rank_out_of_range)
    s += (v.line >= 0 ? ", rank " : " at rank ") + std::to_string(v.rank);
  if (v.stage >= 0) s += ", stage " + std::to_string(v.stage);
  if (v.microbatch >= 0) s += ", microbatch " + std::to_string(v.microbatch);
  if (v.kind != '?' || *v.op) {
    s += ", action ";
    if (v.stage >= 0) s += std::to_string(v.stage);
    if (*v.op)
      s += v.op;
    else
      s += v.kind;
    if (v.microbatch >= 0) s += std::to_string(v.microbatch);
  }
  if (v.index >= 0) s += " (index " + std::to_string(v.index) + ")";
  if (v.detail && *v.detail) s += std::string(": ") + v.detail;
  return s;
}

}  // namespace pipetype
