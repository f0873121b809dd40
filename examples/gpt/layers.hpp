// examples/gpt/layers.hpp — the numerics of a small GPT-2 decoder (forward, backward, init), in plain C++20.
//
// The model is GPT-2 (Radford et al. 2019, "Language Models are Unsupervised Multitask Learners"):
// pre-LayerNorm blocks, no dropout, an untied LM head. Weights are laid out as in Hugging Face's GPT-2
// (Conv1D: y = x·W + b with W stored [in, out]) and named as its state dict without the
// `transformer.` prefix, so a dump can be loaded and checked by an independent PyTorch model
// (tests/pytorch/check_gpt_dump.py). The code here is written from the equations, not copied.
//
//   h      = wte[id] + wpe[position]                                   embedding part
//   a      = h + attn(ln_1(h))                                         block i (i = 0..L-1)
//   h'     = a + mlp(ln_2(a))
//   loss   = Σ_tokens cross_entropy(ln_f(h) · lm_head.weightᵀ, target)  head part (a SUM, see below)
//   ln     = LayerNorm over C, eps 1e-5, biased variance
//   attn   = per head causal softmax(q·kᵀ/√(C/H))·v, q|k|v = x·c_attn.weight + c_attn.bias (in that
//            order along the last dim), heads concatenated, then ·c_proj.weight + c_proj.bias
//   mlp    = gelu_tanh(x·c_fc.weight + c_fc.bias)·c_proj.weight + c_proj.bias,
//            gelu_tanh(x) = 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
//
// Conventions.
//  * Three kinds of part, each with its own flat parameter vector (tensors back to back, C order,
//    offsets from *_tensors(cfg)) and a weight-gradient vector of the same layout: the embedding
//    (wte [V,C], wpe [T,C]), one block (12 tensors) and the head (ln_f.weight, ln_f.bias,
//    lm_head.weight [V,C]).
//  * A microbatch is `rows` sequences of the same actual length t ≤ T (= cfg.seq). Every function
//    takes t; buffers are sized for T but only their packed prefix is used: activations are
//    [rows, t, C] with element (r, τ, c) at (r·t + τ)·C + c; token ids and targets are int32
//    [rows, t] at r·t + τ. Position τ of every row uses wpe row τ.
//  * Each part has forward / backward_input / backward_weight over a per-microbatch stash (R
//    elements, size *_stash_floats(cfg), sized for T). forward fills it with what the backward needs;
//    backward_input computes the input gradient (none for the embedding) and leaves in the stash the
//    intermediate gradients that backward_weight reads; backward_weight WRITES (never accumulates)
//    this microbatch's gradient of every parameter of the part. backward = backward_input then
//    backward_weight, literally, so splitting the backward gives the same bits. A microbatch's stash
//    must stay untouched from its forward to its backward_weight (one stash per microbatch in flight).
//  * The head's forward returns the SUM of the cross-entropy of its rows·t tokens as a double (each
//    token's term computed in R, summed in double). Its backward_input takes loss_scale = d(loss)/d(sum),
//    e.g. 1/(total tokens of the step) for a mean over every token of every microbatch.
//  * Templates over the element type R (float for training; double for finite-difference checks).
//    Single-threaded with fixed loop orders: the same inputs give the same bits, on every run.
//  * Gradients of a step are the per-microbatch weight gradients added into a zeroed accumulator in
//    microbatch order (add_into); reference_step does exactly that, so a pipelined run that adds
//    each stage's per-microbatch gradients in microbatch order gets identical bits.
//  * Initialisation (GPT-2-like): weights ~ normal(0, 0.02), both c_proj weights ~ normal(0,
//    0.02/√(2L)), biases 0, LayerNorm weights 1. Each tensor draws from its own splitmix64 stream
//    seeded from (seed, tensor name), so a part's values do not depend on how the model is split.
#pragma once

#include "npy.hpp"

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
  std::size_t at = 0;
  auto take = [&at](std::size_t n) {
    const std::size_t o = at;
    at += n;
    return o;
  };
  l.ln1_w = take(C);
  l.ln1_b = take(C);
  l.attn_w = take(C * 3 * C);
  l.attn_b = take(3 * C);
  l.attn_proj_w = take(C * C);
  l.attn_proj_b = take(C);
  l.ln2_w = take(C);
  l.ln2_b = take(C);
  l.fc_w = take(C * 4 * C);
  l.fc_b = take(4 * C);
  l.mlp_proj_w = take(4 * C * C);
  l.mlp_proj_b = take(C);
  l.total = at;
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

// ---------------------------------------------------------------------------------------------
// Building blocks (rows of n tokens; all matrices row-major)

