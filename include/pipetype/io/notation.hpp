// pipetype/io/notation.hpp — the schedule notation, read (io/write_schedule.hpp writes it).
//
// The notation is PyTorch's (torch.distributed.pipelining: `_Action`, `_load_csv`, `_dump_csv`;
// facts from torch 2.15, docs/07_pytorch.md). One line per rank, the rank's actions in the order
// it runs them, separated by commas (spaces also work). A cell is
//   <stage><kind><microbatch>      2F0, 3I1, 0W5, 1B2          compute: F, I (backward for inputs),
//                                                              W (backward for weights), B (full)
//   (<a>;<b>)OVERLAP_F_B           (0F7;7B3)OVERLAP_F_B        an overlapped F&B pair (DualPipe);
//                                                              the bare (0F7;7B3) is read too
//   <stage>SEND_F<mb>, RECV_F, SEND_B, RECV_B                  a transfer (compute+comms files)
//   <stage>WAIT_SEND_F<mb>, WAIT_SEND_B                        the compute stream waits for a send
//   <stage>UNSHARD, RESHARD, REDUCE_GRAD, WAIT_REDUCE_GRAD     data-parallel markers (below)
//   <stage>OFFLOAD<mb>, RELOAD<mb>, RECOMPUTE<mb>              memory actions (pipetype's; below)
//   (empty)                                                    idle: changes nothing
// Older PyTorch files (before about October 2024) wrote `B` for backward-for-inputs next to `W`
// and `BW` for a full backward; `notation::automatic` (the default) reads a file as that older
// form when it has a `BW`, or `B` and `W` but no `I`; `notation::legacy` / `current` force one.
// A cell may hold two transfers joined by `_` (`1SEND_F0_2RECV_B0`, seen in older copies).
// Whitespace, quotes, CRLF line ends and `#` comments are skipped; blank lines are not ranks. A
// line `lanes N` (pipetype's, not PyTorch's; `chains N`, its older spelling, reads the same) splits
// the stage graph into N parallel lanes, as DualPipe's two directions (core/program.hpp). A line
// `edges 0>1, 1>2, 0>2` (pipetype's too) gives the stage graph as edges instead of the chain: skip
// connections, several towers (graph/dag.hpp; verify checks the graph's rules); `0~1` is a
// detached edge (activations only, no gradient back: local learning). With both, the
// edges are every lane's, lane by lane (each a copy of lane 0's, shifted).
//
// Reading: `read_schedule(text)` gives every rank's steps in file order (core/step.hpp) and the
// notation it read; `to_program(file, options)` the compute program (stages and microbatches
// inferred as largest index + 1, or given in the options so that an index out of range is named
// where it is) and, for a file with transfers, checks their order against NCCL's rules
// (compile/verify_transfers.hpp) when the compute part verifies. `parse_schedule(text)` is both.
// All of it is constexpr: `from_text<R"(...)">` is a schedule type parsed at compile time, and a
// parse error is error<what<_PARSE_ERROR_>, at_line_column<L, C>> (line 1 is the literal's first).
//
//   using mine = pipetype::from_text<R"(0F0,0F1,0B0,0B1
//                                       1F0,1B0,1F1,1B1)">;
//   constexpr auto plan = pipetype::make_plan<mine>();
//
// Data-parallel markers: `collectives_of(file)` reads UNSHARD, RESHARD and REDUCE_GRAD as the
// collectives of a mesh step (mesh/collectives.hpp), each after the compute action before it
// on its row (WAIT_REDUCE_GRAD is PyTorch's wait for the reduction and adds nothing), so that
// check_collectives says whether the file computes only on unsharded stages, reduces each stage
// after its last weight backward and keeps to a window; `to_csv(program, lowered, collectives)`
// (io/write_schedule.hpp) writes a mesh step's collectives so (a tie group's reduction has no
// PyTorch name and is not written).
//
// Memory actions: `memory_actions_of(file, program)` reads OFFLOAD, RELOAD and RECOMPUTE as the
// memory actions of the step (mesh/memory_actions.hpp), each after the compute action before it
// on its row, an OFFLOAD completing by default before the second action after it;
// check_memory_actions says whether they are placed so that the step reads only what is there.
// `to_text(program, memory)` (io/write_schedule.hpp) writes them so. PyTorch's runtime has no such
// actions: torch_load_note names the first.
//
// pipetype reads more than torch's loader does (spaces, comments, blank lines, fused and bare
// cells); `torch_load_note(file, program, format)` (io/write_schedule.hpp) says where torch 2.15
// would read a file otherwise or refuse it (docs/07_pytorch.md).
//
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "pipetype/compile/diagnostics.hpp"
#include "pipetype/compile/lowered.hpp"
#include "pipetype/compile/verify.hpp"
#include "pipetype/compile/verify_transfers.hpp"
#include "pipetype/core/program.hpp"
#include "pipetype/core/step.hpp"
#include "pipetype/detail/fixed_string.hpp"
#include "pipetype/mesh/collectives.hpp"
#include "pipetype/mesh/memory_actions.hpp"

