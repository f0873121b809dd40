// pipetype/graph/layer_layout.hpp — which layers each stage holds, from a Megatron-style string.
//
// Megatron-LM's `--pipeline-model-parallel-layout` describes an uneven split of a model into
// pipeline stages as a string (Megatron-core's PipelineParallelLayerLayout); pipetype reads the
// same language:
//
//   E|t*3|t*4|t*4|t*3,L      5 stages: the embedding; 3, 4, 4 decoder layers; 3 and the loss
//   Et*3|(tt|)*29,m|L        32 stages: E + 3 layers, 29 stages of 2, an MTP layer, the loss
//
//   E  embedding     t  decoder (transformer) layer     m  MTP layer     L  loss
//   |  ends a stage (a stage may be empty: `||`)         ,  and spaces separate, and mean nothing
//   X*N  N copies of X, a layer or a parenthesised group (which may hold `|`); N ≥ 0
//
// The embedding may sit only in the first stage and the loss only in the last, once each.
// `parse_layout` is constexpr: a bad string is a verdict (errc::parse_error, the 1-based column
// and a reason), and `pipetype::layout<"...">` turns one into a compile error.
//
// What a stage costs follows its layers (analysis/layout_costs.hpp): each kind of layer has a
// weight (`layer_weights`), and a stage's forward, backward and activations scale with the sum.
#pragma once

#include <array>
#include <cstddef>
#include <string_view>
#include <vector>

#include "pipetype/core/verdict.hpp"
#include "pipetype/detail/fixed_string.hpp"

namespace pipetype {

/// The layers of one stage, by kind.
struct stage_layers {
  int embedding = 0;
  int decoder = 0;
  int mtp = 0;
  int loss = 0;
  constexpr int layers() const noexcept { return embedding + decoder + mtp + loss; }
  friend constexpr bool operator==(const stage_layers&, const stage_layers&) = default;
};

/// A parsed layout: one entry per stage, or the first error (then `stages` is empty).
struct layer_layout {
  std::vector<stage_layers> stages{};
  verdict error{};
  constexpr bool ok() const noexcept { return error.ok(); }
  constexpr int size() const noexcept { return static_cast<int>(stages.size()); }
  /// Decoder and MTP layers over all stages.
  constexpr int layers() const noexcept {
    int n = 0;
    for (const stage_layers& s : stages) n += s.decoder + s.mtp;
    return n;
  }
};

/// How much each kind of layer weighs against one decoder layer, in time and in activation
/// memory (a modelling default; measure yours: the embedding is a lookup, the loss a projection
/// to the vocabulary).
struct layer_weights {
  double embedding = 0.5;
  double decoder = 1;
  double mtp = 1;
  double loss = 1;
  constexpr double of(const stage_layers& s) const noexcept {
    return embedding * s.embedding + decoder * s.decoder + mtp * s.mtp + loss * s.loss;
  }
};

/// Expanded layouts longer than this are refused (a nested `*` can ask for billions of layers).
inline constexpr int max_layout_tokens = 1 << 16;

namespace detail {

struct layout_parser {
  std::string_view text;
  std::size_t pos = 0;
  verdict error{};

