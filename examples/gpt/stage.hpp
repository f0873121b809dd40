// examples/gpt/stage.hpp — the decoder of layers.hpp cut into pipeline stages of whole blocks.
//
// Stage i of S holds blocks [i·L/S, (i+1)·L/S), the first stage the embedding before them, the
// last ln_f, the LM head and the loss after them. What travels between stages is one set of
// tensors (docs/04_host_execution.md, "Several tensors per edge"):
//
//   hidden states  varying<tensor<float, dynamic>>                    [rows, t, C], gradient back
//   token ids      no_grad<varying<tensor<std::int32_t, dynamic>>>    [rows, t], the first stage's input
//
// both varying: a microbatch of sequence length t ≤ T holds rows·t tokens (the batch's lengths),
// so a short microbatch moves and computes only its share. The first stage's input holds no hidden
// states (extent 0) and the others' no ids (extent 0): one stage type serves every position, as a
// uniform_chain needs. The sink reads its targets (`using target`), writes the sum of its tokens'
// cross-entropy as the microbatch's loss, and seeds its backward with ctx.loss_scale (the batch
// says per(tokens of the step), so the objective is the mean over every token, as PyTorch's
// cross_entropy with reduction "mean" over the whole batch).
//
// Each stage keeps its parameters in one flat vector, the embedding's, then each block's, then the
// head's (layers.hpp's part layouts back to back), and hands pipetype each microbatch's weight
// gradient in the same layout (weight_grad): pipetype adds them in microbatch order, as the
// unpipelined reference_step does, so every schedule's gradients are bitwise the reference's.
// Over a mesh (--dp) it also hands pipetype its parameters (FSDP gathers and releases them) and,
// with tied embeddings, where wte.weight's or lm_head.weight's gradient lies (tied_gradients).
// Under FSDP it lends them (lends_parameters): pipetype holds each replica's shard and gathers the
// whole into a slot of its pool for the calls that read it (ctx.params); the stage then keeps no
// parameters of its own, and Adam's moments for its replica's shard only. With ZeRO-1 (--zero 1)
// it keeps its parameters and Adam's moments for its shard (own_shard), and the step's OPT_STEP
// runs Adam on that shard inside the step (optimizer_step, pipetype's hook).
// The gradients' element type G is a template parameter (basic_stage<G>; `stage` is float's):
// with pipetype::half or pipetype::bfloat16 (--grad-dtype fp16|bf16) each part's weight gradient
// is computed in float into a per-thread scratch and rounded to G as it is handed over, and
// pipetype sums the microbatches, the tie and the replicas in G, as reference_step does; the
// parameters, activations and Adam stay float (mixed precision's master weights).
// Local learning (--local-losses: the model's params carry local heads, add_local_heads): every
// stage but the last has a head of its own after its blocks, in the head's layout, and is a loss:
// its forward sends its last block's output on and writes its head's loss, its backward starts
// from that loss and writes no input gradient (pipetype gives it none: the edges are detached).
// The backward is split (backward_input, backward_weight) so that the zero-bubble schedules run
// it; everything a microbatch's backward needs, including the gradients I leaves for W, lives in
// its stash, so DualPipe's two directions may run one stage object at once.
#pragma once

#include <pipetype/pipetype.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "../pace.hpp"
#include "layers.hpp"

namespace gpt {

namespace pt = pipetype;

/// Whether PyTorch's clip_grad_norm_ rule scales the step's gradients down: a bound `clip` > 0
/// below the global norm of the unscaled gradients (`norm`: GRAD_NORM's, of the gradients seeded
/// with `loss_scale`; −1: none).
inline bool clips(float clip, double norm, double loss_scale) {
  return clip > 0 && norm >= 0 && clip / (norm / loss_scale + 1e-6) < 1;
}

/// The factor Adam multiplies each summed gradient by: 1/loss_scale (mixed precision's seed,
/// a power of two, so the division is exact) times PyTorch's clip_grad_norm_ rule for a bound
/// `clip` > 0 on the global norm (`norm`: GRAD_NORM's, of the scaled gradients; −1: none).
/// With loss_scale 1 and no clipping it is 1, the same bits as no factor.
inline float gradient_factor(float clip, double norm, double loss_scale) {
  const float scale = clips(clip, norm, loss_scale) ? static_cast<float>(clip / (norm / loss_scale + 1e-6)) : 1.0f;
  return loss_scale == 1 ? scale : scale / static_cast<float>(loss_scale);
}

template <class G>
class basic_stage {
 public:
  using input = pt::tensors<pt::varying<pt::tensor<float, pt::dynamic>>,
                            pt::no_grad<pt::varying<pt::tensor<std::int32_t, pt::dynamic>>>>;
  using output = input;
  using target = pt::varying<pt::tensor<std::int32_t, pt::dynamic>>;
  using stash = pt::tensor<float, pt::dynamic>;
  using weight_grad = pt::tensor<G, pt::dynamic>;

