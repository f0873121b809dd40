// examples/mlp.hpp — a small multilayer perceptron as pipeline stages, in plain C++.
//
// The model: `layers` dense layers of width `mlp::width` (tanh after every layer but the last),
// trained by mean squared error against a fixed "teacher" function of the input. A microbatch is
// `mlp::rows` rows. The layers are split over the stages of a plan as evenly as possible (stage s
// gets layers [s·L/S, (s+1)·L/S)); a stage with no layers passes its input through.
//
// Each stage is one `mlp::stage` (pipetype's stage concept): it owns its layers' parameters and
// gradients. Its stash keeps, per microbatch, every layer's output (for the backward) and every
// layer's pre-activation gradient (from backward_input to backward_weight). The full backward is
// literally backward_input followed by backward_weight, so a schedule that splits the backward
// computes bitwise the same gradients as one that does not. Gradients accumulate in microbatch
// order (pipetype calls each stage's weight gradients in that order), so every schedule matches
// `reference_step`, which runs the microbatches one after the other on one thread.
#pragma once

#include <pipetype/core/program.hpp>
#include <pipetype/graph/chain.hpp>
#include <pipetype/graph/stage.hpp>
#include <pipetype/mesh/memory_actions.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <stdexcept>
#include <vector>

#include "figures.hpp"
#include "pace.hpp"

namespace mlp {

inline constexpr std::size_t width = 32;  // features
inline constexpr std::size_t rows = 8;    // rows per microbatch
inline constexpr std::size_t act = rows * width;

/// A deterministic generator (splitmix64), so runs are reproducible everywhere.
struct rng {
  std::uint64_t s;
  std::uint64_t next() {
    std::uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  float uniform() { return static_cast<float>(next() >> 40) / static_cast<float>(1u << 24) * 2.0f - 1.0f; }
};

/// Half the mean squared error of `n` outputs `y` against targets `t` (the loss both examples train).
inline double half_mse(const float* y, const float* t, std::size_t n) {
  double sum = 0;
  for (std::size_t i = 0; i < n; ++i) sum += 0.5 * double(y[i] - t[i]) * double(y[i] - t[i]);
  return sum / double(n);
}

/// The largest |difference| of two gradients into `d`, and whether they are bitwise equal into `same`.
inline void grad_diff(std::span<const float> x, std::span<const float> y, double& d, bool& same) {
  for (std::size_t i = 0; i < x.size(); ++i) {
    d = examples::worst(d, std::fabs(double(x[i]) - double(y[i])));
    same = same && std::memcmp(&x[i], &y[i], sizeof(float)) == 0;
  }
}

struct layer {
  std::vector<float> w, b;  // w: [out][in] = width × width
};
/// Per layer, its weight gradient then its bias gradient, in one vector.
inline constexpr std::size_t layer_grads = width * width + width;

class stage {
 public:
  using input = pipetype::tensor<float, rows, width>;
  using output = pipetype::tensor<float, rows, width>;
  using stash = pipetype::tensor<float, pipetype::dynamic>;        // 2 · layers · rows · width
  using weight_grad = pipetype::tensor<float, pipetype::dynamic>;  // layers · layer_grads

  stage(int first_layer, int layers, bool last, std::uint64_t seed) : first_(first_layer), last_(last) {
    rng g{seed + static_cast<std::uint64_t>(first_layer)};
    const float scale = 1.0f / std::sqrt(static_cast<float>(width));
    for (int l = 0; l < layers; ++l) {
      layer L;
      L.w.resize(width * width);
      for (float& x : L.w) x = g.uniform() * scale * 1.5f;
      L.b.assign(width, 0.0f);
      layers_.push_back(std::move(L));
    }
    grads_.assign(layers_.size() * layer_grads, 0.0f);
  }

