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

#include <cstddef>
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
  invalid_graph,            // the stage graph breaks a rule of graph/dag.hpp (detail says which; stage: where)
  bad_mesh,                 // a pp × dp mesh with a side below 1, or not the world it should cover (core/mesh.hpp)
  collective_misplaced,     // a REDUCE_GRAD / UNSHARD / RESHARD / TIE where the step would be wrong
                            // (compile/collectives.hpp)
  collective_mismatch,      // members of a communicator issue different collectives (compile/mesh_program.hpp)
  memory_action_misplaced,  // an OFFLOAD / RELOAD / RECOMPUTE where the step would read what is not there
                            // (compile/memory_actions.hpp)
};

/// One link of a deadlock's wait-for cycle: `rank` stopped at its action `at_*` (`index` in its
/// list) waits for the action `needs_*`, which rank `from` runs.
struct wait_link {
  int rank = -1, index = -1;
  char at_kind = '?';
  int at_stage = -1, at_microbatch = -1;
  char needs_kind = '?';
  int needs_stage = -1, needs_microbatch = -1;
  int from = -1;
  // a mesh step's ops that are no compute action (compile/mesh_program.hpp): their names
  // ("all-reduce", "group", ...) in place of the kinds, and the communicator the wait is on
  // (nullptr, not "": g++ 12 cannot copy-list-initialize an array of aggregates whose pointer
  // member defaults to a string literal, and verdict holds such an array)
  const char* at_name = nullptr;
  const char* needs_name = nullptr;
  int comm = -1;
};

/// The links a verdict keeps; a longer cycle keeps its first max_cycle and counts the rest.
inline constexpr int max_cycle = 8;

struct verdict {
  errc code = errc::ok;
  int rank = -1;
  int stage = -1;
  int microbatch = -1;
  char kind = '?';  // 'F', 'B', 'I', 'W' or '?'
  int index = -1;   // position in the rank's action list (or lowered op list); -1 when absent
  int line = -1;    // parse errors: 1-based line and column
  int column = -1;
  const char* detail = "";       // a short static reason (parse errors, lowered checks)
  const char* op = "";           // a schedule file's non-compute kind at fault ("RECV_F", ...; core/step.hpp)
  wait_link cycle[max_cycle]{};  // cross_rank_deadlock: who waits for whom, from `rank` around the cycle
  int cycle_length = 0;          // links in the cycle (those past max_cycle are not kept)

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
    case errc::invalid_graph:
      return "invalid stage graph";
    case errc::bad_mesh:
      return "bad mesh";
    case errc::collective_misplaced:
      return "collective misplaced";
    case errc::collective_mismatch:
      return "collective mismatch";
    case errc::memory_action_misplaced:
      return "memory action misplaced";
  }
  return "unknown";
}

/// How to fix a verdict of this category: one sentence (docs/03 keeps the same list).
constexpr const char* how_to_fix(errc e) noexcept {
  switch (e) {
    case errc::ok:
      return "nothing to fix";
    case errc::empty_program:
      return "give the program at least one rank, one stage and one microbatch";
    case errc::rank_out_of_range:
      return "select a rank with rank(r) for 0 <= r < ranks before adding actions";
    case errc::index_out_of_range:
      return "name only stages and microbatches below the program's counts, and each microbatch on its own lane";
    case errc::stage_on_two_ranks:
      return "put every action of a stage on one rank, the rank its placement names";
    case errc::missing_action:
      return "add the missing action; every stage and microbatch needs one F and either one B or one I and one W";
    case errc::duplicate_action:
      return "remove the second copy of the action";
    case errc::mixed_backward:
      return "use either the full backward B or the split pair I and W for a stage and microbatch, not both";
    case errc::backward_before_forward:
      return "move the backward after the forward of the same stage and microbatch";
    case errc::action_before_its_input:
      return "move the action after the action on its rank that produces its input";
    case errc::invalid_overlap:
      return "overlap one F with one B or I of another stage or microbatch, the second right after the first";
    case errc::cross_rank_deadlock:
      return "reorder one rank of the cycle so that it runs the awaited action before the one it waits at";
    case errc::memory_limit_exceeded:
      return "run backwards earlier (fewer forwards in flight), or raise the memory limit";
    case errc::parse_error:
      return "write actions as 2F0, 3I1, 1SEND_F0 or (0F7;7B3)OVERLAP_F_B, separated by commas, one rank a line";
    case errc::transfer_mismatch:
      return "issue the sends and receives of each channel in the same order at both ends";
    case errc::nccl_deadlock:
      return "post both ends of every transfer in matching groups, and every communicator's collectives, in the same "
             "order on every rank";
    case errc::event_misuse:
      return "record each event before it is waited on, and wait before a stream touches a buffer the other used";
    case errc::invalid_lanes:
      return "use a lane count of at least 1 that divides both the stages and the microbatches";
    case errc::bad_extent:
      return "make the schedule's extent() count every rank, stage and action generate() returns, and say if it splits";
    case errc::too_large:
      return "stay within pipetype::limits (docs/03): fewer ranks, stages, microbatches or stage-graph edges";
    case errc::invalid_graph:
      return "give every edge two existing stages, break the cycle, and let every stage be fed by a source and reach a "
             "loss (docs/10)";
    case errc::bad_mesh:
      return "give the mesh at least one pipeline rank and one replica, with pp x dp equal to the world's ranks";
    case errc::collective_misplaced:
      return "place each REDUCE_GRAD after its stage's last B or W, each compute between an UNSHARD and a RESHARD of "
             "its stage, and the ties in increasing order before their stages' REDUCE_GRAD (place_collectives does)";
    case errc::collective_mismatch:
      return "issue the same collectives in the same order on every member of a communicator";
    case errc::memory_action_misplaced:
      return "OFFLOAD a microbatch's activation after its F, RELOAD it after the OFFLOAD and before its first "
             "backward, and RECOMPUTE it after its F (with its input on the device) and before its first backward "
             "(place_memory does)";
  }
  return "";
}