  /// Under FSDP on a host mesh pipetype holds the parameters (lends_parameters): replica `replica`
  /// of `dp` keeps Adam's moments for its own shard only, and `initial` (the stage's flat initial
  /// parameters, one copy every replica's stage reads) serves only for binding (drop_initial()).
  struct lending {
    int dp = 1, replica = 0;
    std::shared_ptr<std::vector<float>> initial;
    bool local = false;  // local learning: a head on every stage
  };
  static constexpr bool lends_parameters = true;

  /// Stage `index` of `stages`, its parameters taken from the whole model's `params`; `split`:
  /// each stage's blocks (empty: as even as they go, stage i holding [i·L/S, (i+1)·L/S)).
  basic_stage(const gpt_config& c, int index, int stages, const model_params<float>& params,
              const std::vector<int>& split = {})
      : basic_stage(c, index, stages, flat_parameters(c, index, stages, params, split),
                    lending{1, 0, nullptr, !params.local_heads.empty()}, split) {}
  /// The same, its parameters lent to pipetype (see `lending`).
  basic_stage(const gpt_config& c, int index, int stages, const lending& l)
      : basic_stage(c, index, stages, std::vector<float>{}, l) {}

  /// The blocks stage `index` of `stages` holds: [first, first + count).
  struct block_range {
    int first = 0, count = 0;
  };
  static block_range blocks_of(const gpt_config& c, int index, int stages, const std::vector<int>& split = {}) {
    if (split.empty()) return {index * c.layers / stages, (index + 1) * c.layers / stages - index * c.layers / stages};
    int first = 0;
    for (int s = 0; s < index; ++s) first += split.at(static_cast<std::size_t>(s));
    return {first, split.at(static_cast<std::size_t>(index))};
  }

  /// Stage `index` of `stages`' parameters in one flat vector (the top of this file).
  static std::vector<float> flat_parameters(const gpt_config& c, int index, int stages,
                                            const model_params<float>& params, const std::vector<int>& split = {}) {
    check_stages(c, stages);
    const auto [b0, n] = blocks_of(c, index, stages, split);
    std::vector<float> out;
    auto take = [&](const std::vector<float>& part) { out.insert(out.end(), part.begin(), part.end()); };
    if (index == 0) take(params.embedding);
    for (int k = 0; k < n; ++k) take(params.blocks[static_cast<std::size_t>(b0 + k)]);
    if (index == stages - 1)
      take(params.head);
    else if (!params.local_heads.empty())
      take(params.local_heads.at(static_cast<std::size_t>(index)));
    return out;
  }

 private:
  static void check_stages(const gpt_config& c, int stages) {
    if (c.layers < stages)
      throw std::invalid_argument("gpt: " + std::to_string(c.layers) + " layers cannot fill " + std::to_string(stages) +
                                  " stages of whole blocks (give --layers at least the plan's stages)");
  }
  basic_stage(const gpt_config& c, int index, int stages, std::vector<float> own, const lending& l,
              const std::vector<int>& split = {})
      : c_(c),
        first_(index == 0),
        last_(index == stages - 1),
        head_(last_ || l.local),
        index_(index),
        params_(std::move(own)),
        initial_(l.initial) {
    check_stages(c, stages);
    stages_ = stages;
    split_ = split;
    block0_ = blocks_of(c, index, stages, split).first;
    blocks_ = blocks_of(c, index, stages, split).count;
    n_ = initial_ ? initial_->size() : params_.size();
    own_ = initial_ ? pt::shard_of(n_, l.dp, l.replica) : pt::shard_range{0, n_};
    grads_.assign(n_, G{});
    m_.assign(own_.size(), 0.0f);
    v_.assign(own_.size(), 0.0f);
    const std::size_t A = activation_floats(c);
    acts_ = 0;
    grad_buf_ = acts_ + A * static_cast<std::size_t>(blocks_ + 1);
    emb_stash_ = grad_buf_ + 2 * A;
    block_stash_ = emb_stash_ + (first_ ? embedding_stash_floats(c) : 0);
    head_stash_ = block_stash_ + static_cast<std::size_t>(blocks_) * block_stash_floats(c);
    stash_size_ = head_stash_ + (head_ ? head_stash_floats(c) : 0);
  }