  std::size_t stash_extent() const { return 2 * layers_.size() * act; }
  std::size_t weight_grad_extent() const { return grads_.size(); }
  /// The accumulated gradients (pipetype adds each microbatch's into them, in microbatch order).
  std::span<float> weight_gradients() { return grads_; }
  std::span<const float> weight_gradients() const { return grads_; }
  int first_layer() const { return first_; }
  bool last() const { return last_; }
  std::vector<layer>& layers() { return layers_; }
  const std::vector<layer>& layers() const { return layers_; }

  /// Targets of every microbatch (the last stage reads microbatch j's at j · act) and the
  /// per-microbatch losses it writes.
  void set_targets(const float* t, std::vector<double>* losses) {
    targets_ = t;
    losses_ = losses;
  }

  /// Every call then lasts `factor` × max(its own time, `per_layer` × its layers) (train_mlp's
  /// --slow and --layer-us: a throttled rank, a pretend cost per layer; 1 and 0: its own time).
  void set_pace(double factor, std::chrono::nanoseconds per_layer) {
    pace_factor_ = factor;
    pace_floor_ = per_layer * static_cast<long>(layers_.size());
  }

  void forward(const pipetype::forward_ctx<stage>& c) {
    const examples::paced guard{pace_factor_, pace_floor_};
    const float* x = c.input.data();
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      float* y = c.stash.data() + l * act;
      dense(layers_[l], x, y, !(last_ && l + 1 == layers_.size()));
      x = y;
    }
    if (!c.output.empty()) copy(x, c.output.data());
    if (last_ && losses_) {
      (*losses_)[static_cast<std::size_t>(c.microbatch)] =
          half_mse(x, targets_ + static_cast<std::size_t>(c.microbatch) * act, act);
    }
  }

  // I: the gradient of every layer's pre-activation (kept in the stash for W) and of the input.
  void backward_input(const pipetype::backward_ctx<stage>& c) {
    const examples::paced guard{pace_factor_, pace_floor_};
    const std::size_t L = layers_.size();
    std::vector<float> dy(act);
    if (last_) {
      const float* y = L ? c.stash.data() + (L - 1) * act : c.input.data();
      const float* t = targets_ + static_cast<std::size_t>(c.microbatch) * act;
      for (std::size_t i = 0; i < act; ++i) dy[i] = (y[i] - t[i]) / float(act);
    } else {
      copy(c.grad_output.data(), dy.data());
    }
    for (std::size_t l = L; l-- > 0;) {
      const float* y = c.stash.data() + l * act;
      float* g = c.stash.data() + (L + l) * act;
      const bool tanh_layer = !(last_ && l + 1 == L);
      for (std::size_t i = 0; i < act; ++i) g[i] = tanh_layer ? dy[i] * (1.0f - y[i] * y[i]) : dy[i];
      if (l == 0 && c.grad_input.empty()) break;
      const std::vector<float>& w = layers_[l].w;
      for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t i = 0; i < width; ++i) {
          float s = 0;
          for (std::size_t o = 0; o < width; ++o) s += w[o * width + i] * g[r * width + o];
          dy[r * width + i] = s;
        }
    }
    if (!c.grad_input.empty()) copy(dy.data(), c.grad_input.data());
  }

  // W: this microbatch's weight gradients, from the stashed pre-activation gradients, written to
  // c.weight_grad (pipetype adds them into weight_gradients() in microbatch order).
  void backward_weight(const pipetype::backward_ctx<stage>& c) {
    const examples::paced guard{pace_factor_, pace_floor_};
    const std::size_t L = layers_.size();
    for (std::size_t l = 0; l < L; ++l) {
      const float* x = l == 0 ? c.input.data() : c.stash.data() + (l - 1) * act;
      const float* g = c.stash.data() + (L + l) * act;
      float* dw = c.weight_grad.data() + l * layer_grads;
      float* db = dw + width * width;
      for (std::size_t o = 0; o < width; ++o) {
        float sb = 0;
        for (std::size_t r = 0; r < rows; ++r) sb += g[r * width + o];
        db[o] = sb;
        for (std::size_t i = 0; i < width; ++i) {
          float s = 0;
          for (std::size_t r = 0; r < rows; ++r) s += g[r * width + o] * x[r * width + i];
          dw[o * width + i] = s;
        }
      }
    }
  }