namespace detail {

/// A bounded constexpr text buffer, the renderer of describe(); text past the capacity is
/// dropped. (The compile-time error carries the same parts as facts: compile/diagnostics.hpp.)
template <int Capacity>
struct sentence {
  char text[Capacity + 1]{};
  int size = 0;
  constexpr sentence& operator<<(const char* s) {
    for (; s && *s && size < Capacity; ++s) text[size++] = *s;
    return *this;
  }
  constexpr sentence& operator<<(char c) {
    if (size < Capacity) text[size++] = c;
    return *this;
  }
  constexpr sentence& operator<<(int v) {
    char digits[12]{};
    int k = 0;
    const bool negative = v < 0;
    long long u = negative ? -static_cast<long long>(v) : v;
    do {
      digits[k++] = static_cast<char>('0' + u % 10);
      u /= 10;
    } while (u > 0);
    if (negative) *this << '-';
    while (k > 0) *this << digits[--k];
    return *this;
  }
};

/// An op of a cycle: a compute action as 1B0; a mesh op by its name and what it is of
/// ("all-reduce of stage 1", "group").
template <int Capacity>
constexpr void write_op(sentence<Capacity>& out, int stage, char kind, int microbatch, const char* name) {
  if (name && *name) {
    out << name;
    if (stage >= 0) out << " of stage " << stage;
    if (microbatch >= 0) out << " microbatch " << microbatch;
    return;
  }
  out << stage << kind << microbatch;
}

/// The wait-for cycle of a deadlock: "rank 0 at 0B0 (index 1) waits for 1B0 from rank 1; ...".
template <int Capacity>
constexpr void write_cycle(sentence<Capacity>& out, const verdict& v) {
  const int kept = v.cycle_length < max_cycle ? v.cycle_length : max_cycle;
  for (int i = 0; i < kept; ++i) {
    const wait_link& w = v.cycle[i];
    out << (i ? "; " : "") << "rank " << w.rank << " at ";
    write_op(out, w.at_stage, w.at_kind, w.at_microbatch, w.at_name);
    out << " (index " << w.index << ") waits for ";
    write_op(out, w.needs_stage, w.needs_kind, w.needs_microbatch, w.needs_name);
    out << " from rank " << w.from;
    if (w.comm >= 0) out << " on communicator " << w.comm;
  }
  if (v.cycle_length > kept) out << "; and " << (v.cycle_length - kept) << " more";
}

/// Why: the verdict's static reason, then its wait-for cycle if it has one.
template <int Capacity>
constexpr void write_reason(sentence<Capacity>& out, const verdict& v) {
  if (v.detail) out << v.detail;
  if (v.cycle_length > 0) {
    out << (v.detail && *v.detail ? "; " : "") << "wait-for cycle: ";
    write_cycle(out, v);
  }
}

/// What and where, then why.
template <int Capacity>
constexpr void write_sentence(sentence<Capacity>& out, const verdict& v) {
  out << errc_name(v.code);
  if (v.ok()) return;
  if (v.code == errc::invalid_graph) {  // a place in the graph: a stage, and the edge when one is at fault
    if (v.stage != -1 || v.index >= 0) out << " at stage " << v.stage;
    if (v.index >= 0) out << ", edge " << v.index;
    if (v.detail && *v.detail) out << ": " << v.detail;
    return;
  }
  if (v.line >= 0) out << " at line " << v.line << ", column " << v.column;
  if (v.rank != -1 || v.code == errc::rank_out_of_range) out << (v.line >= 0 ? ", rank " : " at rank ") << v.rank;
  if (v.stage >= 0) out << ", stage " << v.stage;
  if (v.microbatch >= 0) out << ", microbatch " << v.microbatch;
  if (v.kind != '?' || *v.op) {
    out << ", action ";
    if (v.stage >= 0) out << v.stage;
    if (*v.op)
      out << v.op;
    else
      out << v.kind;
    if (v.microbatch >= 0) out << v.microbatch;
  }
  if (v.index >= 0) out << " (index " << v.index << ")";
  if ((v.detail && *v.detail) || v.cycle_length > 0) {
    out << ": ";
    write_reason(out, v);
  }
}

}  // namespace detail

/// One sentence naming what went wrong, where and why (a deadlock: around its wait-for cycle).
inline std::string describe(const verdict& v) {
  detail::sentence<2048> out;
  detail::write_sentence(out, v);
  return std::string(out.text, static_cast<std::size_t>(out.size));
}

/// describe(v) and, for a failure, how to fix it: "…. To fix: …." — what the tools print.
inline std::string explain(const verdict& v) {
  std::string s = describe(v);
  if (!v.ok()) s += std::string(". To fix: ") + how_to_fix(v.code) + ".";
  return s;
}

}  // namespace pipetype
