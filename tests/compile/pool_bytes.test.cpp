// compile/pool_bytes.hpp: a rank's four pools in bytes, constants of a plan that is a type.
// Checked: 1F1B p=4 m=8 as static_asserts with sizes that tell every stride apart (a lane's first
// rank counts no input, its last no output); per-stage sizes of an interleaved plan (plan stage s
// has model stage s % L's); weight-gradient slots side by side; and, for every registered
// schedule, against an independent count from each rank's ops.
#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_pool_bytes {

namespace pt = pipetype;

constexpr auto one_f_one_b = pt::make_plan<pt::one_f_one_b<pt::ranks<4>, pt::microbatches<8>>>();
// activations 2000 in and 5000 out, gradients 100 and 3000 back, a 1000-byte stash, 200 of weight gradient
constexpr pt::stage_bytes chain[] = {{2000, 5000, 100, 3000, 0, 0, 1000, 200}};
constexpr pt::rank_pools first = pt::pools_of(one_f_one_b, 0, chain);
constexpr pt::rank_pools last = pt::pools_of(one_f_one_b, 3, chain);
constexpr pt::rank_pools middle = pt::pools_of(one_f_one_b, 1, chain);
// rank 0 reads the batch: only its output counts; rank 3 writes the loss: only its input
static_assert(first.activation_stride == 5056 && first.gradient_stride == 3008);
static_assert(last.activation_stride == 2048 && last.gradient_stride == 128);
static_assert(middle.activation_stride == 5056 && middle.gradient_stride == 3008);
static_assert(first.stash_stride == 1024 && first.stashes == 4 * 1024);  // 1F1B: rank 0 holds p stashes
static_assert(last.stashes == 1024);
static_assert(first.weight_grads == 256);  // in-order backwards: one slot
static_assert(first.activations == 5056 * static_cast<std::size_t>(one_f_one_b.resources[0].activation_slots));
static_assert(first.total() == first.activations + first.gradients + 4 * 1024 + 256);
// no sizes: every pool empty
static_assert(pt::pools_of(one_f_one_b, 0, std::span<const pt::stage_bytes>{}).total() == 0);

// interleaved, p = 2, v = 2: rank 0 runs plan stages 0 and 2, which are model stages 0 and 2 of 4
constexpr auto interleaved = pt::make_plan<pt::interleaved_1f1b<pt::ranks<2>, pt::microbatches<4>, pt::chunks<2>>>();
constexpr pt::stage_bytes four[] = {{0, 64, 0, 64, 0, 0, 64, 0},
                                    {64, 64, 64, 64, 0, 0, 6400, 0},
                                    {640, 64, 640, 64, 0, 0, 128, 64},
                                    {64, 0, 64, 0, 0, 0, 64, 0}};
static_assert(pt::pools_of(interleaved, 0, four).activation_stride == 640);
static_assert(pt::pools_of(interleaved, 0, four).stash_stride == 128);
static_assert(pt::pools_of(interleaved, 1, four).stash_stride == 6400);
// only stage 2 hands over a weight gradient: rank 1's pool is empty, rank 0's one 64-byte slot per held one
static_assert(pt::pools_of(interleaved, 1, four).weight_grads == 0);
static_assert(pt::pools_of(interleaved, 0, four).weight_grads > 0);

/// The pools of rank r counted from its ops alone: each stage it runs, each slot number it uses.
pt::rank_pools counted(const pt::program_view& p, pt::op_span ops,
                       std::span<const pt::stage_bytes> sizes) {
  std::size_t act = 0, grad = 0, stash = 0;
  int act_slots = 0, grad_slots = 0, stash_slots = 0;
  std::set<int> stages;
  std::vector<int> wg_stage;  // per weight-gradient slot: its stage
  for (const pt::lowered_op& o : ops) {
    const bool act_out = o.what == pt::kind::F;  // F: an activation; a backward: a gradient
    if (o.code == pt::op_code::send || o.code == pt::op_code::recv) {
      (act_out ? act_slots : grad_slots) = std::max(act_out ? act_slots : grad_slots, o.slot + 1);
      continue;
    }
    if (o.code != pt::op_code::compute) continue;
    act_slots = std::max(act_slots, o.slot + 1);
    grad_slots = std::max(grad_slots, o.grad_slot + 1);
    (act_out ? act_slots : grad_slots) = std::max(act_out ? act_slots : grad_slots, o.out_slot + 1);
    stages.insert(o.stage);
    stash_slots = std::max(stash_slots, o.stash_slot + 1);
    if (o.weight_grad_slot >= 0) {
      if (wg_stage.size() <= static_cast<std::size_t>(o.weight_grad_slot))
        wg_stage.resize(static_cast<std::size_t>(o.weight_grad_slot) + 1, -1);
      wg_stage[static_cast<std::size_t>(o.weight_grad_slot)] = o.stage;
    }
  }
  const auto up = [](std::size_t n) { return (n + 63) / 64 * 64; };
  for (const int s : stages) {
    const pt::stage_bytes& z = sizes[static_cast<std::size_t>(s) % sizes.size()];
    const bool head = s % p.lane_length() == 0, tail = (s + 1) % p.lane_length() == 0;
    if (!head) act = std::max(act, z.input), grad = std::max(grad, z.input_grad);
    if (!tail) act = std::max(act, z.output), grad = std::max(grad, z.output_grad);
    stash = std::max(stash, z.stash);
  }
  pt::rank_pools out{up(act), up(grad), up(stash), 0, 0, 0, 0};
  out.activations = out.activation_stride * static_cast<std::size_t>(act_slots);
  out.gradients = out.gradient_stride * static_cast<std::size_t>(grad_slots);
  out.stashes = out.stash_stride * static_cast<std::size_t>(stash_slots);
  for (const int s : wg_stage)
    out.weight_grads += s < 0 ? 0 : up(sizes[static_cast<std::size_t>(s) % sizes.size()].weight_grad);
  return out;
}

TEST_CASE("pool bytes: every registered schedule's pools are what its ops hold, rank by rank") {
  const pt::stage_bytes sizes[] = {{100, 300, 50, 700, 0, 0, 900, 10}, {1000, 30, 500, 70, 0, 0, 90, 0}};
  int plans = 0;
  for (const pt::schedule_info& s : pt::schedule_infos) {
    for (const auto& pm : {std::pair{2, 4}, std::pair{4, 8}}) {
      const int p = pm.first, m = pm.second;  // not a structured binding: doctest's macros capture it
      if (pt::schedule_error(s.name, p, m, 0) != nullptr) continue;
      const pt::runtime_plan plan = pt::build_plan(pt::make_schedule(s.name, p, m));
      REQUIRE_MESSAGE(plan.ok(), std::string(s.name), ": ", pt::describe(plan.result));
      for (int r = 0; r < plan.lowered().ranks; ++r) {
        const pt::rank_pools got = pt::pools_of(plan, r, sizes);
        const pt::rank_pools want = counted(plan.compute(), plan.lowered().rank_ops(r), sizes);
        CHECK_MESSAGE(got == want, std::string(s.name), " p=", p, " m=", m, " rank ", r, ": ", got.total(), " against ",
                      want.total());
      }
      ++plans;
    }
  }
  CHECK(plans >= 15);
}

}  // namespace test_pool_bytes
}  // namespace
