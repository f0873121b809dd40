// pipetype/host/mesh_executor.hpp — a pp × dp mesh step on host threads: pipeline and data
// parallelism, with every collective where the proof put it.
// Example, given a, b, global_batch (two models of one chain type, each with its own parameters):
//   const auto plan = pipetype::build_plan(pipetype::make_schedule("1f1b", 2, 4));
//   std::vector replicas{&a, &b};                                          // one model per replica
//   pipetype::host::mesh_executor ex{plan, pipetype::mesh{.pp = 2, .dp = 2}, pipetype::dp_options{.dp = 2}, replicas};
//   ex.step(global_batch);  // a pipetype::batch of 2 · 4 microbatches: replica d takes [4d, 4d + 4)
//
// The executor places the step's collectives (place_collectives, or the caller's), checks them
// (check_collectives), lowers the mesh (lower_mesh), proves it (verify_mesh) and binds every
// global rank's ops to its replica's model (mesh_binding.hpp); then each step runs pp · dp ranks
// of three streams each (compute, communication, data-parallel) on parked threads, as the
// pipeline executor runs its ranks (executor.hpp: same waits, same fabric, same faults).
//
// The global batch holds dp · m microbatches; replica d runs microbatches [d·m, (d+1)·m) and the
// loss scaling is the global batch's (mean(): 1/(dp·m)), so the reduced gradient is the
// objective's over the whole batch and is scaled once. What each stage's weight_gradients()
// holds after a step, on every replica (collective.hpp has the arithmetic):
//   plain   Σ_d (Σ_j g_{d,j}): each replica's microbatches summed in order, then the replicas'
//           sums added in replica order — bitwise the same on every replica, and bitwise what an
//           unpipelined run gets that sums the same microbatches in that order;
//   sharded the same numbers on the shard the replica owns (shard_of(n, dp, d)); elsewhere the
//           replica's own partial sums;
//           parameters() is gathered before the stage runs and, with poison_released, NaN
//           outside the owned shard once released (the optimizer updates the owned shard; the
//           next step's gather brings the rest);
//   tied    the tie group's stages' tied_gradients(tie) summed (ranks in order, a rank's stages
//           in order) before the replicas reduce: every copy of a tied parameter gets the same
//           gradient.
// With mesh_options::memory (docs/13: OFFLOAD, RELOAD, RECOMPUTE, placed by place_memory or
// plan_memory, or written) every replica runs the same actions: a microbatch's stash copied to a
// host pool and back on a fourth, copy stream per global rank, or rebuilt by running its forward
// again before its backward; an OFFLOAD moves the microbatch's input too (where only its own ops
// read it), out of an activation pool the step plans. The stashes then live in a pool per rank that
// is the plan's peak (memory_of with stash_model) in slots; stash_pools() says how many were in use
// at once as the last step ran, and how many activation slots the step needs against the lowering's. The gradients are
// the same bits as without the actions (a forward must be deterministic to be recomputed). A one-replica mesh (mesh{pp,
// 1}) runs them on a plain pipeline.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipetype/bind/batch.hpp"
#include "pipetype/bind/checks.hpp"
#include "pipetype/host/executor.hpp"
#include "pipetype/host/mesh_binding.hpp"