namespace pipetype {

enum class notation : std::uint8_t { automatic, current, legacy };

constexpr const char* notation_name(notation n) noexcept {
  return n == notation::legacy ? "legacy" : n == notation::current ? "current" : "automatic";
}

/// A schedule file as read: every rank's steps in file order.
struct schedule_file {
  int rows = 0;                       // rank lines
  std::vector<int> begin{0};          // [rows + 1]
  std::vector<step> steps;            // rank-major
  int lanes = 0;                      // 0: no `lanes` line
  std::vector<stage_edge> edges{};    // the `edges` line's; empty: none (the chain)
  notation form = notation::current;  // the notation the file was read in
  verdict error{};                    // a parse error (line, column, reason)
  int transfers = 0, waits = 0, markers = 0;
  /// Forms pipetype reads but torch's loader reads otherwise (the first of each; line -1: none),
  /// for torch_load_note: a pair without OVERLAP_F_B, a cell holding two actions (spaces, `_`,
  /// quotes), an empty cell, a blank line (a rank row to csv.reader), a comment.
  struct position {
    int line = -1, column = -1;
  };
  position bare_pair, shared_cell, empty_cell, blank_line, comment;
  /// The marker naming the highest stage (the first such; stage -1: no marker), so that to_program
  /// can refuse one naming a stage the program does not have, at its line and column.
  int marker_stage = -1;
  position marker_at;

