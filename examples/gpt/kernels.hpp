// examples/gpt/kernels.hpp — the building blocks every part is made of: linear maps, LayerNorm, causal attention, GELU
// (rows of n tokens; all matrices row-major).
// Part of examples/gpt's model (layers.hpp says its equations and conventions).
#pragma once

#include "params.hpp"

namespace gpt {

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

}  // namespace gpt
