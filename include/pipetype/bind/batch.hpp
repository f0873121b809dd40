// pipetype/bind/batch.hpp — the data of one step, as every executor takes it.
//
// A batch lists the inputs of the model's sources and the targets of its sinks, one array per
// tensor, each holding all microbatches (microbatch j at j × the tensor's elements):
//
//   pipetype::batch b;
//   b.input(ids);        // the first source's first tensor (sources in stage order, each
//   b.input(positions);  // source's tensors in declaration order)
//   b.target(labels);    // the sinks' targets likewise (sinks in stage order)
//   b.scale(pipetype::loss_scaling::per(tokens));  // how the losses make the objective
//   const pipetype::step_losses& l = ex.step(b);   // what each sink wrote, per microbatch
//
// Loss scaling. Each sink writes one loss per microbatch (ctx.loss). The step's objective is
// f · Σ losses, with f from the batch's loss_scaling: mean() (the default) f = 1/m, so the
// objective is the mean over microbatches; sum() f = 1; per(n) f = 1/n, e.g. when each loss is a
// sum over tokens and n counts the step's tokens. A sink's backward gets f as ctx.loss_scale, the
// gradient of the objective with respect to its loss, and seeds its backward with it; then the
// weight gradients are those of the objective, as an unpipelined run over the whole batch gives.
//
// The arrays are the caller's (host memory for the host executor, device memory for the CUDA
// executor) and must stay alive through the step (and through replays of a captured step). An
// executor checks a batch against its plan before anything runs: as many tensors as its sources
// take, each of the element type and size they declare; a mismatch is one sentence naming the
// source stage and the tensor (shape_error), and the executor stays usable.
//
// A single array (`step(span)`) remains the shorthand for a chain of one-tensor stages: stage 0's
// input, microbatch j at j × its extent; a stage graph's sources then sit side by side in one row
// per microbatch, in stage order (bind/layout.hpp's batch_layout).
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "pipetype/bind/layout.hpp"
#include "pipetype/bind/stage_entry.hpp"

namespace pipetype {

/// How a step's microbatch losses make its objective: f · Σ_j loss_j (see the top of this file).
class loss_scaling {
 public:
  /// f = 1/m: the mean over microbatches (the default).
  static constexpr loss_scaling mean() noexcept { return loss_scaling(0); }
  /// f = 1.
  static constexpr loss_scaling sum() noexcept { return loss_scaling(1); }
  /// f = 1/n (n > 0): e.g. losses that sum over tokens, n the step's tokens.
  static constexpr loss_scaling per(double n) noexcept { return loss_scaling(2, n); }
  /// f for a step of `microbatches` microbatches; NaN for per(n) with n not positive.
  constexpr double factor(int microbatches) const noexcept {
    return how_ == 0 ? 1.0 / microbatches : how_ == 1 ? 1.0 : n_ > 0 ? 1.0 / n_ : __builtin_nan("");
  }

 private:
  constexpr explicit loss_scaling(int how, double n = 0) noexcept : how_(how), n_(n) {}
  int how_ = 0;
  double n_ = 0;
};

/// A step's losses: what each sink wrote for each microbatch (NaN where it wrote nothing), and
/// the objective they make.
struct step_losses {
  std::vector<float> values;  // sinks × microbatches: sink k's loss of microbatch j at k · microbatches + j
  int sinks = 0, microbatches = 0;
  double scale = 0;  // f: d objective / d loss_j
  float at(int sink, int microbatch) const {
    return values.at(static_cast<std::size_t>(sink) * static_cast<std::size_t>(microbatches) +
                     static_cast<std::size_t>(microbatch));
  }
  /// f · Σ losses, summed in double in (sink, microbatch) order.
  double objective() const noexcept {
    double t = 0;
    for (const float v : values) t += static_cast<double>(v);
    return t * scale;
  }
};

class batch {
 public:
  /// One array of a tensor over all microbatches: the type, elements and where they are.
  struct array {
    const std::byte* data = nullptr;
    std::size_t elems = 0, size = 0;
    const void* type = nullptr;
  };