  constexpr step_view view() const { return {rows, begin, steps}; }
  /// True when the file lists its own transfers (PyTorch's compute+comms format).
  constexpr bool has_transfers() const noexcept { return transfers + waits > 0; }
  /// Counts the transfers, waits and markers among the steps.
  constexpr void count() noexcept {
    transfers = waits = markers = 0;
    for (const step& s : steps) {
      transfers += is_transfer(s.op) ? 1 : 0;
      waits += is_send_wait(s.op) ? 1 : 0;
      markers += is_marker(s.op) ? 1 : 0;
    }
  }
};

namespace detail {

struct kind_word {
  std::string_view word;
  step_kind op;
  char raw;  // compute: 'F', 'I', 'W', 'B' or 'b' (the older notation's BW); otherwise 0
};

// longest words first: a prefix never hides a longer kind
inline constexpr kind_word kind_words[] = {
    {"WAIT_REDUCE_GRAD", step_kind::wait_reduce_grad, 0},
    {"WAIT_SEND_F", step_kind::wait_send_f, 0},
    {"WAIT_SEND_B", step_kind::wait_send_b, 0},
    {"REDUCE_GRAD", step_kind::reduce_grad, 0},
    {"RECOMPUTE", step_kind::recompute, 0},
    {"OFFLOAD", step_kind::offload, 0},
    {"UNSHARD", step_kind::unshard, 0},
    {"RESHARD", step_kind::reshard, 0},
    {"RELOAD", step_kind::reload, 0},
    {"SEND_F", step_kind::send_f, 0},
    {"RECV_F", step_kind::recv_f, 0},
    {"SEND_B", step_kind::send_b, 0},
    {"RECV_B", step_kind::recv_b, 0},
    {"BW", step_kind::compute, 'b'},
    {"F", step_kind::compute, 'F'},
    {"I", step_kind::compute, 'I'},
    {"B", step_kind::compute, 'B'},
    {"W", step_kind::compute, 'W'},
};

}  // namespace detail

constexpr schedule_file read_schedule(std::string_view text, notation form = notation::automatic) {
  schedule_file f;
  std::vector<char> raw;  // per step: its compute letter as written (0 for the other kinds)
  int bw_line = -1, bw_col = -1;
  auto fail = [&](int line, int col, const char* why) {
    if (f.error.ok()) {
      f.error = refusal(errc::parse_error, why).on_line(line, col);
    }
  };
  std::size_t i = 0, line_start = 0;
  int line = 1;
  auto col = [&] { return static_cast<int>(i - line_start) + 1; };
  auto at_end = [&] { return i >= text.size() || text[i] == '\n'; };
  auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '"'; };
  auto is_digit = [](char c) { return c >= '0' && c <= '9'; };
  auto skip_space = [&] {
    while (!at_end() && is_space(text[i])) ++i;
  };
  auto parse_number = [&](int& out, const char* missing) -> bool {
    if (at_end() || !is_digit(text[i])) {
      fail(line, col(), missing);
      return false;
    }
    long v = 0;
    while (!at_end() && is_digit(text[i])) {
      v = v * 10 + (text[i] - '0');
      if (v > 1000000) {
        fail(line, col(), "number too large (at most 1000000)");
        return false;
      }
      ++i;
    }
    out = static_cast<int>(v);
    return true;
  };
  // <stage><kind>[<microbatch>] at i
  auto parse_single = [&](step& s, char& letter) -> bool {
    const int starts = col();
    if (!parse_number(s.stage, "expected a stage number")) return false;
    // an index, not a pointer: GCC's UBSan cannot fold a pointer test in constant evaluation
    int found = -1;
    for (int k = 0; k < static_cast<int>(std::size(detail::kind_words)) && found < 0; ++k) {
      const std::string_view word = detail::kind_words[k].word;
      if (text.size() - i >= word.size() && text.substr(i, word.size()) == word) found = k;
    }
    if (found < 0) {
      fail(line, col(), "expected F, B, I or W after the stage (or a PyTorch kind: SEND_F, RECV_B, UNSHARD, ...)");
      return false;
    }
    const detail::kind_word& w = detail::kind_words[found];
    if (w.raw == 'b' && bw_line < 0) bw_line = line, bw_col = col();
    i += w.word.size();
    s.op = w.op;
    letter = w.raw;
    s.overlapped = false;
    if (is_marker(s.op)) {  // no microbatch (PyTorch's parser would take one and ignore it)
      s.microbatch = -1;
      if (s.stage > f.marker_stage) f.marker_stage = s.stage, f.marker_at = {line, starts};
      while (!at_end() && is_digit(text[i])) ++i;
      return true;
    }
    return parse_number(s.microbatch, "expected a microbatch number");
  };
  constexpr const char* two_computes =
      "an overlapped action holds two computes, a forward and a backward: (0F7;7B3)OVERLAP_F_B";
  // inside a pair: a compute, or an error at the sub-action's column
  auto compute_only = [&](const step& s, int at) {
    if (s.op != step_kind::compute) fail(line, at, two_computes);
    return s.op == step_kind::compute;
  };
  // the row's cells, as csv.reader splits them (commas outside quotes)
  int cell = 0, cell_line = 1, cell_col = 1, action_col = 1;  // action_col: where the cell's action starts
  bool cell_used = false, in_quotes = false;
  auto first = [](schedule_file::position& at, int l, int c) {
    if (at.line < 0) at = {l, c};
  };
  auto keep = [&](step s, char letter, bool same_cell = false) {  // same_cell: a pair's second half
    if (cell_used && !same_cell) first(f.shared_cell, line, action_col);
    cell_used = true;
    s.cell = cell;
    f.steps.push_back(s);
    raw.push_back(letter);
  };
  auto starts_with = [&](std::string_view word) {
    return text.size() - i >= word.size() && text.substr(i, word.size()) == word;
  };
  while (i < text.size() && f.error.ok()) {
    skip_space();
    if (starts_with("lanes") || starts_with("chains")) {  // a directive line: `lanes N` (`chains N`: older)
      if (f.lanes != 0) fail(line, col(), "`lanes` given twice");
      i += starts_with("lanes") ? 5 : 6;
      skip_space();
      int n = 0;
      if (f.error.ok() && parse_number(n, "expected the number of lanes after `lanes`")) {
        if (n < 1) fail(line, col(), "the number of lanes must be at least 1");
        f.lanes = n;
        skip_space();
        if (!at_end() && text[i] != '#') fail(line, col(), "`lanes N` stands alone on its line");
      }
      while (!at_end()) ++i;
    } else if (starts_with("edges")) {  // a directive line: `edges A>B, C>D, ...`
      if (!f.edges.empty()) fail(line, col(), "`edges` given twice");
      i += 5;
      bool more = true;
      while (more && f.error.ok()) {
        skip_space();
        stage_edge e;
        if (!parse_number(e.from, "expected an edge `A>B` (stage A feeds stage B) after `edges`")) break;
        skip_space();
        if (at_end() || (text[i] != '>' && text[i] != '~')) {
          fail(line, col(),
               "expected `>` (or `~`, detached: no gradient back) between the two stages of an edge: `edges 0>1, 1>2`");
          break;
        }
        e.detached = text[i++] == '~';
        skip_space();
        if (!parse_number(e.to, "expected the stage an edge goes to after `>` or `~`")) break;
        f.edges.push_back(e);
        skip_space();
        more = !at_end() && text[i] == ',';
        if (more) ++i;
      }
      if (f.error.ok()) {
        skip_space();
        if (!at_end() && text[i] != '#') fail(line, col(), "`edges A>B, C>D, ...` stands alone on its line");
      }
      while (!at_end()) ++i;
    } else if (!at_end() && text[i] != '#') {  // a rank's row
      cell = 0, cell_used = false, in_quotes = false, cell_line = line, cell_col = col();
      while (!at_end() && f.error.ok()) {
        const char c = text[i];
        if (c == '"') {
          in_quotes = !in_quotes;
          ++i;
          continue;
        }
        if (c == ',' && !in_quotes) {
          if (!cell_used) first(f.empty_cell, cell_line, cell_col);
          ++cell, ++i, cell_used = false, cell_line = line, cell_col = col();
          continue;
        }
        if (is_space(c) || c == ',') {
          ++i;
          continue;
        }
        if (c == '#') {
          first(f.comment, line, col());
          while (!at_end()) ++i;
          break;
        }
        action_col = col();
        if (c == '(') {  // (a;b)OVERLAP_F_B
          const int open_col = col();
          ++i;
          skip_space();
          step x, y;
          char lx = 0, ly = 0;
          const int cx = col();
          if (!parse_single(x, lx) || !compute_only(x, cx)) break;
          skip_space();
          if (at_end() || text[i] != ';') {
            fail(line, col(), "expected ';' between the two actions of an overlapped pair");
            break;
          }
          ++i;
          skip_space();
          const int cy = col();
          if (!parse_single(y, ly) || !compute_only(y, cy)) break;
          skip_space();
          if (!at_end() && text[i] == ';') {
            fail(line, col(), two_computes);
            break;
          }
          if (at_end() || text[i] != ')') {
            fail(line, col(), "expected ')' to close the overlapped pair");
            break;
          }
          ++i;
          if (starts_with("OVERLAP_F_B")) {
            i += 11;
          } else if (!at_end() && text[i] >= 'A' && text[i] <= 'Z') {
            fail(line, col(), "a compound action is written (a;b)OVERLAP_F_B");
            break;
          } else {
            first(f.bare_pair, line, open_col);
          }
          x.overlapped = true;
          keep(x, lx);
          keep(y, ly, true);
        } else if (is_digit(c)) {
          step s;
          char l = 0;
          if (!parse_single(s, l)) break;
          keep(s, l);
          // older copies fused two transfers in one cell: 1SEND_F0_2RECV_B0
          while (f.error.ok() && is_transfer(s.op) && text.size() - i >= 2 && text[i] == '_' && is_digit(text[i + 1])) {
            action_col = col() + 1;
            ++i;
            if (!parse_single(s, l)) break;
            if (!is_transfer(s.op)) fail(line, col(), "only transfers are joined with '_' (1SEND_F0_2RECV_B0)");
            keep(s, l);
          }
        } else {
          fail(line, col(), "unexpected character; an action looks like 2F0, 3I1, 1SEND_F0 or (0F7;7B3)OVERLAP_F_B");
          break;
        }
        // after a cell: a separator, a comment or the end of the line
        if (f.error.ok() && !at_end() && !(is_space(text[i]) || text[i] == ',' || text[i] == '#'))
          fail(line, col(), "expected ',' or a space between actions");
      }
      if (!cell_used && (cell > 0 || in_quotes)) first(f.empty_cell, cell_line, cell_col);  // a trailing comma
      ++f.rows;
      f.begin.push_back(static_cast<int>(f.steps.size()));
    } else {
      if (at_end())
        first(f.blank_line, line, 1);  // a rank with no actions to csv.reader
      else
        first(f.comment, line, col());
      while (!at_end()) ++i;  // a comment line
    }
    if (i < text.size() && text[i] == '\n') {
      ++i;
      ++line;
      line_start = i;
    }
  }
  if (!f.error.ok()) return f;
  // the notation: the older one has BW, or B and W without I
  bool any_b = false, any_i = false, any_w = false;
  for (char l : raw) any_b |= l == 'B', any_i |= l == 'I', any_w |= l == 'W';
  const bool legacy =
      form == notation::legacy || (form == notation::automatic && (bw_line >= 0 || (any_b && any_w && !any_i)));
  if (!legacy && bw_line >= 0) {
    fail(bw_line, bw_col, "BW is the older notation's full backward; read the file with the legacy notation");
    return f;
  }
  f.form = legacy ? notation::legacy : notation::current;
  for (std::size_t k = 0; k < f.steps.size(); ++k) {
    step& s = f.steps[k];
    switch (raw[k]) {
      case 'F':
        s.what = kind::F;
        break;
      case 'I':
        s.what = kind::I;
        break;
      case 'W':
        s.what = kind::W;
        break;
      case 'B':
        s.what = legacy ? kind::I : kind::B;
        break;
      case 'b':
        s.what = kind::B;
        break;
      default:
        break;
    }
  }
  f.count();
  return f;
}