namespace detail {

/// y[j] += a·x[j] for j < n, in blocks of 8 that the compiler vectorises at -O2 (each element is
/// still one multiply and one add, so the bits are those of the plain loop).
template <class R>
void axpy(R* __restrict y, const R* __restrict x, R a, std::size_t n) {
  std::size_t j = 0;
  for (; j + 8 <= n; j += 8) {
    R* __restrict yy = y + j;
    const R* __restrict xx = x + j;
    yy[0] += a * xx[0];
    yy[1] += a * xx[1];
    yy[2] += a * xx[2];
    yy[3] += a * xx[3];
    yy[4] += a * xx[4];
    yy[5] += a * xx[5];
    yy[6] += a * xx[6];
    yy[7] += a * xx[7];
  }
  for (; j < n; ++j) y[j] += a * x[j];
}

/// dst [cols, rows] = src [rows, cols]ᵀ.
template <class R>
void transpose(R* __restrict dst, const R* __restrict src, std::size_t rows, std::size_t cols) {
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
}

/// out[n, o] = bias[o] + Σ_i in[n, i]·w[i, o], i ascending   (w [I, O]; bias may be null).
template <class R>
void linear_forward(R* out, const R* in, const R* w, const R* bias, std::size_t n, std::size_t I, std::size_t O) {
  for (std::size_t r = 0; r < n; ++r) {
    R* o = out + r * O;
    const R* x = in + r * I;
    if (bias) {
      std::copy(bias, bias + O, o);
    } else {
      std::fill(o, o + O, R(0));
    }
    for (std::size_t i = 0; i < I; ++i) axpy(o, w + i * O, x[i], O);
  }
}

/// din[n, i] = Σ_o dout[n, o]·w[i, o], o ascending from 0   (written; wt: I·O elements of scratch).
template <class R>
void linear_backward_input(R* din, const R* dout, const R* w, R* wt, std::size_t n, std::size_t I, std::size_t O) {
  transpose(wt, w, I, O);  // wt [O, I]
  for (std::size_t r = 0; r < n; ++r) {
    const R* g = dout + r * O;
    R* d = din + r * I;
    std::fill(d, d + I, R(0));
    for (std::size_t j = 0; j < O; ++j) axpy(d, wt + j * I, g[j], I);
  }
}

/// dw[i, o] = Σ_n in[n, i]·dout[n, o], dbias[o] = Σ_n dout[n, o], n ascending   (written; dbias may be null).
template <class R>
void linear_backward_weight(R* dw, R* dbias, const R* in, const R* dout, std::size_t n, std::size_t I, std::size_t O) {
  std::fill(dw, dw + I * O, R(0));
  if (dbias) std::fill(dbias, dbias + O, R(0));
  for (std::size_t r = 0; r < n; ++r) {
    const R* x = in + r * I;
    const R* g = dout + r * O;
    for (std::size_t i = 0; i < I; ++i) axpy(dw + i * O, g, x[i], O);
    if (dbias) axpy(dbias, g, R(1), O);
  }
}

inline constexpr double ln_eps = 1e-5;

/// y = (x − mean)·rstd·gamma + beta per row of C; keeps mean and rstd per row.
template <class R>
void layernorm_forward(R* y, R* mean, R* rstd, const R* x, const R* gamma, const R* beta, std::size_t n,
                       std::size_t C) {
  for (std::size_t r = 0; r < n; ++r) {
    const R* xr = x + r * C;
    R s = R(0);
    for (std::size_t c = 0; c < C; ++c) s += xr[c];
    const R m = s / R(C);
    R v = R(0);
    for (std::size_t c = 0; c < C; ++c) {
      const R d = xr[c] - m;
      v += d * d;
    }
    const R rs = R(1) / std::sqrt(v / R(C) + R(ln_eps));
    R* yr = y + r * C;
    for (std::size_t c = 0; c < C; ++c) yr[c] = (xr[c] - m) * rs * gamma[c] + beta[c];
    mean[r] = m;
    rstd[r] = rs;
  }
}

/// dx[n, c] = residual[n, c] + (LayerNorm's input gradient for dy); residual may be null.
template <class R>
void layernorm_backward_input(R* dx, const R* dy, const R* x, const R* mean, const R* rstd, const R* gamma,
                              const R* residual, std::size_t n, std::size_t C) {
  for (std::size_t r = 0; r < n; ++r) {
    const R* xr = x + r * C;
    const R* gr = dy + r * C;
    const R m = mean[r], rs = rstd[r];
    R s1 = R(0), s2 = R(0);
    for (std::size_t c = 0; c < C; ++c) {
      const R xh = (xr[c] - m) * rs;
      const R dxh = gr[c] * gamma[c];
      s1 += dxh;
      s2 += dxh * xh;
    }
    s1 /= R(C);
    s2 /= R(C);
    R* d = dx + r * C;
    for (std::size_t c = 0; c < C; ++c) {
      const R xh = (xr[c] - m) * rs;
      const R v = rs * (gr[c] * gamma[c] - s1 - xh * s2);
      d[c] = residual ? residual[r * C + c] + v : v;
    }
  }
}

/// dgamma[c] = Σ_n dy·x̂, dbeta[c] = Σ_n dy   (written).
template <class R>
void layernorm_backward_weight(R* dgamma, R* dbeta, const R* dy, const R* x, const R* mean, const R* rstd,
                               std::size_t n, std::size_t C) {
  std::fill(dgamma, dgamma + C, R(0));
  std::fill(dbeta, dbeta + C, R(0));
  for (std::size_t r = 0; r < n; ++r) {
    const R* xr = x + r * C;
    const R* gr = dy + r * C;
    const R m = mean[r], rs = rstd[r];
    for (std::size_t c = 0; c < C; ++c) {
      dgamma[c] += gr[c] * ((xr[c] - m) * rs);
      dbeta[c] += gr[c];
    }
  }
}

template <class R>
inline constexpr R gelu_k0 = R(0.79788456080286535587989211986876);  // √(2/π)
template <class R>
inline constexpr R gelu_k1 = R(0.044715);

template <class R>
R gelu(R x) {
  return R(0.5) * x * (R(1) + std::tanh(gelu_k0<R> * (x + gelu_k1<R> * x * x * x)));
}

template <class R>
R gelu_grad(R x) {
  const R th = std::tanh(gelu_k0<R> * (x + gelu_k1<R> * x * x * x));
  return R(0.5) * (R(1) + th) + R(0.5) * x * (R(1) - th * th) * gelu_k0<R> * (R(1) + R(3) * gelu_k1<R> * x * x);
}

inline void check_length(const gpt_config& c, int t) {
  if (t < 1 || t > c.seq)
    throw std::invalid_argument("gpt: microbatch length " + std::to_string(t) + " outside [1, " +
                                std::to_string(c.seq) + "]");
}

}  // namespace detail

