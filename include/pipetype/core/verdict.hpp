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

/// The error table: one row per code, from which the enum `errc`, `errc_name`, `how_to_fix` and
/// the tag type that names a rejected schedule's category at compile time (compile/diagnostics.hpp)
/// are made. Adding a code is adding a row: X(enumerator, tag type, name in sentences, how to fix
/// it; one sentence that docs/03 also lists), after a comment saying when it is returned.
// clang-format off
#define PIPETYPE_ERRORS(X)                                                                                             \
  /* ranks, stages or microbatches not positive */                                                                     \
  X(empty_program, _EMPTY_PROGRAM_, "empty program",                                                                   \
    "give the program at least one rank, one stage and one microbatch")                                                \
  /* the builder was asked for a rank outside [0, ranks) */                                                            \
  X(rank_out_of_range, _RANK_OUT_OF_RANGE_, "rank out of range",                                                       \
    "select a rank with rank(r) for 0 <= r < ranks before adding actions")                                             \
  /* an action names a stage or microbatch out of range (lowered: a slot) */                                           \
  X(index_out_of_range, _INDEX_OUT_OF_RANGE_, "index out of range",                                                    \
    "name only stages and microbatches below the program's counts, and each microbatch on its own lane")               \
  /* a stage's actions appear on two ranks (or off its placement) */                                                   \
  X(stage_on_two_ranks, _STAGE_ON_TWO_RANKS_, "stage on two ranks",                                                    \
    "put every action of a stage on one rank, the rank its placement names")                                           \
  /* some (stage, microbatch) lacks its F, B, I or W */                                                                \
  X(missing_action, _MISSING_ACTION_, "missing action",                                                                \
    "add the missing action; every stage and microbatch needs one F and either one B or one I and one W")              \
  /* an action appears twice */                                                                                        \
  X(duplicate_action, _DUPLICATE_ACTION_, "duplicate action", "remove the second copy of the action")                  \
  /* a (stage, microbatch) has both a full B and an I/W split */                                                       \
  X(mixed_backward, _MIXED_BACKWARD_, "full backward mixed with I/W split",                                            \
    "use either the full backward B or the split pair I and W for a stage and microbatch, not both")                   \
  /* B/I/W before the F of the same (stage, microbatch) on its rank */                                                 \
  X(backward_before_forward, _BACKWARD_BEFORE_FORWARD_, "backward before forward",                                     \
    "move the backward after the forward of the same stage and microbatch")                                            \
  /* an action before the same-rank action that produces its input */                                                  \
  X(action_before_its_input, _ACTION_BEFORE_ITS_INPUT_, "action before its input",                                     \
    "move the action after the action on its rank that produces its input")                                            \
  /* an overlapped pair that is not one forward and one backward */                                                    \
  X(invalid_overlap, _INVALID_OVERLAP_, "invalid overlapped pair",                                                     \
    "overlap one F with one B or I of another stage or microbatch, the second right after the first")                  \
  /* ranks wait on each other forever */                                                                               \
  X(cross_rank_deadlock, _CROSS_RANK_DEADLOCK_, "cross-rank deadlock",                                                 \
    "reorder one rank of the cycle so that it runs the awaited action before the one it waits at")                     \
  /* peak activations above the limit */                                                                               \
  X(memory_limit_exceeded, _MEMORY_LIMIT_EXCEEDED_, "memory limit exceeded",                                           \
    "run backwards earlier (fewer forwards in flight), or raise the memory limit")                                     \
  /* text notation: see line / column */                                                                               \
  X(parse_error, _PARSE_ERROR_, "parse error",                                                                         \
    "write actions as 2F0, 3I1, 1SEND_F0 or (0F7;7B3)OVERLAP_F_B, separated by commas, one rank a line")               \
  /* lowered: the k-th send and the k-th recv of a channel carry different data */                                     \
  X(transfer_mismatch, _TRANSFER_MISMATCH_, "transfer mismatch",                                                       \
    "issue the sends and receives of each channel in the same order at both ends")                                     \
  /* lowered: rendezvous / group / event order can never complete */                                                   \
  X(nccl_deadlock, _NCCL_DEADLOCK_, "NCCL deadlock",                                                                   \
    "post both ends of every transfer in matching groups, and every communicator's collectives, in the same "          \
    "order on every rank")                                                                                             \
  /* lowered: a wait with no earlier record, an event outside the pool, an event on a transfer, or a buffer the        \
     other stream may still use */                                                                                     \
  X(event_misuse, _EVENT_MISUSE_, "event misuse",                                                                      \
    "record each event before it is waited on, and wait before a stream touches a buffer the other used")              \
  /* lanes not positive, or not dividing the stages and microbatches */                                                \
  X(invalid_lanes, _INVALID_LANES_, "invalid lanes",                                                                   \
    "use a lane count of at least 1 that divides both the stages and the microbatches")                                \
  /* a schedule's extent() disagrees with the program it generates */                                                  \
  X(bad_extent, _BAD_EXTENT_, "schedule extent mismatch",                                                              \
    "make the schedule's extent() count every rank, stage and action generate() returns, and say if it splits")        \
  /* a size past pipetype::limits (core/sizes.hpp), refused before any table is made */                                \
  X(too_large, _TOO_LARGE_, "program too large",                                                                       \
    "stay within pipetype::limits (docs/03): fewer ranks, stages, microbatches or stage-graph edges")                  \
  /* the stage graph breaks a rule of graph/dag.hpp (detail says which; stage: where) */                               \
  X(invalid_graph, _INVALID_GRAPH_, "invalid stage graph",                                                             \
    "give every edge two existing stages, break the cycle, and let every stage be fed by a source and reach a "        \
    "loss (docs/10)")                                                                                                  \
  /* a pp x dp mesh with a side below 1, or not the world it should cover (core/mesh.hpp) */                           \
  X(bad_mesh, _BAD_MESH_, "bad mesh",                                                                                  \
    "give the mesh at least one pipeline rank and one replica, with pp x dp equal to the world's ranks")               \
  /* a REDUCE_GRAD / UNSHARD / RESHARD / TIE where the step would be wrong (mesh/collectives.hpp) */                   \
  X(collective_misplaced, _COLLECTIVE_MISPLACED_, "collective misplaced",                                              \
    "place each REDUCE_GRAD after its stage's last B or W, each compute between an UNSHARD and a RESHARD of "          \
    "its stage, and the ties in increasing order before their stages' REDUCE_GRAD (place_collectives does)")           \
  /* members of a communicator issue different collectives (mesh/verify.hpp) */                                        \
  X(collective_mismatch, _COLLECTIVE_MISMATCH_, "collective mismatch",                                                 \
    "issue the same collectives in the same order on every member of a communicator")                                  \
  /* an OFFLOAD / RELOAD / RECOMPUTE where the step would read what is not there (mesh/memory_actions.hpp) */          \
  X(memory_action_misplaced, _MEMORY_ACTION_MISPLACED_, "memory action misplaced",                                     \
    "OFFLOAD a microbatch's activation after its F, RELOAD it after the OFFLOAD and before its first "                 \
    "backward, and RECOMPUTE it after its F (with its input on the device) and before its first backward "             \
    "(place_memory does)")
