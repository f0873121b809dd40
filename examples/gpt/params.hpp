// examples/gpt/params.hpp — the model's configuration, each part's parameter layout (tensor names, shapes, offsets) and
// its deterministic initialisation.
// Part of examples/gpt's model (layers.hpp says its equations and conventions).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numbers>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace gpt {

/// The model's sizes. T (seq) is the longest sequence (and wpe's rows); buffers are sized for it.
struct gpt_config {
  int vocab = 0;   // V
  int seq = 0;     // T
  int layers = 0;  // L
  int heads = 0;   // H
  int width = 0;   // C, a multiple of H
  int rows = 0;    // sequences per microbatch
};

/// Throws std::invalid_argument unless every size is positive and C % H == 0.
inline void validate(const gpt_config& c) {
  if (c.vocab <= 0 || c.seq <= 0 || c.layers <= 0 || c.heads <= 0 || c.width <= 0 || c.rows <= 0)
    throw std::invalid_argument("gpt_config: every size must be positive");
  if (c.width % c.heads != 0) throw std::invalid_argument("gpt_config: width must be a multiple of heads");
}

namespace detail {
inline std::size_t z(int v) { return static_cast<std::size_t>(v); }

/// Lays regions out back to back: take(n) is where the next n elements start. Every layout of a
/// part's flat vector or stash is one (block_offsets, block_stash_offsets, head_stash_offsets).
struct packer {
  std::size_t at = 0;
  std::size_t take(std::size_t n) {
    const std::size_t o = at;
    at += n;
    return o;
  }
};
}  // namespace detail

/// Elements of one activation buffer [rows, T, C] (an input, output or gradient of a part).
inline std::size_t activation_floats(const gpt_config& c) {
  return detail::z(c.rows) * detail::z(c.seq) * detail::z(c.width);
}
/// Elements of one token buffer [rows, T] (ids or targets).
inline std::size_t token_capacity(const gpt_config& c) { return detail::z(c.rows) * detail::z(c.seq); }

// ---------------------------------------------------------------------------------------------
// Parameter layout

/// One tensor of a part: its Hugging Face name, shape, and place in the part's flat vector.
struct tensor_info {
  std::string name;
  std::vector<std::size_t> shape;
  std::size_t offset = 0;
  std::size_t size = 0;
};

/// Offsets of a block's 12 tensors in its flat vector (in this order).
struct block_layout {
  std::size_t ln1_w, ln1_b, attn_w, attn_b, attn_proj_w, attn_proj_b, ln2_w, ln2_b, fc_w, fc_b, mlp_proj_w, mlp_proj_b,
      total;
};

inline block_layout block_offsets(const gpt_config& c) {
  const std::size_t C = detail::z(c.width);
  block_layout l{};
  detail::packer pack;
  l.ln1_w = pack.take(C);
  l.ln1_b = pack.take(C);
  l.attn_w = pack.take(C * 3 * C);
  l.attn_b = pack.take(3 * C);
  l.attn_proj_w = pack.take(C * C);
  l.attn_proj_b = pack.take(C);
  l.ln2_w = pack.take(C);
  l.ln2_b = pack.take(C);
  l.fc_w = pack.take(C * 4 * C);
  l.fc_b = pack.take(4 * C);
  l.mlp_proj_w = pack.take(4 * C * C);
  l.mlp_proj_b = pack.take(C);
  l.total = pack.at;
  return l;
}

/// Parameters of each part: (V + T)·C, 12C² + 13C, 2C + V·C.
inline std::size_t embedding_params(const gpt_config& c) {
  return (detail::z(c.vocab) + detail::z(c.seq)) * detail::z(c.width);
}
inline std::size_t block_params(const gpt_config& c) { return block_offsets(c).total; }
inline std::size_t head_params(const gpt_config& c) { return (2 + detail::z(c.vocab)) * detail::z(c.width); }
inline std::size_t model_param_count(const gpt_config& c) {
  return embedding_params(c) + detail::z(c.layers) * block_params(c) + head_params(c);
}

/// wte.weight [V, C] at 0, wpe.weight [T, C] at V·C.
inline std::vector<tensor_info> embedding_tensors(const gpt_config& c) {
  const std::size_t V = detail::z(c.vocab), T = detail::z(c.seq), C = detail::z(c.width);
  return {{"wte.weight", {V, C}, 0, V * C}, {"wpe.weight", {T, C}, V * C, T * C}};
}