// ---------------------------------------------------------------------------------------------
// Embedding part: ids int32 [rows, t] → h [rows, t, C]; no input gradient. Its forward does not use
// the stash (null is fine); backward_input copies the output gradient [rows, t, C] into it for
// backward_weight (a caller may instead pass its grad_output buffer itself as backward_weight's stash:
// that is all backward_input does).

inline std::size_t embedding_stash_floats(const gpt_config& c) { return activation_floats(c); }

template <class R>
void embedding_forward(const gpt_config& c, const R* params, const std::int32_t* ids, R* out, R* /*stash*/, int t) {
  detail::check_length(c, t);
  const std::size_t C = detail::z(c.width), tt = detail::z(t), N = detail::z(c.rows) * tt;
  const R* wte = params;
  const R* wpe = params + detail::z(c.vocab) * C;
  for (std::size_t n = 0; n < N; ++n) {
    const std::int32_t id = ids[n];
    if (id < 0 || id >= c.vocab)
      throw std::out_of_range("gpt: token id " + std::to_string(id) + " outside the vocabulary");
    const R* e = wte + detail::z(id) * C;
    const R* p = wpe + (n % tt) * C;
    R* o = out + n * C;
    for (std::size_t k = 0; k < C; ++k) o[k] = e[k] + p[k];
  }
}

template <class R>
void embedding_backward_input(const gpt_config& c, const R* /*params*/, const std::int32_t* /*ids*/,
                              const R* grad_output, R* stash, int t) {
  detail::check_length(c, t);
  const std::size_t n = detail::z(c.rows) * detail::z(t) * detail::z(c.width);
  std::copy(grad_output, grad_output + n, stash);
}

template <class R>
void embedding_backward_weight(const gpt_config& c, const R* /*params*/, const std::int32_t* ids, const R* stash,
                               R* weight_grad, int t) {
  detail::check_length(c, t);
  const std::size_t C = detail::z(c.width), tt = detail::z(t), N = detail::z(c.rows) * tt;
  std::fill(weight_grad, weight_grad + embedding_params(c), R(0));
  R* dwte = weight_grad;
  R* dwpe = weight_grad + detail::z(c.vocab) * C;
  for (std::size_t n = 0; n < N; ++n) {
    const R* g = stash + n * C;
    R* e = dwte + detail::z(ids[n]) * C;
    R* p = dwpe + (n % tt) * C;
    for (std::size_t k = 0; k < C; ++k) {
      e[k] += g[k];
      p[k] += g[k];
    }
  }
}

template <class R>
void embedding_backward(const gpt_config& c, const R* params, const std::int32_t* ids, const R* grad_output, R* stash,
                        R* weight_grad, int t) {
  embedding_backward_input(c, params, ids, grad_output, stash, t);
  embedding_backward_weight(c, params, ids, stash, weight_grad, t);
}

// ---------------------------------------------------------------------------------------------
// Block part: x [rows, t, C] → out [rows, t, C].

/// Offsets into a block's stash (capacity for T; each region packed by the actual t).
struct block_stash_layout {
  // filled by forward
  std::size_t xn1, mean1, rstd1, qkv, att, y, a, xn2, mean2, rstd2, u, g;
  // filled by backward_input, read by backward_weight
  std::size_t dout, du, dxn2, da, dqkv, dxn1;
  // backward_input's scratch
  std::size_t dy, dp, wt;
  std::size_t total;
};

inline block_stash_layout block_stash_offsets(const gpt_config& c) {
  const std::size_t C = detail::z(c.width), T = detail::z(c.seq), N = detail::z(c.rows) * T;
  const std::size_t H = detail::z(c.heads);
  block_stash_layout s{};
  std::size_t at = 0;
  auto take = [&at](std::size_t n) {
    const std::size_t o = at;
    at += n;
    return o;
  };
  s.xn1 = take(N * C);
  s.mean1 = take(N);
  s.rstd1 = take(N);
  s.qkv = take(N * 3 * C);
  s.att = take(detail::z(c.rows) * H * T * T);  // softmax probabilities [rows, H, t, t], zero above the diagonal
  s.y = take(N * C);                            // heads concatenated, before c_proj
  s.a = take(N * C);                            // residual stream after attention
  s.xn2 = take(N * C);
  s.mean2 = take(N);
  s.rstd2 = take(N);
  s.u = take(N * 4 * C);  // c_fc output (before gelu)
  s.g = take(N * 4 * C);  // gelu(u)
  s.dout = take(N * C);
  s.du = take(N * 4 * C);
  s.dxn2 = take(N * C);
  s.da = take(N * C);
  s.dqkv = take(N * 3 * C);
  s.dxn1 = take(N * C);
  s.dy = take(N * C);
  s.dp = take(T);
  s.wt = take(4 * C * C);  // a transposed weight
  s.total = at;
  return s;
}

/// rows·(27·T·C + 4·T + H·T²) + T + 4C² elements.
inline std::size_t block_stash_floats(const gpt_config& c) { return block_stash_offsets(c).total; }

