// examples/gpt/layers_check.cpp — checks the GPT numerics of examples/gpt/layers.hpp; exit 0 when all pass.
//
//   layers_check                          layout, finite differences, split and padding checks
//   layers_check --dump DIR               also writes dumps DIR/tiny and DIR/small (write_dump)
//   layers_check --torch PYTHON SCRIPT    also dumps into a temporary directory and runs
//                                         `PYTHON SCRIPT DUMP` (tests/pytorch/check_gpt_dump.py) on each
//                                         dump; its exit 77 (no torch) makes this exit 77 when all else passed
//   layers_check --time                   also times one training-size step (C=64 H=4 L=4 T=64 V=96 rows=4)
//
// What is checked (each prints FAIL lines naming what differs, and counts towards exit 1):
//  * layout: each part's tensors are contiguous and fill its vector; names are unique;
//  * finite differences in double (central, eps 1e-5) on a tiny config (V=11 T=5 L=2 H=2 C=8 rows=2,
//    two microbatches of lengths 5 and 3): sampled elements of every tensor, and of every block's
//    input gradient; and the float gradients agree with the double ones (1e-4 of the tensor's max);
//  * backward_input + backward_weight (weight_grad prefilled with NaN) give the same bits as backward,
//    for every part;
//  * padding does not leak: a microbatch of length t < T in NaN-prefilled buffers gives the same bits
//    (loss and gradients) as the same tokens with T' = t;
//  * a GPipe-order run (all forwards, then backwards in reverse, one stash per microbatch, weight
//    gradients added in microbatch order) gives the same bits as reference_step;
//  * packed documents (a row of 5 + 3 tokens with their starts) give each document's activations
//    bit for bit, and its loss and gradients within rounding.
#include "../write_file.hpp"
#include "layers.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>
#include <string>
#include <vector>

#if __has_include(<sys/wait.h>)
#include <sys/wait.h>
#define GPT_CHECK_HAVE_WAIT 1
#endif