  /// The next source tensor: any contiguous range (a std::span, a std::vector, an array) of all
  /// microbatches' elements.
  template <class R>
  batch& input(const R& all) {
    return add(inputs_, all);
  }
  /// The next sink target tensor (sinks in stage order, each sink's tensors in declaration order).
  template <class R>
  batch& target(const R& all) {
    return add(targets_, all);
  }
  /// Per microbatch, its length (a sequence length), for the tensors declared varying<...>: a
  /// varying tensor of declared (most) extent E holds E · length / max_length elements in that
  /// microbatch, the first of its slot, and only those travel. Each length at most max_length; E
  /// a multiple of max_length. Without lengths every microbatch is full. Every rank of a step
  /// must see the same lengths: a process that runs one rank (a device executor, a model part)
  /// gives its step the step's lengths even when it holds no source, or its transfers' byte
  /// counts would differ from its peers' (NCCL needs them equal).
  template <class R>
  batch& lengths(const R& per_microbatch, std::size_t max_length) {
    lengths_.assign(std::begin(per_microbatch), std::end(per_microbatch));
    max_length_ = max_length;
    has_lengths_ = true;
    return *this;
  }
  /// How the losses make the step's objective (loss_scaling::mean() unless set).
  batch& scale(loss_scaling how) noexcept {
    scaling_ = how;
    return *this;
  }
  const std::vector<array>& inputs() const noexcept { return inputs_; }
  const std::vector<array>& targets() const noexcept { return targets_; }
  loss_scaling scaling() const noexcept { return scaling_; }
  bool has_lengths() const noexcept { return has_lengths_; }
  const std::vector<std::size_t>& lengths() const noexcept { return lengths_; }
  std::size_t max_length() const noexcept { return max_length_; }
  void clear() noexcept {
    inputs_.clear();
    targets_.clear();
    lengths_.clear();
    max_length_ = 0;
    has_lengths_ = false;
    scaling_ = loss_scaling::mean();
  }

 private:
  template <class R>
  batch& add(std::vector<array>& to, const R& all) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(std::data(all))>>;
    to.push_back({reinterpret_cast<const std::byte*>(std::data(all)), std::size(all), sizeof(T), detail::type_id<T>});
    return *this;
  }
  std::vector<array> inputs_, targets_;
  std::vector<std::size_t> lengths_;
  std::size_t max_length_ = 0;
  bool has_lengths_ = false;
  loss_scaling scaling_ = loss_scaling::mean();
};