namespace pipetype::host {

struct mesh_options {
  executor_options exec{};       // deadline, trace, ordered_gradients (keep_outputs: not over a mesh)
  bool poison_released = true;   // RESHARD fills the parameters a replica does not own with NaN
  memory_program memory{};       // OFFLOAD, RELOAD, RECOMPUTE of the pipeline (docs/13; ranks 0: none):
                                 // every replica runs them, on a copy stream per global rank
  bool poison_offloaded = true;  // an OFFLOAD fills the stash slot it copied out of with 0xFF bytes
};

/// One global rank's stash pool in a step with memory actions: its slots (the plan's peak), the
/// most in use at once in the last step (measured as the ops ran), the slot's bytes, the host pool;
/// and its activation pool's slots, which the step plans (mesh/activation_slots.hpp: fewer
/// than the lowering's when offloaded inputs leave theirs), beside the lowering's.
struct stash_pool_use {
  int slots = 0, high_water = 0, host_slots = 0;
  std::size_t stride = 0;
  int activation_slots = 0, lowered_activation_slots = 0;
};

/// One global rank's parameters under FSDP when its stages lend them: the slots the plan gave its
/// pool (mesh_program::param_slots), the most in use at once in the last step (measured as the
/// gathers and releases ran), a slot's bytes, and every byte the rank holds for parameters: its
/// shards and its slots. `lent`: false where no stage of the rank lends (then all 0).
struct param_pool_use {
  bool lent = false;
  int slots = 0, high_water = 0;
  std::size_t stride = 0, resident_bytes = 0;
};

template <stage_graph Model>
class mesh_executor {
 public:
  /// The collectives placed by place_collectives(plan, o).
  template <class Plan>
  mesh_executor(const Plan& plan, const mesh& m, const dp_options& o, std::span<Model* const> replicas,
                const mesh_options& opt = {})
      : mesh_executor(plan, m, o, place_collectives(views_of(plan).compute, o), replicas, opt) {}

  /// The caller's collectives `c` (checked with check_collectives, then proven with the rest).
  template <class Plan>
  mesh_executor(const Plan& plan, const mesh& m, const dp_options& o, const collective_program& c,
                std::span<Model* const> replicas, const mesh_options& opt = {}) {
    static_assert(pipetype::detail::stages_fit_plan<Plan, Model>());
    if (opt.exec.keep_outputs)
      throw std::invalid_argument(
          "pipetype::host: mesh_executor keeps no outputs (executor_options::keep_outputs): evaluate with a "
          "forward-only plan on an executor per replica");
    const plan_views v = views_of(plan);
    std::vector<std::vector<stage_entry>> entries;
    for (std::size_t d = 0; d < replicas.size(); ++d) {
      if (replicas[d] == nullptr)
        throw std::invalid_argument("pipetype::host: replica " + std::to_string(d) + " is null");
      for (std::size_t e = 0; e < d; ++e)
        if (replicas[e] == replicas[d])
          throw std::invalid_argument("pipetype::host: replicas " + std::to_string(e) + " and " + std::to_string(d) +
                                      " are one model; each replica needs its own parameters and gradients");
      entries.push_back(pipetype::detail::entries_for(v.compute, *replicas[d], "pipetype::host"));
    }
    auto st = std::make_unique<mesh_state>();
    bound_program prog =
        bind_mesh(v, m, o, c, std::move(entries),
                  {{opt.exec.ordered_gradients, false},
                   pipetype::detail::positive_deadline(opt.exec.deadline, "pipetype::host: executor_options::deadline"),
                   opt.poison_released,
                   &opt.memory,
                   opt.poison_offloaded},
                  *st);
    engine_ = std::make_unique<detail::engine>(std::move(prog), opt.exec, std::move(st));
  }