namespace {

int failures = 0;

void fail(const std::string& what) {
  std::printf("FAIL %s\n", what.c_str());
  ++failures;
}

std::string fmt(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

gpt::microbatch random_microbatch(const gpt::gpt_config& c, int t, std::uint64_t seed) {
  gpt::microbatch mb;
  mb.t = t;
  std::uint64_t s = seed;
  for (int k = 0; k < c.rows * t; ++k) {
    mb.ids.push_back(static_cast<std::int32_t>(gpt::splitmix64(s) % static_cast<std::uint64_t>(c.vocab)));
    mb.targets.push_back(static_cast<std::int32_t>(gpt::splitmix64(s) % static_cast<std::uint64_t>(c.vocab)));
  }
  return mb;
}

/// init_model plus normal(0, 0.2) noise on every element, so that biases and LayerNorm weights are
/// not at their special values and attention is far from uniform.
gpt::model_params<float> noisy_model(const gpt::gpt_config& c, std::uint64_t seed) {
  gpt::model_params<float> p = gpt::init_model(c, seed);
  std::uint64_t stream = seed * 7 + 1;
  auto perturb = [&stream](std::vector<float>& v) {
    std::vector<float> noise(v.size());
    gpt::fill_normal(noise, 0.2, gpt::splitmix64(stream));
    for (std::size_t k = 0; k < v.size(); ++k) v[k] += noise[k];
  };
  perturb(p.embedding);
  for (auto& b : p.blocks) perturb(b);
  perturb(p.head);
  return p;
}

template <class R>
double mean_loss(const gpt::gpt_config& c, const gpt::model_params<R>& p, const std::vector<gpt::microbatch>& batch) {
  double total = 0.0, tokens = 0.0;
  const std::vector<double> sums = gpt::reference_forward<R>(c, p, batch);
  for (std::size_t j = 0; j < batch.size(); ++j) {
    total += sums[j];
    tokens += static_cast<double>(c.rows) * batch[j].t;
  }
  return total / tokens;
}

/// Indices to probe in a tensor of n elements: the first, the last and a few drawn ones.
std::vector<std::size_t> sample(std::size_t n, std::uint64_t seed, std::size_t count = 6) {
  std::set<std::size_t> s{0, n - 1};
  std::uint64_t st = seed;
  while (s.size() < std::min(n, count)) s.insert(static_cast<std::size_t>(gpt::splitmix64(st) % n));
  return {s.begin(), s.end()};
}

double max_abs(const double* v, std::size_t n) {
  double m = 0.0;
  for (std::size_t k = 0; k < n; ++k) m = std::max(m, std::fabs(v[k]));
  return m;
}

const gpt::gpt_config tiny{11, 5, 2, 2, 8, 2};

void check_layout(const gpt::gpt_config& c) {
  std::set<std::string> names;
  auto part = [&](const std::vector<gpt::tensor_info>& ts, std::size_t total, const char* what) {
    std::size_t at = 0;
    for (const auto& t : ts) {
      std::size_t n = 1;
      for (std::size_t d : t.shape) n *= d;
      if (t.offset != at || t.size != n) fail(std::string("layout: ") + what + " tensor " + t.name + " not contiguous");
      at += t.size;
      if (!names.insert(t.name).second) fail("layout: duplicate name " + t.name);
    }
    if (at != total) fail(std::string("layout: ") + what + " tensors do not fill its vector");
  };
  part(gpt::embedding_tensors(c), gpt::embedding_params(c), "embedding");
  for (int i = 0; i < c.layers; ++i) part(gpt::block_tensors(c, i), gpt::block_params(c), "block");
  part(gpt::head_tensors(c), gpt::head_params(c), "head");
  if (names.size() != 2 + 12 * static_cast<std::size_t>(c.layers) + 3) fail("layout: wrong number of tensors");
  if (gpt::model_tensors(c).size() != names.size()) fail("layout: model_tensors disagrees");
}

/// Finite differences of the mean loss against reference_step's gradients, in double; and the float
/// gradients against the double ones.
void check_gradients() {
  const gpt::gpt_config& c = tiny;
  const std::vector<gpt::microbatch> batch{random_microbatch(c, 5, 11), random_microbatch(c, 3, 12)};
  const gpt::model_params<float> pf = noisy_model(c, 3);
  gpt::model_params<double> pd = gpt::convert<double>(pf);
  gpt::model_params<double> gd;
  gpt::reference_step<double>(c, pd, batch, gd);
  gpt::model_params<float> gf;
  gpt::reference_step<float>(c, pf, batch, gf);

  const double eps = 1e-5;
  std::size_t probes = 0;
  for (const gpt::model_tensor& mt : gpt::model_tensors(c)) {
    std::vector<double>& p = gpt::part_vector(pd, mt.part);
    const std::vector<double>& g = gpt::part_vector(gd, mt.part);
    const std::vector<float>& g32 = gpt::part_vector(gf, mt.part);
    const gpt::tensor_info& t = mt.tensor;
    const double scale = max_abs(g.data() + t.offset, t.size);
    if (!(scale > 0.0)) fail("gradient of " + t.name + " is all zero");
    // the part of wpe that the t = 3 microbatch does not reach still gets the t = 5 one's gradient
    for (std::size_t k : sample(t.size, gpt::name_hash(t.name))) {
      const std::size_t at = t.offset + k;
      const double keep = p[at];
      p[at] = keep + eps;
      const double up = mean_loss<double>(c, pd, batch);
      p[at] = keep - eps;
      const double down = mean_loss<double>(c, pd, batch);
      p[at] = keep;
      const double fd = (up - down) / (2 * eps);
      ++probes;
      if (std::fabs(fd - g[at]) > 1e-9 + 1e-6 * scale)
        fail("finite difference " + t.name + "[" + std::to_string(k) + "]: analytic " + fmt(g[at]) + ", numeric " +
             fmt(fd));
    }
    for (std::size_t k = 0; k < t.size; ++k) {
      const std::size_t at = t.offset + k;
      if (!(std::fabs(static_cast<double>(g32[at]) - g[at]) <= 1e-7 + 1e-4 * scale)) {
        fail("float gradient " + t.name + "[" + std::to_string(k) + "]: float " + fmt(g32[at]) + ", double " +
             fmt(g[at]));
        break;
      }
    }
  }
  std::printf("finite differences: %zu parameter probes over %zu tensors\n", probes, gpt::model_tensors(c).size());

  // each block's input gradient, on the t = 3 microbatch alone (loss = its mean over rows·t tokens)
  const gpt::microbatch& mb = batch[1];
  const int t = mb.t;
  const std::size_t L = static_cast<std::size_t>(c.layers), n = static_cast<std::size_t>(c.rows * t * c.width);
  std::vector<std::vector<double>> hidden(L + 1, std::vector<double>(gpt::activation_floats(c)));
  std::vector<std::vector<double>> stash(L, std::vector<double>(gpt::block_stash_floats(c)));
  std::vector<double> head_stash(gpt::head_stash_floats(c)), wg_block(gpt::block_params(c)),
      wg_head(gpt::head_params(c));
  const double scale = 1.0 / (c.rows * t);
  gpt::embedding_forward<double>(c, pd.embedding.data(), mb.ids.data(), hidden[0].data(), nullptr, t);
  for (std::size_t i = 0; i < L; ++i)
    gpt::block_forward<double>(c, pd.blocks[i].data(), hidden[i].data(), hidden[i + 1].data(), stash[i].data(), t);
  gpt::head_forward<double>(c, pd.head.data(), hidden[L].data(), mb.targets.data(), head_stash.data(), t);
  std::vector<double> ga(gpt::activation_floats(c)), gb(gpt::activation_floats(c));
  gpt::head_backward<double>(c, pd.head.data(), hidden[L].data(), scale, ga.data(), head_stash.data(), wg_head.data(),
                             t);
  std::vector<std::vector<double>> grad_in(L);
  for (std::size_t i = L; i-- > 0;) {
    gpt::block_backward<double>(c, pd.blocks[i].data(), hidden[i].data(), ga.data(), gb.data(), stash[i].data(),
                                wg_block.data(), t);
    grad_in[i].assign(gb.begin(), gb.begin() + static_cast<std::ptrdiff_t>(n));
    std::swap(ga, gb);
  }
  // loss as a function of block i's input
  auto loss_from = [&](std::size_t i, const std::vector<double>& x) {
    std::vector<double> cur(x), next(gpt::activation_floats(c)), st(gpt::block_stash_floats(c)),
        hs(gpt::head_stash_floats(c));
    for (std::size_t b = i; b < L; ++b) {
      gpt::block_forward<double>(c, pd.blocks[b].data(), cur.data(), next.data(), st.data(), t);
      std::swap(cur, next);
    }
    return gpt::head_forward<double>(c, pd.head.data(), cur.data(), mb.targets.data(), hs.data(), t) * scale;
  };
  for (std::size_t i = 0; i < L; ++i) {
    const double gscale = max_abs(grad_in[i].data(), n);
    std::vector<double> x = hidden[i];
    for (std::size_t k : sample(n, 100 + i, 12)) {
      const double keep = x[k];
      x[k] = keep + eps;
      const double up = loss_from(i, x);
      x[k] = keep - eps;
      const double down = loss_from(i, x);
      x[k] = keep;
      const double fd = (up - down) / (2 * eps);
      if (std::fabs(fd - grad_in[i][k]) > 1e-9 + 1e-6 * gscale)
        fail("finite difference: block " + std::to_string(i) + " input gradient [" + std::to_string(k) +
             "]: analytic " + fmt(grad_in[i][k]) + ", numeric " + fmt(fd));
    }
  }
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b, std::size_t n) {
  return a.size() >= n && b.size() >= n && std::memcmp(a.data(), b.data(), n * sizeof(float)) == 0;
}

/// backward_input + backward_weight (NaN-prefilled weight_grad, other work in between) == backward.
void check_split() {
  const gpt::gpt_config& c = tiny;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const gpt::model_params<float> p = noisy_model(c, 5);
  const gpt::microbatch mb = random_microbatch(c, 4, 21), other = random_microbatch(c, 5, 22);
  const int t = mb.t;
  const std::size_t A = gpt::activation_floats(c), n = static_cast<std::size_t>(c.rows * t * c.width);

  std::vector<float> x(A), y(A), scratch_out(A), gout(A);
  gpt::embedding_forward<float>(c, p.embedding.data(), mb.ids.data(), x.data(), nullptr, t);
  std::uint64_t s = 99;
  std::vector<float> noise(A);
  gpt::fill_normal(noise, 1.0, gpt::splitmix64(s));
  gout = noise;

  {  // block
    std::vector<float> st1(gpt::block_stash_floats(c), nan), st2, st3(gpt::block_stash_floats(c), nan);
    gpt::block_forward<float>(c, p.blocks[1].data(), x.data(), y.data(), st1.data(), t);
    st2 = st1;
    std::vector<float> gi1(A, nan), gi2(A, nan), wg1(gpt::block_params(c), 0.0f), wg2(gpt::block_params(c), nan);
    gpt::block_backward<float>(c, p.blocks[1].data(), x.data(), gout.data(), gi1.data(), st1.data(), wg1.data(), t);
    gpt::block_backward_input<float>(c, p.blocks[1].data(), x.data(), gout.data(), gi2.data(), st2.data(), t);
    gpt::block_forward<float>(c, p.blocks[0].data(), y.data(), scratch_out.data(), st3.data(), other.t);
    gpt::block_backward_weight<float>(c, p.blocks[1].data(), x.data(), st2.data(), wg2.data(), t);
    if (!same_bits(gi1, gi2, n)) fail("split: block input gradients differ");
    if (!same_bits(wg1, wg2, wg1.size())) fail("split: block weight gradients differ");
  }
  {  // head
    std::vector<float> st1(gpt::head_stash_floats(c), nan), st2;
    const double l = gpt::head_forward<float>(c, p.head.data(), x.data(), mb.targets.data(), st1.data(), t);
    if (!std::isfinite(l)) fail("split: head loss not finite");
    st2 = st1;
    std::vector<float> gi1(A, nan), gi2(A, nan), wg1(gpt::head_params(c), 0.0f), wg2(gpt::head_params(c), nan);
    gpt::head_backward<float>(c, p.head.data(), x.data(), 0.125f, gi1.data(), st1.data(), wg1.data(), t);
    gpt::head_backward_input<float>(c, p.head.data(), x.data(), 0.125f, gi2.data(), st2.data(), t);
    gpt::head_backward_weight<float>(c, p.head.data(), x.data(), st2.data(), wg2.data(), t);
    if (!same_bits(gi1, gi2, n)) fail("split: head input gradients differ");
    if (!same_bits(wg1, wg2, wg1.size())) fail("split: head weight gradients differ");
  }
  {  // embedding
    std::vector<float> st1(gpt::embedding_stash_floats(c), nan), st2(gpt::embedding_stash_floats(c), nan);
    std::vector<float> wg1(gpt::embedding_params(c), 0.0f), wg2(gpt::embedding_params(c), nan);
    gpt::embedding_backward<float>(c, p.embedding.data(), mb.ids.data(), gout.data(), st1.data(), wg1.data(), t);
    gpt::embedding_backward_input<float>(c, p.embedding.data(), mb.ids.data(), gout.data(), st2.data(), t);
    gpt::embedding_backward_weight<float>(c, p.embedding.data(), mb.ids.data(), st2.data(), wg2.data(), t);
    if (!same_bits(wg1, wg2, wg1.size())) fail("split: embedding weight gradients differ");
    // wte gradient sums to the sum of grad_output over tokens, per channel
  }
}

/// A GPipe-order run with NaN-prefilled buffers: every forward (one stash per microbatch), then the
/// backwards in reverse microbatch order split into backward_input and, later, backward_weight, the
/// per-microbatch weight gradients added in microbatch order. Returns the loss sums.
std::vector<double> gpipe_step(const gpt::gpt_config& c, const gpt::model_params<float>& p,
                               const std::vector<gpt::microbatch>& batch, gpt::model_params<float>& grads) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::size_t L = static_cast<std::size_t>(c.layers), m = batch.size(), A = gpt::activation_floats(c);
  std::size_t tokens = 0;
  for (const auto& mb : batch) tokens += static_cast<std::size_t>(c.rows * mb.t);
  const float loss_scale = 1.0f / static_cast<float>(tokens);
  // per microbatch: activations (L + 1), stashes, gradients
  std::vector<std::vector<std::vector<float>>> act(m,
                                                   std::vector<std::vector<float>>(L + 1, std::vector<float>(A, nan)));
  std::vector<std::vector<std::vector<float>>> bst(
      m, std::vector<std::vector<float>>(L, std::vector<float>(gpt::block_stash_floats(c), nan)));
  std::vector<std::vector<float>> hst(m, std::vector<float>(gpt::head_stash_floats(c), nan));
  std::vector<std::vector<float>> est(m, std::vector<float>(gpt::embedding_stash_floats(c), nan));
  std::vector<double> sums(m);
  for (std::size_t j = 0; j < m; ++j) {
    const int t = batch[j].t;
    gpt::embedding_forward<float>(c, p.embedding.data(), batch[j].ids.data(), act[j][0].data(), est[j].data(), t);
    for (std::size_t i = 0; i < L; ++i)
      gpt::block_forward<float>(c, p.blocks[i].data(), act[j][i].data(), act[j][i + 1].data(), bst[j][i].data(), t);
    sums[j] = gpt::head_forward<float>(c, p.head.data(), act[j][L].data(), batch[j].targets.data(), hst[j].data(), t);
  }
  // input gradients, microbatches in reverse
  for (std::size_t j = m; j-- > 0;) {
    const int t = batch[j].t;
    std::vector<float> ga(A, nan), gb(A, nan);
    gpt::head_backward_input<float>(c, p.head.data(), act[j][L].data(), loss_scale, ga.data(), hst[j].data(), t);
    for (std::size_t i = L; i-- > 0;) {
      gpt::block_backward_input<float>(c, p.blocks[i].data(), act[j][i].data(), ga.data(), gb.data(), bst[j][i].data(),
                                       t);
      std::swap(ga, gb);
    }
    gpt::embedding_backward_input<float>(c, p.embedding.data(), batch[j].ids.data(), ga.data(), est[j].data(), t);
  }
  // weight gradients, added in microbatch order
  grads = gpt::zero_params<float>(c);
  for (std::size_t j = 0; j < m; ++j) {
    const int t = batch[j].t;
    std::vector<float> we(gpt::embedding_params(c), nan), wb(gpt::block_params(c), nan), wh(gpt::head_params(c), nan);
    gpt::head_backward_weight<float>(c, p.head.data(), act[j][L].data(), hst[j].data(), wh.data(), t);
    gpt::add_into<float>(grads.head, wh);
    for (std::size_t i = L; i-- > 0;) {
      gpt::block_backward_weight<float>(c, p.blocks[i].data(), act[j][i].data(), bst[j][i].data(), wb.data(), t);
      gpt::add_into<float>(grads.blocks[i], wb);
    }
    gpt::embedding_backward_weight<float>(c, p.embedding.data(), batch[j].ids.data(), est[j].data(), we.data(), t);
    gpt::add_into<float>(grads.embedding, we);
  }
  return sums;
}

bool same_model(const gpt::model_params<float>& a, const gpt::model_params<float>& b) {
  if (!same_bits(a.embedding, b.embedding, a.embedding.size()) || a.embedding.size() != b.embedding.size())
    return false;
  if (!same_bits(a.head, b.head, a.head.size()) || a.head.size() != b.head.size()) return false;
  if (a.blocks.size() != b.blocks.size()) return false;
  for (std::size_t i = 0; i < a.blocks.size(); ++i)
    if (a.blocks[i].size() != b.blocks[i].size() || !same_bits(a.blocks[i], b.blocks[i], a.blocks[i].size()))
      return false;
  return true;
}

void check_order_and_padding() {
  const gpt::gpt_config& c = tiny;
  const gpt::model_params<float> p = noisy_model(c, 7);
  const std::vector<gpt::microbatch> batch{random_microbatch(c, 3, 31), random_microbatch(c, 5, 32),
                                           random_microbatch(c, 1, 33)};
  gpt::model_params<float> g_ref, g_pipe;
  const std::vector<double> s_ref = gpt::reference_step<float>(c, p, batch, g_ref);
  const std::vector<double> s_pipe = gpipe_step(c, p, batch, g_pipe);
  if (s_ref != s_pipe) fail("order: GPipe-order loss sums differ from reference_step");
  if (!same_model(g_ref, g_pipe)) fail("order: GPipe-order gradients differ from reference_step");

  // t = 3 < T = 5 (NaN-prefilled buffers) against T' = 3
  for (int t : {1, 3}) {
    gpt::gpt_config c2 = c;
    c2.seq = t;
    gpt::model_params<float> p2 = p;
    p2.embedding.resize(gpt::embedding_params(c2));  // wpe is last: its first t rows
    const std::vector<gpt::microbatch> one{random_microbatch(c, t, 40 + static_cast<std::uint64_t>(t))};
    gpt::model_params<float> g1, g2;
    const std::vector<double> s1 = gpipe_step(c, p, one, g1);
    const std::vector<double> s2 = gpipe_step(c2, p2, one, g2);
    const std::string what = "padding (t = " + std::to_string(t) + ", T = " + std::to_string(c.seq) + "): ";
    if (s1 != s2) fail(what + "loss " + fmt(s1[0]) + " against " + fmt(s2[0]) + " with T' = t");
    std::vector<float> e1 = g1.embedding;
    for (std::size_t k = gpt::embedding_params(c2); k < e1.size(); ++k)
      if (e1[k] != 0.0f) {
        fail(what + "wpe gradient beyond t is not zero");
        break;
      }
    e1.resize(gpt::embedding_params(c2));
    g1.embedding = e1;
    if (!same_model(g1, g2)) fail(what + "gradients differ from those with T' = t");
    if (!std::isfinite(s1[0])) fail(what + "loss not finite");
  }
}

void write_dumps(const std::filesystem::path& dir) {
  const gpt::gpt_config small{17, 8, 2, 4, 16, 3};
  for (const auto& [name, cfg, seed] : {std::tuple{"tiny", tiny, 1}, std::tuple{"small", small, 2}}) {
    const gpt::model_params<float> p = noisy_model(cfg, static_cast<std::uint64_t>(seed));
    const std::vector<gpt::microbatch> batch{random_microbatch(cfg, cfg.seq, 50 + static_cast<std::uint64_t>(seed)),
                                             random_microbatch(cfg, cfg.seq, 60 + static_cast<std::uint64_t>(seed))};
    const double loss = gpt::write_dump(dir / name, cfg, p, batch);
    std::printf("dump %s: loss %.6f\n", (dir / name).string().c_str(), loss);
  }
}

void time_step() {
  const gpt::gpt_config c{96, 64, 4, 4, 64, 4};
  const gpt::model_params<float> p = gpt::init_model(c, 1);
  const std::vector<gpt::microbatch> batch{random_microbatch(c, c.seq, 5)};
  gpt::model_params<float> g;
  double best = 1e30, total = 0.0;
  const int reps = 5;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    gpt::reference_step<float>(c, p, batch, g);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, s);
    total += s;
  }
  std::printf(
      "time: one step (C=64 H=4 L=4 T=64 V=96 rows=4, one microbatch, forward+backward): best %.1f ms, mean %.1f ms "
      "over %d\n",
      best * 1e3, total / reps * 1e3, reps);
  // per part
  const int t = c.seq;
  std::vector<float> x(gpt::activation_floats(c)), y(x.size()), gx(x.size()), gy(x.size(), 0.01f);
  std::vector<float> st(gpt::block_stash_floats(c)), wg(gpt::block_params(c));
  gpt::embedding_forward<float>(c, p.embedding.data(), batch[0].ids.data(), x.data(), nullptr, t);
  auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r) gpt::block_forward<float>(c, p.blocks[0].data(), x.data(), y.data(), st.data(), t);
  auto t1 = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r)
    gpt::block_backward_input<float>(c, p.blocks[0].data(), x.data(), gy.data(), gx.data(), st.data(), t);
  auto t2 = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r)
    gpt::block_backward_weight<float>(c, p.blocks[0].data(), x.data(), st.data(), wg.data(), t);
  auto t3 = std::chrono::steady_clock::now();
  std::vector<float> hs(gpt::head_stash_floats(c)), hw(gpt::head_params(c));
  for (int r = 0; r < reps; ++r)
    gpt::head_forward<float>(c, p.head.data(), x.data(), batch[0].targets.data(), hs.data(), t);
  auto t4 = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r)
    gpt::head_backward<float>(c, p.head.data(), x.data(), 1.0f / 256, gx.data(), hs.data(), hw.data(), t);
  auto t5 = std::chrono::steady_clock::now();
  auto ms = [reps](auto a, auto b) { return std::chrono::duration<double>(b - a).count() * 1e3 / reps; };
  std::printf(
      "time per part: block forward %.2f ms, backward_input %.2f ms, backward_weight %.2f ms; head forward %.2f ms, "
      "backward %.2f ms\n",
      ms(t0, t1), ms(t1, t2), ms(t2, t3), ms(t3, t4), ms(t4, t5));
}