/// How a file becomes a compute program.
struct read_options {
  notation form = notation::automatic;
  int ranks = 0;         // > 0: the program has this many ranks (a further row is out of range)
  int microbatches = 0;  // > 0: the program has this many microbatches (a larger index is out of range)
  const char* name = "text";
  p2p_streams p2p = p2p_streams::shared;  // the NCCL streams a file's own transfers are checked on
};

/// The compute program of a file (its F, B, I, W and pairs); a file with transfers has them
/// checked when the compute part verifies, the verdict landing in `source_error`.
constexpr program to_program(const schedule_file& f, const read_options& o = {}) {
  int max_stage = -1, max_mb = -1;
  for (const step& s : f.steps)
    if (s.op == step_kind::compute) {
      max_stage = s.stage > max_stage ? s.stage : max_stage;
      max_mb = s.microbatch > max_mb ? s.microbatch : max_mb;
    }
  const int ranks = o.ranks > 0 ? o.ranks : f.rows;
  program_builder b{ranks > 0 ? ranks : 1, max_stage + 1 > 0 ? max_stage + 1 : 1,
                    o.microbatches > 0 ? o.microbatches : (max_mb + 1 > 0 ? max_mb + 1 : 1)};
  b.lanes(f.lanes > 0 ? f.lanes : 1);
  b.graph(f.edges);
  for (int r = 0; r < f.rows; ++r) {
    b.rank(r);
    for (int k = f.begin[static_cast<std::size_t>(r)]; k < f.begin[static_cast<std::size_t>(r) + 1]; ++k)
      if (f.steps[static_cast<std::size_t>(k)].op == step_kind::compute)
        b.add(f.steps[static_cast<std::size_t>(k)].compute());
  }
  program p = std::move(b).build(o.name);
  // a row beyond the given ranks is out of range even when it holds no compute
  if (p.invalid_rank == no_rank && o.ranks > 0 && f.rows > o.ranks) p.invalid_rank = o.ranks;
  p.source_error = f.error;
  if (p.source_error.ok() && f.marker_stage >= p.stages) {  // markers are kept, so they must be of a stage
    p.source_error = refusal(errc::parse_error,
                             "a marker (UNSHARD, RESHARD, REDUCE_GRAD, ...) names a stage no action of the file has")
                         .on_line(f.marker_at.line, f.marker_at.column);
  }
  if (p.source_error.ok() && f.steps.empty())
    p.source_error = refusal(errc::parse_error, "the schedule has no actions").on_line(1, 1);
  if (p.source_error.ok() && f.has_transfers() && !f.edges.empty())  // verify_transfers knows chains only
    p.source_error = refusal(errc::parse_error,
                             "a file with an `edges` line cannot list its own transfers yet (docs/10): give its "
                             "computes only")
                         .on_line(1, 1);
  if (p.source_error.ok() && f.has_transfers() && verify(p.view()).ok())
    p.source_error = verify_transfers(p.view(), f.view(), o.p2p);
  return p;
}

