// examples/gpt/model.hpp — the whole model unpipelined: every part's parameters, the reference step and forward the
// pipelined runs are checked against, tied embeddings.
// Part of examples/gpt's model (layers.hpp says its equations and conventions).
#pragma once

#include <type_traits>

#include "blocks.hpp"

namespace gpt {

// ---------------------------------------------------------------------------------------------
// The whole model, unpipelined

/// Every part's flat vector: parameters, or gradients of the same layout. Local learning
/// (--local-losses, add_local_heads): the model cut into S stages, each but the last with a head of
/// its own (ln_f and an LM head, the head's layout), trained on its own loss.
template <class R>
struct model_params {
  std::vector<R> embedding;
  std::vector<std::vector<R>> blocks;  // L of them
  std::vector<R> head;
  std::vector<std::vector<R>> local_heads{};  // local learning: stage s's head, s = 0..S−2 (none otherwise)
};

inline model_params<float> init_model(const gpt_config& c, std::uint64_t seed) {
  validate(c);
  model_params<float> p;
  p.embedding = init_embedding(c, seed);
  for (int i = 0; i < c.layers; ++i) p.blocks.push_back(init_block(c, i, seed));
  p.head = init_head(c, seed);
  return p;
}

/// Local learning over `stages` stages: a head for each stage but the last (which has the model's),
/// each initialised as the model's head is, from its own seed.
inline void add_local_heads(model_params<float>& p, const gpt_config& c, int stages, std::uint64_t seed) {
  p.local_heads.clear();
  for (int s = 0; s + 1 < stages; ++s) p.local_heads.push_back(init_head(c, seed + 1 + static_cast<std::uint64_t>(s)));
}

/// Zeroed vectors of the parameters' sizes (with `local_heads` heads of local learning).
template <class R>
model_params<R> zero_params(const gpt_config& c, std::size_t local_heads = 0) {
  model_params<R> p;
  p.embedding.assign(embedding_params(c), R{});
  p.blocks.assign(detail::z(c.layers), std::vector<R>(block_params(c), R{}));
  p.head.assign(head_params(c), R{});
  p.local_heads.assign(local_heads, std::vector<R>(head_params(c), R{}));
  return p;
}

template <class To, class From>
model_params<To> convert(const model_params<From>& p) {
  auto cv = [](const std::vector<From>& v) { return std::vector<To>(v.begin(), v.end()); };
  model_params<To> q;
  q.embedding = cv(p.embedding);
  for (const auto& b : p.blocks) q.blocks.push_back(cv(b));
  q.head = cv(p.head);
  for (const auto& h : p.local_heads) q.local_heads.push_back(cv(h));
  return q;
}

/// acc[k] += g[k], k in order (how a step's per-microbatch gradients are summed), in acc's type:
/// g[k] rounded to it first (a float gradient summed in pipetype::half, say), then the exactly
/// rounded sum of that type.
template <class A, class R = A>
void add_into(std::type_identity_t<std::span<A>> acc, std::type_identity_t<std::span<const R>> g) {
  if (acc.size() != g.size()) throw std::invalid_argument("add_into: sizes differ");
  for (std::size_t k = 0; k < acc.size(); ++k) acc[k] += static_cast<A>(g[k]);
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

namespace detail {
template <class P>
auto& part_of(P& p, int part) {
  const int L = static_cast<int>(p.blocks.size());
  if (part == 0) return p.embedding;
  if (part <= L) return p.blocks[z(part - 1)];
  if (part > L + 1) return p.local_heads[z(part - L - 2)];
  return p.head;
}
}  // namespace detail

/// Part `part`: 0 the embedding, 1..L the blocks, L + 1 the head, then the local heads (part_count).
template <class R>
std::vector<R>& part_vector(model_params<R>& p, int part) {
  return detail::part_of(p, part);
}
template <class R>
const std::vector<R>& part_vector(const model_params<R>& p, int part) {
  return detail::part_of(p, part);
}
template <class R>
int part_count(const model_params<R>& p) {
  return static_cast<int>(p.blocks.size() + p.local_heads.size()) + 2;
}

/// One microbatch: `rows` sequences of length t; ids and targets int32 [rows, t], packed. With
/// `starts` (t entries) each row packs several documents: position τ's begins at starts[τ]
/// (blocks.hpp: positions restart there, attention reaches back to it only).
struct microbatch {
  int t = 0;
  std::vector<std::int32_t> ids, targets;
  std::vector<std::int32_t> starts{};  // empty: one document a row
  const std::int32_t* starts_or_null() const noexcept { return starts.empty() ? nullptr : starts.data(); }
};

namespace detail {
inline void check_microbatch(const gpt_config& c, const microbatch& mb) {
  check_length(c, mb.t);
  const std::size_t n = z(c.rows) * z(mb.t);
  if (mb.ids.size() != n || mb.targets.size() != n)
    throw std::invalid_argument("gpt: a microbatch's ids and targets must hold rows·t tokens");
  if (!mb.starts.empty() && mb.starts.size() != z(mb.t))
    throw std::invalid_argument("gpt: a microbatch's document starts must hold t positions");
  for (std::size_t k = 0; k < mb.starts.size(); ++k)
    if (mb.starts[k] < 0 || z(mb.starts[k]) > k)
      throw std::invalid_argument("gpt: a document start after its position");
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
    embedding_forward(c, p.embedding.data(), mb.ids.data(), hidden[0].data(), emb_stash.data(), mb.t,
                      mb.starts_or_null());
    for (std::size_t i = 0; i < z(c.layers); ++i)
      block_forward(c, p.blocks[i].data(), hidden[i].data(), hidden[i + 1].data(), block_stash[i].data(), mb.t,
                    mb.starts_or_null());
    return head_forward(c, p.head.data(), hidden[z(c.layers)].data(), mb.targets.data(), head_stash.data(), mb.t);
  }
};
}  // namespace detail

namespace detail {
/// reference_step under local learning (its comment says what).
template <class R, class G>
std::vector<double> local_step(const gpt_config& c, const model_params<R>& params, std::span<const microbatch> batch,
                               model_params<G>& grads, std::size_t scale_tokens, double seed) {
  const std::size_t L = z(c.layers), S = params.local_heads.size() + 1, m = batch.size();
  std::size_t tokens = 0;
  for (const microbatch& mb : batch) {
    check_microbatch(c, mb);
    tokens += z(c.rows) * z(mb.t);
  }
  const R loss_scale = R(seed) / R(static_cast<double>(scale_tokens > 0 ? scale_tokens : tokens));
  grads = zero_params<G>(c, S - 1);
  model_params<R> tmp = zero_params<R>(c, S - 1);
  runner<R> run(c);
  std::vector<double> sums(S * m, 0.0);
  for (std::size_t j = 0; j < m; ++j) {
    const microbatch& mb = batch[j];
    const int t = mb.t;
    embedding_forward(c, params.embedding.data(), mb.ids.data(), run.hidden[0].data(), run.emb_stash.data(), t);
    for (std::size_t s = 0; s < S; ++s) {
      const std::size_t b0 = s * L / S, b1 = (s + 1) * L / S;
      for (std::size_t i = b0; i < b1; ++i)
        block_forward(c, params.blocks[i].data(), run.hidden[i].data(), run.hidden[i + 1].data(),
                      run.block_stash[i].data(), t);
      const std::vector<R>& head = s + 1 == S ? params.head : params.local_heads[s];
      std::vector<R>& head_grad = s + 1 == S ? tmp.head : tmp.local_heads[s];
      sums[s * m + j] =
          head_forward(c, head.data(), run.hidden[b1].data(), mb.targets.data(), run.head_stash.data(), t);
      // this stage's backward, its gradient stopped at its input (the first block's input gradient unused)
      head_backward(c, head.data(), run.hidden[b1].data(), loss_scale, run.grad_a.data(), run.head_stash.data(),
                    head_grad.data(), t);
      for (std::size_t i = b1; i-- > b0;) {
        block_backward(c, params.blocks[i].data(), run.hidden[i].data(), run.grad_a.data(), run.grad_b.data(),
                       run.block_stash[i].data(), tmp.blocks[i].data(), t);
        std::swap(run.grad_a, run.grad_b);
      }
      if (s == 0)
        embedding_backward(c, params.embedding.data(), mb.ids.data(), run.grad_a.data(), run.emb_stash.data(),
                           tmp.embedding.data(), t);
    }
    for (int part = 0; part < part_count(tmp); ++part) add_into<G, R>(part_vector(grads, part), part_vector(tmp, part));
  }
  return sums;
}
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
/// 1/scale_tokens: the step is a replica's share of a larger batch), times `seed` (a power of two:
/// mixed precision's loss scale, which keeps small gradients above the 16-bit formats' underflow).
/// Each part's per-microbatch weight gradient is written into a temporary and added into `grads`
/// (zeroed first, resized to the parameters' shapes) in microbatch order, in G: each rounded to G,
/// then summed in G (float16 gradients, as the pipelined step sums them). Returns the
/// per-microbatch loss sums (loss = Σ sums · loss_scale).
///
/// Local learning (params.local_heads not empty: S = local_heads + 1 stages, stage s holding blocks
/// [s·L/S, (s+1)·L/S) as examples/gpt's stages do): each stage's blocks then its own head (the last
/// stage's: the model's), each stage's loss seeded with loss_scale and its gradient stopped at the
/// stage's input. Returns the loss sums stage by stage: stage s, microbatch j at s·m + j.
template <class R, class G = R>
std::vector<double> reference_step(const gpt_config& c, const model_params<R>& params,
                                   std::span<const microbatch> batch, model_params<G>& grads,
                                   std::size_t scale_tokens = 0, double seed = 1) {
  validate(c);
  const std::size_t L = detail::z(c.layers);
  if (params.blocks.size() != L || params.embedding.size() != embedding_params(c) ||
      params.head.size() != head_params(c) || params.local_heads.size() >= std::max<std::size_t>(L, 1))
    throw std::invalid_argument("reference_step: parameters do not match the config");
  if (!params.local_heads.empty()) return detail::local_step<R, G>(c, params, batch, grads, scale_tokens, seed);
  std::size_t tokens = 0;
  for (const microbatch& mb : batch) {
    detail::check_microbatch(c, mb);
    tokens += detail::z(c.rows) * detail::z(mb.t);
  }
  const R loss_scale = R(seed) / R(static_cast<double>(scale_tokens > 0 ? scale_tokens : tokens));
  grads = zero_params<G>(c);
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
                     run.block_stash[i].data(), tmp.blocks[i].data(), t, mb.starts_or_null());
      std::swap(run.grad_a, run.grad_b);
    }
    embedding_backward(c, params.embedding.data(), mb.ids.data(), run.grad_a.data(), run.emb_stash.data(),
                       tmp.embedding.data(), t, mb.starts_or_null());
    add_into<G, R>(grads.embedding, tmp.embedding);
    for (std::size_t i = 0; i < L; ++i) add_into<G, R>(grads.blocks[i], tmp.blocks[i]);
    add_into<G, R>(grads.head, tmp.head);
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
/// order, from replica 0's; all of it in G, the step's loss seeded with `seed` (reference_step).
/// Returns the per-microbatch loss sums of the whole batch (local learning: each replica's stage by
/// stage, replica after replica).
template <class R, class G = R>
std::vector<double> reference_step_dp(const gpt_config& c, const model_params<R>& params,
                                      std::span<const microbatch> batch, int replicas, bool tied,
                                      model_params<G>& grads, double seed = 1) {
  if (replicas < 1 || batch.size() % detail::z(replicas) != 0)
    throw std::invalid_argument("reference_step_dp: the batch does not split into the replicas");
  std::size_t tokens = 0;
  for (const microbatch& mb : batch) tokens += detail::z(c.rows) * detail::z(mb.t);
  const std::size_t m = batch.size() / detail::z(replicas);
  std::vector<double> sums;
  model_params<G> one;
  for (int d = 0; d < replicas; ++d) {
    const std::vector<double> s =
        reference_step<R, G>(c, params, batch.subspan(detail::z(d) * m, m), one, tokens, seed);
    sums.insert(sums.end(), s.begin(), s.end());
    if (tied) {
      const std::span<G> e = tied_in_embedding(one.embedding, c), h = tied_in_head(one.head, c);
      for (std::size_t i = 0; i < e.size(); ++i) {
        G sum = e[i];  // (G's own sum: TIE's)
        sum += h[i];
        e[i] = h[i] = sum;
      }
    }
    if (d == 0) {
      grads = one;
      continue;
    }
    for (int part = 0; part < part_count(grads); ++part)
      add_into<G, G>(part_vector(grads, part), part_vector(one, part));
  }
  return sums;
}

}  // namespace gpt