  constexpr bool fail(std::size_t at, const char* why) {
    if (error.ok()) {
      error = refusal(errc::parse_error, why).on_line(1, static_cast<int>(at) + 1);
    }
    return false;
  }
  constexpr void skip_blanks() {
    while (pos < text.size() && (text[pos] == ' ' || text[pos] == '\t' || text[pos] == ',')) ++pos;
  }
  /// A sequence of items up to `)` (depth > 0) or the end, appended to `out`.
  constexpr bool sequence(std::vector<char>& out, int depth) {
    for (;;) {
      skip_blanks();
      if (pos == text.size()) return depth == 0 || fail(pos, "a '(' is not closed");
      const std::size_t at = pos;
      const char c = text[pos];
      std::vector<char> item;
      if (c == 'E' || c == 't' || c == 'm' || c == 'L' || c == '|') {
        item.push_back(c);
        ++pos;
      } else if (c == '(') {
        if (depth >= 32) return fail(at, "groups nest more than 32 deep");
        ++pos;
        if (!sequence(item, depth + 1)) return false;
        ++pos;  // the ')'
      } else if (c == ')') {
        return depth > 0 || fail(at, "a ')' without its '('");
      } else if (c == '*') {
        return fail(at, "a '*' after nothing to repeat");
      } else {
        return fail(at, "not a layer: E (embedding), t (decoder layer), m (MTP layer), L (loss), '|' ends a stage");
      }
      skip_blanks();
      long long count = 1;
      if (pos < text.size() && text[pos] == '*') {
        ++pos;
        if (pos == text.size() || text[pos] < '0' || text[pos] > '9') return fail(pos, "a '*' needs a count");
        count = 0;
        while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
          count = count * 10 + (text[pos] - '0');
          if (count > max_layout_tokens) return fail(at, "the layout is too long once expanded (65536 tokens at most)");
          ++pos;
        }
      }
      if (static_cast<long long>(out.size()) + count * static_cast<long long>(item.size()) > max_layout_tokens)
        return fail(at, "the layout is too long once expanded (65536 tokens at most)");
      for (long long k = 0; k < count; ++k)
        for (char x : item) out.push_back(x);
    }
  }
};

}  // namespace detail

/// Parses a layout string (see the header comment).
constexpr layer_layout parse_layout(std::string_view text) {
  layer_layout out;
  detail::layout_parser p{text};
  std::vector<char> tokens;
  if (!p.sequence(tokens, 0)) {
    out.error = p.error;
    return out;
  }
  out.stages.push_back({});
  for (char c : tokens) {
    stage_layers& s = out.stages.back();
    if (c == '|')
      out.stages.push_back({});
    else if (c == 'E')
      ++s.embedding;
    else if (c == 't')
      ++s.decoder;
    else if (c == 'm')
      ++s.mtp;
    else
      ++s.loss;
  }
  auto refuse = [&](const char* why) {
    out.stages.clear();
    out.error = refusal(errc::parse_error, why).on_line(1, static_cast<int>(text.size()) + 1);
    return out;
  };
  int embeddings = 0, losses = 0;
  for (std::size_t s = 0; s < out.stages.size(); ++s) {
    embeddings += out.stages[s].embedding;
    losses += out.stages[s].loss;
    if (out.stages[s].embedding > 0 && s != 0) return refuse("the embedding (E) must be in the first stage");
    if (out.stages[s].loss > 0 && s + 1 != out.stages.size()) return refuse("the loss (L) must be in the last stage");
  }
  if (embeddings > 1) return refuse("the layout has more than one embedding (E)");
  if (losses > 1) return refuse("the layout has more than one loss (L)");
  if (out.layers() + embeddings + losses == 0) return refuse("the layout has no layers");
  return out;
}

/// A layout string checked at compile time: `pipetype::layout<"E|t*3|t*4|t*4|t*3,L">`.
template <detail::fixed_string Text>
struct layout {
  static constexpr verdict error = parse_layout(Text.view()).error;
  static_assert(error.ok(), "pipetype::layout: the layout string does not parse (parse_layout(...).error says where)");
  static constexpr int stages = parse_layout(Text.view()).size();
  /// Every stage's layers, parsed once.
  static constexpr std::array<stage_layers, static_cast<std::size_t>(stages)> table = [] {
    std::array<stage_layers, static_cast<std::size_t>(stages)> t{};
    const layer_layout l = parse_layout(Text.view());
    for (std::size_t s = 0; s < t.size(); ++s) t[s] = l.stages[s];
    return t;
  }();
  /// The layers of stage s.
  static constexpr stage_layers stage(int s) { return table[static_cast<std::size_t>(s)]; }
  static constexpr layer_layout value() {
    layer_layout l;
    l.stages.assign(table.begin(), table.end());
    return l;
  }
};

}  // namespace pipetype