/// out = block(x); fills the forward part of the stash.
template <class R>
void block_forward(const gpt_config& c, const R* params, const R* x, R* out, R* stash, int t) {
  detail::check_length(c, t);
  const std::size_t C = detail::z(c.width), H = detail::z(c.heads), hd = C / H, tt = detail::z(t);
  const std::size_t rows = detail::z(c.rows), N = rows * tt;
  const block_layout P = block_offsets(c);
  const block_stash_layout S = block_stash_offsets(c);
  R* xn1 = stash + S.xn1;
  R* qkv = stash + S.qkv;
  R* att = stash + S.att;
  R* y = stash + S.y;
  R* a = stash + S.a;
  R* xn2 = stash + S.xn2;
  R* u = stash + S.u;
  R* g = stash + S.g;

  detail::layernorm_forward(xn1, stash + S.mean1, stash + S.rstd1, x, params + P.ln1_w, params + P.ln1_b, N, C);
  detail::linear_forward(qkv, xn1, params + P.attn_w, params + P.attn_b, N, C, 3 * C);

  const R scale = R(1) / std::sqrt(R(hd));
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t h = 0; h < H; ++h) {
      for (std::size_t i = 0; i < tt; ++i) {
        const R* q = qkv + (r * tt + i) * 3 * C + h * hd;
        R* p = att + ((r * H + h) * tt + i) * tt;
        R mx = -std::numeric_limits<R>::infinity();
        for (std::size_t j = 0; j <= i; ++j) {
          const R* k = qkv + (r * tt + j) * 3 * C + C + h * hd;
          R s = R(0);
          for (std::size_t d = 0; d < hd; ++d) s += q[d] * k[d];
          s *= scale;
          p[j] = s;
          mx = std::max(mx, s);
        }
        R sum = R(0);
        for (std::size_t j = 0; j <= i; ++j) {
          p[j] = std::exp(p[j] - mx);
          sum += p[j];
        }
        const R inv = R(1) / sum;
        for (std::size_t j = 0; j <= i; ++j) p[j] *= inv;
        for (std::size_t j = i + 1; j < tt; ++j) p[j] = R(0);
        R* yi = y + (r * tt + i) * C + h * hd;
        std::fill(yi, yi + hd, R(0));
        for (std::size_t j = 0; j <= i; ++j) detail::axpy(yi, qkv + (r * tt + j) * 3 * C + 2 * C + h * hd, p[j], hd);
      }
    }
  }

  detail::linear_forward(a, y, params + P.attn_proj_w, params + P.attn_proj_b, N, C, C);
  for (std::size_t k = 0; k < N * C; ++k) a[k] = x[k] + a[k];
  detail::layernorm_forward(xn2, stash + S.mean2, stash + S.rstd2, a, params + P.ln2_w, params + P.ln2_b, N, C);
  detail::linear_forward(u, xn2, params + P.fc_w, params + P.fc_b, N, C, 4 * C);
  for (std::size_t k = 0; k < N * 4 * C; ++k) g[k] = detail::gelu(u[k]);
  detail::linear_forward(out, g, params + P.mlp_proj_w, params + P.mlp_proj_b, N, 4 * C, C);
  for (std::size_t k = 0; k < N * C; ++k) out[k] = a[k] + out[k];
}

/// grad_input = d(loss)/dx given grad_output = d(loss)/d(out); leaves dout, du, dxn2, da, dqkv, dxn1
/// in the stash for backward_weight (and uses dy, dp, wt as scratch).
template <class R>
void block_backward_input(const gpt_config& c, const R* params, const R* x, const R* grad_output, R* grad_input,
                          R* stash, int t) {
  detail::check_length(c, t);
  const std::size_t C = detail::z(c.width), H = detail::z(c.heads), hd = C / H, tt = detail::z(t);
  const std::size_t rows = detail::z(c.rows), N = rows * tt;
  const block_layout P = block_offsets(c);
  const block_stash_layout S = block_stash_offsets(c);
  const R* qkv = stash + S.qkv;
  const R* att = stash + S.att;
  const R* a = stash + S.a;
  const R* u = stash + S.u;
  R* dout = stash + S.dout;
  R* du = stash + S.du;
  R* dxn2 = stash + S.dxn2;
  R* da = stash + S.da;
  R* dqkv = stash + S.dqkv;
  R* dxn1 = stash + S.dxn1;
  R* dy = stash + S.dy;
  R* dp = stash + S.dp;
  R* wt = stash + S.wt;

  std::copy(grad_output, grad_output + N * C, dout);
  // mlp
  detail::linear_backward_input(du, dout, params + P.mlp_proj_w, wt, N, 4 * C, C);  // d gelu output
  for (std::size_t k = 0; k < N * 4 * C; ++k) du[k] *= detail::gelu_grad(u[k]);
  detail::linear_backward_input(dxn2, du, params + P.fc_w, wt, N, C, 4 * C);
  detail::layernorm_backward_input(da, dxn2, a, stash + S.mean2, stash + S.rstd2, params + P.ln2_w, dout, N, C);
  // attention
  detail::linear_backward_input(dy, da, params + P.attn_proj_w, wt, N, C, C);
  std::fill(dqkv, dqkv + N * 3 * C, R(0));
  const R scale = R(1) / std::sqrt(R(hd));
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t h = 0; h < H; ++h) {
      for (std::size_t i = 0; i < tt; ++i) {
        const R* p = att + ((r * H + h) * tt + i) * tt;
        const R* dyi = dy + (r * tt + i) * C + h * hd;
        const R* q = qkv + (r * tt + i) * 3 * C + h * hd;
        R* dq = dqkv + (r * tt + i) * 3 * C + h * hd;
        R dsum = R(0);
        for (std::size_t j = 0; j <= i; ++j) {
          const R* v = qkv + (r * tt + j) * 3 * C + 2 * C + h * hd;
          R s = R(0);
          for (std::size_t d = 0; d < hd; ++d) s += dyi[d] * v[d];
          dp[j] = s;
          dsum += p[j] * s;
        }
        for (std::size_t j = 0; j <= i; ++j) {
          const R* k = qkv + (r * tt + j) * 3 * C + C + h * hd;
          R* dk = dqkv + (r * tt + j) * 3 * C + C + h * hd;
          R* dv = dqkv + (r * tt + j) * 3 * C + 2 * C + h * hd;
          const R pj = p[j];
          const R ds = pj * (dp[j] - dsum) * scale;
          detail::axpy(dq, k, ds, hd);
          detail::axpy(dk, q, ds, hd);
          detail::axpy(dv, dyi, pj, hd);
        }
      }
    }
  }
  detail::linear_backward_input(dxn1, dqkv, params + P.attn_w, wt, N, C, 3 * C);
  detail::layernorm_backward_input(grad_input, dxn1, x, stash + S.mean1, stash + S.rstd1, params + P.ln1_w, da, N, C);
}

