// pipetype/bind/batch.hpp — the data of one step, as every executor takes it.
//
// A batch lists the inputs of the model's sources, one array per tensor, each holding all
// microbatches (microbatch j at j × the tensor's elements):
//
//   pipetype::batch b;
//   b.input(ids);        // the first source's first tensor (sources in stage order, each
//   b.input(positions);  // source's tensors in declaration order)
//   ex.step(b);
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
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(std::data(all))>>;
    inputs_.push_back(
        {reinterpret_cast<const std::byte*>(std::data(all)), std::size(all), sizeof(T), detail::type_id<T>});
    return *this;
  }
  const std::vector<array>& inputs() const noexcept { return inputs_; }
  void clear() noexcept { inputs_.clear(); }

 private:
  std::vector<array> inputs_;
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

/// The feed of `b` for a plan of `microbatches` whose sources are laid out as `layout` says;
/// shape_error (prefixed `who`) when it does not fit.
inline void feed_from_batch(const batch_layout& layout, const std::vector<stage_entry>& entries, int microbatches,
                            const batch& b, std::vector<feed_tensor>& out, const std::string& who) {
  const std::vector<batch::array>& in = b.inputs();
  if (static_cast<int>(in.size()) != layout.tensors)
    throw shape_error(who + ": the batch has " + std::to_string(in.size()) + " input arrays; the model's " +
                      std::to_string(layout.sources) + " source" + (layout.sources == 1 ? "" : "s") + " take " +
                      std::to_string(layout.tensors) + " (one per tensor, sources in stage order)");
  const auto m = static_cast<std::size_t>(microbatches);
  out.resize(in.size());
  for (std::size_t s = 0; s < entries.size(); ++s) {
    if (layout.first[s] < 0) continue;
    const edge_shape& sh = entries[s].in;
    for (std::size_t k = 0; k < static_cast<std::size_t>(sh.count); ++k) {
      const batch::array& a = in[static_cast<std::size_t>(layout.first[s]) + k];
      const tensor_place& p = sh.t[k];
      const std::string at = who + ": the batch's input array " +
                             std::to_string(layout.first[s] + static_cast<int>(k)) + " (source stage " +
                             std::to_string(s) + ", tensor " + std::to_string(k) + ")";
      if (a.size != p.size || a.type != p.type)
        throw shape_error(at + " has elements of " + std::to_string(a.size) + " bytes" +
                          (a.size == p.size ? " but of another type" : "") + "; the stage takes elements of " +
                          std::to_string(p.size) + " bytes");
      if (a.elems != p.elems * m)
        throw shape_error(at + " has " + std::to_string(a.elems) + " elements; the plan has " + std::to_string(m) +
                          " microbatches of " + std::to_string(p.elems) + ", so " + std::to_string(p.elems * m));
      out[static_cast<std::size_t>(layout.first[s]) + k] = {a.data, p.bytes()};
    }
  }
}

}  // namespace detail
}  // namespace pipetype