  /// Forgets the accumulated gradients (a step that should not train, e.g. a measuring one).
  void zero_grads() { std::fill(grads_.begin(), grads_.end(), 0.0f); }

  void sgd(float lr) {
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      layer& ly = layers_[l];
      const float* dw = grads_.data() + l * layer_grads;
      for (std::size_t i = 0; i < ly.w.size(); ++i) ly.w[i] -= lr * dw[i];
      for (std::size_t i = 0; i < ly.b.size(); ++i) ly.b[i] -= lr * dw[width * width + i];
    }
    std::fill(grads_.begin(), grads_.end(), 0.0f);
  }

 private:
  static void copy(const float* from, float* to) {
    for (std::size_t i = 0; i < act; ++i) to[i] = from[i];
  }
  static void dense(const layer& ly, const float* x, float* y, bool tanh_act) {
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t o = 0; o < width; ++o) {
        float s = ly.b[o];
        for (std::size_t i = 0; i < width; ++i) s += ly.w[o * width + i] * x[r * width + i];
        y[r * width + o] = tanh_act ? std::tanh(s) : s;
      }
  }

  int first_;
  bool last_;
  std::vector<layer> layers_;
  std::vector<float> grads_;
  const float* targets_ = nullptr;
  std::vector<double>* losses_ = nullptr;
  double pace_factor_ = 1;
  std::chrono::nanoseconds pace_floor_{0};
};

/// A model whose stage s holds `split[s]` consecutive layers, initialised from `seed` (each
/// stage's layers from seed + its first layer: another split starts from other parameters).
inline pipetype::uniform_chain<stage> make_model(const std::vector<int>& split, std::uint64_t seed = 7) {
  std::vector<stage> s;
  int first = 0;
  for (std::size_t i = 0; i < split.size(); ++i) {
    s.emplace_back(first, split[i], i + 1 == split.size(), seed);
    first += split[i];
  }
  return pipetype::uniform_chain<stage>(std::move(s));
}

/// The even split of `layers` layers over `stages` stages: stage s gets [s·L/S, (s+1)·L/S).
inline std::vector<int> even_split(int layers, int stages) {
  std::vector<int> split;
  for (int i = 0; i < stages; ++i) split.push_back((i + 1) * layers / stages - i * layers / stages);
  return split;
}

/// `layers` layers split evenly over `stages` stages, initialised from `seed`.
inline pipetype::uniform_chain<stage> make_model(int layers, int stages, std::uint64_t seed = 7) {
  return make_model(even_split(layers, stages), seed);
}

/// Copies `from`'s parameters into `to`, a model of the same layers split otherwise (train_mlp's
/// --plan-set moving layers between ranks between two steps); both hold no gradient then.
inline void move_layers(pipetype::uniform_chain<stage>& from, pipetype::uniform_chain<stage>& to) {
  std::vector<const layer*> all;
  for (const stage& s : from.stages())
    for (const layer& l : s.layers()) all.push_back(&l);
  std::size_t k = 0;
  for (stage& s : to.stages())
    for (layer& l : s.layers()) l = *all.at(k++);
  if (k != all.size()) throw std::logic_error("move_layers: the two models hold different layers");
}

/// A batch of `microbatches` microbatches and its targets (a fixed teacher of the input).
struct batch {
  std::vector<float> inputs, targets;
};
inline batch make_batch(int microbatches, std::uint64_t step) {
  batch b;
  const std::size_t n = static_cast<std::size_t>(microbatches) * act;
  b.inputs.resize(n);
  b.targets.resize(n);
  rng g{1000 + step};
  for (float& x : b.inputs) x = g.uniform();
  for (std::size_t k = 0; k < n / width; ++k)  // each row: a smooth function of its features
    for (std::size_t o = 0; o < width; ++o) {
      const float* x = &b.inputs[k * width];
      b.targets[k * width + o] = 0.5f * std::sin(x[o] + 0.5f * x[(o + 1) % width]);
    }
  return b;
}