/// Block `layer`'s tensors, named h.{layer}.…, at the offsets of block_offsets.
inline std::vector<tensor_info> block_tensors(const gpt_config& c, int layer) {
  const std::size_t C = detail::z(c.width);
  const block_layout l = block_offsets(c);
  const std::string p = "h." + std::to_string(layer) + ".";
  return {{p + "ln_1.weight", {C}, l.ln1_w, C},
          {p + "ln_1.bias", {C}, l.ln1_b, C},
          {p + "attn.c_attn.weight", {C, 3 * C}, l.attn_w, 3 * C * C},
          {p + "attn.c_attn.bias", {3 * C}, l.attn_b, 3 * C},
          {p + "attn.c_proj.weight", {C, C}, l.attn_proj_w, C * C},
          {p + "attn.c_proj.bias", {C}, l.attn_proj_b, C},
          {p + "ln_2.weight", {C}, l.ln2_w, C},
          {p + "ln_2.bias", {C}, l.ln2_b, C},
          {p + "mlp.c_fc.weight", {C, 4 * C}, l.fc_w, 4 * C * C},
          {p + "mlp.c_fc.bias", {4 * C}, l.fc_b, 4 * C},
          {p + "mlp.c_proj.weight", {4 * C, C}, l.mlp_proj_w, 4 * C * C},
          {p + "mlp.c_proj.bias", {C}, l.mlp_proj_b, C}};
}

/// ln_f.weight [C] at 0, ln_f.bias [C] at C, lm_head.weight [V, C] at 2C.
inline std::vector<tensor_info> head_tensors(const gpt_config& c) {
  const std::size_t V = detail::z(c.vocab), C = detail::z(c.width);
  return {{"ln_f.weight", {C}, 0, C}, {"ln_f.bias", {C}, C, C}, {"lm_head.weight", {V, C}, 2 * C, V * C}};
}

// ---------------------------------------------------------------------------------------------
// Deterministic initialisation

/// splitmix64's output function: a bijective 64-bit mix.
inline std::uint64_t mix64(std::uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/// The next value of a splitmix64 stream.
inline std::uint64_t splitmix64(std::uint64_t& state) { return mix64(state += 0x9e3779b97f4a7c15ULL); }

/// FNV-1a of a name (a tensor's identity for its random stream).
inline std::uint64_t name_hash(std::string_view s) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (char ch : s) {
    h ^= static_cast<unsigned char>(ch);
    h *= 0x100000001b3ULL;
  }
  return h;
}

/// Fills `out` with normal(0, stddev) from splitmix64 + Box–Muller (both values of each pair used).
inline void fill_normal(std::span<float> out, double stddev, std::uint64_t stream) {
  std::uint64_t s = stream;
  const double two_pi = 2.0 * std::numbers::pi;
  for (std::size_t i = 0; i < out.size(); i += 2) {
    const double u1 = (static_cast<double>(splitmix64(s) >> 11) + 0.5) * 0x1.0p-53;  // (0, 1)
    const double u2 = static_cast<double>(splitmix64(s) >> 11) * 0x1.0p-53;          // [0, 1)
    const double r = std::sqrt(-2.0 * std::log(u1));
    out[i] = static_cast<float>(stddev * r * std::cos(two_pi * u2));
    if (i + 1 < out.size()) out[i + 1] = static_cast<float>(stddev * r * std::sin(two_pi * u2));
  }
}

/// Initialises `params` (a part's flat vector) tensor by tensor, by name: LayerNorm weights 1, biases 0,
/// *.c_proj.weight normal(0, 0.02/√(2L)), other weights normal(0, 0.02); stream = (seed, name).
inline void init_tensors(const gpt_config& c, std::span<const tensor_info> tensors, std::span<float> params,
                         std::uint64_t seed) {
  auto ends_with = [](std::string_view s, std::string_view suffix) {
    return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
  };
  for (const tensor_info& t : tensors) {
    if (t.offset + t.size > params.size()) throw std::invalid_argument("init_tensors: parameter vector too short");
    std::span<float> dst = params.subspan(t.offset, t.size);
    const std::string_view n = t.name;
    if (ends_with(n, ".bias")) {
      std::fill(dst.begin(), dst.end(), 0.0f);
    } else if (n.find("ln_") != std::string_view::npos) {
      std::fill(dst.begin(), dst.end(), 1.0f);
    } else {
      const double stddev = ends_with(n, "c_proj.weight") ? 0.02 / std::sqrt(2.0 * c.layers) : 0.02;
      fill_normal(dst, stddev, mix64(seed) ^ name_hash(n));
    }
  }
}

inline std::vector<float> init_embedding(const gpt_config& c, std::uint64_t seed) {
  std::vector<float> p(embedding_params(c));
  init_tensors(c, embedding_tensors(c), p, seed);
  return p;
}
inline std::vector<float> init_block(const gpt_config& c, int layer, std::uint64_t seed) {
  std::vector<float> p(block_params(c));
  init_tensors(c, block_tensors(c, layer), p, seed);
  return p;
}
inline std::vector<float> init_head(const gpt_config& c, std::uint64_t seed) {
  std::vector<float> p(head_params(c));
  init_tensors(c, head_tensors(c), p, seed);
  return p;
}

}  // namespace gpt
