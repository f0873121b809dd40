// pipetype/compile/pool_bytes.hpp — a rank's four buffer pools in bytes, from the stages' sizes.
//
// The lowering counts each rank's slots (rank_resources: activation, gradient, stash and
// weight-gradient slots); given what each stage declares it moves and keeps per microbatch
// (stage_bytes), those counts become bytes:
//
//   activations    activation_slots × the largest activation block crossing into, out of or
//                  within the rank (a lane's first stage reads the batch, its last writes no
//                  activation: neither counts)
//   gradients      gradient_slots × the largest gradient block, likewise
//   stashes        stash_slots × the largest stash of the rank's stages
//   weight grads   each slot its stage's weight gradient (0 for a stage that hands none to
//                  pipetype), the stages' slots side by side in stage order
//
// Every stride is a multiple of 64 bytes. These are the bytes the executors allocate (the bind
// layer calls the same function, bind/layout.hpp), and a plan that is a type has them as
// constants.
//
// Example:
//   using one_f_one_b = pipetype::one_f_one_b<pipetype::ranks<4>, pipetype::microbatches<8>>;
//   static constexpr auto plan = pipetype::make_plan<one_f_one_b>();
//   static constexpr pipetype::stage_bytes sizes[] = {  // every stage alike
//       {.input = 4096, .output = 4096, .input_grad = 4096, .output_grad = 4096, .stash = 1000}};
//   static_assert(pipetype::pools_of(plan, 0, sizes).stashes == 4 * 1024);  // rank 0 holds 4 stashes
//
// A step with memory actions has a stash pool of its own (mesh/memory_slots.hpp).
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <tuple>
#include <utility>

#include "pipetype/compile/lowered.hpp"
#include "pipetype/compile/plan.hpp"
#include "pipetype/core/program.hpp"
#include "pipetype/detail/scratch.hpp"
#include "pipetype/graph/stage.hpp"
#include "pipetype/graph/tensors.hpp"

namespace pipetype {

/// What one stage moves and keeps per microbatch, in bytes. A plan stage s has the sizes of
/// model stage s % (the number given), as the executors bind it.
struct stage_bytes {
  std::size_t input = 0, output = 0;            // its input's and output's activation blocks
  std::size_t input_grad = 0, output_grad = 0;  // their gradient blocks (only tensors that carry one)
  std::size_t edge_input = 0;                   // a stage with per-edge inputs: its largest incoming block
  std::size_t edge_input_grad = 0;              // and that block's largest gradient
  std::size_t stash = 0;                        // what it saves for its backward besides its input
  std::size_t weight_grad = 0;                  // the weight gradient it hands to pipetype (0: none)

  friend constexpr bool operator==(const stage_bytes&, const stage_bytes&) = default;
};

/// One rank's pools: the slot strides and each pool's bytes.
struct rank_pools {
  std::size_t activation_stride = 0, gradient_stride = 0, stash_stride = 0;
  std::size_t activations = 0, gradients = 0, stashes = 0, weight_grads = 0;