/// Writes the microbatch's gradient of the block's 12 tensors (block_offsets layout) into weight_grad.
template <class R>
void block_backward_weight(const gpt_config& c, const R* /*params*/, const R* x, const R* stash, R* weight_grad,
                           int t) {
  detail::check_length(c, t);
  const std::size_t C = detail::z(c.width), N = detail::z(c.rows) * detail::z(t);
  const block_layout P = block_offsets(c);
  const block_stash_layout S = block_stash_offsets(c);
  R* w = weight_grad;
  detail::linear_backward_weight(w + P.mlp_proj_w, w + P.mlp_proj_b, stash + S.g, stash + S.dout, N, 4 * C, C);
  detail::linear_backward_weight(w + P.fc_w, w + P.fc_b, stash + S.xn2, stash + S.du, N, C, 4 * C);
  detail::layernorm_backward_weight(w + P.ln2_w, w + P.ln2_b, stash + S.dxn2, stash + S.a, stash + S.mean2,
                                    stash + S.rstd2, N, C);
  detail::linear_backward_weight(w + P.attn_proj_w, w + P.attn_proj_b, stash + S.y, stash + S.da, N, C, C);
  detail::linear_backward_weight(w + P.attn_w, w + P.attn_b, stash + S.xn1, stash + S.dqkv, N, C, 3 * C);
  detail::layernorm_backward_weight(w + P.ln1_w, w + P.ln1_b, stash + S.dxn1, x, stash + S.mean1, stash + S.rstd1, N,
                                    C);
}

template <class R>
void block_backward(const gpt_config& c, const R* params, const R* x, const R* grad_output, R* grad_input, R* stash,
                    R* weight_grad, int t) {
  block_backward_input(c, params, x, grad_output, grad_input, stash, t);
  block_backward_weight(c, params, x, stash, weight_grad, t);
}

// ---------------------------------------------------------------------------------------------
// Head part: x [rows, t, C] and targets int32 [rows, t] → Σ cross-entropy (double).

/// Offsets into the head's stash.
struct head_stash_layout {
  std::size_t xn, mean, rstd;  // ln_f
  std::size_t logits;          // [rows, t, V], for evaluation
  std::size_t dlogits;         // softmax − onehot after forward; × loss_scale after backward_input
  std::size_t dxn;             // gradient of ln_f's output, from backward_input to backward_weight
  std::size_t wt;              // forward's scratch: lm_head.weight transposed [C, V]
  std::size_t total;
};

inline head_stash_layout head_stash_offsets(const gpt_config& c) {
  const std::size_t C = detail::z(c.width), V = detail::z(c.vocab), N = token_capacity(c);
  head_stash_layout s{};
  s.xn = 0;
  s.mean = N * C;
  s.rstd = s.mean + N;
  s.logits = s.rstd + N;
  s.dlogits = s.logits + N * V;
  s.dxn = s.dlogits + N * V;
  s.wt = s.dxn + N * C;
  s.total = s.wt + V * C;
  return s;
}

/// rows·T·(2C + 2V + 2) + V·C elements.
inline std::size_t head_stash_floats(const gpt_config& c) { return head_stash_offsets(c).total; }

/// The logits [rows, t, V] (packed) that the last head_forward on this stash computed.
template <class R>
const R* head_logits(const gpt_config& c, const R* stash) {
  return stash + head_stash_offsets(c).logits;
}

/// Σ over the rows·t tokens of −log softmax(logits)[target]; keeps the logits and softmax − onehot
/// in the stash.
template <class R>
double head_forward(const gpt_config& c, const R* params, const R* x, const std::int32_t* targets, R* stash, int t) {
  detail::check_length(c, t);
  const std::size_t C = detail::z(c.width), V = detail::z(c.vocab), N = detail::z(c.rows) * detail::z(t);
  const head_stash_layout S = head_stash_offsets(c);
  R* xn = stash + S.xn;
  R* logits = stash + S.logits;
  R* dl = stash + S.dlogits;
  R* wt = stash + S.wt;
  detail::transpose(wt, params + 2 * C, V, C);  // lm_head.weight [V, C] → [C, V]
  detail::layernorm_forward(xn, stash + S.mean, stash + S.rstd, x, params, params + C, N, C);
  double total = 0.0;
  for (std::size_t n = 0; n < N; ++n) {
    const std::int32_t tgt = targets[n];
    if (tgt < 0 || tgt >= c.vocab)
      throw std::out_of_range("gpt: target " + std::to_string(tgt) + " outside the vocabulary");
    const R* xr = xn + n * C;
    R* l = logits + n * V;
    std::fill(l, l + V, R(0));
    for (std::size_t k = 0; k < C; ++k) detail::axpy(l, wt + k * V, xr[k], V);
    R mx = -std::numeric_limits<R>::infinity();
    for (std::size_t v = 0; v < V; ++v) mx = std::max(mx, l[v]);
    R* d = dl + n * V;
    R sum = R(0);
    for (std::size_t v = 0; v < V; ++v) {
      d[v] = std::exp(l[v] - mx);
      sum += d[v];
    }
    const R inv = R(1) / sum;
    for (std::size_t v = 0; v < V; ++v) d[v] *= inv;
    d[detail::z(tgt)] -= R(1);
    const R loss = mx + std::log(sum) - l[detail::z(tgt)];
    total += static_cast<double>(loss);
  }
  return total;
}