  /// One step over the global batch `b` (dp · m microbatches of every array; see the top of this
  /// file). Returns every microbatch's losses, replica by replica (microbatch d·m + j is replica
  /// d's j). shape_error before anything runs if the batch does not fit; step_error if the step
  /// failed on some rank (failures() lists how every thread ended).
  const step_losses& step(const pipetype::batch& b) {
    const mesh_state& st = state();
    const bound_program& rep = st.replicas.front();
    const int m = rep.microbatches, D = st.shape.dp;
    pipetype::detail::batch_feed whole;
    whole.take(b, rep.batch, rep.entries, D * m, "pipetype::host");
    const std::size_t sinks = static_cast<std::size_t>(rep.batch.sinks);
    feeds_.assign(static_cast<std::size_t>(D), whole);
    replica_losses_.resize(static_cast<std::size_t>(D));
    views_.clear();
    for (int d = 0; d < D; ++d) {
      pipetype::detail::batch_feed& f = feeds_[static_cast<std::size_t>(d)];
      const std::size_t skip = static_cast<std::size_t>(d) * static_cast<std::size_t>(m);
      for (feed_tensor& t : f.inputs) t.base += t.stride * skip;
      for (feed_tensor& t : f.targets) t.base += t.stride * skip;
      if (f.max_length > 0)
        f.lengths.assign(whole.lengths.begin() + static_cast<std::ptrdiff_t>(skip),
                         whole.lengths.begin() + static_cast<std::ptrdiff_t>(skip) + m);
      std::vector<float>& l = replica_losses_[static_cast<std::size_t>(d)];
      l.assign(sinks * static_cast<std::size_t>(m), __builtin_nanf(""));
      views_.push_back(f.view(l.data(), m));
      views_.back().forward_only = engine_->program().forward_only;
    }
    losses_.sinks = rep.batch.sinks;  // (a failed step leaves NaN)
    losses_.microbatches = D * m;
    losses_.scale = whole.scale;
    losses_.values.assign(sinks * static_cast<std::size_t>(D * m), __builtin_nanf(""));
    auto restart = [](memory_use& u) {  // the high-water mark is the step's
      u.in_use.store(0, std::memory_order_relaxed);
      u.high.store(0, std::memory_order_relaxed);
    };
    for (const std::unique_ptr<stash_pool>& pl : st.pools) restart(pl->use);
    for (const std::unique_ptr<param_pool>& pl : st.params)
      if (pl) restart(pl->use);
    engine_->run(views_);
    for (std::size_t k = 0; k < sinks; ++k)
      for (int d = 0; d < D; ++d)
        for (int j = 0; j < m; ++j)
          losses_.values[k * static_cast<std::size_t>(D * m) + static_cast<std::size_t>(d * m + j)] =
              replica_losses_[static_cast<std::size_t>(d)]
                             [k * static_cast<std::size_t>(m) + static_cast<std::size_t>(j)];
    return losses_;
  }

  /// The last step's losses (the same step() returned).
  const step_losses& losses() const noexcept { return losses_; }
  /// The mesh step the executor runs (for listings, the cost model and the tests).
  const mesh_program& program() const noexcept { return state().program; }
  const mesh& shape() const noexcept { return state().shape; }
  /// How every thread that had not finished ended the last step (empty when it succeeded).
  const std::vector<failure>& failures() const noexcept { return engine_->failures(); }
  /// With dp_options::grad_norm, after a step: the L2 norm of its reduced gradients over the
  /// whole mesh, every stage's once and a tied parameter's once, as GRAD_NORM summed it (√ of
  /// Σ over global ranks in order, each rank's stages in order, of Σ x² over what the rank
  /// answers for: its own shard when sharded, else replica 0's whole gradients); every rank got
  /// the same. std::logic_error when the step has no GRAD_NORM.
  double grad_norm() const {
    const mesh_state& st = state();
    if (!st.options.grad_norm)
      throw std::logic_error("pipetype::host: the step has no GRAD_NORM (dp_options::grad_norm)");
    return std::sqrt(st.grad_norm_sq.front());
  }
  /// With dp_options::finite_check, after a step: whether every reduced gradient of it, on every
  /// rank, was finite, as FINITE_CHECK found (the parts GRAD_NORM sums; every rank got the same
  /// answer, and each OPT_STEP saw it as optimizer_ctx::finite). std::logic_error without one.
  bool gradients_finite() const {
    const mesh_state& st = state();
    if (!st.options.finite_check)
      throw std::logic_error("pipetype::host: the step has no FINITE_CHECK (dp_options::finite_check)");
    return st.finite.front() != 0;
  }
  /// Per op of every global rank, its start and end in the last step (executor_options::trace).
  const std::vector<op_time>& trace() const noexcept { return engine_->trace(); }
  /// With memory actions (mesh_options::memory), per global rank its stash pool: the slots the
  /// plan gave it and the most in use at once in the last step; empty without them.
  std::vector<stash_pool_use> stash_pools() const {
    std::vector<stash_pool_use> out;
    for (const std::unique_ptr<stash_pool>& pl : state().pools)
      out.push_back({pl->device_slots, pl->use.high.load(std::memory_order_relaxed), pl->host_slots, pl->stride,
                     pl->activation_slots, pl->lowered_activation_slots});
    return out;
  }