 public:
  // sizes pipetype asks for (the most: a microbatch of length T)
  std::size_t input_extent(std::size_t k) const {
    return k == 0 ? (first_ ? 0 : activation_floats(c_)) : (first_ ? token_capacity(c_) : 0);
  }
  std::size_t output_extent(std::size_t k) const { return k == 0 ? activation_floats(c_) : 0; }
  std::size_t target_extent() const { return token_capacity(c_); }
  std::size_t stash_extent() const { return stash_size_; }
  std::size_t weight_grad_extent() const { return n_; }
  std::span<G> weight_gradients() { return grads_; }
  /// For FSDP (a mesh executor with dp_options::shard): gathered before the stage runs. A lending
  /// stage's are its shared initial ones until drop_initial() (pipetype reads them once, at
  /// binding: each replica's shard), then none: its calls read ctx.params.
  std::span<float> parameters() { return initial_ ? std::span<float>(*initial_) : std::span<float>(params_); }
  /// A lending stage, once pipetype holds its shards: the initial copy is no longer its to keep.
  void drop_initial() { initial_.reset(); }
  /// A lending stage after training: the whole parameters back (its replica's and the others'
  /// shards), for evaluation and the checks; it reads them itself from then on.
  void restore(std::vector<float> whole) { params_ = std::move(whole); }
  /// Tie group 0, the tied embedding (--tie-embeddings): wte.weight's gradient on the first
  /// stage, lm_head.weight's on the last.
  std::span<G> tied_gradients(int) { return tied_part(grads_); }
  /// The tied copy's parameters (wte.weight on the first stage, lm_head.weight on the last).
  std::span<float> tied_parameters() { return tied_part(params_); }

  void forward(const pt::forward_ctx<basic_stage>& c) {
    const examples::paced guard{slow_};
    const auto [hidden, ids] = c.input;
    const int t = length(first_ ? ids.size() : hidden.size() / width());
    float* s = c.stash.data();
    const float* x = hidden.data();
    if (first_) {
      embedding_forward(c_, param(c, 0), ids.data(), act(s, 0), static_cast<float*>(nullptr), t, starts(c.microbatch));
      x = act(s, 0);
    }
    for (int k = 0; k < blocks_; ++k) {
      float* y = k == blocks_ - 1 && !head_ ? c.output.template get<0>().data() : act(s, k + 1);
      block_forward(c_, param(c, block_offset(k)), x, y,
                    s + block_stash_ + static_cast<std::size_t>(k) * block_stash_floats(c_), t, starts(c.microbatch));
      x = y;
    }
    if (!head_) return;
    if (!last_) {  // local learning: the output travels on, and this stage's head reads it too
      const std::span<float> out = c.output.template get<0>();
      std::copy(x, x + out.size(), out.begin());
    }
    *c.loss = static_cast<float>(head_forward(c_, param(c, head_offset()), x, c.target.data(), s + head_stash_, t));
  }