int run_torch(const std::string& python, const std::string& script) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() /
      ("gpt-layers-check-" + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
  write_dumps(dir);
  int skipped = 0, failed = 0;
  for (const char* name : {"tiny", "small"}) {
    const std::string cmd = "'" + python + "' '" + script + "' '" + (dir / name).string() + "'";
    std::fflush(stdout);
    const int status = std::system(cmd.c_str());
#ifdef GPT_CHECK_HAVE_WAIT
    const int rc = (status != -1 && WIFEXITED(status)) ? WEXITSTATUS(status) : -1;
#else
    const int rc = status;
#endif
    if (rc == 77) {
      ++skipped;
    } else if (rc != 0) {
      fail(std::string("torch check of the ") + name + " dump exited " + std::to_string(rc));
      ++failed;
    }
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  return failed ? 1 : (skipped ? 77 : 0);
}

}  // namespace

// Packed documents (blocks.hpp's `starts`): a row holding documents of 5 and 3 tokens computes
// each as if alone — the same bits, token for token, as the documents in rows of their own — and
// its loss and gradients are theirs summed (within rounding: the sums run in another order).
void check_documents() {
  gpt::gpt_config c = tiny;
  c.rows = 1;
  c.seq = 8;
  const gpt::model_params<float> p = noisy_model(c, 9);
  const gpt::microbatch a = random_microbatch(c, 5, 51), b = random_microbatch(c, 3, 52);
  gpt::microbatch packed;
  packed.t = 8;
  packed.ids = a.ids, packed.targets = a.targets;
  packed.ids.insert(packed.ids.end(), b.ids.begin(), b.ids.end());
  packed.targets.insert(packed.targets.end(), b.targets.begin(), b.targets.end());
  packed.starts = {0, 0, 0, 0, 0, 5, 5, 5};
  gpt::detail::runner<float> run_packed(c), run_a(c), run_b(c);
  const double sp = run_packed.forward(c, p, packed), sa = run_a.forward(c, p, a), sb = run_b.forward(c, p, b);
  const std::size_t C = static_cast<std::size_t>(c.width), L = static_cast<std::size_t>(c.layers);
  for (std::size_t l = 0; l <= L; ++l) {
    const std::vector<float>& h = run_packed.hidden[l];
    if (std::memcmp(h.data(), run_a.hidden[l].data(), 5 * C * sizeof(float)) != 0 ||
        std::memcmp(h.data() + 5 * C, run_b.hidden[l].data(), 3 * C * sizeof(float)) != 0)
      fail("documents: layer " + std::to_string(l) + "'s output of a packed row differs from the documents alone");
  }
  if (std::fabs(sp - (sa + sb)) > 1e-9 * std::fabs(sp)) fail("documents: the packed row's loss is not its documents'");
  gpt::model_params<float> gp, gs;
  const std::vector<gpt::microbatch> one{packed}, two{a, b};
  gpt::reference_step<float>(c, p, one, gp);
  gpt::reference_step<float>(c, p, two, gs);
  for (int part = 0; part <= c.layers + 1; ++part) {
    const std::vector<float>&x = gpt::part_vector(gp, part), &y = gpt::part_vector(gs, part);
    double most = 0, diff = 0;
    for (std::size_t i = 0; i < x.size(); ++i)
      most = std::max(most, static_cast<double>(std::fabs(y[i]))),
      diff = std::max(diff, static_cast<double>(std::fabs(x[i] - y[i])));
    if (diff > 1e-5 * most) fail("documents: part " + std::to_string(part) + "'s gradient differs from its documents'");
  }
}