/// grad_input = d(loss)/dx with d(loss)/d(Σ) = loss_scale. Scales the stash's dlogits in place, so it
/// runs once per forward.
template <class R>
void head_backward_input(const gpt_config& c, const R* params, const R* x, R loss_scale, R* grad_input, R* stash,
                         int t) {
  detail::check_length(c, t);
  const std::size_t C = detail::z(c.width), V = detail::z(c.vocab), N = detail::z(c.rows) * detail::z(t);
  const head_stash_layout S = head_stash_offsets(c);
  R* dl = stash + S.dlogits;
  R* dxn = stash + S.dxn;
  const R* W = params + 2 * C;
  for (std::size_t k = 0; k < N * V; ++k) dl[k] *= loss_scale;
  for (std::size_t n = 0; n < N; ++n) {
    R* d = dxn + n * C;
    std::fill(d, d + C, R(0));
    const R* g = dl + n * V;
    for (std::size_t v = 0; v < V; ++v) detail::axpy(d, W + v * C, g[v], C);
  }
  detail::layernorm_backward_input(grad_input, dxn, x, stash + S.mean, stash + S.rstd, params,
                                   static_cast<const R*>(nullptr), N, C);
}

/// Writes the microbatch's gradient of ln_f.weight, ln_f.bias and lm_head.weight into weight_grad.
template <class R>
void head_backward_weight(const gpt_config& c, const R* /*params*/, const R* x, const R* stash, R* weight_grad, int t) {
  detail::check_length(c, t);
  const std::size_t C = detail::z(c.width), V = detail::z(c.vocab), N = detail::z(c.rows) * detail::z(t);
  const head_stash_layout S = head_stash_offsets(c);
  const R* dl = stash + S.dlogits;
  const R* xn = stash + S.xn;
  R* dW = weight_grad + 2 * C;
  detail::layernorm_backward_weight(weight_grad, weight_grad + C, stash + S.dxn, x, stash + S.mean, stash + S.rstd, N,
                                    C);
  std::fill(dW, dW + V * C, R(0));
  for (std::size_t n = 0; n < N; ++n) {
    const R* g = dl + n * V;
    const R* xr = xn + n * C;
    for (std::size_t v = 0; v < V; ++v) detail::axpy(dW + v * C, xr, g[v], C);
  }
}

template <class R>
void head_backward(const gpt_config& c, const R* params, const R* x, R loss_scale, R* grad_input, R* stash,
                   R* weight_grad, int t) {
  head_backward_input(c, params, x, loss_scale, grad_input, stash, t);
  head_backward_weight(c, params, x, stash, weight_grad, t);
}

// ---------------------------------------------------------------------------------------------
// The whole model, unpipelined

/// Every part's flat vector: parameters, or gradients of the same layout.
template <class R>
struct model_params {
  std::vector<R> embedding;
  std::vector<std::vector<R>> blocks;  // L of them
  std::vector<R> head;
};

inline model_params<float> init_model(const gpt_config& c, std::uint64_t seed) {
  validate(c);
  model_params<float> p;
  p.embedding = init_embedding(c, seed);
  for (int i = 0; i < c.layers; ++i) p.blocks.push_back(init_block(c, i, seed));
  p.head = init_head(c, seed);
  return p;
}

/// Zeroed vectors of the parameters' sizes.
template <class R>
model_params<R> zero_params(const gpt_config& c) {
  model_params<R> p;
  p.embedding.assign(embedding_params(c), R(0));
  p.blocks.assign(detail::z(c.layers), std::vector<R>(block_params(c), R(0)));
  p.head.assign(head_params(c), R(0));
  return p;
}

template <class To, class From>
model_params<To> convert(const model_params<From>& p) {
  auto cv = [](const std::vector<From>& v) { return std::vector<To>(v.begin(), v.end()); };
  model_params<To> q;
  q.embedding = cv(p.embedding);
  for (const auto& b : p.blocks) q.blocks.push_back(cv(b));
  q.head = cv(p.head);
  return q;
}

/// acc[k] += g[k], k in order (how a step's per-microbatch gradients are summed).
template <class R>
void add_into(std::span<R> acc, std::span<const R> g) {
  if (acc.size() != g.size()) throw std::invalid_argument("add_into: sizes differ");
  for (std::size_t k = 0; k < acc.size(); ++k) acc[k] += g[k];
}

/// Every tensor of the model with its part: part 0 the embedding, 1..L block part−1, L+1 the head.
struct model_tensor {
  int part = 0;
  tensor_info tensor;
};

inline std::vector<model_tensor> model_tensors(const gpt_config& c) {
  std::vector<model_tensor> out;
  for (auto& t : embedding_tensors(c)) out.push_back({0, t});
  for (int i = 0; i < c.layers; ++i)
    for (auto& t : block_tensors(c, i)) out.push_back({i + 1, t});
  for (auto& t : head_tensors(c)) out.push_back({c.layers + 1, t});
  return out;
}