/// Points the last stage at the targets and the per-microbatch losses.
inline void attach(pipetype::uniform_chain<stage>& model, const batch& b, std::vector<double>& losses,
                   int microbatches) {
  losses.assign(static_cast<std::size_t>(microbatches), 0.0);
  for (stage& s : model.stages()) s.set_targets(s.last() ? b.targets.data() : nullptr, s.last() ? &losses : nullptr);
}

/// The loss of a step: the mean over microbatches, summed in microbatch order.
inline double mean_loss(const std::vector<double>& losses) {
  double s = 0;
  for (double l : losses) s += l;
  return losses.empty() ? 0 : s / double(losses.size());
}

/// One step without a pipeline: every microbatch forward through all stages, then backward,
/// one after the other on this thread (the unpipelined reference). Fills `losses`.
inline void reference_step(pipetype::uniform_chain<stage>& model, const batch& b, std::vector<double>& losses,
                           int microbatches) {
  attach(model, b, losses, microbatches);
  const int S = model.size();
  for (int j = 0; j < microbatches; ++j) {
    std::vector<std::vector<float>> acts(static_cast<std::size_t>(S) + 1, std::vector<float>(act));
    std::vector<std::vector<float>> stash(static_cast<std::size_t>(S));
    std::copy_n(b.inputs.data() + static_cast<std::size_t>(j) * act, act, acts[0].data());
    for (int s = 0; s < S; ++s) {
      stage& st = model.stage(s);
      stash[static_cast<std::size_t>(s)].assign(st.stash_extent(), 0.0f);
      pipetype::forward_ctx<stage> c{
          s, j, acts[static_cast<std::size_t>(s)],
          s + 1 < S ? std::span<float>(acts[static_cast<std::size_t>(s) + 1]) : std::span<float>{},
          stash[static_cast<std::size_t>(s)]};
      st.forward(c);
    }
    std::vector<float> grad(act), grad_in(act);
    for (int s = S; s-- > 0;) {
      stage& st = model.stage(s);
      pipetype::backward_ctx<stage> c{s,
                                      j,
                                      acts[static_cast<std::size_t>(s)],
                                      s + 1 < S ? std::span<const float>(grad) : std::span<const float>{},
                                      s > 0 ? std::span<float>(grad_in) : std::span<float>{},
                                      stash[static_cast<std::size_t>(s)],
                                      {}};
      st.backward_input(c);
      std::vector<float> wg(st.weight_grad_extent());
      c.grad_input = {};
      c.weight_grad = wg;
      st.backward_weight(c);
      const std::span<float> acc = st.weight_gradients();
      for (std::size_t i = 0; i < acc.size(); ++i) acc[i] += wg[i];
      grad.swap(grad_in);
    }
  }
}

/// The largest |difference| between two models' gradients (0: bitwise equal, when `bitwise`).
inline double max_grad_diff(const pipetype::uniform_chain<stage>& a, const pipetype::uniform_chain<stage>& b,
                            bool* bitwise = nullptr) {
  double d = 0;
  bool same = true;
  for (int s = 0; s < a.size(); ++s) grad_diff(a.stage(s).weight_gradients(), b.stage(s).weight_gradients(), d, same);
  if (bitwise) *bitwise = same;
  return d;
}

/// What each plan stage of `p` keeps for its backward beside its input, for memory actions
/// (docs/13): its stash, in bytes; a recomputed forward keeps only its input, which stays in its
/// activation slot, so nothing of it is in the stash pool.
inline pipetype::memory_sizes stash_sizes(const pipetype::program_view& p, pipetype::uniform_chain<stage>& model) {
  pipetype::memory_sizes z;
  for (int s = 0; s < p.stages; ++s)
    z.saved.push_back(static_cast<std::int64_t>(model.stage(s % p.lane_length()).stash_extent() * sizeof(float)));
  z.kept = {0};
  return z;
}

}  // namespace mlp
