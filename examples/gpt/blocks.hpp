// examples/gpt/blocks.hpp — the three kinds of part (the embedding, a block, the head), each a forward, backward_input
// and backward_weight over a per-microbatch stash.
// Part of examples/gpt's model (layers.hpp says its equations and conventions).
#pragma once

#include "kernels.hpp"

namespace gpt {

// ---------------------------------------------------------------------------------------------
// Embedding part: ids int32 [rows, t] → h [rows, t, C]; no input gradient. Its forward does not use
// the stash (null is fine); backward_input copies the output gradient [rows, t, C] into it for
// backward_weight (a caller may instead pass its grad_output buffer itself as backward_weight's stash:
// that is all backward_input does).

inline std::size_t embedding_stash_floats(const gpt_config& c) { return activation_floats(c); }

// Packed rows (documents): `starts`, when given, holds for each position τ of a row the position
// where its document begins (starts[τ] ≤ τ): positions restart there (wpe row τ − starts[τ]) and
// attention reaches back to it only (a block-diagonal causal mask), so a row of several documents
// computes each as if it were alone. nullptr: one document a row, starting at 0.

template <class R>
void embedding_forward(const gpt_config& c, const R* params, const std::int32_t* ids, R* out, R* /*stash*/, int t,
                       const std::int32_t* starts = nullptr) {
  detail::check_length(c, t);
  const std::size_t C = detail::z(c.width), tt = detail::z(t), N = detail::z(c.rows) * tt;
  const R* wte = params;
  const R* wpe = params + detail::z(c.vocab) * C;
  for (std::size_t n = 0; n < N; ++n) {
    const std::int32_t id = ids[n];
    if (id < 0 || id >= c.vocab)
      throw std::out_of_range("gpt: token id " + std::to_string(id) + " outside the vocabulary");
    const R* e = wte + detail::z(id) * C;
    const std::size_t tau = n % tt;
    const R* p = wpe + (tau - (starts ? detail::z(starts[tau]) : 0)) * C;
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
                               R* weight_grad, int t, const std::int32_t* starts = nullptr) {
  detail::check_length(c, t);
  const std::size_t C = detail::z(c.width), tt = detail::z(t), N = detail::z(c.rows) * tt;
  std::fill(weight_grad, weight_grad + embedding_params(c), R(0));
  R* dwte = weight_grad;
  R* dwpe = weight_grad + detail::z(c.vocab) * C;
  for (std::size_t n = 0; n < N; ++n) {
    const R* g = stash + n * C;
    R* e = dwte + detail::z(ids[n]) * C;
    const std::size_t tau = n % tt;
    R* p = dwpe + (tau - (starts ? detail::z(starts[tau]) : 0)) * C;
    for (std::size_t k = 0; k < C; ++k) {
      e[k] += g[k];
      p[k] += g[k];
    }
  }
}

template <class R>
void embedding_backward(const gpt_config& c, const R* params, const std::int32_t* ids, const R* grad_output, R* stash,
                        R* weight_grad, int t, const std::int32_t* starts = nullptr) {
  embedding_backward_input(c, params, ids, grad_output, stash, t);
  embedding_backward_weight(c, params, ids, stash, weight_grad, t, starts);
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
  detail::packer pack;
  s.xn1 = pack.take(N * C);
  s.mean1 = pack.take(N);
  s.rstd1 = pack.take(N);
  s.qkv = pack.take(N * 3 * C);
  s.att = pack.take(detail::z(c.rows) * H * T * T);  // softmax probabilities [rows, H, t, t], zero above the diagonal
  s.y = pack.take(N * C);                            // heads concatenated, before c_proj
  s.a = pack.take(N * C);                            // residual stream after attention
  s.xn2 = pack.take(N * C);
  s.mean2 = pack.take(N);
  s.rstd2 = pack.take(N);
  s.u = pack.take(N * 4 * C);  // c_fc output (before gelu)
  s.g = pack.take(N * 4 * C);  // gelu(u)
  s.dout = pack.take(N * C);
  s.du = pack.take(N * 4 * C);
  s.dxn2 = pack.take(N * C);
  s.da = pack.take(N * C);
  s.dqkv = pack.take(N * 3 * C);
  s.dxn1 = pack.take(N * C);
  s.dy = pack.take(N * C);
  s.dp = pack.take(T);
  s.wt = pack.take(4 * C * C);  // a transposed weight
  s.total = pack.at;
  return s;
}

/// rows·(27·T·C + 4·T + H·T²) + T + 4C² elements.
inline std::size_t block_stash_floats(const gpt_config& c) { return block_stash_offsets(c).total; }

/// out = block(x); fills the forward part of the stash.
template <class R>
void block_forward(const gpt_config& c, const R* params, const R* x, R* out, R* stash, int t,
                   const std::int32_t* starts = nullptr) {
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
        const std::size_t j0 = starts ? detail::z(starts[i]) : 0;  // its document's first position
        for (std::size_t j = 0; j < j0; ++j) p[j] = R(0);
        for (std::size_t j = j0; j <= i; ++j) {
          const R* k = qkv + (r * tt + j) * 3 * C + C + h * hd;
          R s = R(0);
          for (std::size_t d = 0; d < hd; ++d) s += q[d] * k[d];
          s *= scale;
          p[j] = s;
          mx = std::max(mx, s);
        }
        R sum = R(0);
        for (std::size_t j = j0; j <= i; ++j) {
          p[j] = std::exp(p[j] - mx);
          sum += p[j];
        }
        const R inv = R(1) / sum;
        for (std::size_t j = j0; j <= i; ++j) p[j] *= inv;
        for (std::size_t j = i + 1; j < tt; ++j) p[j] = R(0);
        R* yi = y + (r * tt + i) * C + h * hd;
        std::fill(yi, yi + hd, R(0));
        for (std::size_t j = j0; j <= i; ++j) detail::axpy(yi, qkv + (r * tt + j) * 3 * C + 2 * C + h * hd, p[j], hd);
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
                          R* stash, int t, const std::int32_t* starts = nullptr) {
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
        const std::size_t j0 = starts ? detail::z(starts[i]) : 0;  // its document's first position
        for (std::size_t j = j0; j <= i; ++j) {
          const R* v = qkv + (r * tt + j) * 3 * C + 2 * C + h * hd;
          R s = R(0);
          for (std::size_t d = 0; d < hd; ++d) s += dyi[d] * v[d];
          dp[j] = s;
          dsum += p[j] * s;
        }
        for (std::size_t j = j0; j <= i; ++j) {
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
                    R* weight_grad, int t, const std::int32_t* starts = nullptr) {
  block_backward_input(c, params, x, grad_output, grad_input, stash, t, starts);
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
  detail::packer pack;
  s.xn = pack.take(N * C);
  s.mean = pack.take(N);
  s.rstd = pack.take(N);
  s.logits = pack.take(N * V);
  s.dlogits = pack.take(N * V);
  s.dxn = pack.take(N * C);
  s.wt = pack.take(V * C);
  s.total = pack.at;
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

}  // namespace gpt