  void backward_input(const pt::backward_ctx<basic_stage>& c) {
    const examples::paced guard{slow_};
    const auto [hidden, ids] = c.input;
    const int t = length(first_ ? ids.size() : hidden.size() / width());
    float* s = c.stash.data();
    float* bufs[2] = {s + grad_buf_, s + grad_buf_ + activation_floats(c_)};
    int next = 0;  // the buffer the next gradient goes to
    const float* g = c.grad_output.template get<0>().data();
    if (head_) {
      head_backward_input(c_, param(c, head_offset()), act(s, blocks_), c.loss_scale, bufs[next], s + head_stash_, t);
      g = bufs[next];
      next ^= 1;
    }
    // (a detached input, local learning: no gradient is sent back, the first block's goes to a buffer)
    const bool sends = !first_ && !c.grad_input.template get<0>().empty();
    for (int k = blocks_ - 1; k >= 0; --k) {
      float* gin = k == 0 && sends ? c.grad_input.template get<0>().data() : bufs[next];
      block_backward_input(c_, param(c, block_offset(k)), block_input(c, k), g, gin,
                           s + block_stash_ + static_cast<std::size_t>(k) * block_stash_floats(c_), t,
                           starts(c.microbatch));
      g = gin;
      next ^= 1;
    }
    if (first_) embedding_backward_input(c_, param(c, 0), ids.data(), g, s + emb_stash_, t);
  }

  void backward_weight(const pt::backward_ctx<basic_stage>& c) {
    const examples::paced guard{slow_};
    const auto [hidden, ids] = c.input;
    const int t = length(first_ ? ids.size() : hidden.size() / width());
    float* s = c.stash.data();
    // the last layer first, as the backward's data flows: each layer's weight gradient depends on
    // its stash only, so the order changes no bit, and with buckets (c.buckets()) each bucket is
    // released for its reduction once every layer it covers is written
    if (head_) {
      const std::size_t at = head_offset();
      head_backward_weight(c_, param(c, at), act(s, blocks_), s + head_stash_, grad_out(c, at, head_params(c_)), t);
      written(c, at, head_params(c_));
    }
    for (int k = blocks_ - 1; k >= 0; --k) {
      const std::size_t at = block_offset(k);
      block_backward_weight(c_, param(c, at), block_input(c, k),
                            s + block_stash_ + static_cast<std::size_t>(k) * block_stash_floats(c_),
                            grad_out(c, at, block_params(c_)), t);
      written(c, at, block_params(c_));
    }
    if (first_) {
      embedding_backward_weight(c_, param(c, 0), ids.data(), s + emb_stash_, grad_out(c, 0, embedding_params(c_)), t,
                                starts(c.microbatch));
      written(c, 0, embedding_params(c_));
    }
  }

  /// --lengths: the step's microbatches, whose document starts (packed rows) the calls read by
  /// ctx.microbatch; nullptr: one document a row. Set before each step; read during it only.
  void set_documents(const std::vector<microbatch>* mbs) { docs_ = mbs; }
  /// --slow: every call of this stage then takes `factor` times as long (it sleeps the rest), as on
  /// a throttled rank (1: nominal).
  void set_slow(double factor) { slow_ = factor; }
  /// --plan-set's switch to another layout: this stage's part of the whole model's parameters and
  /// Adam's moments (its own split), gradients zero.
  void load(const model_params<float>& params, const model_params<float>& m, const model_params<float>& v) {
    params_ = flat_parameters(c_, index_, stages_, params, split_);
    set_adam(flat_parameters(c_, index_, stages_, m, split_), flat_parameters(c_, index_, stages_, v, split_));
    zero_grads();
  }

  /// Adam on this stage's parameters with its summed gradients, which it then zeroes.
  void adam(float lr, int step, float grad_scale = 1) { adam(params_, lr, step, grad_scale); }
  /// The same on the parameters `own` holds: the stage's shard (pipetype's, when it lends them:
  /// mesh_executor::parameter_shard), the elements own_ of the whole; each the same arithmetic.
  /// `grad_scale` multiplies each gradient first (global-norm clipping; 1: none, the same bits).
  void adam(std::span<float> own, float lr, int step, float grad_scale = 1) {
    update(own, lr, step, grad_scale);
    zero_grads();
  }
  void zero_grads() { std::fill(grads_.begin(), grads_.end(), G{}); }

