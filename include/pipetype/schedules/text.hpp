// pipetype/schedules/text.hpp — schedules written as text, parsed at compile time.
//
// The notation is PyTorch's (torch.distributed.pipelining, its schedule CSV files): one line per
// rank, actions in the order the rank runs them, separated by commas (spaces also work; both
// may be mixed). An action is `<stage><kind><microbatch>` with kind F, B, I or W: `2F0`, `3I1`.
// An overlapped F&B pair (DualPipe) is `(0F7;7B3)`. An empty entry between two commas is an
// idle slot: the executors start every action as soon as its inputs exist, so idle slots only
// help a reader line columns up; they change nothing. `#` starts a comment; blank lines are
// skipped. Ranks are the lines, stages and microbatches are inferred (largest index + 1), and
// each stage is placed on the rank whose line names it. A line `chains N` (once, anywhere) splits
// the stage graph into N parallel chains, as DualPipe's two directions (core/program.hpp).
//
//   using mine = pipetype::from_text<R"(
//     0F0,0F1,0B0,0B1
//     1F0,1B0,1F1,1B1
//   )">;
//   constexpr auto plan = pipetype::make_plan<mine>();
//
// A syntax error makes make_plan fail with error<what<_PARSE_ERROR_>, at_line_column<L, C>>
// (1-based; line 1 is the first line of the literal, even if blank). `parse_schedule` is the
// same parser at run time (the explorer's --file), returning the error in `source_error`.
#pragma once

#include <string_view>

#include "pipetype/core/program.hpp"
#include "pipetype/detail/fixed_string.hpp"
#include "pipetype/schedules/schedule.hpp"

namespace pipetype {

constexpr program parse_schedule(std::string_view text, const char* name = "text") {
  struct parsed {
    int rank;
    action a;
  };
  std::vector<parsed> items;
  int ranks = 0, max_stage = -1, max_mb = -1, chains = 0;
  verdict err;
  auto fail = [&](int line, int col, const char* why) {
    if (err.ok()) {
      err.code = errc::parse_error;
      err.line = line;
      err.column = col;
      err.detail = why;
    }
  };
  std::size_t i = 0;
  int line = 1;
  std::size_t line_start = 0;
  auto col = [&] { return static_cast<int>(i - line_start) + 1; };
  auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\r'; };
  auto is_digit = [](char c) { return c >= '0' && c <= '9'; };
  // parses a number at i into `out`; `what` names it in errors
  auto parse_number = [&](int& out, const char* missing, const char* too_large) -> bool {
    if (i >= text.size() || !is_digit(text[i])) {
      fail(line, col(), missing);
      return false;
    }
    long v = 0;
    while (i < text.size() && is_digit(text[i])) {
      v = v * 10 + (text[i] - '0');
      if (v > 1000000) {
        fail(line, col(), too_large);
        return false;
      }
      ++i;
    }
    out = static_cast<int>(v);
    return true;
  };
  // parses <stage><kind><mb> at i
  auto parse_action = [&](action& a) -> bool {
    if (!parse_number(a.stage, "expected a stage number", "stage number too large")) return false;
    if (i >= text.size()) {
      fail(line, col(), "expected F, B, I or W after the stage");
      return false;
    }
    switch (text[i]) {
      case 'F':
        a.what = kind::F;
        break;
      case 'B':
        a.what = kind::B;
        break;
      case 'I':
        a.what = kind::I;
        break;
      case 'W':
        a.what = kind::W;
        break;
      default:
        fail(line, col(), "expected F, B, I or W after the stage");
        return false;
    }
    ++i;
    a.overlapped = false;
    return parse_number(a.microbatch, "expected a microbatch number", "microbatch number too large");
  };
  auto keep = [&](int rank, const action& a) {
    items.push_back({rank, a});
    max_stage = a.stage > max_stage ? a.stage : max_stage;
    max_mb = a.microbatch > max_mb ? a.microbatch : max_mb;
  };
  auto starts_with = [&](std::string_view word) {
    return text.size() - i >= word.size() && text.substr(i, word.size()) == word;
  };
  while (i < text.size() && err.ok()) {
    // one line
    bool any = false;
    const int rank = ranks;
    while (i < text.size() && is_space(text[i])) ++i;
    if (starts_with("chains")) {  // a directive line: `chains N`
      if (chains != 0) fail(line, col(), "`chains` given twice");
      i += 6;
      while (i < text.size() && is_space(text[i])) ++i;
      int n = 0;
      if (err.ok() && parse_number(n, "expected the number of chains after `chains`", "too many chains")) {
        if (n < 1) fail(line, col(), "the number of chains must be at least 1");
        chains = n;
        while (i < text.size() && is_space(text[i])) ++i;
        if (i < text.size() && text[i] != '\n' && text[i] != '#')
          fail(line, col(), "`chains N` stands alone on its line");
      }
      while (err.ok() && i < text.size() && text[i] != '\n') ++i;  // a trailing comment
    }
    while (i < text.size() && text[i] != '\n' && err.ok()) {
      const char c = text[i];
      if (is_space(c) || c == ',') {
        ++i;
        continue;
      }
      if (c == '#') {
        while (i < text.size() && text[i] != '\n') ++i;
        break;
      }
      if (c == '(') {
        ++i;
        while (i < text.size() && is_space(text[i])) ++i;
        action x, y;
        if (!parse_action(x)) break;
        while (i < text.size() && is_space(text[i])) ++i;
        if (i >= text.size() || text[i] != ';') {
          fail(line, col(), "expected ';' between the two actions of an overlapped pair");
          break;
        }
        ++i;
        while (i < text.size() && is_space(text[i])) ++i;
        if (!parse_action(y)) break;
        while (i < text.size() && is_space(text[i])) ++i;
        if (i >= text.size() || text[i] != ')') {
          fail(line, col(), "expected ')' to close the overlapped pair");
          break;
        }
        ++i;
        x.overlapped = true;
        keep(rank, x);
        keep(rank, y);
        any = true;
      } else if (is_digit(c)) {
        action a;
        if (!parse_action(a)) break;
        keep(rank, a);
        any = true;
      } else {
        fail(line, col(), "unexpected character; an action looks like 2F0, 3I1 or (0F7;7B3)");
        break;
      }
      // after an action: a separator, a comment or the end of the line
      if (i < text.size() && !(is_space(text[i]) || text[i] == ',' || text[i] == '\n' || text[i] == '#'))
        fail(line, col(), "expected ',' or a space between actions");
    }
    if (any) ++ranks;
    if (i < text.size() && text[i] == '\n') {
      ++i;
      ++line;
      line_start = i;
    }
  }
  if (err.ok() && ranks == 0) fail(1, 1, "the schedule has no actions");
  program_builder b{ranks > 0 ? ranks : 1, max_stage + 1 > 0 ? max_stage + 1 : 1, max_mb + 1 > 0 ? max_mb + 1 : 1};
  b.chains(chains > 0 ? chains : 1);
  for (const parsed& x : items) b.rank(x.rank).add(x.a);
  program p = std::move(b).build(name);
  p.source_error = err;
  return p;
}

/// A schedule type from a string literal in the text notation, parsed at compile time.
template <detail::fixed_string Text>
struct from_text {
  static constexpr program generate() { return parse_schedule(Text.view()); }
};

}  // namespace pipetype