namespace detail {

/// The element type of a one-array batch (step(span)) for a first stage whose input is `X`: a
/// single tensor's element type; a set's blocks as bytes.
template <class X>
struct row_type {
  using type = std::byte;
};
template <class T, std::size_t... E>
struct row_type<tensor<T, E...>> {
  using type = T;
};

/// The places of `arrays` (what = "input" or "target") for the tensors `shape_of(s)` of the stages
/// whose first tensor is `first[s]` (-1: none), `count` tensors in all; shape_error (prefixed
/// `who`) when they do not fit.
template <class ShapeOf>
void feed_arrays(const std::vector<batch::array>& arrays, const std::vector<int>& first, int count, int stages_with,
                 const char* what, const char* stage_kind, ShapeOf shape_of, int microbatches,
                 std::vector<feed_tensor>& out, const std::string& who) {
  if (static_cast<int>(arrays.size()) != count)
    throw shape_error(who + ": the batch has " + std::to_string(arrays.size()) + " " + what + " arrays; the model's " +
                      std::to_string(stages_with) + " " + stage_kind + (stages_with == 1 ? "" : "s") + " take " +
                      std::to_string(count) + " (one per tensor, " + stage_kind + "s in stage order)");
  const auto m = static_cast<std::size_t>(microbatches);
  out.resize(arrays.size());
  for (std::size_t s = 0; s < first.size(); ++s) {
    if (first[s] < 0) continue;
    const edge_shape& sh = shape_of(s);
    for (std::size_t k = 0; k < static_cast<std::size_t>(sh.count); ++k) {
      const std::size_t i = static_cast<std::size_t>(first[s]) + k;
      const batch::array& a = arrays[i];
      const tensor_place& p = sh.t[k];
      const std::string at = who + ": the batch's " + what + " array " + std::to_string(i) + " (" + stage_kind +
                             " stage " + std::to_string(s) + ", tensor " + std::to_string(k) + ")";
      if (a.size != p.size || a.type != p.type)
        throw shape_error(at + " has elements of " + std::to_string(a.size) + " bytes" +
                          (a.size == p.size ? " but of another type" : "") + "; the stage takes elements of " +
                          std::to_string(p.size) + " bytes");
      if (a.elems != p.elems * m)
        throw shape_error(at + " has " + std::to_string(a.elems) + " elements; the plan has " + std::to_string(m) +
                          " microbatches of " + std::to_string(p.elems) + ", so " + std::to_string(p.elems * m));
      out[i] = {a.data, p.bytes()};
    }
  }
}

/// A batch given as one array (step(span)) fits the model: its sinks take no targets, and each
/// source takes one tensor (a set's tensors would sit at unaligned places in a packed row).
inline void check_one_array(const batch_layout& layout, const std::vector<stage_entry>& entries,
                            const std::string& who) {
  if (layout.targets > 0)
    throw shape_error(who + ": the model's sinks take targets; give step() a pipetype::batch with them");
  for (std::size_t s = 0; s < entries.size(); ++s)
    if (layout.first[s] >= 0 && entries[s].in.count > 1)
      throw shape_error(who + ": step() got one array, but source stage " + std::to_string(s) + " takes a set of " +
                        std::to_string(entries[s].in.count) +
                        " tensors: give it a pipetype::batch (one array per tensor)");
}

/// The batch's lengths fit: one per microbatch, none above the maximum, and every varying tensor's
/// declared extent a multiple of the maximum (so that each length holds whole elements).
inline void check_lengths(const batch& b, const std::vector<stage_entry>& entries, int microbatches,
                          const std::string& who) {
  if (!b.has_lengths()) return;
  const std::size_t most = b.max_length();
  if (most == 0) throw shape_error(who + ": the batch's lengths have a maximum length of 0");
  if (b.lengths().size() != static_cast<std::size_t>(microbatches))
    throw shape_error(who + ": the batch has " + std::to_string(b.lengths().size()) + " lengths; the plan has " +
                      std::to_string(microbatches) + " microbatches");
  for (std::size_t j = 0; j < b.lengths().size(); ++j)
    if (b.lengths()[j] > most)
      throw shape_error(who + ": the batch's length of microbatch " + std::to_string(j) + " is " +
                        std::to_string(b.lengths()[j]) + ", above the maximum " + std::to_string(most));
  const char* names[] = {"input", "output", "target"};
  for (std::size_t s = 0; s < entries.size(); ++s) {
    const edge_shape* shapes[] = {&entries[s].in, &entries[s].out, &entries[s].target};
    for (int w = 0; w < 3; ++w)
      for (int k = 0; k < shapes[w]->count; ++k) {
        const tensor_place& p = shapes[w]->t[static_cast<std::size_t>(k)];
        if (p.varies && p.elems % most != 0)
          throw shape_error(who + ": stage " + std::to_string(s) + "'s " + names[w] + " tensor " + std::to_string(k) +
                            " varies and holds at most " + std::to_string(p.elems) +
                            " elements, which is no multiple of the batch's maximum length " + std::to_string(most));
      }
  }
}

/// The feed of `b`'s inputs and targets for a plan of `microbatches` whose sources and sinks are
/// laid out as `layout` says; shape_error (prefixed `who`) when it does not fit.
inline void feed_from_batch(const batch_layout& layout, const std::vector<stage_entry>& entries, int microbatches,
                            const batch& b, std::vector<feed_tensor>& inputs, std::vector<feed_tensor>& targets,
                            const std::string& who) {
  int with_targets = 0;
  for (const int t : layout.target_first) with_targets += t >= 0;
  feed_arrays(
      b.inputs(), layout.first, layout.tensors, layout.sources, "input", "source",
      [&](std::size_t s) -> const edge_shape& { return entries[s].in; }, microbatches, inputs, who);
  feed_arrays(
      b.targets(), layout.target_first, layout.targets, with_targets, "target", "sink",
      [&](std::size_t s) -> const edge_shape& { return entries[s].target; }, microbatches, targets, who);
  const double f = b.scaling().factor(microbatches);
  if (!(f > 0) || !(f < __builtin_inf()))
    throw shape_error(who + ": the batch's loss_scaling::per(n) needs n > 0 (the count its losses are divided by)");
  check_lengths(b, entries, microbatches, who);
}

/// A step's feed as an executor keeps it: where the batch's arrays are, its loss scaling and its
/// lengths. Both executors fill it from a pipetype::batch or from one array, and hand the stage
/// calls its view.
struct batch_feed {
  std::vector<feed_tensor> inputs;   // per source tensor, where its microbatches are
  std::vector<feed_tensor> targets;  // per sink target tensor
  double scale = 0;                  // the loss scaling's factor
  std::vector<std::size_t> lengths;  // per microbatch (varying tensors), when max_length > 0
  std::size_t max_length = 0;
  const std::byte* rows = nullptr;  // the one array `inputs` was made from (nullptr: a pipetype::batch)

  /// The feed of `b`; shape_error (prefixed `who`), and nothing changed, when it does not fit.
  void take(const batch& b, const batch_layout& layout, const std::vector<stage_entry>& entries, int microbatches,
            const std::string& who) {
    std::vector<feed_tensor> in, tg;
    feed_from_batch(layout, entries, microbatches, b, in, tg, who);
    rows = nullptr;
    inputs = std::move(in);
    targets = std::move(tg);
    scale = b.scaling().factor(microbatches);
    lengths = b.lengths();
    max_length = b.has_lengths() ? b.max_length() : 0;
  }
  /// The feed of one array (step(span), which check_one_array accepted): no targets, the mean,
  /// every microbatch full; the places are kept when it is the last step's array.
  void take_rows(const std::byte* array, const batch_layout& layout, const std::vector<stage_entry>& entries,
                 int microbatches) {
    if (array != rows || inputs.size() != static_cast<std::size_t>(layout.tensors))
      feed_from_rows(layout, entries, array, inputs);
    rows = array;
    targets.clear();
    scale = loss_scaling::mean().factor(microbatches);
    max_length = 0;
  }
  /// What the stage calls read: this feed, the sinks writing their losses to `losses`.
  step_feed view(float* losses, int microbatches) const noexcept {
    return {inputs.data(), targets.data(),
            losses,        static_cast<float>(scale),
            microbatches,  max_length > 0 ? lengths.data() : nullptr,
            max_length};
  }
};

}  // namespace detail
}  // namespace pipetype