  /// --zero 1 (ZeRO-1): replica `replica` of `dp` keeps Adam's moments for its shard only and
  /// updates that shard in the step's OPT_STEP; call before set_adam.
  void own_shard(int dp, int replica) {
    own_ = pt::shard_of(n_, dp, replica);
    m_ = std::vector<float>(own_.size(), 0.0f);  // (new vectors: the whole stage's are freed)
    v_ = std::vector<float>(own_.size(), 0.0f);
  }
  /// The step's optimizer (OPT_STEP, a mesh step with dp_options::optimizer or zero): Adam with
  /// `lr`, the step counted from `step` (the updates already made), its gradients clipped to a
  /// global norm of at most `clip` (> 0) by the norm GRAD_NORM gave.
  void set_optimizer(float lr, float clip, int step) { lr_ = lr, clip_ = clip, step_ = step; }
  /// The loss scale the coming step's loss is seeded with (mixed precision; 1: none): the update
  /// divides the gradients by it.
  void set_loss_scale(double s) { loss_scale_ = s; }
  void optimizer_step(const pt::optimizer_ctx<basic_stage>& c) {
    if (c.offset != own_.begin || c.params.size() != own_.size())
      throw std::logic_error("gpt: OPT_STEP over parameters " + std::to_string(c.offset) +
                             "… of a stage that updates " + std::to_string(own_.begin) + "…" +
                             std::to_string(own_.end));
    if (!c.finite) return;  // FINITE_CHECK found an overflow on some rank: every rank skips the update
    update(c.params, lr_, ++step_, gradient_factor(clip_, c.grad_norm, loss_scale_));  // (the caller zeroes them)
  }

  /// This stage's share of the model (parameters or gradients), written into `into` by part.
  void gather(model_params<float>& into, bool gradients) const {
    if (gradients)
      gather_flat(grads_, into);
    else
      gather_flat(params_, into);
  }

  /// Adam's moments (checkpoints): the elements `adam_range()` of the stage's flat layout hold
  /// them (its shard when it lends its parameters), and `set_adam` takes the whole stage's.
  pt::shard_range adam_range() const { return own_; }
  std::span<const float> adam_m() const { return m_; }
  std::span<const float> adam_v() const { return v_; }
  void set_adam(std::span<const float> m_whole, std::span<const float> v_whole) {
    if (m_whole.size() != n_ || v_whole.size() != n_)
      throw std::logic_error("gpt: Adam's moments for " + std::to_string(m_whole.size()) +
                             " parameters of a stage of " + std::to_string(n_));
    std::copy(m_whole.begin() + static_cast<std::ptrdiff_t>(own_.begin),
              m_whole.begin() + static_cast<std::ptrdiff_t>(own_.end), m_.begin());
    std::copy(v_whole.begin() + static_cast<std::ptrdiff_t>(own_.begin),
              v_whole.begin() + static_cast<std::ptrdiff_t>(own_.end), v_.begin());
  }

  /// A vector in this stage's flat layout (parameters, gradients, a moment), written into `into` by
  /// part (gradients of 16 bits exactly as floats).
  template <class T>
  void gather_flat(const std::vector<T>& v, model_params<float>& into) const {
    auto put = [&](std::vector<float>& part, std::size_t at) {
      std::copy(v.begin() + static_cast<std::ptrdiff_t>(at), v.begin() + static_cast<std::ptrdiff_t>(at + part.size()),
                part.begin());
    };
    if (first_) put(into.embedding, 0);
    for (int k = 0; k < blocks_; ++k) put(into.blocks[static_cast<std::size_t>(block0_ + k)], block_offset(k));
    if (last_)
      put(into.head, head_offset());
    else if (head_)
      put(into.local_heads.at(static_cast<std::size_t>(index_)), head_offset());
  }