template <class R>
std::vector<R>& part_vector(model_params<R>& p, int part) {
  if (part == 0) return p.embedding;
  if (part <= static_cast<int>(p.blocks.size())) return p.blocks[detail::z(part - 1)];
  return p.head;
}
template <class R>
const std::vector<R>& part_vector(const model_params<R>& p, int part) {
  if (part == 0) return p.embedding;
  if (part <= static_cast<int>(p.blocks.size())) return p.blocks[detail::z(part - 1)];
  return p.head;
}

/// One microbatch: `rows` sequences of length t; ids and targets int32 [rows, t], packed.
struct microbatch {
  int t = 0;
  std::vector<std::int32_t> ids, targets;
};

namespace detail {
inline void check_microbatch(const gpt_config& c, const microbatch& mb) {
  check_length(c, mb.t);
  const std::size_t n = z(c.rows) * z(mb.t);
  if (mb.ids.size() != n || mb.targets.size() != n)
    throw std::invalid_argument("gpt: a microbatch's ids and targets must hold rows·t tokens");
}

/// Buffers for running the parts one after the other (one microbatch at a time).
template <class R>
struct runner {
  std::vector<std::vector<R>> hidden;  // L + 1 activations: the embedding's output, then each block's
  std::vector<R> grad_a, grad_b, emb_stash, head_stash;
  std::vector<std::vector<R>> block_stash;
  explicit runner(const gpt_config& c)
      : hidden(z(c.layers) + 1, std::vector<R>(activation_floats(c))),
        grad_a(activation_floats(c)),
        grad_b(activation_floats(c)),
        emb_stash(embedding_stash_floats(c)),
        head_stash(head_stash_floats(c)),
        block_stash(z(c.layers), std::vector<R>(block_stash_floats(c))) {}

  double forward(const gpt_config& c, const model_params<R>& p, const microbatch& mb) {
    check_microbatch(c, mb);
    embedding_forward(c, p.embedding.data(), mb.ids.data(), hidden[0].data(), emb_stash.data(), mb.t);
    for (std::size_t i = 0; i < z(c.layers); ++i)
      block_forward(c, p.blocks[i].data(), hidden[i].data(), hidden[i + 1].data(), block_stash[i].data(), mb.t);
    return head_forward(c, p.head.data(), hidden[z(c.layers)].data(), mb.targets.data(), head_stash.data(), mb.t);
  }
};
}  // namespace detail

/// Per-microbatch loss sums of a forward-only run (for evaluation).
template <class R>
std::vector<double> reference_forward(const gpt_config& c, const model_params<R>& params,
                                      std::span<const microbatch> batch) {
  validate(c);
  detail::runner<R> run(c);
  std::vector<double> sums;
  for (const microbatch& mb : batch) sums.push_back(run.forward(c, params, mb));
  return sums;
}

/// One unpipelined training step's gradients. Runs microbatch j = 0..m−1 one after the other
/// (embedding, blocks, head forward; head, blocks in reverse, embedding backward), with loss_scale =
/// 1/(Σ_j rows·t_j) so that the loss is the mean cross-entropy over every token of the step (or
/// 1/scale_tokens: the step is a replica's share of a larger batch). Each
/// part's per-microbatch weight gradient is written into a temporary and added into `grads`
/// (zeroed first, resized to the parameters' shapes) in microbatch order. Returns the per-microbatch
/// loss sums (loss = Σ sums · loss_scale).
template <class R>
std::vector<double> reference_step(const gpt_config& c, const model_params<R>& params,
                                   std::span<const microbatch> batch, model_params<R>& grads,
                                   std::size_t scale_tokens = 0) {
  validate(c);
  const std::size_t L = detail::z(c.layers);
  if (params.blocks.size() != L || params.embedding.size() != embedding_params(c) ||
      params.head.size() != head_params(c))
    throw std::invalid_argument("reference_step: parameters do not match the config");
  std::size_t tokens = 0;
  for (const microbatch& mb : batch) {
    detail::check_microbatch(c, mb);
    tokens += detail::z(c.rows) * detail::z(mb.t);
  }
  const R loss_scale = R(1) / R(static_cast<double>(scale_tokens > 0 ? scale_tokens : tokens));
  grads = zero_params<R>(c);
  model_params<R> tmp = zero_params<R>(c);
  detail::runner<R> run(c);
  std::vector<double> sums;
  for (const microbatch& mb : batch) {
    const int t = mb.t;
    sums.push_back(run.forward(c, params, mb));
    head_backward(c, params.head.data(), run.hidden[L].data(), loss_scale, run.grad_a.data(), run.head_stash.data(),
                  tmp.head.data(), t);
    for (std::size_t i = L; i-- > 0;) {
      block_backward(c, params.blocks[i].data(), run.hidden[i].data(), run.grad_a.data(), run.grad_b.data(),
                     run.block_stash[i].data(), tmp.blocks[i].data(), t);
      std::swap(run.grad_a, run.grad_b);
    }
    embedding_backward(c, params.embedding.data(), mb.ids.data(), run.grad_a.data(), run.emb_stash.data(),
                       tmp.embedding.data(), t);
    add_into<R>(grads.embedding, tmp.embedding);
    for (std::size_t i = 0; i < L; ++i) add_into<R>(grads.blocks[i], tmp.blocks[i]);
    add_into<R>(grads.head, tmp.head);
  }
  return sums;
}

/// The tied parameter's two copies: wte.weight in the embedding part, lm_head.weight in the head's.
template <class R>
std::span<R> tied_in_embedding(std::vector<R>& embedding, const gpt_config& c) {
  return std::span<R>(embedding).first(detail::z(c.vocab) * detail::z(c.width));
}
template <class R>
std::span<R> tied_in_head(std::vector<R>& head, const gpt_config& c) {
  return std::span<R>(head).subspan(2 * detail::z(c.width), detail::z(c.vocab) * detail::z(c.width));
}