  /// Sharded, with stages that lend their parameters (graph/stage.hpp): per global rank its
  /// parameter pool; empty when the step holds none.
  std::vector<param_pool_use> parameter_pools() const {
    std::vector<param_pool_use> out;
    bool any = false;
    for (const std::unique_ptr<param_pool>& pl : state().params) {
      any = any || pl != nullptr;
      out.push_back(pl ? param_pool_use{true, pl->slot_count, pl->use.high.load(std::memory_order_relaxed), pl->stride,
                                        pl->bytes()}
                       : param_pool_use{});
    }
    if (!any) out.clear();
    return out;
  }
  /// Sharded, with a stage that lends its parameters: replica `replica`'s shard of plan stage
  /// `stage` (the elements `shard_range(replica, stage)` of its parameters), which the step's
  /// gathers read and the optimizer updates between steps. Empty when the executor holds no
  /// parameters of that stage; std::invalid_argument for a replica or stage out of range, or a
  /// `T` that is not the parameters' element type's size.
  template <class T>
  std::span<T> parameter_shard(int replica, int stage) const {
    param_pool* pl = held_pool(replica, stage);
    if (pl == nullptr || pl->shards[static_cast<std::size_t>(stage)].size() == 0) return {};
    if (sizeof(T) != pl->elem_size[static_cast<std::size_t>(stage)])
      throw std::invalid_argument("pipetype::host: parameter_shard<T>: T is not the size of stage " +
                                  std::to_string(stage) + "'s parameters");
    return {reinterpret_cast<T*>(pl->shards[static_cast<std::size_t>(stage)].data()),
            pl->ranges[static_cast<std::size_t>(stage)].size()};
  }
  /// The elements of plan stage `stage`'s parameters that replica `replica` holds (shard_of);
  /// {0, 0} where the executor holds none of them.
  shard_range shard_range_of(int replica, int stage) const {
    const param_pool* pl = held_pool(replica, stage);
    return pl ? pl->ranges[static_cast<std::size_t>(stage)] : shard_range{};
  }

 private:
  const mesh_state& state() const noexcept { return *engine_->mesh(); }
  param_pool* held_pool(int replica, int stage) const {
    const mesh_state& st = state();
    const int stages = static_cast<int>(st.stage_rank.size());
    if (replica < 0 || replica >= st.shape.dp || stage < 0 || stage >= stages)
      throw std::invalid_argument("pipetype::host: replica " + std::to_string(replica) + ", stage " +
                                  std::to_string(stage) + " is outside the mesh (" + std::to_string(st.shape.dp) +
                                  " replicas, " + std::to_string(stages) + " stages)");
    const int r = st.stage_rank[static_cast<std::size_t>(stage)];
    if (r < 0) return nullptr;  // (a stage no action names)
    const int g = st.shape.global(r, replica);
    return st.params[static_cast<std::size_t>(g)].get();
  }

  std::unique_ptr<detail::engine> engine_;
  std::vector<pipetype::detail::batch_feed> feeds_;
  std::vector<step_feed> views_;
  std::vector<std::vector<float>> replica_losses_;
  step_losses losses_;
};

template <class Plan, class Model>
mesh_executor(const Plan&, const mesh&, const dp_options&, const std::vector<Model*>&, const mesh_options& = {})
    -> mesh_executor<Model>;
template <class Plan, class Model>
mesh_executor(const Plan&, const mesh&, const dp_options&, const collective_program&, const std::vector<Model*>&,
              const mesh_options& = {}) -> mesh_executor<Model>;

}  // namespace pipetype::host
