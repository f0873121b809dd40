// examples/gpt/corpus.hpp — the character-level corpus the examples train on, and the microbatches drawn from it.
// Part of examples/gpt's model (layers.hpp says its equations and conventions).
#pragma once

#include "model.hpp"

namespace gpt {

// ---------------------------------------------------------------------------------------------
// Character-level corpus

/// A byte-level vocabulary (the bytes that occur, sorted) and the text as ids.
struct char_corpus {
  std::vector<unsigned char> vocab;       // id → byte
  std::array<std::int32_t, 256> id_of{};  // byte → id, −1 when absent
  std::vector<std::int32_t> ids;          // the whole text

  int vocab_size() const { return static_cast<int>(vocab.size()); }

  /// ids of `text`; throws std::invalid_argument on a byte outside the vocabulary.
  std::vector<std::int32_t> encode(std::string_view text) const {
    std::vector<std::int32_t> out;
    out.reserve(text.size());
    for (char ch : text) {
      const std::int32_t id = id_of[static_cast<unsigned char>(ch)];
      if (id < 0)
        throw std::invalid_argument("char_corpus: byte " + std::to_string(static_cast<unsigned char>(ch)) +
                                    " not in the vocabulary");
      out.push_back(id);
    }
    return out;
  }

  std::string decode(std::span<const std::int32_t> ids_) const {
    std::string s;
    for (std::int32_t id : ids_) s += static_cast<char>(vocab.at(detail::z(id)));
    return s;
  }
};

/// The corpus of `text`: vocabulary from the bytes that occur (sorted), ids of the whole text.
inline char_corpus make_corpus(std::string_view text) {
  char_corpus corpus;
  std::array<bool, 256> seen{};
  for (char ch : text) seen[static_cast<unsigned char>(ch)] = true;
  corpus.id_of.fill(-1);
  for (std::size_t b = 0; b < 256; ++b) {
    if (!seen[b]) continue;
    corpus.id_of[b] = static_cast<std::int32_t>(corpus.vocab.size());
    corpus.vocab.push_back(static_cast<unsigned char>(b));
  }
  corpus.ids = corpus.encode(text);
  return corpus;
}

/// The concatenated bytes of `paths` as a corpus; throws std::runtime_error on a file it cannot read.
inline char_corpus read_corpus(std::span<const std::filesystem::path> paths) {
  std::string text;
  for (const auto& path : paths) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot read " + path.string());
    char buf[1 << 16];
    while (in.read(buf, sizeof buf) || in.gcount() > 0) text.append(buf, static_cast<std::size_t>(in.gcount()));
  }
  return make_corpus(text);
}

/// Microbatch `index` of training step `step`: `rows` windows of t + 1 consecutive ids at offsets
/// drawn from (seed, step, index, row); ids = window[0..t), targets = window[1..t]. Deterministic.
inline microbatch draw_microbatch(const char_corpus& corpus, int rows, int t, std::uint64_t step,
                                  std::uint64_t index = 0, std::uint64_t seed = 0) {
  if (rows <= 0 || t <= 0) throw std::invalid_argument("draw_microbatch: rows and t must be positive");
  if (corpus.ids.size() < detail::z(t) + 1) throw std::invalid_argument("draw_microbatch: corpus shorter than t + 1");
  const std::uint64_t starts = corpus.ids.size() - detail::z(t);  // windows [s, s + t] with s < starts
  microbatch mb;
  mb.t = t;
  mb.ids.resize(detail::z(rows) * detail::z(t));
  mb.targets.resize(mb.ids.size());
  for (std::size_t r = 0; r < detail::z(rows); ++r) {
    const std::uint64_t h = mix64(mix64(mix64(mix64(seed ^ 0x243f6a8885a308d3ULL) ^ step) ^ index) ^ r);
    const std::size_t start = static_cast<std::size_t>(h % starts);
    for (std::size_t k = 0; k < detail::z(t); ++k) {
      mb.ids[r * detail::z(t) + k] = corpus.ids[start + k];
      mb.targets[r * detail::z(t) + k] = corpus.ids[start + k + 1];
    }
  }
  return mb;
}

}  // namespace gpt