int main(int argc, char** argv) {
  examples::tool_exits("gpt_layers_check");
  std::string dump_dir, python, script;
  bool timing = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--dump" && i + 1 < argc) {
      dump_dir = argv[++i];
    } else if (a == "--torch" && i + 2 < argc) {
      python = argv[++i];
      script = argv[++i];
    } else if (a == "--time") {
      timing = true;
    } else if (a == "--help" || a == "-h") {
      std::printf("usage: gpt_layers_check [--dump DIR] [--torch PYTHON SCRIPT] [--time]\n");
      return 0;
    } else {
      std::fprintf(stderr,
                   "gpt_layers_check: unknown argument %s\nusage: gpt_layers_check [--dump DIR] [--torch PYTHON "
                   "SCRIPT] [--time]\n",
                   a.c_str());
      return 2;
    }
  }
  try {
    check_layout(tiny);
    check_layout(gpt::gpt_config{96, 64, 4, 4, 64, 4});
    check_gradients();
    check_split();
    check_order_and_padding();
    check_documents();
    if (!dump_dir.empty()) write_dumps(dump_dir);
    if (timing) time_step();
    int torch = 0;
    if (!python.empty()) torch = run_torch(python, script);
    if (failures > 0) {
      std::printf("%d check(s) failed\n", failures);
      return 1;
    }
    if (torch == 77) {
      std::printf("all checks passed; the PyTorch check was skipped\n");
      return 77;
    }
    std::printf("all checks passed\n");
    return 0;
  } catch (const std::exception& e) {
    std::printf("FAIL exception: %s\n", e.what());
    return 1;
  }
}