  /// All four pools.
  constexpr std::size_t total() const noexcept { return activations + gradients + stashes + weight_grads; }
  friend constexpr bool operator==(const rank_pools&, const rank_pools&) = default;
};

namespace detail {

constexpr const stage_bytes& sizes_of_stage(std::span<const stage_bytes> sizes, int s) {
  return sizes[static_cast<std::size_t>(s) % sizes.size()];
}

/// The weight-gradient pool of the rank whose ops are `ops` (with counts `res`): returns its
/// bytes, and writes slot k's byte offset to offset[k] when `offset` is given (res.weight_grad_slots
/// entries). A slot's bytes are its stage's weight_grad, rounded up to 64.
constexpr std::size_t weight_grad_offsets(op_span ops, const rank_resources& res,
                                          std::span<const stage_bytes> sizes, std::size_t* offset = nullptr) {
  scratch<int> stage_of(res.weight_grad_slots, -1);
  for (const lowered_op& o : ops)
    if (o.code == op_code::compute && o.weight_grad_slot >= 0 && o.weight_grad_slot < res.weight_grad_slots)
      stage_of[o.weight_grad_slot] = o.stage;
  std::size_t at = 0;
  for (int k = 0; k < res.weight_grad_slots; ++k) {
    if (offset != nullptr) offset[k] = at;
    if (stage_of[k] >= 0) at += round_up64(sizes_of_stage(sizes, stage_of[k]).weight_grad);
  }
  return at;
}

/// The shape of a declared input/output `X` whose every extent is static (graph/tensors.hpp).
template <class X>
constexpr edge_shape static_shape() {
  static_assert(!any_dynamic<X>(),
                "pipetype::stage_bytes_of: a tensor's extent is dynamic, so the stage's sizes are known only at "
                "run time (take them from the bound stage: pipetype::entries_of)");
  return shape_of<X>([](std::size_t k) {
    return [k]<std::size_t... K>(std::index_sequence<K...>) {
      std::size_t n = 0;
      ((n = k == K ? tensor_t<X, K>::extent : n), ...);
      return n;
    }
    (std::make_index_sequence<static_cast<std::size_t>(set_traits<X>::count)>{});
  });
}

}  // namespace detail

/// The sizes of stage type `S` (graph/stage.hpp) when every tensor it declares has a static
/// extent: what its bound entry has (pipetype::entries_of), as a constant, for pools_of on a plan
/// that is a type. A dynamic extent is a compile error.
///
/// Example:
///   struct block {  // 256 floats in and out, a 64-float stash
///     using input = pipetype::tensor<float, 256>;
///     using output = pipetype::tensor<float, 256>;
///     using stash = pipetype::tensor<float, 64>;
///     void forward(const pipetype::forward_ctx<block>&) {}
///     void backward(const pipetype::backward_ctx<block>&) {}
///   };
///   static constexpr pipetype::stage_bytes sizes[] = {pipetype::stage_bytes_of<block>()};
///   using gpipe = pipetype::gpipe<pipetype::ranks<2>, pipetype::microbatches<4>>;
///   static constexpr auto plan = pipetype::make_plan<gpipe>();
///   static_assert(pipetype::pools_of(plan, 0, sizes).stashes == 4 * 256);  // GPipe: all 4 held
template <class S>
requires stage<S>
constexpr stage_bytes stage_bytes_of() {
  stage_bytes z;
  const edge_shape in = detail::static_shape<detail::input_decl_t<S>>();
  const edge_shape out = detail::static_shape<typename S::output>();
  z.input = in.bytes, z.output = out.bytes, z.input_grad = in.grad_bytes, z.output_grad = out.grad_bytes;
  if constexpr (has_per_edge_inputs<S>) [&]<std::size_t... E>(std::index_sequence<E...>) {
      const edge_shape edges[] = {detail::static_shape<
          std::tuple_element_t<E, typename detail::per_edge_traits<typename S::inputs>::types>>()...};
      for (const edge_shape& x : edges)
        z.edge_input = std::max(z.edge_input, x.bytes), z.edge_input_grad = std::max(z.edge_input_grad, x.grad_bytes);
    }
  (std::make_index_sequence<std::tuple_size_v<typename detail::per_edge_traits<typename S::inputs>::types>>{});
  static_assert(!stash_tensor_t<S>::is_dynamic, "pipetype::stage_bytes_of: the stage's stash has a dynamic extent");
  z.stash = stash_tensor_t<S>::extent * sizeof(stash_t<S>);
  if constexpr (has_weight_grad<S>) {
    static_assert(!weight_grad_tensor_t<S>::is_dynamic,
                  "pipetype::stage_bytes_of: the stage's weight_grad has a dynamic extent");
    z.weight_grad = weight_grad_tensor_t<S>::extent * sizeof(weight_grad_t<S>);
  }
  return z;
}

/// The pools of the rank whose ops (in `p` lowered) are `ops`, with counts `res`, for stages of
/// sizes `sizes` (plan stage s: sizes[s % sizes.size()]; none: every pool empty).
constexpr rank_pools pools_of(const program_view& p, op_span ops, const rank_resources& res,
                              std::span<const stage_bytes> sizes) {
  rank_pools out;
  if (sizes.empty()) return out;
  std::size_t act = 0, grad = 0, stash = 0;
  const auto most = [](std::size_t& a, std::size_t b) { a = a < b ? b : a; };
  for (const lowered_op& o : ops) {
    if (o.code != op_code::compute) continue;
    const stage_bytes& z = detail::sizes_of_stage(sizes, o.stage);
    if (!p.lane_head(o.stage)) most(act, z.input), most(grad, z.input_grad);
    if (!p.lane_tail(o.stage)) most(act, z.output), most(grad, z.output_grad);
    most(act, z.edge_input), most(grad, z.edge_input_grad), most(stash, z.stash);
  }
  out.activation_stride = detail::round_up64(act);
  out.gradient_stride = detail::round_up64(grad);
  out.stash_stride = detail::round_up64(stash);
  out.activations = out.activation_stride * static_cast<std::size_t>(res.activation_slots);
  out.gradients = out.gradient_stride * static_cast<std::size_t>(res.gradient_slots);
  out.stashes = out.stash_stride * static_cast<std::size_t>(res.stash_slots);
  out.weight_grads = detail::weight_grad_offsets(ops, res, sizes);
  return out;
}

/// The pools of rank r of plan `plan` (make_plan's, or a runtime_plan's) for stages of sizes `sizes`.
template <class Plan>
requires requires(const Plan& x) {
  x.compute();
  x.lowered();
}
constexpr rank_pools pools_of(const Plan& plan, int r, std::span<const stage_bytes> sizes) {
  const program_view p = plan.compute();
  const lowered_view l = plan.lowered();
  return pools_of(p, l.rank_ops(r), l.resources[static_cast<std::size_t>(r)], sizes);
}

}  // namespace pipetype