// clang-format on

/// What went wrong: `ok`, then the table's codes in its order.
enum class errc : std::uint8_t {
  ok,
#define PIPETYPE_ERRC_ENUMERATOR(code, tag, name, advice) code,
  PIPETYPE_ERRORS(PIPETYPE_ERRC_ENUMERATOR)
#undef PIPETYPE_ERRC_ENUMERATOR
};

namespace detail {
struct errc_row {
  const char* name;
  const char* advice;
};
// clang-format off
inline constexpr errc_row errc_rows[] = {
    {"ok", "nothing to fix"},
#define PIPETYPE_ERRC_ROW(code, tag, name, advice) {name, advice},
    PIPETYPE_ERRORS(PIPETYPE_ERRC_ROW)
#undef PIPETYPE_ERRC_ROW
};
// clang-format on
}  // namespace detail

/// The number of codes, ok included (errc's values are 0 .. errc_count - 1).
inline constexpr int errc_count = static_cast<int>(sizeof(detail::errc_rows) / sizeof(detail::errc_rows[0]));

/// One link of a deadlock's wait-for cycle: `rank` stopped at its action `at_*` (`index` in its
/// list) waits for the action `needs_*`, which rank `from` runs.
struct wait_link {
  int rank = -1, index = -1;
  char at_kind = '?';
  int at_stage = -1, at_microbatch = -1;
  char needs_kind = '?';
  int needs_stage = -1, needs_microbatch = -1;
  int from = -1;
  // a mesh step's ops that are no compute action (mesh/verify.hpp): their names
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

  // Where it went wrong, one fact a call, each returning the verdict so that they chain after
  // refusal() (below): refusal(errc::memory_limit_exceeded, "...").on_rank(r).on_stage(s).
  constexpr verdict& on_rank(int r) noexcept { return rank = r, *this; }
  constexpr verdict& on_stage(int s) noexcept { return stage = s, *this; }
  constexpr verdict& on_microbatch(int m) noexcept { return microbatch = m, *this; }
  constexpr verdict& on_kind(char k) noexcept { return kind = k, *this; }
  constexpr verdict& on_op(const char* name) noexcept { return op = name, *this; }
  constexpr verdict& on_index(int i) noexcept { return index = i, *this; }
  constexpr verdict& on_line(int l, int c) noexcept { return line = l, column = c, *this; }
};

/// A failing verdict of code `e` for the static reason `why`; its place follows from the on_*
/// calls (a verdict's every builder: the checks build no verdict field by field).
constexpr verdict refusal(errc e, const char* why = "") noexcept {
  verdict v;
  v.code = e;
  v.detail = why;
  return v;
}

/// The code's name in sentences ("missing action").
constexpr const char* errc_name(errc e) noexcept {
  const auto i = static_cast<int>(e);
  return i < errc_count ? detail::errc_rows[i].name : "unknown";
}

/// How to fix a verdict of this category: one sentence (docs/03 keeps the same list).
constexpr const char* how_to_fix(errc e) noexcept {
  const auto i = static_cast<int>(e);
  return i < errc_count ? detail::errc_rows[i].advice : "";
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