constexpr program parse_schedule(std::string_view text, const read_options& o = {}) {
  return to_program(read_schedule(text, o.form), o);
}
constexpr program parse_schedule(std::string_view text, const char* name) {
  read_options o;
  o.name = name;
  return parse_schedule(text, o);
}

/// A schedule type from a string literal in the notation, parsed at compile time.
template <detail::fixed_string Text>
struct from_text {
  static constexpr program generate() { return parse_schedule(Text.view()); }
  /// Its UNSHARD, RESHARD and REDUCE_GRAD as a mesh step's collectives (none: empty), for
  /// mesh_plan (mesh/plan.hpp).
  static constexpr collective_program collectives();
  /// Its OFFLOAD, RELOAD and RECOMPUTE as the step's memory actions (none: empty).
  static constexpr memory_program memory();
};

/// The collectives a file writes (see the top of this file): per row, its UNSHARD, RESHARD and
/// REDUCE_GRAD in order, each after the row's compute action before it (−1: none yet); the
/// rows past `ranks` (when given) are left out, as to_program leaves them.
constexpr collective_program collectives_of(const schedule_file& f, int ranks = 0) {
  collective_program c;
  c.ranks = ranks > 0 ? ranks : f.rows;
  c.begin.push_back(0);
  for (int r = 0; r < c.ranks; ++r) {
    int k = -1;  // the row's compute actions so far, less one
    if (r < f.rows)
      for (int i = f.begin[static_cast<std::size_t>(r)]; i < f.begin[static_cast<std::size_t>(r) + 1]; ++i) {
        const step& s = f.steps[static_cast<std::size_t>(i)];
        if (s.op == step_kind::compute) ++k;
        if (s.op == step_kind::unshard || s.op == step_kind::reshard || s.op == step_kind::reduce_grad)
          c.ops.push_back({s.op == step_kind::unshard   ? collective_kind::unshard
                           : s.op == step_kind::reshard ? collective_kind::reshard
                                                        : collective_kind::reduce_grad,
                           s.stage, -1, k});
      }
    c.begin.push_back(static_cast<int>(c.ops.size()));
  }
  return c;
}
template <detail::fixed_string Text>
constexpr collective_program from_text<Text>::collectives() {
  const schedule_file f = read_schedule(Text.view());
  return collectives_of(f, f.rows);
}