 private:
  void update(std::span<float> own, float lr, int step, float grad_scale) {
    if (own.size() != own_.size())
      throw std::logic_error("gpt: Adam on " + std::to_string(own.size()) + " parameters of a stage that holds " +
                             std::to_string(own_.size()));
    const float b1 = 0.9f, b2 = 0.95f, eps = 1e-8f;
    const float c1 = 1.0f - std::pow(b1, static_cast<float>(step)), c2 = 1.0f - std::pow(b2, static_cast<float>(step));
    for (std::size_t i = 0; i < own.size(); ++i) {
      const float g = static_cast<float>(grads_[own_.begin + i]) * grad_scale;
      m_[i] = b1 * m_[i] + (1 - b1) * g;
      v_[i] = b2 * v_[i] + (1 - b2) * g * g;
      own[i] -= lr * (m_[i] / c1) / (std::sqrt(v_[i] / c2) + eps);
    }
  }
  std::size_t width() const { return static_cast<std::size_t>(c_.width); }
  int length(std::size_t tokens) const { return static_cast<int>(tokens / static_cast<std::size_t>(c_.rows)); }
  std::size_t block_offset(int k) const {
    return (first_ ? embedding_params(c_) : 0) + static_cast<std::size_t>(k) * block_params(c_);
  }
  std::size_t head_offset() const { return block_offset(blocks_); }
  template <class T>
  std::span<T> tied_part(std::vector<T>& v) const {
    if (first_ == last_) throw std::logic_error("gpt: a tied copy lives on the first or the last of several stages");
    return std::span<T>(v).subspan(first_ ? 0 : head_offset() + 2 * width(),
                                   static_cast<std::size_t>(c_.vocab) * width());
  }
  // Where a part's weight gradient of n floats at `at` is computed: straight into weight_grad when
  // G is float, else this thread's scratch, which written() rounds into weight_grad (a thread's:
  // DualPipe's two directions may run one stage at once, each on its rank's thread)
  static std::vector<float>& scratch() {
    thread_local std::vector<float> s;
    return s;
  }
  float* grad_out(const pt::backward_ctx<basic_stage>& c, std::size_t at, std::size_t n) const {
    if constexpr (std::is_same_v<G, float>) {
      (void)n;
      return c.weight_grad.data() + at;
    } else {
      (void)c, (void)at;
      if (scratch().size() < n) scratch().resize(n);
      return scratch().data();
    }
  }
  // Elements [at, at + n) are computed: rounded into weight_grad (G not float), and with those
  // after them released to the reductions (buckets)
  void written(const pt::backward_ctx<basic_stage>& c, std::size_t at, std::size_t n) const {
    if constexpr (!std::is_same_v<G, float>) {
      const float* x = scratch().data();
      for (std::size_t i = 0; i < n; ++i) c.weight_grad[at + i] = G(x[i]);
    } else {
      (void)n;
    }
    c.gradients_written_from(at);
  }
  // its parameters for this call: where pipetype gathered them (FSDP, lent), else its own
  template <class Ctx>
  const float* param(const Ctx& c, std::size_t at) const {
    return (c.params.empty() ? params_.data() : c.params.data()) + at;
  }
  float* act(float* s, int k) const { return s + acts_ + static_cast<std::size_t>(k) * activation_floats(c_); }
  // block k's input: the stage's input for the first block past the embedding, else the stash's copy
  const float* block_input(const pt::backward_ctx<basic_stage>& c, int k) const {
    return k == 0 && !first_ ? c.input.template get<0>().data() : act(c.stash.data(), k);
  }

  gpt_config c_;
  bool first_, last_, head_;  // head_: the model's head (last_), or a local one
  int index_ = 0, stages_ = 1;
  std::vector<int> split_;  // each stage's blocks (empty: even)
  double slow_ = 1;         // --slow: each call takes this many times as long
  const std::vector<microbatch>* docs_ = nullptr;  // --lengths: the step's microbatches (set_documents)
  const std::int32_t* starts(int microbatch) const {
    return docs_ ? (*docs_)[static_cast<std::size_t>(microbatch)].starts_or_null() : nullptr;
  }
  int block0_ = 0, blocks_ = 0;
  std::vector<float> params_, m_, v_;  // m_, v_: Adam's, over own_
  std::vector<G> grads_;
  float lr_ = 0, clip_ = 0;                      // the step's optimizer (set_optimizer)
  int step_ = 0;
  double loss_scale_ = 1;                        // the step's loss scale (set_loss_scale)
  std::shared_ptr<std::vector<float>> initial_;  // lending, until drop_initial(): the shared initial parameters
  std::size_t n_ = 0;                            // the stage's parameters
  pt::shard_range own_{};                        // the elements this stage's optimizer updates
  // the stash: blocks + 1 activations, two gradient buffers, then the parts' own stashes
  std::size_t acts_ = 0, grad_buf_ = 0, emb_stash_ = 0, block_stash_ = 0, head_stash_ = 0, stash_size_ = 0;
};

/// The stage with float gradients.
using stage = basic_stage<float>;

}  // namespace gpt