/// The unpipelined step of `replicas` data-parallel replicas, as a mesh sums it: replica d's
/// microbatches are batch[d·m, (d+1)·m), each replica's gradients summed in microbatch order
/// (reference_step, scaled by the whole batch's tokens); with `tied`, a replica's wte and lm_head
/// gradients are both set to their sum (wte's first); then the replicas' sums are added in replica
/// order, from replica 0's. Returns the per-microbatch loss sums of the whole batch.
template <class R>
std::vector<double> reference_step_dp(const gpt_config& c, const model_params<R>& params,
                                      std::span<const microbatch> batch, int replicas, bool tied,
                                      model_params<R>& grads) {
  if (replicas < 1 || batch.size() % detail::z(replicas) != 0)
    throw std::invalid_argument("reference_step_dp: the batch does not split into the replicas");
  std::size_t tokens = 0;
  for (const microbatch& mb : batch) tokens += detail::z(c.rows) * detail::z(mb.t);
  const std::size_t m = batch.size() / detail::z(replicas);
  std::vector<double> sums;
  model_params<R> one;
  for (int d = 0; d < replicas; ++d) {
    const std::vector<double> s = reference_step<R>(c, params, batch.subspan(detail::z(d) * m, m), one, tokens);
    sums.insert(sums.end(), s.begin(), s.end());
    if (tied) {
      const std::span<R> e = tied_in_embedding(one.embedding, c), h = tied_in_head(one.head, c);
      for (std::size_t i = 0; i < e.size(); ++i) e[i] = h[i] = e[i] + h[i];
    }
    if (d == 0) {
      grads = one;
      continue;
    }
    add_into<R>(grads.embedding, one.embedding);
    for (std::size_t i = 0; i < grads.blocks.size(); ++i) add_into<R>(grads.blocks[i], one.blocks[i]);
    add_into<R>(grads.head, one.head);
  }
  return sums;
}

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

// ---------------------------------------------------------------------------------------------
// Dump for the PyTorch check (tests/pytorch/check_gpt_dump.py)

/// Writes a dump of one step's weights, batch (every microbatch of full length T), loss and
/// gradients:
///   DIR/weights/<name>.npy   float32, each tensor's shape
///   DIR/grads/<name>.npy     float32, the gradient of the loss below
///   DIR/batch/input_ids.npy, DIR/batch/targets.npy   int64 [m·rows, T] (microbatch j = rows j·rows…)
///   DIR/loss.npy             float32 scalar: the mean cross-entropy over all m·rows·T tokens
///   DIR/config.json          n_layer, n_head, n_embd, vocab_size, seq_len, microbatches, rows, tied
/// With `tied` (the LM head's weight is wte.weight), lm_head.weight is not written: wte.weight's
/// gradient is then the tied parameter's, the sum of both uses.
inline void write_dump(const std::filesystem::path& dir, const gpt_config& c, const model_params<float>& params,
                       std::span<const microbatch> batch, const model_params<float>& grads, double loss,
                       bool tied = false) {
  validate(c);
  if (batch.empty()) throw std::invalid_argument("write_dump: no microbatch");
  for (const microbatch& mb : batch)
    if (mb.t != c.seq) throw std::invalid_argument("write_dump: every microbatch must have length T");
  namespace fs = std::filesystem;
  fs::create_directories(dir / "weights");
  fs::create_directories(dir / "grads");
  fs::create_directories(dir / "batch");
  for (const model_tensor& mt : model_tensors(c)) {
    const tensor_info& t = mt.tensor;
    if (tied && t.name == "lm_head.weight") continue;
    const std::vector<float>& p = part_vector(params, mt.part);
    const std::vector<float>& g = part_vector(grads, mt.part);
    npy::write(dir / "weights" / (t.name + ".npy"), std::span<const float>(p).subspan(t.offset, t.size), t.shape);
    npy::write(dir / "grads" / (t.name + ".npy"), std::span<const float>(g).subspan(t.offset, t.size), t.shape);
  }
  std::vector<std::int64_t> ids, targets;
  for (const microbatch& mb : batch) {
    ids.insert(ids.end(), mb.ids.begin(), mb.ids.end());
    targets.insert(targets.end(), mb.targets.begin(), mb.targets.end());
  }
  const std::vector<std::size_t> shape{batch.size() * detail::z(c.rows), detail::z(c.seq)};
  npy::write(dir / "batch" / "input_ids.npy", ids, shape);
  npy::write(dir / "batch" / "targets.npy", targets, shape);
  const std::vector<float> loss_value{static_cast<float>(loss)};
  npy::write(dir / "loss.npy", loss_value, std::vector<std::size_t>{});
  npy::json_object()
      .add("n_layer", c.layers)
      .add("n_head", c.heads)
      .add("n_embd", c.width)
      .add("vocab_size", c.vocab)
      .add("seq_len", c.seq)
      .add("microbatches", static_cast<int>(batch.size()))
      .add("rows", c.rows)
      .add("tied", tied)
      .write(dir / "config.json");
}

/// The same with the reference's gradients and loss (reference_step on `batch`). Returns the loss.
inline double write_dump(const std::filesystem::path& dir, const gpt_config& c, const model_params<float>& params,
                         std::span<const microbatch> batch) {
  model_params<float> grads;
  const std::vector<double> sums = reference_step<float>(c, params, batch, grads);
  double total = 0.0;
  for (double s : sums) total += s;
  const double loss = total / (static_cast<double>(batch.size()) * c.rows * c.seq);
  write_dump(dir, c, params, batch, grads, loss);
  return loss;
}

}  // namespace gpt