/// Whether a file writes data-parallel collectives at all (UNSHARD, RESHARD or REDUCE_GRAD).
constexpr bool has_collectives(const schedule_file& f) {
  for (const step& s : f.steps)
    if (s.op == step_kind::unshard || s.op == step_kind::reshard || s.op == step_kind::reduce_grad) return true;
  return false;
}

/// The memory actions a file writes (see the top of this file), for the program `p` read from it:
/// per row, its OFFLOAD, RELOAD and RECOMPUTE in order, each after the row's compute action before
/// it (−1: none yet; after an overlapped pair's second half); rows past p's ranks are left out.
constexpr memory_program memory_actions_of(const schedule_file& f, program_view p) {
  std::vector<std::vector<memory_action>> rows(static_cast<std::size_t>(p.ranks > 0 ? p.ranks : 0));
  for (int r = 0; r < p.ranks && r < f.rows; ++r) {
    int k = -1;  // the row's compute actions so far, less one
    for (int i = f.begin[static_cast<std::size_t>(r)]; i < f.begin[static_cast<std::size_t>(r) + 1]; ++i) {
      const step& s = f.steps[static_cast<std::size_t>(i)];
      if (s.op == step_kind::compute) ++k;
      if (!is_memory(s.op)) continue;
      const memory_kind m = s.op == step_kind::offload  ? memory_kind::offload
                            : s.op == step_kind::reload ? memory_kind::reload
                                                        : memory_kind::recompute;
      rows[static_cast<std::size_t>(r)].push_back({m, s.stage, s.microbatch, k, -1});
    }
  }
  return memory_program_of(p, std::move(rows));
}
template <detail::fixed_string Text>
constexpr memory_program from_text<Text>::memory() {
  const schedule_file f = read_schedule(Text.view());
  const program p = to_program(f);
  return memory_actions_of(f, p.view());
}

/// Whether a file writes memory actions at all (OFFLOAD, RELOAD or RECOMPUTE).
constexpr bool has_memory_actions(const schedule_file& f) {
  for (const step& s : f.steps)
    if (is_memory(s.op)) return true;
  return false;
}

}  // namespace pipetype
